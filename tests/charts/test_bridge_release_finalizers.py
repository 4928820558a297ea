"""`releaseFinalizers: true` (charts/slurm-bridge, before `helm uninstall`): the DecoratorControllers lose their
finalize hooks, so Metacontroller takes its finalizers off the managed pods and labelled Nodes (issue: deleting
the DecoratorControllers alone left them Terminating for good, Metacontroller's own issue #1062)."""

from __future__ import annotations

from tests.charts.helm import render


def decorators(values: dict) -> dict[str, dict]:
    return {
        d["metadata"]["name"]: d
        for d in render("slurm-bridge", values, "slurm-bridge-system")
        if d["kind"] == "DecoratorController"
    }


def test_by_default_every_decoratorcontroller_finalizes() -> None:
    found = decorators({})
    assert sorted(found) == ["slurm-bridge-node-external", "slurm-bridge-node-worker", "slurm-bridge-pod"]
    assert all("finalize" in d["spec"]["hooks"] for d in found.values())


def test_release_finalizers_drops_every_finalize_hook_and_keeps_the_rest() -> None:
    before, after = decorators({}), decorators({"releaseFinalizers": True})
    assert sorted(after) == sorted(before)
    for name, decorator in after.items():
        assert "finalize" not in decorator["spec"]["hooks"], name
        kept = {k: v for k, v in before[name]["spec"]["hooks"].items() if k != "finalize"}
        assert (
            decorator["spec"]["hooks"] == kept and decorator["spec"]["resources"] == before[name]["spec"]["resources"]
        )

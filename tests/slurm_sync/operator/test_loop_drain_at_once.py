"""A pass drains the nodes of a few pods whose drain intent just appeared before it reads Slurm's whole node
listing (slurm_sync/operator/loop.py ``_drain_at_once``; issue 28: at 20,000 nodes the listing takes longer
than the rest of the reaction), deciding on what Slurm says of each node when asked by name.

The production reader (``CachedKube``: watches) on the slurm_sync bench's fake API server in a child process and
the real ``SlurmClient`` on its fake slurmrestd (bench/slurm_sync_fakes.py), a cluster of 40 nodes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from bench.slurm_sync import Loop, caught_up, make_loop, settle
from bench.slurm_sync_fakes import NS, FakeSlurmrestd, ServerProcess, Slot, layout, slurm_job, slurm_node
from slinky_common import names
from slurm_sync.operator import loop as operator_loop

SIZE = 40
NODE_PATH = "/slurm/v0.0.45/node/"


@pytest.fixture
def rig(bench_api: ServerProcess) -> Iterator[tuple[Loop, FakeSlurmrestd]]:
    slots = layout(SIZE)
    slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in slots}, [slurm_job(s) for s in slots if s.busy])
    loop = make_loop(bench_api.url, "http://slurmrestd.slurm.svc:6820", slurmd, watched=True)
    try:
        settle(loop)
        caught_up(loop)
        loop.run()
        yield loop, slurmd
    finally:
        loop.close()
        for slot in slots:  # the module's API server outlives the test: its cordons go
            bench_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{slot.pod}", uncordon())


def cordon() -> dict:
    return {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}


def uncordon() -> dict:
    return {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: None}}}


def idle_slots(count: int) -> list[Slot]:
    return [s for s in layout(SIZE) if not s.busy][:count]


def listing_sees(loop: Loop, slurmd: FakeSlurmrestd, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """For each node listing the loop reads from now on: the nodes drained by then (in Slurm's order)."""
    seen: list[list[str]] = []
    watch = loop.loop._watch
    real = watch.poll

    def poll(*args: object) -> object:
        seen.append([name for name, update in slurmd.updates if "DRAIN" in (update.get("state") or [])])
        return real(*args)

    monkeypatch.setattr(watch, "poll", poll)
    return seen


def run_until(loop: Loop, done: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:  # type: ignore[operator]
        caught_up(loop)
        loop.run()


def test_a_new_cordon_is_drained_before_the_pass_reads_the_listing(
    rig: tuple[Loop, FakeSlurmrestd], bench_api: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop, slurmd = rig
    target, other = idle_slots(2)
    seen = listing_sees(loop, slurmd, monkeypatch)
    slurmd.admin_drain(other.pod, "maint: a test")  # Slurm changed as well: the pass reads its whole listing
    bench_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{target.pod}", cordon())
    run_until(loop, lambda: target.pod in slurmd.drained_at)
    assert target.pod in slurmd.drained_at
    assert slurmd.requests["GET " + NODE_PATH + target.pod] == 1, "asked for by name, once"
    assert [target.pod] in seen, f"drained before a listing was read: {seen}"
    drains = [name for name, update in slurmd.updates if "DRAIN" in (update.get("state") or [])]
    assert drains == [target.pod], "drained once, the other node left to its administrator"
    assert slurmd.nodes[other.pod]["reason"] == "maint: a test"


def test_a_node_drained_by_its_administrator_meanwhile_keeps_its_reason(
    rig: tuple[Loop, FakeSlurmrestd], bench_api: ServerProcess
) -> None:
    """The last listing shows the node idle; Slurm, asked by name, says an administrator drained it since: no
    drain over the administrator's reason, before the listing or after it."""
    loop, slurmd = rig
    (target,) = idle_slots(1)
    slurmd.admin_drain(target.pod, "maint: replace DIMM B2")
    bench_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{target.pod}", cordon())
    run_until(loop, lambda: slurmd.requests["GET " + NODE_PATH + target.pod] > 0, timeout=10)
    caught_up(loop)
    loop.run()
    assert slurmd.requests["GET " + NODE_PATH + target.pod] == 1
    assert target.pod not in slurmd.drained_at
    assert slurmd.nodes[target.pod]["reason"] == "maint: replace DIMM B2"


def test_more_new_intents_than_a_few_are_left_to_the_pass(
    rig: tuple[Loop, FakeSlurmrestd], bench_api: ServerProcess
) -> None:
    loop, slurmd = rig
    many = idle_slots(operator_loop.AT_ONCE + 1)
    for slot in many:
        bench_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{slot.pod}", cordon())
    run_until(loop, lambda: all(s.pod in slurmd.drained_at for s in many))
    assert all(s.pod in slurmd.drained_at for s in many)
    assert not [key for key in slurmd.requests if key.startswith("GET " + NODE_PATH)], "one listing, not a GET each"

"""One source for the CRDs and the Metacontroller manifests: the charts read the repository's crds/
and compositecontrollers/ through symlinks, so what they render must equal those files (apart from
the fields the chart patches), and a packaged chart must carry the files themselves."""

from __future__ import annotations

import tarfile
import tempfile
from typing import Any

import pytest
import yaml

from slinky_common import logs
from tests.charts import helm

Obj = dict[str, Any]
REPO = helm.REPO


def _files(directory: str) -> dict[str, Obj]:
    return {p.name: yaml.safe_load(p.read_text()) for p in sorted((REPO / directory).glob("*.yaml"))}


@pytest.mark.parametrize(
    ("chart", "link"),
    [("slurm-operator", "crds"), ("slurm-operator", "compositecontrollers"), ("slurm-bridge", "compositecontrollers")],
)
def test_chart_files_are_symlinks_to_the_repository_sources(chart: str, link: str) -> None:
    path = REPO / "charts" / chart / "files" / link
    assert path.is_symlink() and path.resolve() == (REPO / link).resolve()


def test_rendered_crds_equal_crds_dir() -> None:
    rendered = {
        d["metadata"]["name"]: d for d in helm.render("slurm-operator") if d["kind"] == "CustomResourceDefinition"
    }
    for name, crd in _files("crds").items():
        got = rendered.pop(crd["metadata"]["name"])
        assert got["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", (
            "helm uninstall must not delete every cluster"
        )
        got["metadata"] = {k: v for k, v in got["metadata"].items() if k not in ("labels", "annotations")}
        assert got == crd, f"{name} changed on its way through the chart"
    assert rendered == {}


def _unpatched(doc: Obj, prefix: str) -> Obj:
    """A rendered controller with the chart's patches undone: name prefix, labels, annotations, service,
    and the hook token (on by default in the chart; the directory serves `make run`, which has none)."""
    doc = yaml.safe_load(yaml.safe_dump(doc))
    doc["metadata"].pop("annotations", None)
    doc["spec"].pop("endpointConfigs", None)
    doc["metadata"]["labels"] = {"app.kubernetes.io/part-of": doc["metadata"]["labels"]["app.kubernetes.io/part-of"]}
    doc["metadata"]["name"] = doc["metadata"]["name"].replace(
        prefix, "slurm-operator-" if "operator" in prefix else "slurm-bridge-", 1
    )
    for hook in doc["spec"]["hooks"].values():
        hook["webhook"]["path"] = hook["webhook"]["path"].split("?settings=")[0]
        hook["webhook"]["service"] = {
            "name": "slurm-operator-hooks",
            "namespace": "slinky",
            "port": 8080,
            "protocol": "http",
        }
    return doc


@pytest.mark.parametrize(
    ("chart", "kind", "prefix"),
    [
        ("slurm-operator", "CompositeController", "rel-slurm-operator-"),
        ("slurm-bridge", "DecoratorController", "rel-slurm-bridge-"),
    ],
)
def test_rendered_controllers_equal_compositecontrollers_dir(chart: str, kind: str, prefix: str) -> None:
    rendered = {d["metadata"]["name"]: d for d in helm.render(chart, release="rel") if d["kind"] == kind}
    expected = {d["metadata"]["name"]: d for d in _files("compositecontrollers").values() if d["kind"] == kind}
    got = {_unpatched(d, prefix)["metadata"]["name"]: _unpatched(d, prefix) for d in rendered.values()}
    assert got == expected


def test_bridge_settings_reach_the_decorators_as_annotations() -> None:
    values = {"schedulerConfig": {"partition": "k8s", "mcsLabel": ""}}
    for doc in helm.render("slurm-bridge", values, "slurm-bridge-system"):
        if doc["kind"] == "DecoratorController":
            annotations = doc["metadata"]["annotations"]
            assert annotations["scheduler.slinky.slurm.net/default-partition"] == "k8s"
            assert annotations["scheduler.slinky.slurm.net/mcs-label"] == ""


def hook_paths(values: dict) -> dict[tuple[str, str], str]:
    return {
        (doc["metadata"]["name"], hook): spec["webhook"]["path"]
        for doc in helm.render("slurm-bridge", values, "slurm-bridge-system")
        if doc["kind"] == "DecoratorController"
        for hook, spec in doc["spec"]["hooks"].items()
    }


def test_a_changed_bridge_setting_changes_every_decorators_spec() -> None:
    """Metacontroller hands the hooks a DecoratorController's new annotations only once its spec changed: the
    settings' digest is in each hook's path, so `helm upgrade --set schedulerConfig.partition=...` reaches them."""
    default, same = hook_paths({}), hook_paths({"schedulerConfig": {"partition": "slurm-bridge"}})
    assert default == same, "Slinky's default spelled out is the same setting"
    for changed in ({"partition": "k8s"}, {"mcsLabel": ""}, {"schedulerName": "my-scheduler"}):
        paths = hook_paths({"schedulerConfig": changed})
        assert paths.keys() == default.keys()
        for key, path in paths.items():
            assert path != default[key], (changed, key)
            route, query = path.split("?")
            assert (route, query.split("=")[0]) == (default[key].split("?")[0], "settings")


def test_bridge_scheduler_name_reaches_every_hook_container() -> None:
    """The admission hooks cannot get it from the webhook URL; they read BRIDGE_SCHEDULER_NAME."""
    values = {"schedulerConfig": {"schedulerName": "my-scheduler"}}
    containers = [
        c
        for doc in helm.render("slurm-bridge", values, "slurm-bridge-system")
        if doc["kind"] == "Deployment" and "hooks" in doc["metadata"]["name"]
        for c in doc["spec"]["template"]["spec"]["containers"]
    ]
    assert containers
    for container in containers:
        assert {"name": "BRIDGE_SCHEDULER_NAME", "value": "my-scheduler"} in container["env"]


@pytest.mark.parametrize("chart", ["slurm-operator", "slurm-bridge"])
def test_packaged_chart_carries_the_linked_files(chart: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(helm.package(chart, tmp)) as archive:
        names = set(archive.getnames())
    links = ["crds", "compositecontrollers"] if chart == "slurm-operator" else ["compositecontrollers"]
    for link in links:
        for source in (REPO / link).glob("*.yaml"):
            assert f"{chart}/files/{link}/{source.name}" in names


@pytest.mark.parametrize(
    ("chart", "values", "message"),
    [
        ("slurm", {"controller": {"ha": {"enabled": True}}}, "existingClaim"),
        ("slurm", {"partitions": {"gpu": {"enabled": True, "nodesets": ["nope"]}}}, "not a key of nodesets"),
        ("slurm-bridge", {"admission": {"managedNamespaces": []}}, "managedNamespaceSelector"),
    ],
)
def test_chart_refuses_values_it_cannot_honour(chart: str, values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmFailed, match=message):
        helm.render(chart, values)


def test_slurm_sync_environment_in_every_chart_is_understood_by_slurm_sync(monkeypatch) -> None:
    """Each SLURM_SYNC_* variable a chart renders must change what `python -m slurm_sync` parses."""
    from slurm_sync.__main__ import parse_args

    operator_values = {
        "slurmSync": {"namespace": "hpc", "propagatedNodeConditions": ["KernelDeadlock", "ReadonlyFilesystem"]}
    }
    for chart, values in (("slurm-operator", {}), ("slurm-operator", operator_values), ("slurm-bridge", {})):
        for doc in helm.render(chart, values, "slinky"):
            if doc["kind"] != "Deployment":
                continue
            for container in doc["spec"]["template"]["spec"]["containers"]:
                for var in container.get("env", []):
                    if not var["name"].startswith("SLURM_SYNC_") or "value" not in var:
                        continue
                    monkeypatch.delenv(var["name"], raising=False)
                    before = vars(parse_args([]))
                    monkeypatch.setenv(var["name"], _different(var["value"]))
                    assert vars(parse_args([])) != before, f"{chart}: slurm_sync ignores {var['name']}"
                    monkeypatch.delenv(var["name"])


def _different(value: str) -> str:
    """A value parse_args accepts that differs from its default (numbers stay numbers)."""
    if value in ("operator", "bridge", "both"):
        return "both"
    if value.lower() in logs.LEVELS:  # a closed set: another of its words
        return "debug" if value.lower() != "debug" else "info"
    if value.isdigit():
        return str(int(value) + 1)
    try:
        return str(float(value) + 1.5)
    except ValueError:
        return value + "-x"

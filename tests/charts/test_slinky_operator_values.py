"""A values file written for Slinky's helm/slurm-operator: charts/slurm-operator, rendered by real helm,
honours each of its keys or refuses it at render, naming the key and what to write instead; none is
ignored (issue 27, item 4). The keys it cannot honour, with Slinky's defaults, are the chart's own table
(charts/slurm-operator/files/slinky-operator-values.yaml); docs/slinky-values.md says the same per key."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml

from tests.charts import helm
from tests.charts.validation import validate

Obj = dict[str, Any]
TABLE: Obj = yaml.safe_load((helm.CHARTS / "slurm-operator" / "files" / "slinky-operator-values.yaml").read_text())
RELEASE_NS = "slinky"
FULLNAME = "slurm-operator"
HOOKS, SYNC = f"{FULLNAME}-hooks", f"{FULLNAME}-slurm-sync"
# Slinky's defaults of the keys this chart honours, and of the two it accepts either way.
HONOURED_DEFAULTS: Obj = {
    "nameOverride": "",
    "fullnameOverride": "",
    "namespaceOverride": "",
    "imagePullSecrets": [],
    "imagePullPolicy": "IfNotPresent",
    "priorityClassName": "",
    "crds": {"enabled": False},
    "operator": {"imagePullPolicy": "IfNotPresent"},
    "webhook": {"enabled": True},
    "certManager": {"enabled": True},
    "propagatedNodeConditions": [],
    "extraObjects": [],
}


def render(values: Obj, api_versions: tuple[str, ...] = ()) -> list[Obj]:
    return helm.render("slurm-operator", values, RELEASE_NS, api_versions, release=FULLNAME)


def deployments(docs: list[Obj]) -> dict[str, Obj]:
    return {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}


def sync_env(docs: list[Obj]) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in deployments(docs)[SYNC]["containers"][0]["env"]}


def _set(values: Obj, path: str, value: Any) -> Obj:
    *parents, leaf = path.split(".")
    node = values
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return values


def slinky_defaults() -> Obj:
    """A copy of Slinky's whole values file as a user may carry it: every key at Slinky's default."""
    values = copy.deepcopy(HONOURED_DEFAULTS)
    for path, row in TABLE["refused"].items():
        _set(values, path, copy.deepcopy(row["default"]))
    return values


def changed(default: Any) -> Any:
    """A value other than `default`, of the same kind where there is one."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, dict):
        return {"team": "hpc"}
    if isinstance(default, list):
        return [{"key": "team", "operator": "Exists"}]
    return f"{default}x" if default else "x"


# --- accepted: Slinky's defaults ask for nothing ------------------------------------------------------


def test_a_copy_of_slinkys_whole_values_file_renders_and_validates() -> None:
    docs = render(slinky_defaults())
    problems = {f"{d['kind']} {d['metadata']['name']}": errors for d in docs if (errors := validate(d))}
    assert problems == {}
    assert not [d for d in docs if d["kind"] == "CustomResourceDefinition"], "Slinky's crds.enabled: false is honoured"
    assert {"Deployment", "CompositeController", "ClusterRole"} <= {d["kind"] for d in docs}


def test_slinkys_defaults_partly_written_are_still_defaults() -> None:
    render({"operator": {"image": {"repository": "ghcr.io/slinkyproject/slurm-operator"}, "namespaces": None}})
    render({"webhook": {"enabled": False, "validating": {"failurePolicy": "Fail"}}, "certManager": {"enabled": False}})


# --- refused: every key this chart cannot honour, set to anything but Slinky's default -----------------


@pytest.mark.parametrize("path", sorted(TABLE["refused"]))
def test_each_key_without_a_counterpart_is_refused_naming_it_and_what_to_do(path: str) -> None:
    row = TABLE["refused"][path]
    with pytest.raises(helm.HelmFailed) as failed:
        render(_set({}, path, changed(row["default"])))
    message = " ".join(str(failed.value).split())
    reason = " ".join(TABLE["why"][row["why"]].split())
    assert f"{path} (a value of Slinky's slurm-operator chart) is not supported: {reason}" in message


def test_every_refusal_says_what_to_write_instead() -> None:
    for name, reason in TABLE["why"].items():
        assert re.search(r"\b(set|instead|remove it)\b", reason), f"{name}: {reason}"


def test_watching_only_some_namespaces_is_refused_rather_than_granted_cluster_wide() -> None:
    """Slinky's operator.namespaces: Metacontroller cannot limit the CompositeControllers to some
    namespaces, so rendering would reconcile (and, before, grant) more than the user asked for."""
    with pytest.raises(helm.HelmFailed, match=r"operator\.namespaces .*slurmSync\.namespaces"):
        render({"operator": {"namespaces": "hpc-a,hpc-b"}})
    render({"operator": {"namespaces": ""}})  # Slinky's default: every namespace, as here


# --- honoured -----------------------------------------------------------------------------------------


def test_namespace_override_moves_every_namespaced_object_and_every_reference() -> None:
    values = {
        "namespaceOverride": "ops",
        "networkPolicy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
        "slurmSync": {"namespaces": ["hpc"]},
    }
    docs = render(values, ("monitoring.coreos.com/v1",))
    assert {d["metadata"].get("namespace") for d in docs} == {"ops", "hpc", None}
    assert {d["kind"] for d in docs if d["metadata"].get("namespace") == "hpc"} == {"Role", "RoleBinding"}
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": SYNC, "namespace": "ops"}]
    (lease_role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == f"{SYNC}-lease"]
    assert lease_role["metadata"]["namespace"] == "ops"
    controllers = [d for d in docs if d["kind"] == "CompositeController"]
    assert len(controllers) == 6
    for controller in controllers:
        for hook in controller["spec"]["hooks"].values():
            assert hook["webhook"]["service"]["namespace"] == "ops"
        (config,) = controller["spec"]["endpointConfigs"]
        assert config["host"] == f"{HOOKS}.ops:8080"
        assert config["authorization"]["secretRef"]["namespace"] == "ops"
    monitors = [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert monitors and all(m["spec"]["namespaceSelector"] == {"matchNames": ["ops"]} for m in monitors)
    assert [d for d in docs if validate(d)] == []


def test_priority_class_name_reaches_both_deployments() -> None:
    assert all("priorityClassName" not in spec for spec in deployments(render({})).values())
    specs = deployments(render({"priorityClassName": "slurm-control-plane"}))
    assert {name: spec["priorityClassName"] for name, spec in specs.items()} == {
        HOOKS: "slurm-control-plane",
        SYNC: "slurm-control-plane",
    }


@pytest.mark.parametrize(
    ("values", "policy"),
    [
        ({}, "IfNotPresent"),
        ({"imagePullPolicy": "Always"}, "Always"),
        ({"imagePullPolicy": "Always", "operator": {"imagePullPolicy": "Never"}}, "Never"),
        (
            {"imagePullPolicy": "Always", "operator": {"imagePullPolicy": "Never"}, "image": {"pullPolicy": "Always"}},
            "Always",
        ),
    ],
)
def test_image_pull_policy_as_slinky_orders_it_with_ours_first(values: Obj, policy: str) -> None:
    for spec in deployments(render(values)).values():
        assert [c["imagePullPolicy"] for c in spec["containers"]] == [policy]


def test_an_image_pull_policy_kubernetes_would_refuse_is_refused_at_render() -> None:
    with pytest.raises(helm.HelmFailed, match=r"imagePullPolicy.* must be Always, IfNotPresent or Never"):
        render({"imagePullPolicy": "Sometimes"})


def test_propagated_node_conditions_reach_slurm_sync_with_ours() -> None:
    assert "SLURM_SYNC_PROPAGATED_NODE_CONDITIONS" not in sync_env(render({}))
    env = sync_env(render({"propagatedNodeConditions": ["KernelDeadlock", "GPUProblem"]}))
    assert env["SLURM_SYNC_PROPAGATED_NODE_CONDITIONS"] == "KernelDeadlock,GPUProblem"
    both = {
        "propagatedNodeConditions": ["KernelDeadlock", "GPUProblem"],
        "slurmSync": {"propagatedNodeConditions": ["GPUProblem", "ReadonlyFilesystem"]},
    }
    env = sync_env(render(both))
    assert env["SLURM_SYNC_PROPAGATED_NODE_CONDITIONS"] == "KernelDeadlock,GPUProblem,ReadonlyFilesystem"


def test_propagated_node_conditions_without_slurm_sync_are_refused() -> None:
    with pytest.raises(helm.HelmFailed, match=r"propagatedNodeConditions .*needs slurm_sync.*slurmSync\.enabled"):
        render({"propagatedNodeConditions": ["KernelDeadlock"], "slurmSync": {"enabled": False}})


def test_extra_objects_are_rendered_with_tpl() -> None:
    extra = {
        "extraObjects": [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "site-notes", "namespace": "{{ .Release.Namespace }}"},
                "data": {"release": "{{ .Release.Name }}"},
            },
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-more\n",
        ]
    }
    docs = {d["metadata"]["name"]: d for d in render(extra) if d["kind"] == "ConfigMap"}
    assert docs["site-notes"]["metadata"]["namespace"] == RELEASE_NS
    assert docs["site-notes"]["data"] == {"release": FULLNAME}
    assert f"{FULLNAME}-more" in docs


def test_the_docs_say_what_becomes_of_every_key() -> None:
    docs = (helm.REPO / "docs" / "slinky-values.md").read_text()
    section = docs[docs.index("## Slinky `helm/slurm-operator` values in `charts/slurm-operator`") :]
    honoured = section[: section.index("### Refused")]
    refused = section[section.index("### Refused") :]
    leaves: list[str] = []
    for key, value in HONOURED_DEFAULTS.items():
        leaves += [f"{key}.{leaf}" for leaf in value] if isinstance(value, dict) else [key]
    assert "crds.enabled" in leaves and "nameOverride" in leaves
    for key in leaves:
        assert f"`{key}`" in honoured, key
    for path in TABLE["refused"]:
        block = path.split(".", 1)[0]
        assert (f"`{path}`" if block == "operator" else f"`{block}.*`") in refused, path

"""The cluster lab installs its Slurm cluster with `helm install` of charts/slurm and
hack/cluster/slurm-values.yaml; examples/crs/ with hack/cluster/lab-patches.yaml is the same cluster without
Helm (CLUSTER_LAB_CLUSTER=examples). Rendered by real helm, the two must describe the same custom resources:
spec by spec, after what neither side decides is set aside (a field at its CRD default, an image's tag, the
chart's explicit pull policy) and a short table of chart defaults the examples leave to the operator, each
with the reason it changes nothing. A field added to one side only fails here, naming its path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lab import setup  # hack/cluster's package, on the path through tests/cluster (tests/conftest.py's plugins)

from tests.charts.rendered import Obj, render

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / "hack" / "cluster"
NOT_COMPARED = {
    "Secret": "the chart makes the keys, the lab their random values; the database password is the user's",
    "ConfigMap": "compared through the Controller's configFileRefs, by content",
}
MISSING = object()
# Chart-only fields: (kind, path) -> (value or test of it, why it is the same cluster as the field's absence)
CHART_DEFAULTS: dict[tuple[str, str], tuple[Any, str]] = {
    ("Controller", "ha"): ({"enabled": False, "backups": 1}, "HA off, as with no ha"),
    ("Controller", "metrics.serviceMonitor"): (lambda v: v.get("enabled") is False, "no monitor: metrics are off"),
    ("Controller", "reconfigure"): ({"image": "ghcr.io/slinkyproject/slurmctld"}, "the operator's default image"),
    ("LoginSet", "initconf"): ({"image": "docker.io/library/alpine"}, "the operator's default image"),
    ("*", "template.spec.nodeSelector"): ({"kubernetes.io/os": "linux"}, "every lab node is linux"),
}


def docs(items: list[Obj]) -> dict[tuple[str, str], Obj]:
    return {(d["kind"], d["metadata"]["name"]): d for d in items}


def examples_side() -> dict[tuple[str, str], Obj]:
    patches = setup.load(LAB / "lab-patches.yaml")
    out = docs([setup.patched(cr, patches) for cr in setup.examples()])
    out.update({k: v for k, v in docs(patches).items() if k[0] == "ConfigMap"})
    return out


def chart_side() -> dict[tuple[str, str], Obj]:
    return docs(list(render(yaml.safe_load((LAB / "slurm-values.yaml").read_text())).values()))


def crd_schemas() -> dict[str, Obj]:
    out: Obj = {}
    for path in (REPO / "crds").glob("*.yaml"):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                (version,) = [v for v in crd["spec"]["versions"] if v.get("storage")]
                out[crd["spec"]["names"]["kind"]] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return out


def crd_default(schema: Obj, path: str) -> Any:
    for part in path.split("."):
        schema = (schema.get("properties") or {}).get(part) or {}
    return schema.get("default", MISSING)


def normalized(kind: str, spec: Any, configmaps: dict[str, Obj], path: str = "") -> Any:
    """The spec as the cluster sees it: images without their tags, no pull policy (the lab has its images),
    config files by content, strings without a trailing newline, the lab's own login key left out."""
    if isinstance(spec, str):
        return spec.rstrip("\n")
    if isinstance(spec, list):
        return [normalized(kind, v, configmaps, path) for v in spec]
    if not isinstance(spec, dict):
        return spec
    out: Obj = {}
    for key, value in spec.items():
        where = f"{path}.{key}" if path else key
        if key == "imagePullPolicy" or (kind, where) == ("LoginSet", "rootSshAuthorizedKeys"):
            continue
        if key == "image" and isinstance(value, str):
            out[key] = value.rsplit(":", 1)[0]
        elif key == "configFileRefs":
            out[key] = [configmaps[ref["name"]]["data"] for ref in value]
        else:
            out[key] = normalized(kind, value, configmaps, where)
    return out


def differences(kind: str, example: Any, chart: Any, schema: Obj, path: str = "") -> list[str]:
    """Paths where the two specs describe different clusters."""
    if not (isinstance(example, dict) and isinstance(chart, dict)):
        return [] if example == chart else [f"{kind} {path}: examples {example!r}, chart {chart!r}"]
    found = []
    for key in sorted(set(example) | set(chart)):
        where = f"{path}.{key}" if path else key
        a, b = example.get(key, MISSING), chart.get(key, MISSING)
        if a is MISSING or b is MISSING:
            present = b if a is MISSING else a
            if not explained(kind, where, present, schema):
                side = "chart" if a is MISSING else "examples"
                found.append(f"{kind} {where}: only the {side} sets it ({present!r})")
        else:
            found += differences(kind, a, b, schema, where)
    return found


def explained(kind: str, path: str, value: Any, schema: Obj) -> bool:
    if crd_default(schema, path) == value:
        return True
    for (k, p), (expected, _) in CHART_DEFAULTS.items():
        if k in (kind, "*") and p == path and (expected(value) if callable(expected) else expected == value):
            return True
    if isinstance(value, dict):  # a whole object only one side sets: each of its fields explained
        return all(explained(kind, f"{path}.{k}", v, schema) for k, v in value.items())
    return False


EXAMPLES, CHART = examples_side(), chart_side()
COMPARED = sorted(k for k in set(EXAMPLES) | set(CHART) if k[0] not in NOT_COMPARED)


def test_both_make_the_same_custom_resources() -> None:
    assert [k for k in COMPARED if k not in CHART] == [], "in examples/crs/ but not rendered by the lab's values"
    assert [k for k in COMPARED if k not in EXAMPLES] == [], "rendered by the lab's values but not in examples/crs/"
    assert len(COMPARED) == 7, COMPARED  # Controller, Accounting, RestApi, LoginSet, two NodeSets, Token


@pytest.mark.parametrize("key", COMPARED, ids=["/".join(k) for k in COMPARED])
def test_each_custom_resource_has_the_same_spec(key: tuple[str, str]) -> None:
    kind = key[0]
    schema = crd_schemas()[kind]

    def configmaps(side: dict[tuple[str, str], Obj]) -> dict[str, Obj]:
        return {name: d for (k, name), d in side.items() if k == "ConfigMap"}

    example = normalized(kind, EXAMPLES[key]["spec"], configmaps(EXAMPLES))
    chart = normalized(kind, CHART[key]["spec"], configmaps(CHART))
    assert differences(kind, example, chart, schema) == []


def test_a_field_on_one_side_only_is_named() -> None:
    """The comparison can fail: a field the example does not set, at a value no default explains."""
    schema = crd_schemas()["NodeSet"]
    spec = normalized("NodeSet", EXAMPLES[("NodeSet", "slurm-worker-debug")]["spec"], {})
    changed = {**spec, "pinToNode": True, "template": {**spec["template"], "spec": {"hostname": "other-"}}}
    assert differences("NodeSet", spec, changed, schema) == [
        "NodeSet pinToNode: only the chart sets it (True)",
        "NodeSet template.spec.hostname: examples 'debug-', chart 'other-'",
    ]

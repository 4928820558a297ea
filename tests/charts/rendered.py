"""charts/slurm rendered by real helm from a values file, and the children the hooks compute for the CRs it
renders (shared by the Slinky-values tests and the default-cluster boot test)."""

from __future__ import annotations

import base64
import functools
from typing import Any

import yaml

from hooks.app import create_app
from tests.charts import helm

Obj = dict[str, Any]
NS = "slurm"
MONITOR_RULE = {
    "apiVersion": "monitoring.coreos.com/v1",
    "resource": "servicemonitors",
    "updateStrategy": {"method": "InPlace"},
}
SECRETS = (("slurm-auth-slurm", "slurm.key"), ("slurm-auth-jwt", "jwt.key"), ("slurm-sssd-conf", "sssd.conf"))


def render(values: Obj) -> dict[str, Obj]:
    """Rendered documents by `Kind/name` (cached per values)."""
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in _render(yaml.safe_dump(values, sort_keys=True))}


def hook_children(kind: str, parent: Obj, *related: Obj) -> dict[str, Obj]:
    """The children the `kind` sync hook computes for a rendered CR, by `Kind/name`."""
    keys = [_secret(name, key) for name, key in SECRETS]
    body = {
        "controller": {"spec": {"childResources": [MONITOR_RULE]}},
        "parent": _as_parent(parent),
        "children": {},
        "related": _related(*keys, *(_as_parent(r) for r in related)),
        "finalizing": False,
    }
    resp = create_app().test_client().post(f"/{kind}/sync", json=body)
    assert resp.status_code == 200, resp.get_json()
    return {f"{c['kind']}/{c['metadata']['name']}": c for c in resp.get_json()["children"]}


@functools.cache
def _render(values_yaml: str) -> tuple[Obj, ...]:
    return tuple(helm.render("slurm", yaml.safe_load(values_yaml), namespace=NS, release="slurm"))


def _as_parent(doc: Obj) -> Obj:
    parent = yaml.safe_load(yaml.safe_dump(doc))
    parent["metadata"].update(uid=f"uid-{doc['kind']}-{doc['metadata']['name']}", generation=1)
    return parent


def _secret(name: str, key: str) -> Obj:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": {key: base64.b64encode(b"k" * 64).decode()}}


def _related(*objects: Obj) -> Obj:
    groups: Obj = {}
    for obj in objects:
        groups.setdefault(f"{obj['kind']}.{obj['apiVersion']}", {})[f"{NS}/{obj['metadata']['name']}"] = obj
    return groups

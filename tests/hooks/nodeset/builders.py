"""NodeSet hook requests as Metacontroller sends them (the NodeSet, its Controller, observed pods, Kubernetes Nodes)
and readers of the hook's answer, for the tests that drive the NodeSet hook."""

from __future__ import annotations

import json

import orjson

from slinky_common import names
from tests.support.kube import validate_builtin, validate_cr

NS = "slurm"


NODESET_UID = "uid-gpu"
# The NodeSet's resourceVersion: the epoch of each drain intent it issues (hooks/nodeset/hook.py:intent_epochs),
# which a drained mark answering that intent carries
INTENT_EPOCH = "40"


CONTROLLER_KEY = f"Controller.{names.API_VERSION}"


def nodeset(status: dict | None = None, **spec) -> dict:
    parent = {
        "apiVersion": names.API_VERSION,
        "kind": "NodeSet",
        "metadata": {
            "name": "gpu",
            "namespace": NS,
            "uid": NODESET_UID,
            "generation": 1,
            "resourceVersion": INTENT_EPOCH,
        },
        "spec": {"controllerRef": {"name": "slurm"}, **spec},
    }
    if status is not None:
        parent["status"] = status
    return parent


def controller_cr(**spec) -> dict:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Controller",
        "metadata": {"name": "slurm", "namespace": NS, "uid": "uid-ctrl"},
        "spec": {"slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"}, **spec},
    }


def node(
    name: str,
    labels: dict | None = None,
    taints: list | None = None,
    unschedulable: bool = False,
    annotations: dict | None = None,
) -> dict:
    obj: dict = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
    }
    if annotations:
        obj["metadata"]["annotations"] = annotations
    spec: dict = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    if spec:
        obj["spec"] = spec
    return obj


def request(
    parent: dict, pods=(), pvcs=(), configmaps=(), nodes=(), controller: dict | bool | None = True, finalizing=False
) -> dict:
    related: dict = {CONTROLLER_KEY: {}, "Node.v1": {n["metadata"]["name"]: n for n in nodes}}
    if controller:
        ctrl = controller_cr() if controller is True else controller
        related[CONTROLLER_KEY][f"{NS}/slurm"] = ctrl
    return {
        "controller": {},
        "parent": parent,
        "children": {
            "Pod.v1": {f"{NS}/{p['metadata']['name']}": p for p in pods},
            "PersistentVolumeClaim.v1": {f"{NS}/{p['metadata']['name']}": p for p in pvcs},
            "ConfigMap.v1": {f"{NS}/{c['metadata']['name']}": c for c in configmaps},
        },
        "related": related,
        "finalizing": finalizing,
    }


def observed(
    child: dict,
    phase: str | None = "Running",
    ready: bool = True,
    node_name: str | None = "node-a",
    slurm: tuple[str, ...] = ("Idle",),
    drained: bool | str = False,
    absent: bool = False,
    terminating: bool = False,
) -> dict:
    """What Metacontroller shows after creating `child`, with kubelet and slurm_sync state on top; ``drained``:
    True marks it drained for the NodeSet's intent (INTENT_EPOCH), a string for the intent of that epoch."""
    obj = json.loads(json.dumps(child))
    meta = obj["metadata"]
    meta.update(namespace=NS, uid=f"uid-{meta['name']}", resourceVersion="7", creationTimestamp="2025-01-01T00:00:00Z")
    meta["ownerReferences"] = [
        {
            "apiVersion": names.API_VERSION,
            "kind": "NodeSet",
            "name": "gpu",
            "uid": NODESET_UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    annotations = meta.setdefault("annotations", {})
    annotations[names.ANNOTATION_LAST_APPLIED] = orjson.dumps(child).decode()
    if drained:
        annotations[names.ANNOTATION_DRAINED] = INTENT_EPOCH if drained is True else drained
    if absent:
        annotations[names.ANNOTATION_SLURM_NODE_ABSENT] = "true"
    if terminating:
        meta["deletionTimestamp"] = "2025-01-01T01:00:00Z"
    if obj["kind"] != "Pod":
        obj["status"] = {"phase": "Bound"}
        return obj
    if node_name:
        obj["spec"]["nodeName"] = node_name
    if phase is not None:
        conditions = [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": "2025-01-01T00:01:00Z"}
        ]
        conditions += [
            {"type": f"{names.CONDITION_SLURM_NODE_STATE_PREFIX}{s}", "status": "True", "message": ""} for s in slurm
        ]
        obj["status"] = {"phase": phase, "conditions": conditions}
    return obj


def post(client, path: str, body: dict, status_parent: dict | None = None) -> dict:
    """`status_parent`: a parent the CRD accepts, for checking the status of a parent it would refuse."""
    resp = client.post(path, data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    result = resp.get_json()
    for child in result.get("children", []):
        assert validate_builtin(child) == [], child["metadata"]["name"]
    if "status" in result:  # the status must survive the apiserver's validation of our CRD
        assert validate_cr({**(status_parent or body["parent"]), "status": result["status"]}) == []
    return result


def sync(client, body: dict) -> dict:
    return post(client, "/nodeset/sync", body)


def children(resp: dict, kind: str = "Pod") -> dict[str, dict]:
    return {c["metadata"]["name"]: c for c in resp["children"] if c["kind"] == kind}


def draining(resp: dict) -> dict[str, str]:
    return {d["name"]: d["reason"] for d in resp["status"][names.STATUS_DRAINING_PODS]}


def condition(resp: dict, type_: str) -> dict:
    return next(c for c in resp["status"]["conditions"] if c["type"] == type_)


def reported(
    parent: dict, pending: tuple = (), nodes: tuple = (), cancel_at: str | None = None, error: str = ""
) -> dict:
    """`parent` with slurm_sync's deletion report (slinky_common/names.py ANNOTATION_DELETION_OBSERVED)."""
    report = {"pendingJobs": list(pending), "cancelAt": cancel_at, "nodesLeft": list(nodes), "error": error}
    parent["metadata"].setdefault("annotations", {})[names.ANNOTATION_DELETION_OBSERVED] = json.dumps(report)
    return parent


def slurmd(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "slurmd")

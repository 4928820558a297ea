"""The fake apiserver for the bridge loop: FakeKube plus what the bridge writes: pods/binding,
pod deletion (finalizers hold it, uid preconditions), finalizer and taint lists in patches with
resourceVersion preconditions (409 on mismatch), built-in PodGroups (get, merge patch of status with a
resourceVersion precondition), and builders for bridge pods and nodes."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from werkzeug import Request, Response

from slinky_common import names
from tests.slurm_sync.fakekube import FakeKube, _json, merge_metadata

JSON = dict[str, Any]
BNS = "slurm-bridge"
SCHED = names.BRIDGE_SCHEDULER_NAME
DELETED_AT = "2026-01-02T03:04:05Z"
_POD_GROUP = re.compile(
    r"^/apis/scheduling\.k8s\.io/v1alpha2/namespaces/(?P<ns>[^/]+)/podgroups/(?P<name>[^/]+)(?P<sub>/status)?$"
)
_SUB = re.compile(r"^/api/v1/(?:namespaces/(?P<ns>[^/]+)/)?(?P<kind>pods|nodes)/(?P<name>[^/]+)(?:/(?P<sub>binding))?$")


@dataclass
class BridgeFake(FakeKube):
    failing: set[str] = field(default_factory=set)  # "METHOD path" answered with 500

    def handle(self, request: Request) -> Response:
        if f"{request.method} {request.path}" in self.failing:
            return _json({"kind": "Status", "code": 500, "reason": "InternalError"}, 500)
        if group_match := _POD_GROUP.match(request.path):
            return self._pod_group(request, group_match)
        match = _SUB.match(request.path)
        if not match or request.method == "GET":
            return super().handle(request)
        key = (match["kind"], match["ns"] or "", match["name"])
        obj = self.objects.get(key)
        if obj is None:
            return _json({"kind": "Status", "code": 404, "reason": "NotFound"}, 404)
        body = json.loads(request.get_data() or b"{}")
        self.writes.append((request.method, request.path, request.headers.get("Content-Type", ""), body))
        meta = obj["metadata"]
        if request.method == "POST" and match["sub"] == "binding":
            if obj["spec"].get("nodeName"):
                return _json({"kind": "Status", "code": 409, "reason": "Conflict"}, 409)
            obj["spec"]["nodeName"] = body["target"]["name"]
        elif request.method == "DELETE":
            uid = (body.get("preconditions") or {}).get("uid")
            if uid and uid != meta.get("uid"):
                return _json({"kind": "Status", "code": 409, "reason": "Conflict"}, 409)
            if meta.get("finalizers"):
                meta.setdefault("deletionTimestamp", DELETED_AT)
            else:
                del self.objects[key]
                return _json({"kind": "Status", "status": "Success"})
        elif request.method == "PATCH":
            patch_meta = body.get("metadata") or {}
            if "resourceVersion" in patch_meta and patch_meta["resourceVersion"] != meta["resourceVersion"]:
                return _json({"kind": "Status", "code": 409, "reason": "Conflict"}, 409)
            merge_metadata(obj, patch_meta)
            if "finalizers" in patch_meta:  # merged as a set, as the apiserver does (patchStrategy merge)
                meta["finalizers"] = list(dict.fromkeys([*meta.get("finalizers", []), *patch_meta["finalizers"]]))
            gone = patch_meta.get("$deleteFromPrimitiveList/finalizers") or []
            meta["finalizers"] = [f for f in meta.get("finalizers", []) if f not in gone]
            if "taints" in (body.get("spec") or {}):
                obj.setdefault("spec", {})["taints"] = body["spec"]["taints"]
            if not meta.get("finalizers") and meta.get("deletionTimestamp"):
                del self.objects[key]
                return _json(obj)
        else:
            return _json({"kind": "Status", "code": 405}, 405)
        meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
        return _json(obj)

    def _pod_group(self, request: Request, match: re.Match[str]) -> Response:
        obj = self.objects.get(("podgroups", match["ns"], match["name"]))
        if obj is None:
            return _json({"kind": "Status", "code": 404, "reason": "NotFound"}, 404)
        if request.method == "GET" and not match["sub"]:
            return _json(obj)
        if request.method != "PATCH" or not match["sub"]:
            return _json({"kind": "Status", "code": 405}, 405)
        body = json.loads(request.get_data())
        self.writes.append(("PATCH", request.path, request.headers.get("Content-Type", ""), body))
        wanted = (body.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != obj["metadata"]["resourceVersion"]:
            return _json({"kind": "Status", "code": 409, "reason": "Conflict"}, 409)
        for key, value in (body.get("status") or {}).items():  # merge patch: lists are replaced
            obj.setdefault("status", {})[key] = value
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
        return _json(obj)

    def pod(self, name: str, ns: str = BNS) -> JSON:
        return self.objects[("pods", ns, name)]

    def writes_to(self, path_part: str) -> list[tuple[str, str, str, JSON]]:
        return [w for w in self.writes if path_part in w[1]]


def job_body(pods: list[str], **extra: Any) -> JSON:
    """A placeholder body as the pod hook publishes it (for the lab's partition `debug`)."""
    return {"admin_comment": orjson.dumps({"pods": pods}).decode(), "current_working_directory": "/tmp",
            "flags": ["EXTERNAL_JOB"], "memory_per_node": {"infinite": False, "number": 100, "set": True},
            "nodes": str(len(pods)), "partition": "debug", "priority": {"set": False}, "shared": ["none"],
            "time_limit": {"infinite": False, "number": 10, "set": True}, "tasks_per_node": 1,
            **({"maximum_nodes": 1} if len(pods) == 1 else {"minimum_nodes": len(pods), "maximum_nodes": len(pods)}),
            **extra}  # fmt: skip


def bridge_pod(
    name: str,
    group: str | None = None,
    body: JSON | None = None,
    *,
    ns: str = BNS,
    job_id: int | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    uid: str | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
    pod_group: str | None = None,
) -> JSON:
    """A managed pod; ``body`` published as its placeholder job for ``group``."""
    ann = dict(annotations or {})
    if body is not None:
        ann[names.ANNOTATION_PLACEHOLDER_JOB] = orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode()
        ann[names.ANNOTATION_PLACEHOLDER_GROUP] = group or f"Pod/{ns}/{name}"
    labels = {names.LABEL_BRIDGE_MANAGED: "true"}
    if job_id is not None:
        labels[names.LABEL_SLURM_JOB_ID] = str(job_id)
    meta: JSON = {
        "name": name,
        "namespace": ns,
        "uid": uid or f"uid-{name}",
        "resourceVersion": "5",
        "labels": labels,
        "annotations": ann,
    }
    if finalizers is not None:
        meta["finalizers"] = finalizers
    spec: JSON = {"schedulerName": SCHED, "containers": [{"name": "c", "image": "busybox"}]}
    if node_name:
        spec["nodeName"] = node_name
    if pod_group:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pod_group(name: str, ns: str = BNS, conditions: list[JSON] | None = None) -> JSON:
    """A built-in (Workload API) PodGroup as the apiserver returns it."""
    return {"apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "11", "uid": f"uid-{name}"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {"conditions": list(conditions or [])}}  # fmt: skip


def single(name: str, ns: str = BNS, **kw: Any) -> JSON:
    return bridge_pod(name, None, job_body([f"{ns}/{name}"]), ns=ns, **kw)


def kube_node(
    name: str,
    *,
    slurm_name: str | None = None,
    taint: bool = False,
    drain: str | None = None,
    taints: list[JSON] | None = None,
    registration: JSON | None = None,
    registered: str | None = None,
) -> JSON:
    labels = {names.LABEL_BRIDGE_WORKER: "worker"}
    if slurm_name:
        labels[names.LABEL_SLURM_NODE_NAME] = slurm_name
    ann: dict[str, str] = {}
    if taint:
        ann[names.ANNOTATION_DESIRED_TAINT] = f"{names.TAINT_MANAGED_NODE}={SCHED}:NoExecute"
    if drain:
        ann[names.ANNOTATION_DRAIN_INTENT] = drain
    if registration is not None:
        ann[names.ANNOTATION_EXTERNAL_NODE_INTENT] = orjson.dumps(registration, option=orjson.OPT_SORT_KEYS).decode()
    if registered:
        ann[names.ANNOTATION_EXTERNAL_NODE_REGISTERED] = registered
    spec: JSON = {"taints": taints} if taints else {}
    return {"metadata": {"name": name, "resourceVersion": "3", "labels": labels, "annotations": ann}, "spec": spec}


OUR_TAINT = {"key": names.TAINT_MANAGED_NODE, "value": SCHED, "effect": "NoExecute"}

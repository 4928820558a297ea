"""The drain-before-delete invariant over random observed states (hypothesis).

Whatever the spec and whatever shape the observed pods are in, a pod is left out of the desired
children only if slurm_sync marked it drained (and Slurm does not show it busy) or absent, and
every pod left out is listed in status.drainingPods. The one exception is finalize without a
Controller: there is no slurmctld to drain through, so every pod is released at once, the NodeSet
is finalized, and the ControllerResolved condition says the pods were released.
"""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks import names
from hooks.app import create_app
from tests.hooks.test_nodeset import NODESET_UID, node, nodeset, request
from tests.support.kube import validate_builtin, validate_cr

APP = create_app()
SLURM_STATES = ("Idle", "Allocated", "Mixed", "Completing", "Drain", "Down")


@st.composite
def pods(draw) -> list[dict]:
    names_ = draw(st.lists(st.sampled_from(["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-01", "gpu-node-a", "gpu-x", "other-1"]), unique=True, max_size=6))
    return [draw(pod(name)) for name in names_]


@st.composite
def pod(draw, name: str) -> dict:
    labels = {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: draw(st.sampled_from(["gpu", "gpu", "cpu"]))}
    mode = draw(st.sampled_from([None, "StatefulSet", "DaemonSet"]))
    if mode:
        labels[names.LABEL_NODESET_SCALING_MODE] = mode
    labels[names.LABEL_NODESET_REVISION] = draw(st.sampled_from(["old", "other"]))
    annotations = {}
    drained, absent = draw(st.booleans()), draw(st.booleans())
    if drained:
        annotations[names.ANNOTATION_DRAINED] = draw(st.sampled_from(["true", "yes"]))
    if absent:
        annotations[names.ANNOTATION_SLURM_NODE_ABSENT] = "true"
    meta = {"name": name, "namespace": "slurm", "uid": f"uid-{name}", "labels": labels, "annotations": annotations}
    if draw(st.booleans()):
        meta["ownerReferences"] = [{"apiVersion": names.API_VERSION, "kind": "NodeSet", "name": "gpu", "uid": draw(st.sampled_from([NODESET_UID, "someone-else"])), "controller": True}]
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": [{"name": "slurmd", "image": "x"}]}}
    if draw(st.booleans()):
        obj["spec"]["nodeName"] = draw(st.sampled_from(["node-a", "node-b"]))
    if draw(st.booleans()):
        states = draw(st.lists(st.sampled_from(SLURM_STATES), unique=True, max_size=3))
        conditions = [{"type": "Ready", "status": draw(st.sampled_from(["True", "False"]))}]
        conditions += [{"type": names.CONDITION_SLURM_NODE_STATE_PREFIX + s, "status": "True"} for s in states]
        obj["status"] = {"phase": draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown", "Weird"])), "conditions": conditions}
    return obj


def may_go(obj: dict) -> bool:
    annotations = obj["metadata"]["annotations"]
    states = {c["type"] for c in (obj.get("status") or {}).get("conditions", [])}
    busy = any(names.CONDITION_SLURM_NODE_STATE_PREFIX + s in states for s in ("Allocated", "Mixed", "Completing"))
    return annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true" or (annotations.get(names.ANNOTATION_DRAINED) == "true" and not busy)


specs = st.fixed_dictionaries(
    {
        "replicas": st.integers(0, 5),
        "scalingMode": st.sampled_from(["StatefulSet", "DaemonSet"]),
        "updateStrategy": st.fixed_dictionaries(
            {"type": st.sampled_from(["RollingUpdate", "OnDelete"]), "rollingUpdate": st.fixed_dictionaries({"maxUnavailable": st.sampled_from([1, 2, "25%", "100%"])})}
        ),
        "minReadySeconds": st.sampled_from([0, 10]),
    }
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs, observed=pods(), hook=st.sampled_from(["sync", "finalize"]), controller=st.booleans(), nodes=st.sampled_from([[], ["node-a"], ["node-a", "node-b"]]))
def test_no_pod_without_a_drained_or_absent_mark_is_ever_left_out(spec, observed, hook, controller, nodes):
    body = request(nodeset(**spec), pods=observed, nodes=[node(n) for n in nodes], controller=controller, finalizing=hook == "finalize")
    resp = APP.test_client().post(f"/nodeset/{hook}", data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    result = resp.get_json()
    for child in result["children"]:
        assert validate_builtin(child) == [], child["metadata"]["name"]
    assert validate_cr({**body["parent"], "status": result["status"]}) == []
    returned = {c["metadata"]["name"] for c in result["children"] if c["kind"] == "Pod"}
    listed = {d["name"] for d in result["status"][names.STATUS_DRAINING_PODS]}
    if hook == "finalize" and not controller:
        assert returned == set() and result["finalized"] is True, "no Controller: finalize releases every pod"
        resolved = next(c for c in result["status"]["conditions"] if c["type"] == names.CONDITION_CONTROLLER_RESOLVED)
        assert (resolved["status"], resolved["reason"]) == ("False", "ControllerNotFound")
        assert "released" in resolved["message"] and "kept" not in resolved["message"], resolved["message"]
        return
    if hook == "sync":
        assert "finalized" not in result
    elif result["finalized"]:
        assert returned == set(), "finalized while still wanting pods"
    for obj in observed:
        name = obj["metadata"]["name"]
        if name not in returned:
            assert may_go(obj), f"{name} was left out without a drained or absent mark"
            assert name in listed, f"{name} was left out without a published drain intent"

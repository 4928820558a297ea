"""Drain before delete and "busy evidence always wins", over random observed states (hypothesis).

Whatever the spec, the Controller (observed, absent, being deleted) and whatever shape the
observed pods are in:
* a pod with busy evidence (a busy SlurmNodeState condition, the pod-protect label, a job-end
  deadline not passed or unreadable) is never left out, in sync or finalize, whatever marks it
  carries; the only exceptions are finalize while the Controller is being deleted (the cluster
  goes with it) and the administrator's force-delete annotation;
* any other pod left out was marked drained or absent by slurm_sync and is listed in
  status.drainingPods, except in finalize without a Controller, where idle pods are released;
* finalize never finishes while it still returns a pod, and with a Controller, only on slurm_sync's
  clear deletion report.
"""

from __future__ import annotations

import json

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hooks.app import create_app
from hooks.nodeset.observe import parse_time
from slinky_common import names
from tests.hooks.nodeset.builders import NODESET_UID, controller_cr, node, nodeset, request
from tests.hooks.nodeset.fixtures import T0
from tests.support.kube import validate_builtin, validate_cr

APP = create_app()
SLURM_STATES = ("Idle", "Allocated", "Mixed", "Completing", "Drain", "Down")
# Job-end deadlines against the pinned clock T0 (00:02:00): none, empty, future, past, far future, unreadable.
DEADLINES = [None, None, "", "2025-01-01T00:02:30Z", "2025-01-01T00:01:59Z", "2025-01-01T09:00:00Z", "soon"]


@st.composite
def pods(draw) -> list[dict]:
    candidates = ["gpu-0", "gpu-1", "gpu-2", "gpu-3", "gpu-01", "gpu-node-a", "gpu-x", "other-1"]
    names_ = draw(st.lists(st.sampled_from(candidates), unique=True, max_size=6))
    return [draw(pod(name)) for name in names_]


@st.composite
def pod(draw, name: str) -> dict:
    labels = {names.LABEL_NAME: "slurmd", names.LABEL_INSTANCE: draw(st.sampled_from(["gpu", "gpu", "cpu"]))}
    mode = draw(st.sampled_from([None, "StatefulSet", "DaemonSet"]))
    if mode:
        labels[names.LABEL_NODESET_SCALING_MODE] = mode
    labels[names.LABEL_NODESET_REVISION] = draw(st.sampled_from(["old", "other"]))
    protect = draw(st.sampled_from([None, None, "true", "false", "maybe"]))
    if protect is not None:
        labels[names.LABEL_POD_PROTECT] = protect
    annotations = {}
    drained, absent = draw(st.booleans()), draw(st.booleans())
    if drained:
        annotations[names.ANNOTATION_DRAINED] = draw(st.sampled_from(["true", "yes"]))
    if absent:
        annotations[names.ANNOTATION_SLURM_NODE_ABSENT] = "true"
    deadline = draw(st.sampled_from(DEADLINES))
    if deadline is not None:
        annotations[names.ANNOTATION_POD_DEADLINE] = deadline
    meta = {"name": name, "namespace": "slurm", "uid": f"uid-{name}", "labels": labels, "annotations": annotations}
    if draw(st.booleans()):
        uid = draw(st.sampled_from([NODESET_UID, "someone-else"]))
        owner = {"apiVersion": names.API_VERSION, "kind": "NodeSet", "name": "gpu", "uid": uid, "controller": True}
        meta["ownerReferences"] = [owner]
    if draw(st.booleans()):
        meta["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    containers = [{"name": "slurmd", "image": "x"}]
    obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {"containers": containers}}
    if draw(st.booleans()):
        obj["spec"]["nodeName"] = draw(st.sampled_from(["node-a", "node-b"]))
    if draw(st.booleans()):
        states = draw(st.lists(st.sampled_from(SLURM_STATES), unique=True, max_size=3))
        conditions = [{"type": "Ready", "status": draw(st.sampled_from(["True", "False"]))}]
        conditions += [{"type": names.CONDITION_SLURM_NODE_STATE_PREFIX + s, "status": "True"} for s in states]
        phase = draw(st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown", "Weird"]))
        obj["status"] = {"phase": phase, "conditions": conditions}
    return obj


def busy(obj: dict) -> bool:
    """The test's own reading of busy evidence, against the pinned clock T0 (2025-01-01T00:02:00Z)."""
    labels, annotations = obj["metadata"]["labels"], obj["metadata"]["annotations"]
    states = {c["type"] for c in (obj.get("status") or {}).get("conditions", [])}
    if any(names.CONDITION_SLURM_NODE_STATE_PREFIX + s in states for s in ("Allocated", "Mixed", "Completing")):
        return True
    if labels.get(names.LABEL_POD_PROTECT) not in (None, "false"):
        return True
    deadline = annotations.get(names.ANNOTATION_POD_DEADLINE)
    return deadline not in (None, "") and (parse_time(deadline) is None or parse_time(deadline) > T0)


def marked(obj: dict) -> bool:
    annotations = obj["metadata"]["annotations"]
    return "true" in (annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT), annotations.get(names.ANNOTATION_DRAINED))


# A spec the hook cannot use (finalize then works from the pods alone); most draws are valid.
invalid_parts = st.sampled_from([{}, {}, {}, {"replicas": -1}, {"scalingMode": "Deployment"}])
specs = st.fixed_dictionaries(
    {
        "replicas": st.integers(0, 5),
        "scalingMode": st.sampled_from(["StatefulSet", "DaemonSet"]),
        "updateStrategy": st.fixed_dictionaries(
            {
                "type": st.sampled_from(["RollingUpdate", "OnDelete"]),
                "rollingUpdate": st.fixed_dictionaries({"maxUnavailable": st.sampled_from([1, 2, "25%", "100%"])}),
            }
        ),
        "minReadySeconds": st.sampled_from([0, 10]),
    }
)
CLEAR = {"pendingJobs": [], "cancelAt": None, "nodesLeft": [], "error": ""}
reports = st.sampled_from(
    [
        None,
        "{}",
        "not json",
        json.dumps(CLEAR),
        json.dumps({**CLEAR, "pendingJobs": [17], "cancelAt": "2025-01-02T00:00:00Z"}),
        json.dumps({"pendingJobs": [], "cancelAt": None, "nodesLeft": ["gpu-0"], "error": "busy"}),
    ]
)


@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(
    spec=specs,
    invalid=invalid_parts,
    observed=pods(),
    hook=st.sampled_from(["sync", "finalize"]),
    controller=st.sampled_from(["observed", "absent", "deleting"]),
    force=st.sampled_from([None, "true", "True"]),
    report=reports,
    nodes=st.sampled_from([[], ["node-a"], ["node-a", "node-b"]]),
)
def test_no_pod_with_busy_evidence_is_ever_left_out(
    clock,
    spec,
    invalid,
    observed,
    hook,
    controller,
    force,
    report,
    nodes,
):
    clock.now = T0
    parent = nodeset(**{**spec, **invalid})
    pairs = ((names.ANNOTATION_FORCE_DELETE, force), (names.ANNOTATION_DELETION_OBSERVED, report))
    annotations = {k: v for k, v in pairs if v is not None}
    if annotations:
        parent["metadata"]["annotations"] = annotations
    deleting = controller_cr()
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    ctrl = {"observed": True, "absent": None, "deleting": deleting}[controller]
    finalizing = hook == "finalize"
    body = request(parent, pods=observed, nodes=[node(n) for n in nodes], controller=ctrl, finalizing=finalizing)
    resp = APP.test_client().post(f"/nodeset/{hook}", data=orjson.dumps(body), content_type="application/json")
    assert resp.status_code == 200, resp.get_json()
    result = resp.get_json()
    for child in result["children"]:
        assert validate_builtin(child) == [], child["metadata"]["name"]
    assert validate_cr({**nodeset(**spec), "status": result["status"]}) == []
    returned = {c["metadata"]["name"] for c in result["children"] if c["kind"] == "Pod"}
    listed = {d["name"] for d in result["status"].get(names.STATUS_DRAINING_PODS, [])}
    if hook == "sync":
        assert "finalized" not in result
    elif result["finalized"]:
        assert returned == set(), "finalized while still wanting pods"
        if controller == "observed" and force != "true":
            assert report is not None and json.loads(report) == CLEAR
    released_at_once = hook == "finalize" and (force == "true" or controller == "deleting")
    for obj in observed:
        name = obj["metadata"]["name"]
        if name in returned or released_at_once:
            continue
        assert not busy(obj), f"{name} was left out although it shows busy evidence"
        if not (hook == "finalize" and controller == "absent"):
            assert marked(obj), f"{name} was left out without a drained or absent mark"
            assert name in listed, f"{name} was left out without a published drain intent"

"""Busy evidence always wins: no mark and no missing object lets a NodeSet hook drop a busy pod.

Busy evidence is anything that says a job may still run on the pod's Slurm node: a busy
SlurmNodeState condition (Allocated, Mixed, Completing), the pod-protect label, or a job-end
deadline (pod-deadline) that has not passed or cannot be read. A drained or absent mark next to
such evidence means one of slurm_sync's words is stale: the pod stays and the NodeSet says so.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slinky_common import names
from tests.hooks.nodeset.builders import (
    children,
    condition,
    controller_cr,
    draining,
    nodeset,
    observed,
    post,
    request,
    sync,
)
from tests.hooks.nodeset.fixtures import T0

SAMPLE = Path(__file__).resolve().parents[3] / "examples" / "requests" / "nodeset-sync.json"
PROTECT = {names.LABEL_POD_PROTECT: "true"}


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def marked(child: dict, labels: dict | None = None, annotations: dict | None = None, **state) -> dict:
    """`observed`, plus labels and annotations; a negative deletion cost makes it the first scale-in victim."""
    obj = observed(child, **state)
    obj["metadata"].setdefault("labels", {}).update(labels or {})
    obj["metadata"]["annotations"].update({names.ANNOTATION_POD_DELETION_COST: "-1", **(annotations or {})})
    return obj


def test_issue_reproduction_an_absent_mark_does_not_drop_an_allocated_pod(client):
    """The sample request, replicas 1, worker 1 condemned and marked absent while Slurm shows it Allocated."""
    body = json.loads(SAMPLE.read_text())
    parent = body["parent"]
    parent["spec"]["replicas"] = 1
    worker = "slurm-worker-debug-1"
    parent["status"][names.STATUS_DRAINING_PODS] = [{"name": worker, "reason": "scale-in to 1 replicas"}]
    pod = body["children"]["Pod.v1"][f"slurm/{worker}"]
    pod["metadata"]["annotations"][names.ANNOTATION_SLURM_NODE_ABSENT] = "true"
    pod["status"]["conditions"] = [c for c in pod["status"]["conditions"] if c["type"] != "SlurmNodeStateIdle"]
    pod["status"]["conditions"].append({"type": "SlurmNodeStateAllocated", "status": "True"})
    resp = sync(client, body)
    assert worker in children(resp), "a pod Slurm shows Allocated was dropped on an absent mark"
    assert draining(resp) == {worker: "scale-in to 1 replicas"}
    inconsistent = condition(resp, names.CONDITION_INCONSISTENT_PODS)
    assert inconsistent["status"] == "True" and worker in inconsistent["message"], inconsistent


EVIDENCE = {
    "allocated": dict(slurm=("Allocated",)),
    "mixed": dict(slurm=("Mixed", "Drain")),
    "completing": dict(slurm=("Idle", "Completing", "Drain")),
    "protect label": dict(slurm=("Idle", "Drain"), labels=PROTECT),
    "future deadline": dict(slurm=("Idle", "Drain"), annotations={names.ANNOTATION_POD_DEADLINE: iso(T0 + 3600)}),
    "unreadable deadline": dict(slurm=("Idle", "Drain"), annotations={names.ANNOTATION_POD_DEADLINE: "next tuesday"}),
}


@pytest.mark.parametrize("mark", ["absent", "drained"])
@pytest.mark.parametrize("evidence", sorted(EVIDENCE))
def test_a_condemned_pod_with_busy_evidence_stays_whatever_its_marks(client, mark, evidence):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), marked(pods["gpu-1"], **{mark: True}, **EVIDENCE[evidence])]
    resp = sync(client, request(nodeset(replicas=1), pods=state))
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"]
    assert draining(resp) == {"gpu-1": "scale-in to 1 replicas"}
    inconsistent = condition(resp, names.CONDITION_INCONSISTENT_PODS)
    assert inconsistent["status"] == "True" and inconsistent["reason"] == "MarkContradictsBusyEvidence"
    assert f"gpu-1: marked {mark}" in inconsistent["message"], inconsistent["message"]


def test_a_passed_deadline_is_no_longer_busy_evidence(client, clock):
    pods = children(sync(client, request(nodeset(replicas=2))))
    deadline = {names.ANNOTATION_POD_DEADLINE: iso(T0 + 60)}
    victim = marked(pods["gpu-1"], slurm=(), absent=True, annotations=deadline)  # scaled in: its node record went
    state = [observed(pods["gpu-0"]), victim]
    reads = clock.reads
    assert "gpu-1" in children(sync(client, request(nodeset(replicas=1), pods=state)))
    assert clock.reads == reads + 1, "the clock is read once, because a marked pod carries a deadline"
    clock.now = T0 + 61
    resp = sync(client, request(nodeset(replicas=1), pods=state))
    assert sorted(children(resp)) == ["gpu-0"]
    assert condition(resp, names.CONDITION_INCONSISTENT_PODS)["status"] == "False"


def test_the_clock_is_not_read_for_deadlines_of_pods_without_a_mark(client, clock):
    pods = children(sync(client, request(nodeset(replicas=2))))
    deadline = {names.ANNOTATION_POD_DEADLINE: iso(T0 + 60)}
    state = [observed(pods["gpu-0"]), marked(pods["gpu-1"], annotations=deadline)]
    reads = clock.reads
    sync(client, request(nodeset(replicas=1), pods=state))
    assert clock.reads == reads


def test_a_marked_pod_that_is_not_condemned_is_reported_too(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    resp = sync(client, request(nodeset(replicas=1), pods=[marked(pods["gpu-0"], slurm=("Allocated",), absent=True)]))
    assert list(children(resp)) == ["gpu-0"] and draining(resp) == {}
    assert "gpu-0: marked absent" in condition(resp, names.CONDITION_INCONSISTENT_PODS)["message"]


def test_an_idle_pod_marked_absent_still_goes(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), marked(pods["gpu-1"], slurm=(), absent=True)]
    resp = sync(client, request(nodeset(replicas=1), pods=state))
    assert sorted(children(resp)) == ["gpu-0"]
    cond = condition(resp, names.CONDITION_INCONSISTENT_PODS)
    assert (cond["status"], cond["reason"]) == ("False", "NoneObserved")


# --- finalize (finding 3) ---------------------------------------------------------------------------


def finalize(client, parent: dict, pods: list[dict], controller=True) -> dict:
    return post(client, "/nodeset/finalize", request(parent, pods=pods, controller=controller, finalizing=True))


def test_finalize_without_the_controller_holds_busy_pods_and_releases_idle_ones(client):
    pods = children(sync(client, request(nodeset(replicas=4))))
    state = [
        observed(pods["gpu-0"]),
        observed(pods["gpu-1"], slurm=("Allocated",)),
        marked(pods["gpu-2"], slurm=("Idle",), labels=PROTECT),
        marked(pods["gpu-3"], slurm=("Idle",), annotations={names.ANNOTATION_POD_DEADLINE: iso(T0 + 600)}),
    ]
    resp = finalize(client, nodeset(replicas=4), state, controller=None)
    assert sorted(children(resp)) == ["gpu-1", "gpu-2", "gpu-3"], "busy pods are held, the idle one goes"
    assert resp["finalized"] is False and resp["resyncAfterSeconds"] > 0
    resolved = condition(resp, names.CONDITION_CONTROLLER_RESOLVED)
    assert (resolved["status"], resolved["reason"]) == ("False", "ControllerNotFound")
    blocked = condition(resp, names.CONDITION_DELETION_BLOCKED)
    assert blocked["status"] == "True" and blocked["reason"] == "BusyPodsWithoutController"
    assert "gpu-1, gpu-2, gpu-3" in blocked["message"] and names.ANNOTATION_FORCE_DELETE in blocked["message"]


def test_finalize_without_the_controller_finishes_once_no_pod_is_busy(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), observed(pods["gpu-1"], slurm=("Down",))]
    resp = finalize(client, nodeset(replicas=2), state, controller=None)
    assert children(resp) == {} and resp["finalized"] is True


def test_finalize_with_the_controller_being_deleted_releases_every_pod(client):
    """The Controller carries a deletionTimestamp: the user tears the whole cluster down, slurmctld goes with it."""
    pods = children(sync(client, request(nodeset(replicas=1))))
    deleting = controller_cr()
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    resp = finalize(client, nodeset(replicas=1), [observed(pods["gpu-0"], slurm=("Allocated",))], controller=deleting)
    assert resp["finalized"] is True and resp["children"] == []
    resolved = condition(resp, names.CONDITION_CONTROLLER_RESOLVED)
    assert resolved["reason"] == "ControllerDeleting" and "released" in resolved["message"]


@pytest.mark.parametrize("controller", [None, True], ids=["no controller", "controller"])
def test_the_force_delete_annotation_releases_every_pod_at_once(client, controller):
    pods = children(sync(client, request(nodeset(replicas=1))))
    parent = nodeset(replicas=1)
    parent["metadata"]["annotations"] = {names.ANNOTATION_FORCE_DELETE: "true"}
    resp = finalize(client, parent, [observed(pods["gpu-0"], slurm=("Allocated",))], controller=controller)
    assert resp["finalized"] is True and resp["children"] == []
    blocked = condition(resp, names.CONDITION_DELETION_BLOCKED)
    assert (blocked["status"], blocked["reason"]) == ("False", "ForceDelete")


def test_force_delete_needs_the_exact_value_true(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    parent = nodeset(replicas=1)
    parent["metadata"]["annotations"] = {names.ANNOTATION_FORCE_DELETE: "yes"}
    resp = finalize(client, parent, [observed(pods["gpu-0"], slurm=("Allocated",))], controller=None)
    assert list(children(resp)) == ["gpu-0"] and resp["finalized"] is False


def test_finalize_with_the_controller_keeps_a_busy_pod_marked_drained(client):
    pods = children(sync(client, request(nodeset(replicas=1))))
    state = [marked(pods["gpu-0"], slurm=("Idle", "Drain"), drained=True, labels=PROTECT)]
    resp = finalize(client, nodeset(replicas=1), state)
    assert list(children(resp)) == ["gpu-0"] and resp["finalized"] is False
    assert condition(resp, names.CONDITION_INCONSISTENT_PODS)["status"] == "True"


def test_finalize_output_is_deterministic(client):
    pods = children(sync(client, request(nodeset(replicas=2))))
    state = [observed(pods["gpu-0"]), observed(pods["gpu-1"], slurm=("Allocated",))]
    first = finalize(client, nodeset(replicas=2), copy.deepcopy(state), controller=None)
    assert first == finalize(client, nodeset(replicas=2), copy.deepcopy(state), controller=None)

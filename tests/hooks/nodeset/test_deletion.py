"""Deleting a NodeSet in a safe order, the hook side: finalize finishes only on slurm_sync's clear report.

slurm_sync reports on the deleting NodeSet (names.ANNOTATION_DELETION_OBSERVED) the jobs still
pending in its partition and the Slurm node records still in slurmctld; the NodeSet's lines leave
slurm.conf only after finalize, so finalize waits until both lists are empty, and says why.
"""

from __future__ import annotations

import pytest

from slinky_common import names
from tests.hooks.nodeset.builders import children, condition, nodeset, observed, post, reported, request, sync


def finalize(client, parent: dict, pods=(), controller=True) -> dict:
    return post(client, "/nodeset/finalize", request(parent, pods=pods, controller=controller, finalizing=True))


def blocked(resp: dict) -> tuple[str, str, str]:
    cond = condition(resp, names.CONDITION_DELETION_BLOCKED)
    return cond["status"], cond["reason"], cond["message"]


def test_pending_jobs_hold_the_deletion_and_are_named_with_the_cancel_time(client):
    parent = reported(nodeset(replicas=0), pending=(41, 42), cancel_at="2025-01-02T00:00:00Z")
    resp = finalize(client, parent)
    assert resp["finalized"] is False and resp["resyncAfterSeconds"] == 10
    status, reason, message = blocked(resp)
    assert (status, reason) == ("True", "PendingJobs")
    assert "41, 42" in message and "2025-01-02T00:00:00Z" in message, message


def test_pending_jobs_without_a_cancel_time_say_so(client):
    _, _, message = blocked(finalize(client, reported(nodeset(replicas=0), pending=("7",))))
    assert "7" in message and "no cancel time is set" in message, message


def test_node_records_left_hold_the_deletion(client):
    resp = finalize(client, reported(nodeset(replicas=0), nodes=("gpu-0", "gpu-1"), error="Node gpu-1 has jobs"))
    status, reason, message = blocked(resp)
    assert resp["finalized"] is False and (status, reason) == ("True", "NodesLeft")
    assert "gpu-0, gpu-1" in message and "Node gpu-1 has jobs" in message, message


UNREADABLE = [
    "{not json",
    "[]",
    '{"pendingJobs": [1]}',
    '{"pendingJobs": ["x", null], "nodesLeft": [], "cancelAt": null}',
    '{"pendingJobs": [], "nodesLeft": [3], "cancelAt": null}',
    '{"pendingJobs": [true], "nodesLeft": []}',
]


@pytest.mark.parametrize("raw", UNREADABLE)
def test_an_unreadable_report_holds_the_deletion(client, raw):
    parent = nodeset(replicas=0)
    parent["metadata"]["annotations"] = {names.ANNOTATION_DELETION_OBSERVED: raw}
    resp = finalize(client, parent)
    assert resp["finalized"] is False and blocked(resp)[:2] == ("True", "ReportUnreadable")


def test_no_report_yet_holds_the_deletion(client):
    resp = finalize(client, nodeset(replicas=0))
    assert resp["finalized"] is False and blocked(resp)[:2] == ("True", "WaitingForReport")


def test_pods_first_then_the_report(client):
    """While pods drain, the pods are what the deletion waits for; the report's lists follow."""
    pods = children(sync(client, request(nodeset(replicas=1))))
    parent = reported(nodeset(replicas=1), pending=(9,), nodes=("gpu-0",))
    resp = finalize(client, parent, pods=[observed(pods["gpu-0"], slurm=("Allocated",))])
    status, reason, message = blocked(resp)
    assert (status, reason) == ("True", "PodsDraining") and "9" in message and "gpu-0" in message


def test_a_clear_report_finishes_the_deletion(client):
    resp = finalize(client, reported(nodeset(replicas=0)))
    assert resp["finalized"] is True and resp["children"] == []
    assert blocked(resp)[:2] == ("False", "NothingLeft")


def test_without_a_controller_pending_jobs_still_hold_but_node_records_do_not(client):
    """No Controller observed: a report naming pending jobs is busy evidence for the partition; node records are not."""
    resp = finalize(client, reported(nodeset(replicas=0), pending=(5,)), controller=None)
    assert resp["finalized"] is False and blocked(resp)[1] == "PendingJobs"
    resp = finalize(client, reported(nodeset(replicas=0), nodes=("gpu-0",)), controller=None)
    assert resp["finalized"] is True
    no_report = finalize(client, nodeset(replicas=0), controller=None)
    assert no_report["finalized"] is True, "no report: nothing holds without a Controller"


def test_force_delete_does_not_wait_for_the_report(client):
    parent = reported(nodeset(replicas=0), pending=(5,), nodes=("gpu-0",))
    parent["metadata"]["annotations"][names.ANNOTATION_FORCE_DELETE] = "true"
    resp = finalize(client, parent)
    assert resp["finalized"] is True and blocked(resp)[:2] == ("False", "ForceDelete")

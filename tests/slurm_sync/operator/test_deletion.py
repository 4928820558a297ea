"""slurm_sync's side of deleting a NodeSet: pending jobs of its partition reported with a deadline
and ended on purpose after it (a multi-partition job only loses this partition), a job leaves the
report only on Slurm's word about it, node records deleted once the pods are proven gone."""

from __future__ import annotations

import datetime
import json
from typing import Any

from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.deletion import plan_deletion
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.view import read_nodeset
from slurm_sync.slurm.types import parse_job
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import CLUSTER, NODESET_UID, NOW, NS, FakeSlurm, api_client, node, nodeset, pod

T0 = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
COMMENT = json.dumps(
    {"namespace": NS, "podName": "gpu-0", "node": "k1", "nodeSetName": "gpu", "nodeSetUID": NODESET_UID},
    separators=(",", ":"),
)


def job(job_id: int, state: str, partition: str = "gpu", comment: str = "") -> Any:
    return parse_job({"job_id": job_id, "job_state": [state], "partition": partition, "comment": comment})


def deleting_nodeset(report: str | None = None) -> dict:
    obj = nodeset(deleting=True)
    obj["spec"]["partition"] = {"enabled": True}
    if report is None:
        del obj["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED]
    else:
        obj["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED] = report
    return obj


def report(kube: FakeKube) -> dict:
    return json.loads(kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED])


def test_the_plan_reports_pending_jobs_and_ends_them_only_after_the_grace() -> None:
    view = read_nodeset(deleting_nodeset())
    pending = [job(7, "PENDING"), job(8, "PENDING", "gpu,cpu", comment="mine")]
    early = plan_deletion(view, pending, {}, (), T0, 600)
    assert early.report.value() == '{"pendingJobs":[7,8],"cancelAt":"2026-01-02T03:14:05Z","nodesLeft":[],"error":""}'
    assert early.job_ends == ()
    later = read_nodeset(deleting_nodeset(early.report.value()))
    due = plan_deletion(later, pending, {}, (), T0 + datetime.timedelta(seconds=600), 60)
    assert due.report.cancel_at == "2026-01-02T03:14:05Z"  # the first deadline holds, whatever the grace now
    cancel, move = due.job_ends
    assert (cancel.job_id, cancel.partitions) == (7, None)
    assert (
        cancel.comment
        == f"slurm-operator: partition gpu is being deleted with NodeSet {NS}/gpu; ended after a grace of 60s"
    )
    assert (move.job_id, move.partitions) == (8, ("cpu",)) and move.comment.startswith("mine | slurm-operator: ")


def test_a_nodeset_without_a_partition_waits_for_no_job() -> None:
    view = read_nodeset(nodeset(deleting=True))
    assert view.partition is None
    assert plan_deletion(view, [job(7, "PENDING")], {}, (), T0, 600).report.pending_jobs == (7,)  # the caller's list
    from slurm_sync.operator.deletion import pending_jobs

    assert pending_jobs(view, [job(7, "PENDING")]) == ()


def loop_rig(httpserver: HTTPServer, slurm: FakeSlurm, kube: FakeKube) -> OperatorLoop:
    kube.install(httpserver)
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,
        Kube(api_client(httpserver.url_for("/"))),
        Metrics(),  # type: ignore[arg-type]
        now=lambda: NOW,
        deletion_grace=0,
        absence_confirm_seconds=0,
    )


def test_the_loop_ends_pending_jobs_on_purpose_and_removes_records_once_pods_are_gone(httpserver: HTTPServer) -> None:
    slurm = FakeSlurm(
        {"gpu-0": node("gpu-0", "IDLE", "DRAIN", reason="slurm-operator: nodeset deleted", comment=COMMENT)}
    )
    slurm.jobs = {
        7: job(7, "PENDING"),
        8: job(8, "PENDING", "gpu,cpu"),
        9: job(9, "RUNNING"),
        10: job(10, "PENDING", "cpu"),
    }
    kube = FakeKube()
    kube.add("nodesets", deleting_nodeset())
    kube.add("pods", pod("gpu-0", states=("IDLE", "DRAIN"), reason="slurm-operator: nodeset deleted"))
    looper = loop_rig(httpserver, slurm, kube)
    looper.run_pass()
    assert report(kube) == {"pendingJobs": [7, 8], "cancelAt": NOW, "nodesLeft": ["gpu-0"], "error": ""}
    looper.run_pass()  # the deadline (grace 0) has come
    assert [(w[0], w[1]) for w in slurm.job_writes] == [("update", 7), ("cancel", 7), ("update", 8)]
    assert "CANCELLED" in slurm.jobs[7].state and slurm.jobs[8].partition == "cpu"
    assert slurm.jobs[7].comment.startswith("slurm-operator: partition gpu is being deleted")
    assert slurm.jobs[9].state == {"RUNNING"} and slurm.jobs[10].state == {"PENDING"}  # not ours to end
    looper.run_pass()
    assert report(kube) == {"pendingJobs": [], "cancelAt": None, "nodesLeft": ["gpu-0"], "error": ""}
    assert ("delete node", "gpu-0", {}) not in slurm.job_writes  # its pod still exists
    del kube.objects[("pods", NS, "gpu-0")]  # the pod is gone: the apiserver answers NotFound
    looper.run_pass()
    assert ("delete node", "gpu-0", {}) in slurm.job_writes
    looper.run_pass()  # nothing left: an absence, reported only once a later pass says so too
    assert report(kube)["nodesLeft"] == ["gpu-0"]
    looper.run_pass()
    assert report(kube) == {"pendingJobs": [], "cancelAt": None, "nodesLeft": [], "error": ""}
    writes = len(kube.writes)
    looper.run_pass()
    assert len(kube.writes) == writes  # written only on change


def test_a_record_slurm_already_deleted_ends_the_deletion_without_an_error(httpserver: HTTPServer) -> None:
    """Seen on the cluster lab: the view still listed a node Slurm had deleted (slurmctld does not date a
    deletion, so "unchanged since" kept it), and each pass's DELETE failed with Slurm's "Invalid node name
    specified": the NodeSet's deletion never ended. Not found is the end the DELETE was for."""
    drained = node("gpu-0", "IDLE", "DRAIN", reason="slurm-operator: nodeset deleted", comment=COMMENT)
    slurm = FakeSlurm({}, ghosts={"gpu-0": drained})
    kube = FakeKube()
    kube.add("nodesets", deleting_nodeset())
    looper = loop_rig(httpserver, slurm, kube)
    assert looper.run_pass().ok
    assert slurm.job_writes == [("delete node", "gpu-0", {})] and slurm.relists >= 1
    assert looper.run_pass().ok and looper.run_pass().ok  # nothing left, said on two passes
    assert report(kube) == {"pendingJobs": [], "cancelAt": None, "nodesLeft": [], "error": ""}
    assert slurm.job_writes == [("delete node", "gpu-0", {})]


def test_a_reported_job_the_listing_omits_stays_until_slurm_says_so(httpserver: HTTPServer) -> None:
    slurm = FakeSlurm({})
    slurm.jobs = {7: job(7, "PENDING")}
    kube = FakeKube()
    kube.add(
        "nodesets", deleting_nodeset('{"pendingJobs":[7],"cancelAt":"2099-01-01T00:00:00Z","nodesLeft":[],"error":""}')
    )
    looper = loop_rig(httpserver, slurm, kube)
    listing = slurm.list_jobs
    slurm.list_jobs = lambda: listing().__class__((), 1, unchanged=False)  # type: ignore[method-assign]  # a listing without it
    looper.run_pass()
    assert report(kube)["pendingJobs"] == [7]  # Slurm, asked by id, still has it pending
    del slurm.jobs[7]  # really gone: a first not-found, then a confirmed one
    looper.run_pass()
    assert report(kube)["pendingJobs"] == [7]
    looper.run_pass()  # confirmed gone: nothing left, which the next pass must say again
    assert report(kube)["pendingJobs"] == [7]
    looper.run_pass()
    assert report(kube)["pendingJobs"] == []
    assert slurm.job_writes == []  # nothing ended: it was never due


def test_one_empty_job_listing_does_not_end_the_partitions_queued_jobs(httpserver: HTTPServer) -> None:
    """model/drain.pml (-DNO_EMPTY_PROOF): the NodeSet's pods and records are gone, a job still waits in its
    partition, and the first listing of a term comes back empty (one wrong answer, nothing earlier to compare it
    with). The report that lets finalize finish, and the partition's lines go, needs a later pass to agree."""
    slurm = FakeSlurm({})
    slurm.jobs = {7: job(7, "PENDING")}
    kube = FakeKube()
    kube.add("nodesets", deleting_nodeset())
    looper = loop_rig(httpserver, slurm, kube)
    listing = slurm.list_jobs
    slurm.list_jobs = lambda: listing().__class__((), 1, unchanged=False)  # type: ignore[method-assign]  # empty
    looper.run_pass()
    assert names.ANNOTATION_DELETION_OBSERVED not in kube.get("nodesets", NS, "gpu")["metadata"]["annotations"]
    slurm.list_jobs = listing  # type: ignore[method-assign]  # the truth again
    looper.run_pass()
    assert report(kube)["pendingJobs"] == [7]


def test_an_elastic_nodesets_slurm_conf_nodes_are_not_left_to_delete() -> None:
    """Slurm refuses to delete a node slurm.conf names; they go with the NodeSet's slurm.conf lines (§4.9). A
    dynamic node whose comment names the NodeSet still counts."""
    obj = deleting_nodeset()
    obj["spec"]["elastic"] = {"minReplicas": 1, "maxReplicas": 3}
    listed = {n: node(n, "IDLE", comment=COMMENT) for n in ("gpu-0", "gpu-2", "gpu-7")}
    plan = plan_deletion(read_nodeset(obj), [], listed, (), T0, 600)
    assert plan.report.nodes_left == ("gpu-7",)


def test_a_mark_the_cache_does_not_show_yet_is_still_removed_before_a_lift(httpserver: HTTPServer) -> None:
    """model/drain.pml (-DNO_OWN_MARKS): a pass marks the pod drained; the intent is withdrawn before the watch
    cache shows that write. The next pass lifts the drain: the removal of the mark must be sent first, or the pod
    keeps a drained mark on a node that takes jobs again (and a NodeSet condemning it anew deletes it at once)."""
    drained = node("gpu-0", "IDLE", "DRAIN", reason="slurm-operator: scale-in", comment=COMMENT)
    slurm = FakeSlurm({"gpu-0": drained})
    kube = FakeKube()
    kube.add("nodesets", nodeset(intents={"gpu-0": "scale-in"}))
    kube.add("pods", pod("gpu-0", states=("IDLE", "DRAIN"), reason="slurm-operator: scale-in"))
    looper = loop_rig(httpserver, slurm, kube)
    looper.run_pass()
    annotations = kube.get("pods", NS, "gpu-0")["metadata"]["annotations"]
    assert annotations[names.ANNOTATION_DRAINED] == "true"
    del annotations[names.ANNOTATION_DRAINED]  # the watch cache lists the pod as it was before that write
    kube.get("nodesets", NS, "gpu")["status"][names.STATUS_DRAINING_PODS] = []  # the intent is withdrawn
    writes = len(kube.writes)
    looper.run_pass()
    assert any(u == ("gpu-0", ("UNDRAIN",)) for u in ((n, up.state) for n, up in slurm.updates))
    patches = [body for verb, path, _, body in kube.writes[writes:] if verb == "PATCH" and path.endswith("/pods/gpu-0")]
    assert any(
        (p.get("metadata") or {}).get("annotations", {}).get(names.ANNOTATION_DRAINED, "x") is None for p in patches
    )

"""The Slurm node record of a pod replaced with new resources or scaled in (slurm_sync/operator/records.py):
deleted only when its drain intent asks for it and Slurm, asked twice, says the node runs no job; then the
absence proof marks the pod, and only that mark lets the hook delete it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import CONFIRM_MARGIN, OperatorLoop
from slurm_sync.passes import FOLLOW_UP
from slurm_sync.slurm.errors import SlurmUnavailable
from slurm_sync.slurm.types import parse_job
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    api_client,
    node,
    nodeset,
    pod,
    running_job,
)

REASON = "slurm-operator: rolling update to revision abc"
DRAINED = ("IDLE", "DRAIN")
DELETE = ("delete node", "gpu-0", {})


def flagged_nodeset(flag: Any = True) -> dict:
    obj = nodeset({"gpu-0": REASON})
    obj["status"][names.STATUS_DRAINING_PODS][0][names.DRAIN_DELETE_NODE] = flag
    return obj


def rig(httpserver: HTTPServer, states: tuple[str, ...] = DRAINED, nodeset_obj: dict | None = None, **pod_kw: Any):
    slurm = FakeSlurm({"gpu-0": node("gpu-0", *states, reason=REASON)})
    kube = FakeKube()
    kube.add("nodesets", nodeset_obj or flagged_nodeset())
    kube.add("pods", pod("gpu-0", states=pod_kw.pop("pod_states", states), reason=REASON, **pod_kw))
    kube.install(httpserver)
    loop = make_loop(httpserver.url_for("/"), slurm)
    return slurm, kube, loop


def make_loop(url: str, slurm: FakeSlurm, **kw: Any) -> OperatorLoop:
    kw.setdefault("absence_confirm_seconds", 0)
    return OperatorLoop(CLUSTER, NS, CLUSTER, slurm, Kube(api_client(url)), Metrics(), now=lambda: NOW, **kw)  # type: ignore[arg-type]


def annotations(kube: FakeKube) -> dict[str, str]:
    return kube.get("pods", NS, "gpu-0")["metadata"]["annotations"]


def test_a_flagged_drained_idle_node_is_deleted_then_its_pod_marked_absent(httpserver: HTTPServer) -> None:
    slurm, kube, loop = rig(httpserver)
    loop.run_pass()
    assert DELETE in slurm.job_writes and slurm.asked.count("gpu-0") == 1  # the listing, then a GET of that node
    assert annotations(kube).get(names.ANNOTATION_SLURM_NODE_ABSENT) != "true"  # one not-found is not proof
    loop.run_pass()
    loop.run_pass()
    assert annotations(kube)[names.ANNOTATION_SLURM_NODE_ABSENT] == "true"
    assert slurm.job_writes.count(DELETE) == 1


def test_a_deletion_slurm_leaves_undated_is_seen_through_a_whole_listing(httpserver: HTTPServer) -> None:
    """slurmctld does not advance the node listing's last_update for a deletion: "unchanged since" would
    keep the deleted record in the view for as long as no other node changes, and the pod never absent."""
    slurm, kube, loop = rig(httpserver)
    slurm.undated_deletes = True
    loop.run_pass()
    assert DELETE in slurm.job_writes and slurm.ghosts == {}  # the next listing is asked whole
    loop.run_pass()
    loop.run_pass()
    assert annotations(kube)[names.ANNOTATION_SLURM_NODE_ABSENT] == "true"
    assert slurm.job_writes.count(DELETE) == 1


def test_a_down_node_without_a_job_is_deleted(httpserver: HTTPServer) -> None:
    slurm, _kube, loop = rig(httpserver, states=("DOWN", "NOT_RESPONDING"))
    loop.run_pass()
    assert DELETE in slurm.job_writes


@pytest.mark.parametrize(
    "states",
    [("MIXED", "DRAIN"), ("ALLOCATED", "DRAIN"), ("IDLE", "DRAIN", "COMPLETING"), ("IDLE",), ("DOWN", "COMPLETING")],
)
def test_never_while_slurm_says_busy_or_the_drain_is_not_done(httpserver: HTTPServer, states) -> None:
    slurm, _kube, loop = rig(httpserver, states=states)
    loop.run_pass()
    loop.run_pass()
    assert DELETE not in slurm.job_writes


@pytest.mark.parametrize(
    "pod_kw",
    [
        {"labels": {names.LABEL_POD_PROTECT: "true"}},
        {"annotations": {names.ANNOTATION_POD_DEADLINE: "2099-01-01T00:00:00Z"}},
        {"pod_states": ("MIXED", "DRAIN")},  # what slurm_sync mirrored last: busy until a pass says otherwise
    ],
)
def test_never_while_the_pod_carries_busy_evidence(httpserver: HTTPServer, pod_kw) -> None:
    """One pass: the pod still carries, as the pass reads it, the evidence it began with."""
    slurm, _kube, loop = rig(httpserver, **pod_kw)
    loop.run_pass()
    assert DELETE not in slurm.job_writes


def test_never_while_the_job_listing_shows_a_job_there(httpserver: HTTPServer) -> None:
    slurm, _kube, loop = rig(httpserver)
    slurm.jobs = {5: parse_job({"job_id": 5, "job_state": ["RUNNING"], "nodes": "gpu-0", "end_time": {"number": 0}})}
    loop.run_pass()
    assert DELETE not in slurm.job_writes


@pytest.mark.parametrize("required", ["gpu-0", "gpu-[0-1]", "gpu-[0"])
def test_never_while_a_pending_job_asks_for_the_node_by_name(httpserver: HTTPServer, required) -> None:
    """Slurm would keep it pending across the delete, then kill it at its next start (slurm-bridge#43);
    an unreadable list is unknown, not "another node"."""
    slurm, _kube, loop = rig(httpserver)
    slurm.jobs = {6: parse_job({"job_id": 6, "job_state": ["PENDING"], "required_nodes": required})}
    loop.run_pass()
    assert DELETE not in slurm.job_writes


def test_never_on_unknown_state(httpserver: HTTPServer) -> None:
    slurm, _kube, loop = rig(httpserver)
    slurm.fail = SlurmUnavailable("slurmrestd: connection refused")
    loop.run_pass()
    assert DELETE not in slurm.job_writes


def test_never_on_one_answer_the_second_contradicts(httpserver: HTTPServer) -> None:
    """The listing said drained and idle; asked about that node, Slurm says a job got it meanwhile."""
    slurm, _kube, loop = rig(httpserver)
    busy = node("gpu-0", "MIXED", "DRAIN", reason=REASON)
    slurm.get_node = lambda name: busy  # type: ignore[method-assign]
    loop.run_pass()
    assert DELETE not in slurm.job_writes


@pytest.mark.parametrize("flag", [None, False, "true"])
def test_an_ordinary_drain_keeps_the_record(httpserver: HTTPServer, flag) -> None:
    """A pod replaced with the same registration (or an old hook's intent) keeps its node's record and state."""
    obj = flagged_nodeset(flag) if flag is not None else nodeset({"gpu-0": REASON})
    slurm, _kube, loop = rig(httpserver, nodeset_obj=obj)
    loop.run_pass()
    loop.run_pass()
    assert DELETE not in slurm.job_writes


def make_elastic(obj: dict) -> None:
    """Its nodes gpu-[0-3] in slurm.conf (docs/architecture.md §4.9)."""
    obj["spec"]["elastic"] = {"minReplicas": 1, "maxReplicas": 4}
    obj["spec"]["partition"] = {"enabled": True}


def test_an_elastic_nodesets_record_is_never_deleted(httpserver: HTTPServer) -> None:
    """Even when a drain intent asks for it (flagged before the NodeSet became elastic): Slurm refuses to delete a
    node slurm.conf names, and the pod needs no new record to register differently."""
    obj = flagged_nodeset()
    make_elastic(obj)
    slurm, _, loop = rig(httpserver, nodeset_obj=obj)
    for _ in range(3):
        loop.run_pass()
    assert DELETE not in slurm.job_writes


# --- leftover records: a pod gone without a scale-in, replaced under another name ---------------------

TERMINATED = ("DOWN", "NOT_RESPONDING")  # the preStop's DOWN, slurmd gone
LEFTOVER_DELETE = ("delete node", "gpu-2", {})


def pod_comment(pod_name: str = "gpu-2", uid: str = NODESET_UID, nodeset_name: str = NODESET) -> str:
    """The podInfo slurm_sync wrote on the node while its pod lived (Slinky's format)."""
    return json.dumps(
        {"namespace": NS, "podName": pod_name, "node": "k1", "nodeSetName": nodeset_name, "nodeSetUID": uid}
    )


def leftover_rig(httpserver: HTTPServer, replicas: int = 1, states: tuple[str, ...] = TERMINATED, **nodeset_kw: Any):
    """gpu-2's pod was deleted by hand while ordinal 1 was free; its replacement, gpu-0 here, serves."""
    slurm = FakeSlurm({
        "gpu-0": node("gpu-0", "IDLE", comment=pod_comment("gpu-0")),
        "gpu-2": node("gpu-2", *states, reason="slurm-operator: Pod is terminating",
                      comment=nodeset_kw.pop("comment", pod_comment())),
    })  # fmt: skip
    kube = FakeKube()
    obj = nodeset(**nodeset_kw)
    obj["spec"]["replicas"] = replicas
    kube.add("nodesets", obj)
    kube.add("pods", pod("gpu-0", states=("IDLE",)))
    kube.install(httpserver)
    loop = make_loop(httpserver.url_for("/"), slurm)
    return slurm, kube, loop


def test_a_leftover_record_goes_once_its_pod_is_not_found_on_two_passes(httpserver: HTTPServer) -> None:
    slurm, kube, loop = leftover_rig(httpserver)
    loop.run_pass()
    assert LEFTOVER_DELETE not in slurm.job_writes  # one NotFound is not proof
    loop.run_pass()
    assert slurm.job_writes.count(LEFTOVER_DELETE) == 1 and "gpu-0" in slurm.nodes
    (event,) = [w[3] for w in kube.writes if w[0] == "POST" and "events" in w[1]]
    assert event["reason"] == "SlurmNodeDeleted" and event["regarding"]["kind"] == "NodeSet"
    assert "default/gpu-2" not in event["note"] and f"{NS}/gpu-2 is gone" in event["note"]
    loop.run_pass()
    assert slurm.job_writes.count(LEFTOVER_DELETE) == 1


def test_a_pod_found_between_the_two_answers_voids_the_evidence(httpserver: HTTPServer) -> None:
    """NotFound, then the pod exists (the apiserver's cache lags behind a GET), then NotFound: two more
    passes are needed, not one."""
    slurm, kube, loop = leftover_rig(httpserver)
    loop.run_pass()
    kube.add("pods", pod("gpu-2", "gpu-9"))
    kube.unlisted.add(("pods", NS, "gpu-2"))
    loop.run_pass()
    del kube.objects[("pods", NS, "gpu-2")]
    loop.run_pass()
    assert LEFTOVER_DELETE not in slurm.job_writes
    loop.run_pass()
    assert LEFTOVER_DELETE in slurm.job_writes


@pytest.mark.parametrize(
    "case",
    [
        "short of replicas",  # the replacement may still come under the old name
        "a pod claims the name",
        "its pod is listed",
        "another NodeSet uid",
        "another NodeSet",
        "no comment",
        "DaemonSet",
        "not released",
        "a job there",
        "asked for by name",
        "Slurm unknown",
        "busy on the second answer",
        "elastic",  # slurm.conf's node: powered down without a pod, and Slurm refuses to delete it
    ],
)
def test_a_leftover_record_stays(httpserver: HTTPServer, case: str) -> None:
    kw: dict[str, Any] = {}
    if case == "another NodeSet uid":
        kw["comment"] = pod_comment(uid="uid-of-an-earlier-gpu")
    if case == "another NodeSet":
        kw["comment"] = pod_comment(nodeset_name="cpu")
    if case == "no comment":
        kw["comment"] = ""
    slurm, kube, loop = leftover_rig(
        httpserver,
        replicas=2 if case == "short of replicas" else 1,
        states=("IDLE",) if case == "not released" else TERMINATED,
        **kw,
    )
    if case == "a pod claims the name":
        kube.add("pods", pod("gpu-5", "gpu-2"))
        kube.get("nodesets", NS, NODESET)["spec"]["replicas"] = 2
    if case == "its pod is listed":
        kube.add("pods", pod("gpu-2", "gpu-7", terminating=True))
    if case == "DaemonSet":
        kube.get("nodesets", NS, NODESET)["spec"]["scalingMode"] = "DaemonSet"
    if case == "elastic":
        make_elastic(kube.get("nodesets", NS, NODESET))
    if case == "a job there":
        slurm.jobs = {5: running_job(5, "gpu-2")}
    if case == "asked for by name":
        slurm.jobs = {6: parse_job({"job_id": 6, "job_state": ["PENDING"], "required_nodes": "gpu-[1-2]"})}
    if case == "Slurm unknown":
        slurm.fail = SlurmUnavailable("slurmrestd: connection refused")
    if case == "busy on the second answer":
        busy = node("gpu-2", "ALLOCATED", comment=pod_comment())
        slurm.get_node = lambda name: busy  # type: ignore[method-assign]
    for _ in range(3):
        loop.run_pass()
    assert LEFTOVER_DELETE not in slurm.job_writes


def test_each_step_of_a_record_deletion_asks_for_the_pass_that_takes_the_next() -> None:
    """Slurm is not watched: the pass that deleted the record asks for one FOLLOW_UP later; the one that
    got the first not-found asks for one when that answer may be confirmed; a quiet pass asks for none."""
    slurm = FakeSlurm({"gpu-0": node("gpu-0", *DRAINED, reason=REASON)})
    kube = FakeKube()
    kube.add("nodesets", flagged_nodeset())
    kube.add("pods", pod("gpu-0", states=DRAINED, reason=REASON))
    now = [0.0]
    with HTTPServer() as server:
        kube.install(server)
        loop = make_loop(server.url_for("/"), slurm, clock=lambda: now[0], absence_confirm_seconds=5)
        first = loop.run_pass()
        assert DELETE in slurm.job_writes and first.follow_up == FOLLOW_UP
        now[0] = 1.0
        second = loop.run_pass()  # Slurm: no such node, once
        assert second.follow_up == 5.0 + CONFIRM_MARGIN
        now[0] = 6.1
        loop.run_pass()  # confirmed: the pod is marked absent
        assert annotations(kube)[names.ANNOTATION_SLURM_NODE_ABSENT] == "true"
        now[0] = 7.0
        assert loop.run_pass().follow_up is None

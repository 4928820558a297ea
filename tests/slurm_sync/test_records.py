"""The Slurm node record of a pod replaced with new resources or scaled in (slurm_sync/operator/records.py):
deleted only when its drain intent asks for it and Slurm, asked twice, says the node runs no job; then the
absence proof marks the pod, and only that mark lets the hook delete it."""

from __future__ import annotations

from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from hooks import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.slurm.errors import SlurmUnavailable
from slurm_sync.slurm.types import parse_job
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import CLUSTER, NOW, NS, FakeSlurm, api_client, node, nodeset, pod

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
    loop = OperatorLoop(
        CLUSTER, NS, CLUSTER, slurm, Kube(api_client(httpserver.url_for("/"))), Metrics(),  # type: ignore[arg-type]
        now=lambda: NOW, absence_confirm_seconds=0,
    )  # fmt: skip
    return slurm, kube, loop


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

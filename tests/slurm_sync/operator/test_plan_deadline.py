"""The pod-deadline annotation (docs/architecture.md §4.3): the latest end of the jobs Slurm lists on a
pod's node, written only on change, removed only when Slurm says the node runs nothing; an unknown
job listing, a job without an end or an unreadable node list change nothing."""

from __future__ import annotations

import datetime

import pytest

from slinky_common import names
from slurm_sync.metrics import Metrics
from slurm_sync.operator import plan
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import Tally
from slurm_sync.slurm.errors import SlurmUnavailable
from slurm_sync.slurm.types import Job, Node
from tests.slurm_sync.kubefixtures import NOW, NS, FakeSlurm, node, ping, pod
from tests.slurm_sync.operator.planviews import cluster

DEADLINE = names.ANNOTATION_POD_DEADLINE
T0 = 1_800_000_000  # 2027-01-15T08:00:00Z


def job(
    job_id: int, nodes: str, *state: str, end: int | None = None, start: int | None = None, limit: int | None = None
) -> Job:
    return Job(
        job_id,
        "j",
        frozenset(state or ("RUNNING",)),
        "",
        nodes,
        "",
        "debug",
        "u",
        1,
        "",
        "",
        frozenset(),
        start,
        limit,
        end,
    )


def iso(seconds: int) -> str:
    return plan.rfc3339(datetime.datetime.fromtimestamp(seconds, datetime.UTC))


def test_the_latest_end_of_the_jobs_holding_each_node() -> None:
    jobs = [
        job(1, "n[1-2]", end=T0 + 600),
        job(2, "n2", end=T0 + 60),
        job(3, "n3", start=T0, limit=10),  # no end_time: start + limit
        job(4, "n4", "PENDING", end=T0 + 9),  # not on a node
        job(5, "n1", "COMPLETED", end=T0 + 9999),  # ended
        job(6, "n5", "RUNNING"),  # no known end: n5's deadline is unknown
        job(7, "n5", end=T0),
    ]
    assert plan.node_deadlines(jobs) == {"n1": T0 + 600, "n2": T0 + 600, "n3": T0 + 600, "n5": None}
    with pytest.raises(ValueError):
        plan.node_deadlines([job(8, "n[x-")])


def pod_plan(
    slurm_node: Node | None,
    deadlines: dict[str, int | None] | None,
    annotations: dict[str, str] | None = None,
    absent: bool = False,
) -> plan.PodPlan:
    c = cluster(pod("gpu-0", "n1", annotations=annotations or {}))
    nodes = {"n1": slurm_node} if slurm_node is not None else {}
    view = SlurmView(nodes, ping(("c0", True, True)), frozenset({"n1"}) if absent else frozenset(), deadlines=deadlines)
    return plan.plan_pod(c.pods[0], c, view, NOW)


def deadline_writes(p: plan.PodPlan) -> list[str | None]:
    return [
        patch.body["metadata"]["annotations"][DEADLINE]
        for patch in p.patches
        if DEADLINE in ((patch.body.get("metadata") or {}).get("annotations") or {})
    ]


def test_written_on_change_only() -> None:
    busy = node("n1", "ALLOCATED")
    assert deadline_writes(pod_plan(busy, {"n1": T0})) == [iso(T0)]
    assert deadline_writes(pod_plan(busy, {"n1": T0}, {DEADLINE: iso(T0)})) == []
    assert deadline_writes(pod_plan(busy, {"n1": T0 + 60}, {DEADLINE: iso(T0)})) == [iso(T0 + 60)]


def test_removed_only_when_slurm_says_the_node_runs_nothing() -> None:
    before = {DEADLINE: iso(T0)}
    assert deadline_writes(pod_plan(node("n1", "IDLE"), {}, before)) == [None]
    assert deadline_writes(pod_plan(None, {}, before, absent=True)) == [None]  # proven absent
    # the node listing says busy, the job listing shows nothing there: the two disagree, nothing changes
    assert deadline_writes(pod_plan(node("n1", "MIXED"), {}, before)) == []
    assert deadline_writes(pod_plan(node("n1", "IDLE", "COMPLETING"), {}, before)) == []


@pytest.mark.parametrize("deadlines", [None, {"n1": None}], ids=["no job listing", "a job without an end"])
def test_unknown_changes_nothing(deadlines: dict[str, int | None] | None) -> None:
    before = {DEADLINE: iso(T0)}
    assert deadline_writes(pod_plan(node("n1", "IDLE"), deadlines, before)) == []
    assert deadline_writes(pod_plan(node("n1", "ALLOCATED"), deadlines)) == []


def test_a_failed_job_listing_is_an_error_and_no_deadline() -> None:
    slurm = FakeSlurm({"n1": node("n1", "IDLE")})
    loop = OperatorLoop("slurm", NS, "slurm", slurm, None, Metrics())  # type: ignore[arg-type]
    slurm.jobs = {1: job(1, "n1", end=T0)}
    tally = Tally()
    assert loop.read_slurm(tally).deadlines == {"n1": T0}
    listing = slurm.list_jobs
    down = SlurmUnavailable("HTTP 503", status=503)
    slurm.list_jobs = lambda: (_ for _ in ()).throw(down)  # type: ignore[method-assign]
    view = loop.read_slurm(tally)
    assert view.jobs is None and view.deadlines is None and view.nodes is not None
    assert any(e.startswith("list jobs") for e in tally.unready)
    slurm.list_jobs = listing  # type: ignore[method-assign]
    slurm.jobs = {1: job(1, "n[x-", end=T0)}
    tally = Tally()
    assert loop.read_slurm(tally).deadlines is None
    assert any(e.startswith("job deadlines") for e in tally.errors)


def test_the_jobs_holding_nodes_are_read_from_the_job_listing_only_for_the_nodes_asked_about() -> None:
    jobs = [
        job(1, "n[1-3]"),
        job(2, "n3", "COMPLETING"),
        job(3, "n2", "SUSPENDED"),
        job(4, "n1", "COMPLETED"),
        job(5, "", "PENDING"),
        job(6, "n4"),
    ]
    assert plan.holding_jobs(jobs, ["n1", "n3", "n5"]) == {"n1": (1,), "n3": (1, 2)}
    with pytest.raises(ValueError):
        plan.holding_jobs([job(7, "n[3-")], ["n3"])

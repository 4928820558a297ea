"""Elastic NodeSets (docs/architecture.md §4.9), slurm_sync's side: what Slurm's power saving wants of each
on-demand node, reported on the NodeSet (names.ANNOTATION_POWER_OBSERVED) for the NodeSet hook, which creates
the pod of a node Slurm powers up and removes the pod of a node Slurm powers down; and a node Slurm set DOWN
because no pod registered it within ResumeTimeout is resumed once that pod is gone, so a later job can power it
up again (the job that waited for it Slurm itself requeued).

A pure plan from (NodeSet, Slurm's node listing) to the report and the resumes, and the step that carries it
out. A node the listing lacks is in no list: unknown, so the hook neither creates nor removes its pod.

Slurm says nothing when it powers a node up, and the job waits for that node's pod: while a cluster has an
elastic NodeSet its passes follow each other every POWER_POLL seconds rather than the poll interval, each a
conditional node listing that costs one small answer while nothing changed (measured by `make bench`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from functools import partial

from slinky_common import names, slurmstate
from slinky_common.powerreport import PowerReport, read_report
from slurm_sync.events import nodeset_ref
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import ClusterView, NodeSetView
from slurm_sync.slurm.errors import SlurmError
from slurm_sync.slurm.types import Node, NodeUpdate

POWER_POLL = 1.0  # seconds between passes while an elastic NodeSet waits on Slurm's power decisions
RISING_MARGIN = 0.02  # seconds past the second boundary a node Slurm powers up is listed at


def plan_report(
    nodeset: NodeSetView, nodes: Mapping[str, Node], now: float, previous: PowerReport | None = None
) -> PowerReport:
    """Each on-demand node of the NodeSet that Slurm listed, by what its power state asks of its pod (a pending
    one in no list: nothing yet). A node Slurm powers up keeps the second it was first seen so (`upSince`, from
    the ``previous`` report) and is listed up from the next second on (slinky_common/powerreport.py says why); one
    the previous report listed up without that second is up already, dated a second back."""
    found: dict[str, list[str]] = {
        slurmstate.POWER_UP: [],
        slurmstate.POWER_DOWN: [],
        slurmstate.RESUME_FAILED: [],
        slurmstate.POWER_PENDING: [],
    }
    known = previous.since() if previous is not None else {}
    was_up = set(previous.up) if previous is not None else set()
    since: dict[str, int] = {}
    for name in sorted(nodeset.on_demand_nodes):
        node = nodes.get(name)
        if node is None:
            continue
        power = slurmstate.power(node.state)
        if power == slurmstate.POWER_UP:
            since[name] = known.get(name, int(now) - 1 if name in was_up else int(now))
            if now < since[name] + 1:
                continue  # up from the next second on: in no list until then
        found[power].append(name)
    return PowerReport(
        tuple(found[slurmstate.POWER_UP]),
        tuple(found[slurmstate.POWER_DOWN]),
        tuple(found[slurmstate.RESUME_FAILED]),
        tuple(sorted(since.items())),
    )


def failed_resumes(report: PowerReport, nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """Nodes Slurm set DOWN for a failed resume (its own reason, never an administrator's DOWN)."""
    return tuple(n for n in report.resume_failed if nodes[n].reason.startswith(slurmstate.RESUME_TIMEOUT_REASON))


def newly_failed(report: PowerReport, nodes: Mapping[str, Node], previous: str | None) -> tuple[str, ...]:
    """Failed resumes the NodeSet's last report did not list yet: each is told once, across restarts too."""
    before = read_report(previous)
    known = set(before.resume_failed) if before is not None else set()
    return tuple(n for n in failed_resumes(report, nodes) if n not in known)


def to_resume(nodeset: NodeSetView, nodes: Mapping[str, Node], served: Collection[str]) -> tuple[str, ...]:
    """On-demand nodes Slurm powered down, no pod serves any more, and that stay DOWN or drained without a RESUME:
    a failed resume (Slurm's reason), or our own DOWN or DRAIN (the preStop of the pod that left, or a drain under
    way when Slurm powered the node down). Slurm would never power them up again. Only once their pod is gone: a
    node resumed while the pod that failed it is still there may be given the next job at once, and that pod,
    whose slurmd cannot register it, would fail it again. A powered-down node runs nothing; an administrator's
    reason is never ours."""
    return tuple(
        name
        for name in sorted(nodeset.on_demand_nodes)
        if name not in served
        and (node := nodes.get(name)) is not None
        and "POWERED_DOWN" in node.state
        and slurmstate.is_powered_down(node.state)
        and not node.busy
        and (node.base_state == "DOWN" or "DRAIN" in node.state)
        and (slurmstate.is_operator_reason(node.reason) or node.reason.startswith(slurmstate.RESUME_TIMEOUT_REASON))
    )


def execute(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Report on each elastic NodeSet of the cluster, tell each failed resume, and resume the nodes left DOWN or
    drained once their pod is gone. Needs Slurm's node listing of this pass (a failed one is already a pass
    error)."""
    if slurm.nodes is None:
        return
    served = {pod.slurm_node for pod in cluster.pods}
    for nodeset in sorted(cluster.nodesets.values(), key=lambda n: n.name):
        if not nodeset.on_demand_nodes or nodeset.deleting:
            continue
        tally.watch_power = True
        now = ctx.wall_clock()
        report = plan_report(nodeset, slurm.nodes, now, read_report(nodeset.power_report))
        rising = [since + 1 - now for node, since in report.up_since if node not in report.up]
        if rising:  # the next pass when the first of them may be listed up, not a whole POWER_POLL later
            tally.power_due = min([*rising, *([tally.power_due] if tally.power_due is not None else [])])
        _count(ctx, nodeset, report)
        for node in newly_failed(report, slurm.nodes, nodeset.power_report):
            _tell_failed(ctx, nodeset, node)
        for node in to_resume(nodeset, slurm.nodes, served):
            _resume(ctx, node, tally)
        value = report.value()
        if value != nodeset.power_report:
            ctx.kube_write(
                tally,
                f"nodeset {nodeset.name} power report",
                partial(
                    ctx.kube.annotate_nodeset, nodeset.namespace, nodeset.name, names.ANNOTATION_POWER_OBSERVED, value
                ),
            )


def _tell_failed(ctx: StepContext, nodeset: NodeSetView, node: str) -> None:
    ctx.metrics.elastic_resume_failures.labels(ctx.cluster, nodeset.namespace, nodeset.name).inc()
    note = (
        f"Slurm node {node} was not up within its ResumeTimeout (its pod did not register it): Slurm requeued the "
        "job that waited for it; the pod goes, and the node is resumed, powered down, for a later try"
    )
    ctx.events.warn(nodeset_ref(nodeset.namespace, nodeset.name, nodeset.uid), "ResumeFailed", note, "Resume")


def _resume(ctx: StepContext, node: str, tally: Tally) -> None:
    try:
        ctx.slurm.update_node(node, NodeUpdate(state=("RESUME",)))
    except SlurmError as exc:
        ctx.slurm_error(tally, f"resume powered-down node {node}", exc)
        return
    tally.slurm_writes += 1


def _count(ctx: StepContext, nodeset: NodeSetView, report: PowerReport) -> None:
    gauge = ctx.metrics.elastic_nodes
    for power, nodes in (
        (slurmstate.POWER_UP, report.up),
        (slurmstate.POWER_DOWN, report.down),
        (slurmstate.RESUME_FAILED, report.resume_failed),
    ):
        gauge.labels(ctx.cluster, nodeset.namespace, nodeset.name, power).set(len(nodes))

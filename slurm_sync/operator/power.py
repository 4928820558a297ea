"""Elastic NodeSets (docs/architecture.md §4.9), slurm_sync's side: what Slurm's power saving wants of each
on-demand node, reported on the NodeSet (names.ANNOTATION_POWER_OBSERVED) for the NodeSet hook, which creates
the pod of a node Slurm powers up and removes the pod of a node Slurm powers down; and a node Slurm set DOWN
because no pod registered it within ResumeTimeout is resumed, so a later job can power it up again (the job
that waited for it Slurm itself requeued).

A pure plan from (NodeSet, Slurm's node listing) to the report and the resumes, and the step that carries it
out. A node the listing lacks is in no list: unknown, so the hook neither creates nor removes its pod.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from slinky_common import names, slurmstate
from slinky_common.powerreport import PowerReport
from slurm_sync.events import nodeset_ref
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import ClusterView, NodeSetView
from slurm_sync.slurm.errors import SlurmError
from slurm_sync.slurm.types import Node, NodeUpdate


def plan_report(nodeset: NodeSetView, nodes: Mapping[str, Node]) -> PowerReport:
    """Each on-demand node of the NodeSet that Slurm listed, by what its power state asks of its pod."""
    found: dict[str, list[str]] = {slurmstate.POWER_UP: [], slurmstate.POWER_DOWN: [], slurmstate.RESUME_FAILED: []}
    for name in sorted(nodeset.on_demand_nodes):
        node = nodes.get(name)
        if node is not None:
            found[slurmstate.power(node.state)].append(name)
    return PowerReport(
        tuple(found[slurmstate.POWER_UP]),
        tuple(found[slurmstate.POWER_DOWN]),
        tuple(found[slurmstate.RESUME_FAILED]),
    )


def to_resume(report: PowerReport, nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """Nodes Slurm set DOWN for a failed resume (its own reason, never an administrator's DOWN)."""
    return tuple(n for n in report.resume_failed if nodes[n].reason.startswith(slurmstate.RESUME_TIMEOUT_REASON))


def to_lift(nodeset: NodeSetView, nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """On-demand nodes Slurm powered down that carry our own DOWN or DRAIN (the preStop of the pod that left, or a
    drain that was under way when Slurm powered the node down): no pod is left to lift it, and Slurm would never
    power the node up again. A powered-down node runs nothing; an administrator's reason is never ours."""
    return tuple(
        name
        for name in sorted(nodeset.on_demand_nodes)
        if (node := nodes.get(name)) is not None
        and "POWERED_DOWN" in node.state
        and slurmstate.is_powered_down(node.state)
        and not node.busy
        and (node.base_state == "DOWN" or "DRAIN" in node.state)
        and slurmstate.is_operator_reason(node.reason)
    )


def execute(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Report on each elastic NodeSet of the cluster and resume its nodes whose resume failed. Needs Slurm's node
    listing of this pass (a failed one is already a pass error)."""
    if slurm.nodes is None:
        return
    for nodeset in sorted(cluster.nodesets.values(), key=lambda n: n.name):
        if not nodeset.on_demand_nodes or nodeset.deleting:
            continue
        report = plan_report(nodeset, slurm.nodes)
        _count(ctx, nodeset, report)
        for node in to_resume(report, slurm.nodes):
            _resume(ctx, nodeset, node, tally)
        for node in to_lift(nodeset, slurm.nodes):
            _lift(ctx, node, tally)
        value = report.value()
        if value != nodeset.power_report:
            ctx.kube_write(
                tally,
                f"nodeset {nodeset.name} power report",
                partial(
                    ctx.kube.annotate_nodeset, nodeset.namespace, nodeset.name, names.ANNOTATION_POWER_OBSERVED, value
                ),
            )


def _resume(ctx: StepContext, nodeset: NodeSetView, node: str, tally: Tally) -> None:
    ref = nodeset_ref(nodeset.namespace, nodeset.name, nodeset.uid)
    try:
        ctx.slurm.update_node(node, NodeUpdate(state=("RESUME",)))
    except SlurmError as exc:
        ctx.slurm_error(tally, f"resume node {node}", exc)
        return
    tally.slurm_writes += 1
    ctx.metrics.elastic_resume_failures.labels(ctx.cluster, nodeset.namespace, nodeset.name).inc()
    note = (
        f"Slurm node {node} was not up within its ResumeTimeout (its pod did not register it): Slurm requeued the "
        "job that waited for it; the node is resumed, powered down, for a later try"
    )
    ctx.events.warn(ref, "ResumeFailed", note, "Resume")


def _lift(ctx: StepContext, node: str, tally: Tally) -> None:
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

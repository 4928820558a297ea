"""The Slurm node record of a pod whose replacement registers differently, or that is scaled in
(docs/architecture.md §4.1): deleted once the node is drained and idle, so a new slurmd registers anew.

A dynamic node keeps the CPUs, memory, Gres and features of its first registration: a slurmd started
again under the same name with other resources takes over the old record (Slurm 26.05), and Slurm
would schedule what the new pod does not have. The NodeSet hook flags such a pod's drain intent
(names.DRAIN_DELETE_NODE) and keeps the pod until slurm_sync proves its node absent; the pod holds its
name meanwhile, so its replacement cannot start before the record is gone.

The decision fails closed (§4.2): Slurm's node and job listings of this pass must both be known; the
node must be released (drained, or DOWN, with no job: slinky_common/slurmstate.is_released), no job listed on
it, no pending job asking for it by name (`-w`: Slurm keeps such a job pending across the delete, but
one that names a node gone at slurmctld's next start is killed, as slurm-bridge#43 saw), and the pod
must carry no busy evidence (pod-protect, a pod-deadline not yet cleared). The delete
is then sent only after a second answer, a GET of that very node, says the same; Slurm itself refuses
to delete a node with a job.

A leftover record (§4.1) is the record of a live NodeSet's pod that is gone without the NodeSet asking:
deleted by hand or evicted while an ordinal below it was free, so its replacement took that lower
ordinal and another name, and nothing would ever register under the old one. It goes on the same
evidence about the node, once the apiserver has said NotFound for the pod named in the node's comment
on two passes and no listed pod carries the node's name.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from slinky_common import names, slurmstate
from slurm_sync.events import nodeset_ref, pod_ref
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.kube import pod_gone
from slurm_sync.operator.plan import SlurmView, pod_info
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import ClusterView, NodeSetView, PodView
from slurm_sync.slurm.errors import SlurmError, SlurmNotFound
from slurm_sync.slurm.types import Job, Node

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordDelete:
    pod: PodView
    node: str
    why: str  # the drain intent's reason


@dataclass(frozen=True)
class Leftover:
    """A node record whose comment names a gone pod of a live NodeSet."""

    node: str
    namespace: str
    pod: str
    nodeset: NodeSetView


def idle_for_good(node: Node, deadlines: Mapping[str, int | None]) -> bool:
    """Slurm runs no job on the node and will start none, by its state and by the job listing."""
    return slurmstate.is_released(node.state) and node.name not in deadlines


def busy_evidence(pod: PodView) -> bool:
    """The pod says a job may run there (busy evidence wins over Slurm's answer)."""
    return (
        pod.labels.get(names.LABEL_POD_PROTECT) == "true"
        or bool(pod.annotations.get(names.ANNOTATION_POD_DEADLINE))
        or slurmstate.is_busy(c.removeprefix(names.CONDITION_SLURM_NODE_STATE_PREFIX) for c in pod.state_conditions)
    )


def asked_for(jobs: Iterable[Job]) -> frozenset[str] | None:
    """The nodes pending jobs ask for by name; None when a job's list cannot be read (unknown)."""
    wanted: set[str] = set()
    for job in jobs:
        if job.required_nodes and "PENDING" in job.state:
            try:
                wanted.update(expand_hostlist(job.required_nodes))
            except ValueError:
                return None
    return frozenset(wanted)


def record_deletes(cluster: ClusterView, slurm: SlurmView) -> Iterator[RecordDelete]:
    """The pods whose flagged drain is done and whose node record may go, by this pass's listings."""
    if slurm.nodes is None or slurm.deadlines is None or slurm.jobs is None:
        return  # Slurm's state unknown: nothing
    wanted = asked_for(slurm.jobs.values())
    if wanted is None:
        return
    for pod in cluster.pods:
        nodeset = cluster.nodesets.get(pod.nodeset or "")
        if nodeset is None or nodeset.deleting or pod.name not in nodeset.record_deletes:
            continue  # a deleting NodeSet's records go by slurm_sync/operator/deletion.py
        if pod.slurm_node in nodeset.conf_nodes:
            continue  # an elastic NodeSet's node is slurm.conf's: Slurm keeps it (§4.9)
        node = slurm.nodes.get(pod.slurm_node)
        if node is None or node.name in wanted:
            continue
        if idle_for_good(node, slurm.deadlines) and not busy_evidence(pod):
            yield RecordDelete(pod, node.name, nodeset.intents.get(pod.name, ""))


def leftovers(cluster: ClusterView, slurm: SlurmView) -> Iterator[Leftover]:
    """Records of a live NodeSet (same namespace, name and uid) whose comment names a pod the pass does
    not list, that no listed pod's hostname claims while the NodeSet has all its replicas' pods (so no
    replacement is still to come under that name), and that run no job and will start none, by this
    pass's listings. DaemonSet NodeSets are left to their own pruning setting (Slinky's
    pruneSlurmNodeRecords); a record without our comment is nobody's to delete."""
    if slurm.nodes is None or slurm.deadlines is None or slurm.jobs is None:
        return  # Slurm's state unknown: nothing
    wanted = asked_for(slurm.jobs.values())
    if wanted is None:
        return
    claimed = {p.slurm_node for p in cluster.pods}
    listed = {(p.namespace, p.name) for p in cluster.pods}
    serving = Counter(p.nodeset for p in cluster.pods if not p.terminating)
    for node in slurm.nodes.values():
        if node.name in claimed or node.name in wanted:
            continue  # cheap first: in a steady cluster every record is claimed, and no comment is read
        info = pod_info(node.comment)
        if info is None or not info["podName"]:
            continue
        nodeset = cluster.nodesets.get(info["nodeSetName"])
        if nodeset is None or nodeset.deleting or nodeset.scaling_mode == "DaemonSet":
            continue  # a deleting NodeSet's records go by slurm_sync/operator/deletion.py
        if node.name in nodeset.conf_nodes:
            continue  # an elastic NodeSet's node is slurm.conf's: powered down without a pod, never deleted
        if (nodeset.namespace, nodeset.uid) != (info["namespace"], info["nodeSetUID"]):
            continue  # another NodeSet of that name, or one made again: not proof the record is its own
        if nodeset.replicas is None or serving[nodeset.name] < nodeset.replicas:
            continue  # a replacement may still come under the old name: the record waits for it
        if (info["namespace"], info["podName"]) not in listed and idle_for_good(node, slurm.deadlines):
            yield Leftover(node.name, info["namespace"], info["podName"], nodeset)


def execute(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Delete each record the listings allow, once a GET of that node confirms it; then the leftovers."""
    for delete in record_deletes(cluster, slurm):
        if confirmed(ctx, delete.node, tally):
            remove(ctx, delete, tally)
    remove_leftovers(ctx, cluster, slurm, tally)


def remove_leftovers(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Each leftover goes once its pod's NotFound held on an earlier pass too, and Slurm, asked about the
    node, still says released (delete_record asks the apiserver a last time)."""
    proof = ctx.leftover_pods
    proof.next_pass()
    seen = []
    for leftover in leftovers(cluster, slurm):
        seen.append(leftover.node)
        gone, unknown = pod_gone(ctx.kube, leftover.namespace, leftover.pod)
        if unknown:
            tally.errors.append(unknown)
        if not gone:
            proof.found(leftover.node)
            continue
        if not proof.not_found(leftover.node) or not confirmed(ctx, leftover.node, tally):
            continue
        nodeset = leftover.nodeset
        why = (
            f"its pod {leftover.namespace}/{leftover.pod} is gone without a scale-in (deleted or evicted), "
            "its replacement took another name, and no job runs there"
        )
        ctx.delete_record(
            leftover.node,
            leftover.namespace,
            leftover.pod,
            tally,
            why,
            nodeset_ref(nodeset.namespace, nodeset.name, nodeset.uid),
            "SlurmNodeDeleted",
        )
    proof.forget_except(seen)


def confirmed(ctx: StepContext, name: str, tally: Tally) -> bool:
    """Slurm's second answer, about that very node: still released and no job listed on it then."""
    try:
        node = ctx.slurm.get_node(name)
    except SlurmNotFound:
        return False  # already gone: the absence proof takes it from here
    except SlurmError as exc:
        ctx.slurm_error(tally, f"get node {name}", exc)
        return False
    return slurmstate.is_released(node.state)


def remove(ctx: StepContext, delete: RecordDelete, tally: Tally) -> None:
    pod = delete.pod
    about = pod_ref(pod.namespace, pod.name, pod.uid)
    try:
        ctx.delete_slurm_node(delete.node)
    except SlurmError as exc:  # e.g. a job was allocated meanwhile: Slurm refuses
        ctx.slurm_error(tally, f"delete node {delete.node}", exc)
        ctx.events.warn(
            about, "SlurmNodeDeleteFailed", f"Slurm did not delete node record {delete.node}: {exc}", "DeleteNode"
        )
        return
    tally.slurm_writes += 1
    ctx.metrics.slurm_writes.labels(ctx.cluster, "delete").inc()
    why = f"drained and idle; its pod goes ({delete.why}) and the next slurmd registers anew"
    log.info("cluster %s: Slurm node %s deleted: %s", ctx.cluster, delete.node, why)
    ctx.events.normal(about, "SlurmNodeDeleted", f"Slurm node record {delete.node} deleted: {why}.", "DeleteNode")

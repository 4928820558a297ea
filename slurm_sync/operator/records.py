"""The Slurm node record of a pod whose replacement registers differently, or that is scaled in
(docs/architecture.md §4.1): deleted once the node is drained and idle, so a new slurmd registers anew.

A dynamic node keeps the CPUs, memory, Gres and features of its first registration: a slurmd started
again under the same name with other resources takes over the old record (Slurm 26.05), and Slurm
would schedule what the new pod does not have. The NodeSet hook flags such a pod's drain intent
(names.DRAIN_DELETE_NODE) and keeps the pod until slurm_sync proves its node absent; the pod holds its
name meanwhile, so its replacement cannot start before the record is gone.

The decision fails closed (§4.2): Slurm's node and job listings of this pass must both be known; the
node must be released (drained, or DOWN, with no job: hooks/slurmstate.is_released), no job listed on
it, no pending job asking for it by name (`-w`: Slurm keeps such a job pending across the delete, but
one that names a node gone at slurmctld's next start is killed, as slurm-bridge#43 saw), and the pod
must carry no busy evidence (pod-protect, a pod-deadline not yet cleared). The delete
is then sent only after a second answer, a GET of that very node, says the same; Slurm itself refuses
to delete a node with a job.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hooks import names, slurmstate
from slurm_sync.events import pod_ref
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.view import ClusterView, PodView
from slurm_sync.slurm.errors import SlurmError, SlurmNotFound
from slurm_sync.slurm.types import Job, Node

if TYPE_CHECKING:
    from slurm_sync.operator.loop import OperatorLoop, Tally

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RecordDelete:
    pod: PodView
    node: str
    why: str  # the drain intent's reason


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
        node = slurm.nodes.get(pod.slurm_node)
        if node is None or node.name in wanted:
            continue
        if idle_for_good(node, slurm.deadlines) and not busy_evidence(pod):
            yield RecordDelete(pod, node.name, nodeset.intents.get(pod.name, ""))


def execute(loop: OperatorLoop, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Delete each record the listings allow, once a GET of that node confirms it."""
    for delete in record_deletes(cluster, slurm):
        if confirmed(loop, delete, tally):
            remove(loop, delete, tally)


def confirmed(loop: OperatorLoop, delete: RecordDelete, tally: Tally) -> bool:
    """Slurm's second answer, about that very node: still released and no job listed on it then."""
    try:
        node = loop.slurm.get_node(delete.node)
    except SlurmNotFound:
        return False  # already gone: the absence proof takes it from here
    except SlurmError as exc:
        loop._slurm_error(tally, f"get node {delete.node}", exc)
        return False
    return slurmstate.is_released(node.state)


def remove(loop: OperatorLoop, delete: RecordDelete, tally: Tally) -> None:
    pod = delete.pod
    about = pod_ref(pod.namespace, pod.name, pod.uid)
    try:
        loop.delete_slurm_node(delete.node)
    except SlurmError as exc:  # e.g. a job was allocated meanwhile: Slurm refuses
        loop._slurm_error(tally, f"delete node {delete.node}", exc)
        loop.events.warn(
            about, "SlurmNodeDeleteFailed", f"Slurm did not delete node record {delete.node}: {exc}", "DeleteNode"
        )
        return
    tally.slurm_writes += 1
    loop.metrics.slurm_writes.labels(loop.name, "delete").inc()
    why = f"drained and idle; its pod goes ({delete.why}) and the next slurmd registers anew"
    log.info("cluster %s: Slurm node %s deleted: %s", loop.name, delete.node, why)
    loop.events.normal(about, "SlurmNodeDeleted", f"Slurm node record {delete.node} deleted: {why}.", "DeleteNode")

"""slurm_sync's side of deleting a NodeSet in a safe order (the protocol is in slinky_common/names.py, next to
ANNOTATION_DELETION_OBSERVED), as a pure plan: (deleting NodeSet, Slurm's jobs and nodes, its pods,
the time) -> the report and the Slurm writes.

* Its partition takes no new job (the Controller hook sets it to PARTITION_STATE_DELETING); the jobs
  still PENDING there are reported with a ``cancelAt`` deadline (now + the grace, kept across passes
  and restarts in the report itself). Past it, a job pending only there is cancelled on purpose,
  after its comment says why; a job also pending in other partitions loses only this one.
* A job leaves the report only on Slurm's word about that job (the caller asks it by id): a listing
  that merely lacks it proves nothing, and an early "nothing pending" would let the partition go.
* The NodeSet's Slurm node records (its pods' nodes, and nodes whose comment links them to the
  NodeSet) are listed as ``nodesLeft`` and deleted once none of its pods is listed, each only after
  the caller proved the pod named in the node's comment gone; Slurm itself refuses while a job runs.
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial

from slinky_common import names
from slurm_sync.events import nodeset_ref
from slurm_sync.operator.plan import SlurmView, pod_info
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import ClusterView, NodeSetView, PodView
from slurm_sync.passes import rfc3339
from slurm_sync.slurm.errors import ESLURM_ALREADY_DONE, SlurmError, SlurmNotFound, SlurmRejected
from slurm_sync.slurm.types import Job, Node

log = logging.getLogger(__name__)

DEFAULT_GRACE = 900.0  # seconds pending jobs get after their partition starts being deleted
MAX_COMMENT = 1000


@dataclass(frozen=True)
class Report:
    pending_jobs: tuple[int, ...]
    cancel_at: str | None
    nodes_left: tuple[str, ...]
    error: str = ""

    def value(self) -> str:
        """The annotation value (compact JSON, stable key order)."""
        body = {
            "pendingJobs": list(self.pending_jobs),
            "cancelAt": self.cancel_at,
            "nodesLeft": list(self.nodes_left),
            "error": self.error,
        }
        return json.dumps(body, separators=(",", ":"))


@dataclass(frozen=True)
class JobEnd:
    """Past the deadline: say why in the job's comment, then cancel it, or (``partitions``) only
    take this partition out of its list."""

    job_id: int
    comment: str
    partitions: tuple[str, ...] | None  # the job's other partitions; None: cancel it


@dataclass(frozen=True)
class NodeDelete:
    node: str
    namespace: str
    pod: str  # the pod named in the node's comment: proven gone before the delete


@dataclass(frozen=True)
class DeletionPlan:
    nodeset: NodeSetView
    report: Report
    job_ends: tuple[JobEnd, ...]
    node_deletes: tuple[NodeDelete, ...]


def previous_report(nodeset: NodeSetView) -> Report | None:
    """Our last report, when it can be read back."""
    try:
        body = json.loads(nodeset.deletion_report or "")
        jobs = tuple(int(j) for j in body["pendingJobs"])
        nodes = tuple(str(n) for n in body["nodesLeft"])
        cancel_at = body["cancelAt"]
    except (ValueError, KeyError, TypeError):
        return None
    return Report(jobs, cancel_at if isinstance(cancel_at, str) else None, nodes, str(body.get("error") or ""))


def job_partitions(job: Job) -> tuple[str, ...]:
    return tuple(p for p in job.partition.split(",") if p)


def pending_here(job: Job, partition: str) -> bool:
    return "PENDING" in job.state and partition in job_partitions(job)


def pending_jobs(nodeset: NodeSetView, jobs: Iterable[Job]) -> tuple[int, ...]:
    """Jobs Slurm lists as pending in the NodeSet's partition."""
    if nodeset.partition is None:
        return ()
    return tuple(sorted(j.job_id for j in jobs if pending_here(j, nodeset.partition)))


def nodes_of(nodeset: NodeSetView, pods: Iterable[PodView], nodes: Mapping[str, Node]) -> tuple[str, ...]:
    """The NodeSet's Slurm node records still in slurmctld: its pods' nodes, and nodes whose comment
    names the NodeSet (namespace, name, uid). Not an elastic NodeSet's slurm.conf nodes: Slurm refuses to delete
    them, and they go with its slurm.conf lines."""
    found = {p.slurm_node for p in pods if p.nodeset == nodeset.name and p.slurm_node in nodes}
    for node in nodes.values():
        info = pod_info(node.comment)
        if info is not None and (info["namespace"], info["nodeSetName"], info["nodeSetUID"]) == (
            nodeset.namespace,
            nodeset.name,
            nodeset.uid,
        ):
            found.add(node.name)
    return tuple(sorted(found - nodeset.conf_nodes))


def parse_rfc3339(text: str | None) -> datetime.datetime | None:
    try:
        return datetime.datetime.strptime(text or "", "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None


def end_comment(job: Job, nodeset: NodeSetView, grace: float) -> str:
    """The job's comment with our reason appended (the user's own text kept)."""
    why = (
        f"slurm-operator: partition {nodeset.partition} is being deleted with NodeSet "
        f"{nodeset.namespace}/{nodeset.name}; "
        f"ended after a grace of {int(grace)}s"
    )
    return (f"{job.comment} | {why}" if job.comment else why)[:MAX_COMMENT]


def plan_deletion(
    nodeset: NodeSetView,
    pending: Iterable[Job],
    nodes: Mapping[str, Node],
    pods: Iterable[PodView],
    now: datetime.datetime,
    grace: float,
    error: str = "",
) -> DeletionPlan:
    """``pending``: the jobs still pending in the partition (the caller keeps a job here until Slurm
    said about it, by id, that it is not); ``nodes``: Slurm's successful node listing."""
    pending = sorted(pending, key=lambda j: j.job_id)
    mine = [p for p in pods if p.nodeset == nodeset.name]
    before = previous_report(nodeset)
    cancel_at = None
    if pending:
        cancel_at = (before.cancel_at if before and parse_rfc3339(before.cancel_at) else None) or rfc3339(
            now + datetime.timedelta(seconds=grace)
        )
    due = cancel_at is not None and now >= (parse_rfc3339(cancel_at) or now)
    ends = []
    for job in pending if due and nodeset.partition else ():
        if "PENDING" not in job.state:
            continue  # reported from an earlier answer only (Slurm could not be asked now): never ended so
        others = tuple(p for p in job_partitions(job) if p != nodeset.partition)
        ends.append(JobEnd(job.job_id, end_comment(job, nodeset, grace), others or None))
    left = nodes_of(nodeset, mine, nodes)
    deletes = []
    if not mine:  # no pod of the NodeSet is listed any more: its records may go, each on proof
        for name in left:
            info = pod_info(nodes[name].comment)
            if info is not None and info["podName"] and not nodes[name].busy:
                deletes.append(NodeDelete(name, info["namespace"], info["podName"]))
    report = Report(tuple(j.job_id for j in pending), cancel_at, left, error)
    return DeletionPlan(nodeset, report, tuple(ends), tuple(deletes))


# --- execution (the one call from the operator loop) ------------------------------------------


def execute(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Report on each deleting NodeSet of the cluster and carry out what is due. Needs Slurm's node and
    job listings of this pass (a failed one is already a pass error)."""
    deleting = sorted((n for n in cluster.nodesets.values() if n.deleting), key=lambda n: n.name)
    if not deleting or slurm.nodes is None or slurm.jobs is None:
        return
    now = parse_rfc3339(ctx.now)
    if now is None:
        tally.errors.append(f"nodeset deletion: unreadable clock {ctx.now!r}; nothing written")
        return
    jobs = slurm.jobs.values()
    ctx.job_absence.next_pass()
    ctx.nothing_left.next_pass()
    ctx.nothing_left.forget_except(n.name for n in deleting)
    for nodeset in deleting:
        pending, unknown = still_pending(ctx, nodeset, jobs)
        if unknown:
            ctx.slurm_error(tally, f"nodeset {nodeset.name}: get job", unknown)
        plan = plan_deletion(
            nodeset,
            pending,
            slurm.nodes,
            cluster.pods,
            now,
            ctx.deletion_grace,
            f"asking Slurm about a job failed: {unknown}" if unknown else "",
        )
        error = _end_jobs(ctx, plan, tally) or _delete_nodes(ctx, plan, tally) or plan.report.error
        value = Report(plan.report.pending_jobs, plan.report.cancel_at, plan.report.nodes_left, error).value()
        if value != nodeset.deletion_report and proven(ctx, nodeset, plan.report):
            ctx.kube_write(
                tally,
                f"nodeset {nodeset.name} deletion report",
                partial(
                    ctx.kube.annotate_nodeset,
                    nodeset.namespace,
                    nodeset.name,
                    names.ANNOTATION_DELETION_OBSERVED,
                    value,
                ),
            )


def proven(ctx: StepContext, nodeset: NodeSetView, report: Report) -> bool:
    """Whether ``report`` may be written. One that lists no pending job and no record lets finalize finish and the
    partition's lines go, ending any job still queued there: that is an absence (§4.2), so it is written only once a
    later pass, some seconds on, said the same. A single wrong listing (an empty job listing, the first of a term
    having no earlier one to be compared with) would otherwise end the NodeSet's queued jobs (model/drain.pml)."""
    if report.pending_jobs or report.nodes_left:
        ctx.nothing_left.found(nodeset.name)
        return True
    before = previous_report(nodeset)
    if before is not None and not before.pending_jobs and not before.nodes_left:
        return True  # said already: only its error changes
    if ctx.nothing_left.not_found(nodeset.name):
        return True
    log.info(
        "cluster %s: nodeset %s shows nothing left in Slurm; confirming on a later pass", ctx.cluster, nodeset.name
    )
    return False


def still_pending(ctx: StepContext, nodeset: NodeSetView, jobs: Iterable[Job]) -> tuple[list[Job], SlurmError | None]:
    """Jobs pending in the partition: the listing's, plus every job of our last report that the listing
    no longer shows pending there until Slurm, asked about it by id, says it is not (or, confirmed,
    that it does not exist). A failed question keeps the job reported."""
    listed = {j.job_id: j for j in jobs if nodeset.partition and pending_here(j, nodeset.partition)}
    before = previous_report(nodeset)
    unknown: SlurmError | None = None
    for job_id in sorted(set(before.pending_jobs if before else ()) - set(listed)):
        try:
            job = ctx.slurm.get_job(job_id)
        except SlurmNotFound:
            if not ctx.job_absence.not_found(job_id):
                listed[job_id] = _placeholder(job_id, nodeset)
            continue
        except SlurmError as exc:
            unknown = exc
            listed[job_id] = _placeholder(job_id, nodeset)
            continue
        ctx.job_absence.found(job_id)
        if nodeset.partition and pending_here(job, nodeset.partition):
            listed[job_id] = job
    return [listed[i] for i in sorted(listed)], unknown


def _placeholder(job_id: int, nodeset: NodeSetView) -> Job:
    """A job we keep reporting without a fresh answer about it (never ended on that basis: its state is empty)."""
    return Job(job_id, "", frozenset(), "", "", "", nodeset.partition or "", "", None, "", "", frozenset(), None, None)


def _end_jobs(ctx: StepContext, plan: DeletionPlan, tally: Tally) -> str:
    """Past the deadline: comment, then cancel (or drop this partition from the job's list). The last
    error, or ""."""
    error = ""
    about = nodeset_ref(plan.nodeset.namespace, plan.nodeset.name, plan.nodeset.uid)
    for end in plan.job_ends:
        what = f"job {end.job_id}"
        try:
            if end.partitions is None:
                ctx.slurm.update_job(end.job_id, {"comment": end.comment})
                ctx.slurm.cancel_job(end.job_id)
                log.warning("cluster %s: cancelled pending %s: %s", ctx.cluster, what, end.comment)
                ctx.events.warn(
                    about,
                    "PendingJobCancelled",
                    f"Slurm job {end.job_id}, pending only in partition "
                    f"{plan.nodeset.partition}, was cancelled: the NodeSet is being deleted and the grace of "
                    f"{int(ctx.deletion_grace)}s passed (its comment says so).",
                    "CancelJob",
                )
            else:
                ctx.slurm.update_job(end.job_id, {"partition": ",".join(end.partitions), "comment": end.comment})
                log.warning(
                    "cluster %s: %s stays pending in %s only: %s",
                    ctx.cluster,
                    what,
                    ",".join(end.partitions),
                    end.comment,
                )
                ctx.events.warn(
                    about,
                    "PendingJobPartitionRemoved",
                    f"Slurm job {end.job_id} no longer waits in "
                    f"partition {plan.nodeset.partition} (the NodeSet is being deleted); it stays pending in "
                    f"{','.join(end.partitions)}.",
                    "UpdateJob",
                )
        except SlurmRejected as exc:
            if isinstance(exc, SlurmNotFound) or ESLURM_ALREADY_DONE in exc.numbers:
                continue  # ended meanwhile: the next pass asks Slurm about it
            ctx.slurm_error(tally, f"end {what}", exc)
            error = f"end {what}: {exc}"
            continue
        except SlurmError as exc:
            ctx.slurm_error(tally, f"end {what}", exc)
            error = f"end {what}: {exc}"
            continue
        tally.slurm_writes += 1
    return error


def _delete_nodes(ctx: StepContext, plan: DeletionPlan, tally: Tally) -> str:
    """Delete each node record whose pod the apiserver says is gone (NotFound). The last error, or ""."""
    error = ""
    about = nodeset_ref(plan.nodeset.namespace, plan.nodeset.name, plan.nodeset.uid)
    for delete in plan.node_deletes:
        why = f"the NodeSet is being deleted, its pod {delete.namespace}/{delete.pod} is gone and no job runs there"
        error = (
            ctx.delete_record(delete.node, delete.namespace, delete.pod, tally, why, about, "SlurmNodeDeleted") or error
        )
    return error

"""The bridge's pod path as a pure function: (pods, nodes, jobs Slurm reported) -> actions.

Safety rules (docs/architecture.md §4.2, §4.6), all decided here so they are unit-testable:

* The caller passes ``jobs`` only when every job it asked about answered: a job is "gone" only
  when Slurm said so (``None`` in ``jobs``), never because a read failed.
* One job per group: a group gets a new job only when no member holds a live one and no live job
  in Slurm already lists a member in its ``admin_comment`` (a crash between submit and label
  adopts that job instead of submitting twice), and only when every member publishes the same
  body naming exactly the members (the hook may be half-way through a membership change).
* An unbound pod is never deleted; a bound pod is deleted once its job is not RUNNING.
* A group of N pods is submitted only when at least N Kubernetes nodes can take its pods (bridge
  nodes whose Slurm node exists; each pod binds to a distinct node): otherwise Slurm could start a
  job no binding can follow (vector 17). The pods say why (ANNOTATION_SUBMIT_ERROR).
* A pod that ended (terminal phase; deleted before binding; deleted past its grace period; on a
  node that vanished) releases its job; the last one to go cancels it. A RUNNING job is never
  changed; only a PENDING job is updated with a changed body.
"""

from __future__ import annotations

import datetime
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import TypeGuard

import orjson

from slinky_common import names
from slurm_sync.bridge.view import ENDED_PHASES, BridgeNode, BridgePod
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.slurm.types import Job

# A deleted pod whose kubelet never reports it terminal (node gone dark) stops holding its job
# this long after its grace period ended (slurm-bridge #49).
DELETION_SLACK = datetime.timedelta(seconds=30)
FINISHED_STATES = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
                             "DEADLINE", "OUT_OF_MEMORY"})  # fmt: skip


class Problem(str):
    """A plan error caused by the objects (user or administrator input), not by failing to read:
    the text, plus a low-cardinality ``kind`` for the metric."""

    kind: str

    def __new__(cls, text: str, kind: str) -> Problem:
        self = super().__new__(cls, text)
        self.kind = kind
        return self


@dataclass(frozen=True)
class Submit:
    group: str
    body: str  # the published JSON
    pods: tuple[BridgePod, ...]


@dataclass(frozen=True)
class Label:
    """Record ``job_id`` on pods (label, finalizer, applied digest)."""

    job_id: int
    digest: str
    pods: tuple[BridgePod, ...]


@dataclass(frozen=True)
class UpdateJob:
    job_id: int
    body: str
    pods: tuple[BridgePod, ...]  # their applied digest follows


@dataclass(frozen=True)
class Bind:
    pod: BridgePod
    node: str  # Kubernetes node
    slurm_node: str


@dataclass(frozen=True)
class DeletePod:
    pod: BridgePod
    why: str


@dataclass(frozen=True)
class Cancel:
    """Cancel ``job_id`` (unless ``needed`` is False: already over), then release ``release``."""

    job_id: int
    needed: bool
    release: tuple[BridgePod, ...]
    why: str


@dataclass(frozen=True)
class Blocked:
    """The group's job is not submitted: ``why`` goes on each pod that does not say so already."""

    group: str
    why: str
    pods: tuple[BridgePod, ...]


@dataclass(frozen=True)
class Unscheduled:
    """The pod waits for its pending job: condition PodScheduled=False says Slurm's reason (as kube-scheduler's)."""

    pod: BridgePod
    message: str


@dataclass(frozen=True)
class PodActions:
    submits: tuple[Submit, ...]
    labels: tuple[Label, ...]
    updates: tuple[UpdateJob, ...]
    binds: tuple[Bind, ...]
    deletes: tuple[DeletePod, ...]
    cancels: tuple[Cancel, ...]
    errors: tuple[Problem, ...]
    blocked: tuple[Blocked, ...] = ()
    unscheduled: tuple[Unscheduled, ...] = ()


# --- small facts ---------------------------------------------------------------------------


def digest(body: str) -> str:
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def is_active(job: Job | None) -> bool:
    """Slurm still holds resources (or a queue slot) for the job."""
    return job is not None and not (job.state & FINISHED_STATES)


def is_running(job: Job | None) -> TypeGuard[Job]:
    return job is not None and "RUNNING" in job.state


def is_pending(job: Job | None) -> bool:
    return job is not None and "PENDING" in job.state


def bridge_pods_of(job: Job) -> tuple[str, ...] | None:
    """The ``ns/name`` list of one of our jobs (EXTERNAL_JOB, admin_comment ``{"pods":[...]}``), else None."""
    if not job.external:
        return None
    try:
        comment = orjson.loads(job.admin_comment)
    except orjson.JSONDecodeError:
        return None
    pods = comment.get("pods") if isinstance(comment, dict) else None
    if not isinstance(pods, list) or not all(isinstance(p, str) for p in pods):
        return None
    return tuple(pods)


def ended(pod: BridgePod, nodes: Mapping[str, BridgeNode], now: datetime.datetime) -> bool:
    """The pod no longer needs its job: it will never run (again) in the allocation."""
    if pod.phase in ENDED_PHASES:
        return True
    if pod.node_name and pod.node_name not in nodes:
        return True  # its node vanished: nothing will report this pod terminal
    if pod.deletion is None:
        return False
    return not pod.node_name or now >= pod.deletion + DELETION_SLACK


# --- the plan ------------------------------------------------------------------------------


def plan_pods(
    pods: Iterable[BridgePod],
    nodes: Mapping[str, BridgeNode],
    jobs: Mapping[int, Job | None],
    index: Mapping[int, Job],
    now: datetime.datetime,
    placeable: AbstractSet[str] | None,
) -> PodActions:
    """``jobs``: each job id asked about this pass (labels and adoption candidates) -> Job, or
    None when Slurm says it does not exist. ``index``: bridge jobs from the last full listing.
    ``placeable``: the Kubernetes nodes a pod can be bound to (bridge nodes whose Slurm node
    exists), or None when Slurm's node listing failed (then nothing new is submitted)."""
    pods = sorted(pods, key=lambda p: p.key)
    out = _Builder()
    by_job: dict[int, list[BridgePod]] = defaultdict(list)
    for pod in pods:
        if pod.job_id is not None:
            by_job[pod.job_id].append(pod)
        elif pod.node_name and not ended(pod, nodes, now) and pod.deletion is None:
            out.deletes.append(DeletePod(pod, "bound without a Slurm job id label"))
    for job_id, members in sorted(by_job.items()):
        _plan_job(job_id, members, jobs.get(job_id), nodes, now, out)
    groups: dict[str, list[BridgePod]] = defaultdict(list)
    for pod in pods:
        if pod.group and not pod.node_name and not ended(pod, nodes, now) and pod.deletion is None:
            groups[pod.group].append(pod)
    for group, members in sorted(groups.items()):
        _plan_group(group, members, jobs, index, placeable, out)
    return out.build()


@dataclass
class _Builder:
    submits: list[Submit] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    updates: list[UpdateJob] = field(default_factory=list)
    binds: list[Bind] = field(default_factory=list)
    deletes: list[DeletePod] = field(default_factory=list)
    cancels: list[Cancel] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)
    blocked: list[Blocked] = field(default_factory=list)
    unscheduled: list[Unscheduled] = field(default_factory=list)

    def build(self) -> PodActions:
        fields = ("submits", "labels", "updates", "binds", "deletes", "cancels", "errors", "blocked", "unscheduled")
        return PodActions(*(tuple(getattr(self, f)) for f in fields))


def _plan_job(
    job_id: int,
    members: list[BridgePod],
    job: Job | None,
    nodes: Mapping[str, BridgeNode],
    now: datetime.datetime,
    out: _Builder,
) -> None:
    live = [p for p in members if not ended(p, nodes, now)]
    unreleased = tuple(p for p in members if p not in live and _holds(p, job_id))
    if not live:
        if is_active(job) or unreleased:
            out.cancels.append(Cancel(job_id, is_active(job), unreleased, "every pod of the job ended"))
        return
    if unreleased:  # the others still run in the job
        out.cancels.append(Cancel(job_id, False, unreleased, "pod ended, others still use the job"))
    for pod in live:
        if pod.node_name and pod.deletion is None and not is_running(job):
            out.deletes.append(DeletePod(pod, f"its Slurm job {job_id} is {_describe(job)}"))
    unbound = [p for p in live if not p.node_name and p.deletion is None]
    if is_pending(job) and unbound and not any(p.job_body for p in live):
        out.cancels.append(Cancel(job_id, True, (), "no pod publishes the pending job any more"))
    elif is_running(job) and unbound:
        _plan_binds(job_id, job, live, unbound, nodes, out)
    elif job is not None and is_pending(job):
        message = pending_message(job)
        out.unscheduled += [Unscheduled(p, message) for p in unbound if p.unscheduled != message]


def pending_message(job: Job) -> str:
    """What a pending pod says (condition PodScheduled): its job and Slurm's reason, as `squeue` shows it."""
    reason = job.state_reason if job.state_reason and job.state_reason != "None" else "not scheduled yet"
    return f"Slurm job {job.job_id} is pending in partition {job.partition}: {reason}"


def _holds(pod: BridgePod, job_id: int) -> bool:
    """The pod still waits for our word that it let go of the job."""
    return pod.released != str(job_id) or names.FINALIZER_SCHEDULER in pod.finalizers


def _describe(job: Job | None) -> str:
    return "gone" if job is None else ",".join(sorted(job.state)) or "in no state"


def _plan_binds(
    job_id: int,
    job: Job,
    live: list[BridgePod],
    unbound: list[BridgePod],
    nodes: Mapping[str, BridgeNode],
    out: _Builder,
) -> None:
    """Each unbound pod to a distinct allocated node (its annotated one if still free)."""
    try:
        allocated = expand_hostlist(job.nodes)
    except ValueError as err:
        out.errors.append(Problem(f"job {job_id}: {err}", "unreadable_hostlist"))
        return
    by_slurm = {n.slurm_name: n.name for n in nodes.values()}
    unmapped = [s for s in allocated if s not in by_slurm]
    if unmapped:
        out.errors.append(
            Problem(
                f"job {job_id}: Slurm node(s) {', '.join(unmapped)} map to no Kubernetes node; not binding",
                "unmapped_slurm_node",
            )
        )
        return
    kube_nodes = [by_slurm[s] for s in allocated]
    free = [n for n in kube_nodes if n not in {p.node_name for p in live if p.node_name}]
    chosen = {p.key: p.slurm_node for p in unbound if p.slurm_node in free}
    free = [n for n in free if n not in chosen.values()]
    for pod in unbound:
        node = chosen.get(pod.key) or (free.pop(0) if free else None)
        if node is None:
            out.errors.append(Problem(f"job {job_id}: no allocated node left for pod {pod.key}", "no_node_left"))
            continue
        out.binds.append(Bind(pod, node, nodes[node].slurm_name))


def _plan_group(
    group: str,
    members: list[BridgePod],
    jobs: Mapping[int, Job | None],
    index: Mapping[int, Job],
    placeable: AbstractSet[str] | None,
    out: _Builder,
) -> None:
    held = sorted({p.job_id for p in members if p.job_id is not None and is_active(jobs.get(p.job_id))})
    bodies = {p.job_body for p in members}
    body = bodies.pop() if len(bodies) == 1 else None
    if held:
        job_id = held[0]
        strays = tuple(p for p in members if p.job_id != job_id)
        if strays:
            out.labels.append(Label(job_id, digest(body) if body else "", strays))
        if body and is_pending(jobs.get(job_id)) and any(p.applied != digest(body) for p in members):
            out.updates.append(UpdateJob(job_id, body, tuple(members)))
        return
    if body is None or not _names_members(body, members):
        return  # the hook is still settling the group; wait for one agreed body
    keys = {p.key for p in members}
    for job_id, job in sorted(index.items()):
        if job_id in jobs and set(bridge_pods_of(job) or ()) & keys and is_active(jobs[job_id]):
            out.labels.append(Label(job_id, digest(body), tuple(members)))
            return
    if placeable is None:
        return  # which nodes exist is unknown this pass: submit nothing new
    if len(placeable) < len(members):  # vector 17
        why = (
            f"the group needs {len(members)} distinct nodes but only {len(placeable)} Kubernetes node(s) are bridge "
            f"nodes mapped to a Slurm node{_few(placeable)}; its job is not submitted"
        )
        out.errors.append(Problem(f"group {group}: {why}", "too_few_nodes"))
        out.blocked.append(Blocked(group, why, tuple(members)))
        return
    out.submits.append(Submit(group, body, tuple(members)))


def _few(nodes: AbstractSet[str]) -> str:
    return f" ({', '.join(sorted(nodes))})" if 0 < len(nodes) <= 8 else ""


def _names_members(body: str, members: list[BridgePod]) -> bool:
    try:
        comment = orjson.loads(orjson.loads(body).get("admin_comment", ""))
    except (orjson.JSONDecodeError, AttributeError):
        return False
    return isinstance(comment, dict) and sorted(comment.get("pods") or []) == sorted(p.key for p in members)


def adoption_candidates(pods: Iterable[BridgePod], index: Mapping[int, Job]) -> set[int]:
    """Live jobs in the index that list an unlabelled published pod: read them before adopting."""
    keys = {p.key for p in pods if p.group and p.job_id is None}
    return {job_id for job_id, job in index.items() if is_active(job) and set(bridge_pods_of(job) or ()) & keys}


def orphans(index: Mapping[int, Job], existing: set[str], namespaces: frozenset[str], tracked: set[int]) -> list[int]:
    """Our active jobs whose pods (all in namespaces we manage) no longer exist (vector 28)."""
    out = []
    for job_id, job in sorted(index.items()):
        listed = bridge_pods_of(job)
        if (
            listed is None
            or job_id in tracked
            or not is_active(job)
            or not ("PENDING" in job.state or "RUNNING" in job.state)
        ):
            continue
        if listed and all(p.split("/", 1)[0] in namespaces for p in listed) and not set(listed) & existing:
            out.append(job_id)
    return out


def scheduled_pod_groups(
    pods: Iterable[BridgePod], nodes: Mapping[str, BridgeNode], now: datetime.datetime
) -> set[tuple[str, str]]:
    """Built-in PodGroups (namespace, name) whose live member pods are all bound (vector 18)."""
    state: dict[tuple[str, str], bool] = {}
    for pod in pods:
        if pod.pod_group and not ended(pod, nodes, now) and pod.deletion is None:
            key = (pod.namespace, pod.pod_group)
            state[key] = state.get(key, True) and bool(pod.node_name)
    return {key for key, bound in state.items() if bound}

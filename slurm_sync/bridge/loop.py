"""One pass of the bridge loop: read Slurm and Kubernetes, plan (bridge_plan, bridge_nodes), execute.

Cost does not grow with the number of jobs in Slurm: the full job listing (for adoption after a
crash and for orphan jobs) goes through ``job_watch`` (``update_time``: one small answer while
Slurm is unchanged) and is refreshed only at start, after a submit whose answer was lost, and
every ``list_interval`` seconds. The jobs our pods carry are read one GET each while they are
few; once N GETs would weigh more than one listing (``reads_by_listing``), the pass takes them from
the listing instead (one request, a small one while Slurm is unchanged), so 200 pending pods cost
one request per pass, not 200. A job the listing lacks is still asked by id: an omission is not
evidence.

Fail closed: a failed job read plans no pod action at all (no submit, cancel, delete or bind); a
failed node listing plans no node action and no new submission. Kubernetes read failures end the pass.

Absence is proven (slurm_sync/proof.py): a job is gone only when ``GET job/<id>`` answers Slurm's
not-found (404, error 2017) on two passes some seconds apart; until then its pods get no action at
all. A 200 without the job is no answer. A job listing that suddenly lacks many of our active jobs
is refused (unready, no index change) until Slurm confirms each of them gone. An orphan job (its
pods are not listed) is cancelled only after the apiserver answers NotFound for every one of them.

Readiness (``BridgeResult.ready``) says whether Slurm and Kubernetes could be read and Slurm took
every write we sent (``unready`` names what failed). What users or administrators got wrong (an unknown partition, a
Slurm node no Kubernetes node maps to,
a group needing more nodes than exist, a job Slurm refuses) is logged, counted in
``slurm_sync_bridge_user_errors_total{kind}`` and, where a pod waits because of it, written on the
pod (ANNOTATION_SUBMIT_ERROR); it does not make the service unready.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import logging
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

import orjson
from prometheus_client import Counter

from slinky_common import names
from slurm_sync import passes
from slurm_sync.bridge import nodes as bridge_nodes
from slurm_sync.bridge import plan as bridge_plan
from slurm_sync.bridge.claims import Claims
from slurm_sync.bridge.devices import DeviceProblem
from slurm_sync.bridge.kube import (
    BridgeKube,
    label_body,
    pod_group_scheduled_body,
    release_body,
    submit_error_body,
    taint_body,
    unscheduled_body,
)
from slurm_sync.bridge.plan import Cancel, PodActions, Problem
from slurm_sync.bridge.view import BridgeNode, BridgePod, read_node, read_pod
from slurm_sync.cache import ViewMemo
from slurm_sync.events import Events, ObjectRef, pod_ref
from slurm_sync.kube import describe_error, pod_gone
from slurm_sync.metrics import Metrics
from slurm_sync.proof import AbsenceProof, refuse_unproven_loss, sudden_loss
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import (
    ESLURM_ALREADY_DONE,
    SlurmError,
    SlurmNotFound,
    SlurmNoToken,
    SlurmRejected,
    SlurmUnavailable,
)
from slurm_sync.slurm.types import Job, Node, parse_job

log = logging.getLogger(__name__)
NAME = "bridge"
LISTING_MIN_JOBS = 8  # from this many of our jobs on, a pass may read them all with one listing
LISTING_RECORDS_PER_GET = 8  # a GET of one job takes as long as about this many listed records (make bench)
_USER_ERRORS: weakref.WeakKeyDictionary[Metrics, Counter] = weakref.WeakKeyDictionary()


def user_errors(metrics: Metrics) -> Counter:
    """``slurm_sync_bridge_user_errors_total{kind}`` in ``metrics``' registry (created once per registry)."""
    if metrics not in _USER_ERRORS:
        _USER_ERRORS[metrics] = Counter(
            "slurm_sync_bridge_user_errors",
            "Bridge problems caused by objects or configuration, not by failing reads",
            ["kind"],
            registry=metrics.registry,
        )
    return _USER_ERRORS[metrics]


def token_file(path: str) -> Callable[[], str]:
    """The JWT in ``path``, read on every request (rotation); an optional ``SLURM_JWT=`` prefix goes.
    ``SlurmNoToken`` naming the setting and the file when it cannot be read or holds no token."""

    def read() -> str:
        try:
            with open(path, encoding="utf-8") as handle:
                token = handle.read().strip().removeprefix("SLURM_JWT=")
        except (OSError, UnicodeDecodeError) as exc:
            why = exc.strerror if isinstance(exc, OSError) else "it is not UTF-8 text"
            raise SlurmNoToken(f"--token-file {path}: cannot read it: {why}") from None
        if not token:
            raise SlurmNoToken(f"--token-file {path} holds no token")
        return token

    return read


@dataclass(frozen=True)
class BridgeResult(passes.Outcome):
    """The bridge's pass (passes.Outcome) and how many of its errors are problems of the objects (Problem)."""

    user_errors: int = 0


@dataclass
class _Tally(passes.Tally):
    slurm_ok: bool = True
    read_ok: bool = True
    user_errors: int = 0
    bound: dict[str, str] = field(default_factory=dict)  # pod key -> node, bound in this pass


@dataclass(frozen=True)
class KubeState:
    pods: tuple[BridgePod, ...]  # ours: our scheduler name
    existing: frozenset[str]  # "ns/name" of every managed pod, any scheduler
    nodes: Mapping[str, BridgeNode]


class BridgeLoop:
    """Keeps between passes only what Slurm and Kubernetes can rebuild: the job index."""

    def __init__(
        self,
        slurm: SlurmClient,
        kube: BridgeKube,
        metrics: Metrics,
        namespaces: Iterable[str],
        scheduler: str = names.BRIDGE_SCHEDULER_NAME,
        list_interval: float = 30.0,
        now: Callable[[], datetime.datetime] = passes.utc_now,
        clock: Callable[[], float] = time.monotonic,
        absence_confirm_seconds: float = 5.0,
        events: Events | None = None,
    ) -> None:
        self.slurm = slurm
        self.kube = kube
        self.events = events if events is not None else Events(kube.kube)
        self.metrics = metrics
        self.namespaces = frozenset(namespaces)
        self.scheduler = scheduler
        self.list_interval = list_interval
        self._now = now
        self._clock = clock
        self._jobs = slurm.job_watch()
        self._nodes = slurm.node_watch()
        self._index: dict[int, Job] = {}
        self._listed_at: float | None = None  # None: the index must be (re)built before any submit
        self._listed_records = 0  # jobs of every user in the last listing: what one listing weighs
        self._scheduled: set[tuple[str, str]] = set()  # PodGroups known to carry PodGroupScheduled=True
        self._user_errors = user_errors(metrics)
        self._gone: AbsenceProof[int] = AbsenceProof(absence_confirm_seconds, clock)
        self._registered_absence: AbsenceProof[str] = AbsenceProof(absence_confirm_seconds, clock)
        self._lost_gone: set[int] = set()  # jobs of a suspect listing that Slurm said are gone
        self._lost_nodes_gone: set[str] = set()  # nodes of a suspect listing that Slurm said are gone
        self._deleted_nodes: set[str] = set()  # node records we deleted ourselves (their loss is expected)
        self.claims = Claims(slurm, kube)
        self._pod_views = ViewMemo(read_pod)
        self._node_views = ViewMemo(read_node)

    # --- reads ------------------------------------------------------------------------------

    def _refresh_index(self, tally: _Tally, now: bool = False) -> bool | None:
        """True: listed now (fresh); False: the index is recent enough; None: listing failed.
        ``now``: list even within ``list_interval`` (the pass reads its jobs from the listing)."""
        if not now and self._listed_at is not None and self._clock() - self._listed_at < self.list_interval:
            return False
        try:
            snapshot = self._jobs.poll(self._check_listing)
        except SlurmError as exc:
            self._slurm_error(tally, "list jobs", exc, read=True)
            return None
        self._index = {i: j for i, j in snapshot.items.items() if bridge_plan.bridge_pods_of(j) is not None}
        self._listed_records = len(snapshot.items)
        self._listed_at = self._clock()
        return True

    def reads_by_listing(self, wanted: int) -> bool:
        """Whether one job listing is cheaper than ``wanted`` GETs: at least LISTING_MIN_JOBS of them and
        an eighth of the jobs a listing returns (a GET costs slurmctld an RPC and slurmrestd a request; a listed
        record is only decoded), so a few pods beside a long queue of other users' jobs keep their GETs."""
        return wanted >= LISTING_MIN_JOBS and wanted * LISTING_RECORDS_PER_GET >= self._listed_records

    def _check_listing(self, before: Mapping[int, Job], now: Mapping[int, Job]) -> None:
        """Refuse (SlurmSuspect) a job listing that suddenly lacks many of our active jobs, until
        Slurm says of each one, asked by id, that it does not exist."""
        ours = [i for i, j in before.items() if bridge_plan.bridge_pods_of(j) is not None and bridge_plan.is_active(j)]
        lost = sudden_loss(ours, now)
        if not lost:
            self._lost_gone.clear()
            return
        refuse_unproven_loss(lost, len(ours), self._lost_gone, self.slurm.get_job, "job")

    def _check_node_listing(self, before: Mapping[str, Node], now: Mapping[str, Node]) -> None:
        """Refuse (SlurmSuspect) a node listing that suddenly lacks many nodes it had, until Slurm says
        of each one, asked by name, that it is gone: a refused listing never becomes the node view."""
        lost = sudden_loss(before, now, self._deleted_nodes)
        self._deleted_nodes -= now.keys()  # registered again: its loss would no longer be ours
        if not lost:
            self._lost_nodes_gone.clear()
            return
        refuse_unproven_loss(lost, len(before), self._lost_nodes_gone, self.slurm.get_node, "node")

    def read_kube(self) -> KubeState:
        """The views of every managed pod and Node, made again only for objects that changed (ViewMemo)."""
        objects = [obj for namespace in sorted(self.namespaces) for obj in self.kube.list_pods(namespace)]
        keep = self.kube.kube.same_dicts
        pods = self._pod_views(objects, keep)
        nodes = self._node_views(self.kube.list_nodes(), keep)
        return KubeState(
            pods=tuple(p for p in pods if p.scheduler == self.scheduler),
            existing=frozenset(p.key for p in pods),
            nodes={n.name: n for n in nodes},
        )

    def read_jobs(
        self, ids: Iterable[int], tally: _Tally, listed: bool = False
    ) -> tuple[dict[int, Job | None], set[int]] | None:
        """Each job from this pass's listing when ``listed``, else (or when the listing lacks it) one GET:
        (job or None when proven gone, ids Slurm said are missing but not yet confirmed); None (for all)
        when any read failed: unknown is not gone."""
        jobs: dict[int, Job | None] = {}
        unconfirmed: set[int] = set()
        ids = sorted(ids)
        self._gone.next_pass()
        self._gone.forget_except(ids)
        for job_id in ids:
            if listed and (job := self._index.get(job_id)) is not None:
                jobs[job_id] = job
                self._gone.found(job_id)
                continue
            try:
                jobs[job_id] = self.slurm.get_job(job_id)
            except SlurmNotFound:
                if self._gone.not_found(job_id):
                    jobs[job_id] = None
                else:
                    unconfirmed.add(job_id)
                    log.info("bridge: Slurm says job %d does not exist; its pods wait for the confirmation", job_id)
                continue
            except SlurmError as exc:
                self._slurm_error(tally, f"get job {job_id}", exc, read=True)
                return None
            self._gone.found(job_id)
        return jobs, unconfirmed

    # --- the pass ---------------------------------------------------------------------------

    def run_pass(self) -> BridgeResult:
        started = time.perf_counter()
        tally = _Tally()
        fresh = self._refresh_index(tally)
        try:
            state = self.read_kube()
        except Exception as exc:  # an ApiException, the apiserver unreachable, a cache not synced: no write at all
            tally.read_ok = False
            passes.kube_read_failed(tally, NAME, exc)
        else:
            slurm_nodes = self._read_slurm_nodes(state, tally)
            if fresh is not None:
                self._pod_path(state, fresh, slurm_nodes, tally)
            if slurm_nodes is not None:
                self._node_path(state, slurm_nodes, tally)
        self.metrics.poll_seconds.labels(NAME).observe(time.perf_counter() - started)
        self.metrics.cluster_up.labels(NAME).set(1 if tally.slurm_ok else 0)
        return BridgeResult(
            slurm_ok=tally.slurm_ok,
            errors=tuple(tally.errors),
            kube_writes=tally.kube_writes,
            slurm_writes=tally.slurm_writes,
            read_ok=tally.read_ok,
            unready=tuple(tally.unready),
            follow_up=passes.FOLLOW_UP if tally.slurm_writes else None,  # a submitted job most often starts at once
            user_errors=tally.user_errors,
        )

    def _read_slurm_nodes(self, state: KubeState, tally: _Tally) -> Mapping[str, Node] | None:
        """Slurm's nodes (one small answer while unchanged: ``update_time``), when any pod or bridge node needs them."""
        if not state.pods and not _bridge_nodes(state):
            return {}
        try:
            return self._nodes.poll(self._check_node_listing).items
        except SlurmError as exc:
            self._slurm_error(tally, "list nodes", exc, read=True)
            return None

    def _pod_path(self, state: KubeState, fresh: bool, slurm_nodes: Mapping[str, Node] | None, tally: _Tally) -> None:
        labelled = {p.job_id for p in state.pods if p.job_id is not None}
        wanted = labelled | bridge_plan.adoption_candidates(state.pods, self._index)
        by_listing = self.reads_by_listing(len(wanted))
        if by_listing and not fresh:
            listed = self._refresh_index(tally, now=True)
            if listed is None:
                return
            fresh = listed
            wanted = labelled | bridge_plan.adoption_candidates(state.pods, self._index)
        read = self.read_jobs(wanted, tally, listed=by_listing and fresh)
        if read is None:
            return
        jobs, unconfirmed = read
        placeable = (
            None
            if slurm_nodes is None
            else frozenset(n.name for n in state.nodes.values() if n.bridge and n.slurm_name in slurm_nodes)
        )
        now = self._now()
        pods = [p for p in state.pods if p.job_id not in unconfirmed]  # their job's fate is not known yet
        actions = bridge_plan.plan_pods(pods, state.nodes, jobs, self._index, now, placeable)
        for problem in actions.errors:
            self._user_error(tally, problem)
        self._execute_pods(actions, tally)
        if fresh:
            tracked = labelled | {a.job_id for a in actions.labels}
            for job_id in bridge_plan.orphans(self._index, set(state.existing), self.namespaces, tracked):
                if self._pods_gone(self._index[job_id], tally):
                    self._cancel(Cancel(job_id, True, (), "orphan: none of its pods exists"), tally)
        self._mark_pod_groups(state, now, tally)

    def _pods_gone(self, job: Job, tally: _Tally) -> bool:
        """The apiserver's NotFound for every pod the job lists (a listing that lacks them is not enough)."""
        for key in bridge_plan.bridge_pods_of(job) or ():
            namespace, _, name = key.partition("/")
            gone, unknown = pod_gone(self.kube.kube, namespace, name)
            if unknown:
                tally.errors.append(unknown)
            if not gone:
                if not unknown:
                    log.warning("bridge: job %d looked orphaned but its pod %s exists; not cancelled", job.job_id, key)
                return False
        return True

    def _mark_pod_groups(self, state: KubeState, now: datetime.datetime, tally: _Tally) -> None:
        """PodGroupScheduled=True on each built-in PodGroup whose pods are all bound (vector 18).
        A PodGroup is read once when it becomes fully bound, patched only if the condition is not
        there yet, and remembered: a steady pass makes no request for it."""
        pods = [dataclasses.replace(p, node_name=tally.bound[p.key]) if p.key in tally.bound else p for p in state.pods]
        scheduled = bridge_plan.scheduled_pod_groups(pods, state.nodes, now)
        self._scheduled &= scheduled
        stamp = passes.rfc3339(now)
        for namespace, name in sorted(scheduled - self._scheduled):
            what = f"PodGroup {namespace}/{name}"
            try:
                pod_group = self.kube.read_pod_group(namespace, name)
            except Exception as exc:  # unknown: not marked this pass
                tally.errors.append(f"read {what}: {describe_error(exc)}")
                log.error("bridge: read %s: %s", what, describe_error(exc))
                continue
            if pod_group is None:
                continue  # gone (or no Workload API): nothing to mark
            body = pod_group_scheduled_body(pod_group, stamp)
            if body is None or self._kube(
                tally,
                f"mark {what} scheduled",
                partial(self.kube.patch_pod_group_status, namespace, name, body),
            ):
                self._scheduled.add((namespace, name))

    def _execute_pods(self, actions: PodActions, tally: _Tally) -> None:
        for cancel in actions.cancels:
            self._cancel(cancel, tally)
        for delete in actions.deletes:
            log.info("bridge: deleting pod %s: %s", delete.pod.key, delete.why)
            if self._kube(tally, f"delete pod {delete.pod.key}", partial(self.kube.delete_pod, delete.pod)):
                self.events.normal(
                    self._ref(delete.pod), "PodDeleted", f"Deleted by the Slurm bridge: {delete.why}.", "Delete"
                )
        for bind in actions.binds:
            self._bind(bind, tally)
        for update in actions.updates:
            self._update(update, tally)
        for label in actions.labels:
            self._label(label.job_id, label.digest, label.pods, tally)
        for submit in actions.submits:
            self._submit(submit, tally)
        for blocked in actions.blocked:
            self._tell(blocked.pods, blocked.why, tally)
        for waiting in actions.unscheduled:
            since = None if waiting.pod.unscheduled is not None else passes.rfc3339(self._now())
            body = unscheduled_body(waiting.message, since)
            self._kube(tally, f"mark pod {waiting.pod.key} unscheduled", partial(self.kube.patch_pod_scheduled,
                                                                                 waiting.pod, body))  # fmt: skip

    def _tell(self, pods: Iterable[BridgePod], why: str, tally: _Tally) -> None:
        """Say on each pod why its job is not submitted (written only when it changes)."""
        for pod in pods:
            if pod.submit_error != why:
                self._kube(tally, f"annotate pod {pod.key}", partial(self.kube.patch_pod, pod, submit_error_body(why)))

    def _cancel(self, cancel: Cancel, tally: _Tally) -> None:
        if cancel.needed:
            try:
                self.slurm.cancel_job(cancel.job_id)
                tally.slurm_writes += 1
                log.info("bridge: cancelled job %d: %s", cancel.job_id, cancel.why)
                for pod in cancel.release:
                    self.events.normal(
                        self._ref(pod),
                        "SlurmJobCancelled",
                        f"Slurm job {cancel.job_id} cancelled: {cancel.why}.",
                        "Cancel",
                    )
            except SlurmRejected as exc:
                if not (isinstance(exc, SlurmNotFound) or ESLURM_ALREADY_DONE in exc.numbers):
                    self._slurm_error(tally, f"cancel job {cancel.job_id}", exc)
                    return
            except SlurmError as exc:
                self._slurm_error(tally, f"cancel job {cancel.job_id}", exc)
                return
        for pod in cancel.release:
            if pod.devices and not self._kube(
                tally, f"delete the ResourceClaim of pod {pod.key}", partial(self.claims.release, pod)
            ):
                continue  # the claim first: a released pod is never looked at again
            self._kube(
                tally, f"release pod {pod.key}", partial(self.kube.patch_pod, pod, release_body(pod, cancel.job_id))
            )

    def _bind(self, bind: bridge_plan.Bind, tally: _Tally) -> None:
        """Annotate the node first (Slinky's order): a failed binding keeps the choice for next time.
        A pod asking for DRA devices gets its ResourceClaim before the binding, or no binding."""
        pod = bind.pod
        if pod.slurm_node != bind.node:
            body = {"metadata": {"annotations": {names.ANNOTATION_SLURM_NODE: bind.node}}}
            if not self._kube(tally, f"annotate pod {pod.key}", lambda: self.kube.patch_pod(pod, body)):
                return
        if pod.devices and not self._claim(bind, tally):
            return
        if self._kube(tally, f"bind pod {pod.key}", lambda: self.kube.bind(pod, bind.node)):
            tally.bound[pod.key] = bind.node
            log.info("bridge: bound pod %s to node %s (Slurm %s)", pod.key, bind.node, bind.slurm_node)
            self.events.normal(
                self._ref(pod),
                "PodBound",
                f"Bound to node {bind.node}: Slurm started job {pod.job_id} on its node {bind.slurm_node}.",
                "Bind",
            )

    def _claim(self, bind: bridge_plan.Bind, tally: _Tally) -> bool:
        """Whether the pod's ResourceClaim is in place (slurm_sync/bridge/claims.py); on any failure the
        pod stays unbound: no allocation read, no claim, no binding."""
        pod = bind.pod

        def wrote() -> None:
            tally.kube_writes += 1

        try:
            return self.claims.prepare(bind, wrote)
        except SlurmError as exc:
            self._slurm_error(tally, f"read the resources of job {pod.job_id}", exc, read=True)
        except DeviceProblem as exc:
            self._user_error(tally, Problem(f"pod {pod.key}: {exc}", "device_claim"))
            self.events.warn(
                self._ref(pod),
                "DeviceClaimFailed",
                f"Slurm started job {pod.job_id} on node {bind.slurm_node}, but its devices cannot be given to the "
                f"pod: {exc}. The pod stays unbound until they can.",
                "Bind",
            )
        except Exception as exc:  # an ApiException, or the apiserver unreachable
            tally.errors.append(f"ResourceClaim of pod {pod.key}: {describe_error(exc)}")
            log.error("bridge: ResourceClaim of pod %s: %s", pod.key, describe_error(exc))
        return False

    def _update(self, update: bridge_plan.UpdateJob, tally: _Tally) -> None:
        try:
            self.slurm.update_job(update.job_id, orjson.loads(update.body))
        except SlurmError as exc:  # e.g. it started meanwhile (2073): its shape is fixed now
            self._slurm_error(tally, f"update job {update.job_id}", exc)
            return
        tally.slurm_writes += 1
        self._label(update.job_id, bridge_plan.digest(update.body), update.pods, tally)

    def _label(self, job_id: int, applied: str, pods: Iterable[BridgePod], tally: _Tally) -> None:
        for pod in pods:
            self._kube(
                tally, f"label pod {pod.key}", partial(self.kube.patch_pod, pod, label_body(pod, job_id, applied))
            )

    def _submit(self, submit: bridge_plan.Submit, tally: _Tally) -> None:
        body = orjson.loads(submit.body)
        try:
            result = self.slurm.submit_external_job(body)
        except SlurmUnavailable as exc:
            self._listed_at = None  # the job may exist: list again before submitting this group anew
            self._slurm_error(tally, f"submit job for {submit.group}", exc)
            return
        except SlurmRejected as exc:  # the job itself is wrong (unknown partition, account, QOS ...)
            self.metrics.count_slurm_error(NAME, exc)
            self._user_error(tally, Problem(f"submit job for {submit.group}: Slurm refused it: {exc}", "job_refused"))
            self._tell(submit.pods, f"Slurm refused the job: {exc}", tally)
            for pod in submit.pods:
                self.events.warn(
                    self._ref(pod),
                    "SlurmJobRefused",
                    f"Slurm refused the placeholder job: {exc}. Fix "
                    "the pod's slurmjob.slinky.slurm.net/* annotations (partition, account, QOS, limits) "
                    "or the bridge settings.",
                    "Submit",
                )
            return
        except SlurmError as exc:
            self._slurm_error(tally, f"submit job for {submit.group}", exc)
            return
        tally.slurm_writes += 1
        log.info("bridge: submitted job %d for %s", result.job_id, submit.group)
        for pod in submit.pods:
            self.events.normal(
                self._ref(pod),
                "SlurmJobSubmitted",
                f"Submitted Slurm job {result.job_id} for "
                f"{submit.group}; the pod is bound to a node when Slurm starts it.",
                "Submit",
            )
        # until the next listing, the index must know this job, or a failed label would submit again
        self._index[result.job_id] = parse_job(
            {
                "job_id": result.job_id,
                "job_state": ["PENDING"],
                "flags": ["EXTERNAL_JOB"],
                "admin_comment": body.get("admin_comment", ""),
            }
        )
        self._label(result.job_id, bridge_plan.digest(submit.body), submit.pods, tally)

    # --- nodes ------------------------------------------------------------------------------

    def _node_path(self, state: KubeState, slurm_nodes: Mapping[str, Node], tally: _Tally) -> None:
        bridge_nodes_ = _bridge_nodes(state)
        if not bridge_nodes_:
            return
        try:
            partitions = self.slurm.partition_names() if bridge_nodes.needs_partitions(bridge_nodes_) else None
        except SlurmError as exc:
            self._slurm_error(tally, "list partitions", exc, read=True)
            return
        gone = self._registered_gone(bridge_nodes.unproven_registered(bridge_nodes_, slurm_nodes), tally)
        if gone is None:
            return
        actions = bridge_nodes.plan_nodes(bridge_nodes_, slurm_nodes, partitions, gone)
        for problem in actions.errors:
            self._user_error(tally, problem)
        for taint in actions.taints:
            self._kube(
                tally,
                f"taint node {taint.node.name}",
                partial(self.kube.patch_node, taint.node, taint_body(taint.node, taint.taints)),
            )
        for change in actions.slurm:
            self._slurm_write(
                tally,
                f"update node {change.name} {change.update.body()}",
                partial(self.slurm.update_node, change.name, change.update),
            )
        for create in actions.creates:
            self._slurm_write(
                tally,
                f"register node {create.name}",
                partial(self.slurm.create_node, create.node_conf),
                refused="node_refused",
            )
        for delete in actions.deletes:
            if self._slurm_write(tally, f"delete node {delete.name}", partial(self._delete_node, delete.name)):
                self._deleted_nodes.add(delete.name)
                self._nodes.relist()  # slurmctld does not date a deletion: "not modified since" would hide it
        for mark in actions.marks:
            body = {"metadata": {"annotations": {names.ANNOTATION_EXTERNAL_NODE_REGISTERED: mark.value}}}
            self._kube(tally, f"mark node {mark.node.name}", partial(self.kube.patch_node, mark.node, body))

    def _registered_gone(self, missing: frozenset[str], tally: _Tally) -> frozenset[str] | None:
        """Of the registered nodes the listing lacks, those we deleted ourselves (Slurm took the DELETE) or Slurm
        said twice, asked by name, it no longer has; None when a question failed (unknown is not gone: no node
        action this pass)."""
        self._registered_absence.next_pass()
        self._registered_absence.forget_except(missing)
        gone = set(missing & self._deleted_nodes)
        self._deleted_nodes -= gone  # our DELETE proves its absence once, not for a later record of that name
        for name in sorted(missing - gone):
            try:
                self.slurm.get_node(name)
            except SlurmNotFound:
                if self._registered_absence.not_found(name):
                    gone.add(name)
                continue
            except SlurmError as exc:
                self._slurm_error(tally, f"get node {name}", exc, read=True)
                return None
            self._registered_absence.found(name)
        return frozenset(gone)

    def _delete_node(self, name: str) -> None:
        """DELETE the node record; one Slurm says it no longer has counts as deleted."""
        with contextlib.suppress(SlurmNotFound):
            self.slurm.delete_node(name)

    # --- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _ref(pod: BridgePod) -> ObjectRef:
        return pod_ref(pod.namespace, pod.name, pod.uid)

    def _kube(self, tally: _Tally, what: str, write: Callable[[], object]) -> bool:
        return passes.kube_write(tally, NAME, what, write)

    def _slurm_write(self, tally: _Tally, what: str, write: Callable[[], object], refused: str | None = None) -> bool:
        """Whether Slurm took the write. ``refused``: the user-error kind of a SlurmRejected answer
        (the request itself was wrong)."""
        try:
            write()
        except SlurmRejected as exc:
            if refused is None:
                self._slurm_error(tally, what, exc)
            else:
                self.metrics.count_slurm_error(NAME, exc)
                self._user_error(tally, Problem(f"{what}: Slurm refused it: {exc}", refused))
            return False
        except SlurmError as exc:
            self._slurm_error(tally, what, exc)
            return False
        tally.slurm_writes += 1
        log.info("bridge: %s", what)
        return True

    def _slurm_error(self, tally: _Tally, what: str, exc: SlurmError, read: bool = False) -> None:
        """Any failed call makes the pass unready; ``read``: Slurm's state is unknown (``read_ok``)."""
        passes.slurm_failed(tally, self.metrics, NAME, what, exc)
        if isinstance(exc, SlurmUnavailable):
            tally.slurm_ok = False
        if read:
            tally.read_ok = False
        log.warning("bridge: %s failed: %s", what, exc)

    def _user_error(self, tally: _Tally, problem: Problem) -> None:
        """A problem of the objects or the configuration: logged and counted, not a readiness matter."""
        self._user_errors.labels(problem.kind).inc()
        tally.errors.append(problem)
        tally.user_errors += 1
        log.warning("bridge: %s", problem)


def _bridge_nodes(state: KubeState) -> list[BridgeNode]:
    return [n for n in state.nodes.values() if n.desired_taint or n.registration or n.registered or _has_our_taint(n)]


def _has_our_taint(node: BridgeNode) -> bool:
    return any(t.get("key") == names.TAINT_MANAGED_NODE for t in node.taints)

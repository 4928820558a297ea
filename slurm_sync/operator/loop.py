"""One pass of the operator loop for one cluster: read both sides, plan, execute.

Execution order keeps the protocol safe when a write fails half-way: each pod's Kubernetes
patches go first, so a drained mark is always cleared before its drain is lifted; an undrain
is skipped when that pod's patches failed. A 409 is retried from a fresh read of the pod.

A pod whose Slurm node the listing lacks gets no write until Slurm's per-object answer proves the
node gone on two passes (slurm_sync/proof.py); a listing that suddenly lacks many nodes it had is a
fault (nothing written, unready) until each of them is proven gone.

Readiness tells the truth: a pass is unready while Slurm or Kubernetes cannot be read, while the
slurmrestd reached serves another cluster, and while Slurm refuses or fails one of our writes
(each named in ``PassResult.unready``).

The PVCs of a NodeSet being deleted with whenDeleted=Retain are orphaned (its ownerReference
removed) so that they outlive it; they are listed only for such NodeSets, so a steady pass
reads nothing more.

A pass costs what changed (docs/architecture.md §4.8): views are made again only for objects the
cache changed (``ViewMemo``), and a pod whose plan wrote nothing is planned again only when one of its
inputs changed (``plan.plan_inputs``), or at the periodic full re-plan.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import operator
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial

from kubernetes.client.exceptions import ApiException

from slinky_common import names
from slinky_common.gcpause import collector_paused
from slinky_common.wellknown import selector_labels
from slurm_sync import passes
from slurm_sync.cache import ViewMemo
from slurm_sync.events import Events, Notice, ObjectRef, mark_notices, node_update_notice, nodeset_ref, pod_ref
from slurm_sync.kube import ChangeMarks, Kube, describe_error, pod_gone
from slurm_sync.metrics import Metrics
from slurm_sync.operator import deletion, power, records, reservations
from slurm_sync.operator import plan as planning
from slurm_sync.operator import topology as topology_copy
from slurm_sync.operator.plan import PodPlan, PodState, SlurmView
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import (
    ClusterView,
    ControllerPodView,
    KubeNodeView,
    NodeSetView,
    PodView,
    read_controller_pod,
    read_kube_node,
    read_nodeset,
    read_pod,
)
from slurm_sync.operator.writes import PodWrites
from slurm_sync.proof import PROBES_PER_PASS, AbsenceProof, refuse_unproven_loss, sudden_loss
from slurm_sync.slurm.client import ListingWatch, SlurmClient
from slurm_sync.slurm.errors import (
    SlurmError,
    SlurmNotFound,
    SlurmRejected,
    SlurmSuspect,
    SlurmUnsupported,
    SlurmWrongCluster,
)
from slurm_sync.slurm.types import Job, Node, NodeUpdate

log = logging.getLogger(__name__)

CONFLICT_ATTEMPTS = 3
NO_VIEWS: tuple[KubeNodeView, ...] = ()  # the Nodes of a cluster that needs none
CONTROLLER_APP = "slurmctld"
WORKER_APP = "slurmd"  # NodeSet children carry selector_labels(WORKER_APP, <nodeset>)
UNPROCESSABLE = 422  # a JSON patch whose test op failed: the object changed since it was read
# A node update Slurm refused is not sent again while neither the update nor Slurm's value of the
# fields it sets changed; it is retried after a backoff doubling from the first delay up to the cap.
REFUSAL_RETRY_FIRST = 60.0
REFUSAL_RETRY_MAX = 600.0
# Refusals that are about who we are, not about the update: they stay pass errors every pass.
_AUTH_STATUSES = frozenset({401, 403})
_AUTH_NUMBERS = frozenset({1007, 2002})  # protocol authentication failure, ESLURM_ACCESS_DENIED
# The Slurm node fields each update key sets (what "Slurm's value" of an update is).
_UPDATE_FIELDS = {
    "state": ("state", "reason"),
    "reason": ("reason",),
    "comment": ("comment",),
    "features": ("features",),
    "features_act": ("active_features",),
    "topology_str": ("topology",),
}
FULL_REPLAN_INTERVAL = 300.0  # seconds between passes that plan every pod, whatever changed
CONFIRM_MARGIN = 0.05  # seconds past the time absence evidence may be confirmed, for the pass that does it
WRITERS = 8  # pods whose writes are in flight at once (paced by the client's rate limit, slurm_sync/throttle.py)
AT_ONCE = 8  # new drain intents drained before a pass reads Slurm's listing; beyond, the listing is cheaper


def utc_now() -> str:
    return passes.rfc3339(passes.utc_now())


@dataclass(frozen=True)
class PassResult(passes.Outcome):
    """One cluster's pass (passes.Outcome), with what only the operator knows."""

    cluster: str = ""
    wrong_cluster: str | None = None  # the slurmrestd reached serves another Slurm cluster: why


@dataclass
class ClusterViews:
    """The views of one cluster's objects, kept from pass to pass (made again only for changed objects)."""

    pods: ViewMemo[PodView | None] = field(default_factory=lambda: ViewMemo(read_pod))
    nodesets: ViewMemo[NodeSetView] = field(default_factory=lambda: ViewMemo(read_nodeset))
    kube_nodes: ViewMemo[KubeNodeView] = field(default_factory=lambda: ViewMemo(read_kube_node))
    controller_pods: ViewMemo[ControllerPodView] = field(default_factory=lambda: ViewMemo(read_controller_pod))
    # the view lists last read (the cache's very lists while unchanged), their cluster and its pods' Nodes
    last: tuple[tuple[object, ...], ClusterView, frozenset[str]] | None = None


def read_cluster(
    kube: Kube,
    namespace: str,
    controller: str,
    propagated_conditions: tuple[str, ...] = (),
    views: ClusterViews | None = None,
) -> ClusterView:
    """The cluster's worker pods (by the cluster label), its NodeSets, Nodes and slurmctld pods.
    Nodes are listed when a pod runs on one, and all kept when a NodeSet prunes defunct Slurm nodes."""
    views, keep = views or ClusterViews(), kube.same_dicts
    pod_views = views.pods(kube.list_pods(namespace, {names.LABEL_CLUSTER: controller}), keep)
    nodeset_views = views.nodesets(kube.list_custom("nodesets", namespace), keep)
    last = views.last if keep else None
    if last is not None and last[0][0] is pod_views:
        pods, node_names = last[1].pods, last[2]
    else:
        pods = tuple(v for v in pod_views if v is not None)
        node_names = frozenset(p.node_name for p in pods if p.node_name)
    nodesets = [n for n in nodeset_views if n.controller == controller]
    all_nodes = any(n.prunes_defunct_nodes for n in nodesets)
    node_views = views.kube_nodes(kube.list_nodes(), keep) if node_names or all_nodes else NO_VIEWS
    ctl_labels = {names.LABEL_NAME: CONTROLLER_APP, names.LABEL_INSTANCE: controller}
    ctl_views = views.controller_pods(kube.list_pods(namespace, ctl_labels), keep)
    read = (pod_views, nodeset_views, node_views, ctl_views)
    if last is not None and all(map(operator.is_, last[0], read)):
        return last[1]  # the very same objects: the very same cluster (an idle pass costs nothing per object)
    cluster = ClusterView(
        namespace=namespace,
        controller=controller,
        pods=pods,
        nodesets={n.name: n for n in nodesets},
        kube_nodes={n.name: n for n in node_views if all_nodes or n.name in node_names},
        controller_pods=tuple(ctl_views),
        propagated_conditions=propagated_conditions,
        all_kube_nodes=all_nodes,
    )
    if keep:
        views.last = (read, cluster, node_names)
    return cluster


def release_retained_claims(kube: Kube, nodeset: NodeSetView, tally: Tally, events: Events) -> None:
    """Remove a deleted NodeSet's ownerReference from its PVCs (whenDeleted=Retain).

    Needs no Slurm: the service also runs it for NodeSets whose Controller is already gone, whose
    deletion would otherwise wait forever on claims nobody releases.
    """
    try:
        claims = kube.list_pvcs(nodeset.namespace, selector_labels(WORKER_APP, nodeset.name))
    except Exception as exc:  # an ApiException or an unreachable apiserver: release nothing
        tally.errors.append(f"list PVCs of nodeset {nodeset.name}: {describe_error(exc)}")
        log.error("listing PVCs of nodeset %s/%s failed: %s", nodeset.namespace, nodeset.name, describe_error(exc))
        return
    for claim in claims:
        operations = planning.claim_release_patch(claim, nodeset.uid)
        if operations is None:
            continue
        name = str(claim["metadata"].get("name"))
        try:
            kube.patch_pvc(nodeset.namespace, name, operations)
        except ApiException as exc:
            if exc.status == UNPROCESSABLE:
                log.info("pvc %s/%s: ownerReferences changed since read; retrying next pass", nodeset.namespace, name)
                continue
            tally.errors.append(f"release pvc {name}: HTTP {exc.status}")
            log.error("releasing pvc %s/%s failed: HTTP %s %s", nodeset.namespace, name, exc.status, exc.reason)
            continue
        tally.kube_writes += 1
        log.info(
            "pvc %s/%s released from deleted nodeset %s (whenDeleted: Retain)", nodeset.namespace, name, nodeset.name
        )
        events.normal(
            nodeset_ref(nodeset.namespace, nodeset.name, nodeset.uid),
            "PersistentVolumeClaimRetained",
            f"PersistentVolumeClaim {name} no longer belongs to the NodeSet (whenDeleted: Retain): it outlives "
            "the NodeSet with its data; delete it by hand once that data is no longer needed.",
            "Retain",
        )


@dataclass
class Refusal:
    """A node update Slurm refused: not sent again before ``retry_at`` unless Slurm's value changed."""

    seen: str  # Slurm's value of the fields the update sets, when it was refused
    retry_at: float
    delay: float
    message: str = ""  # what Slurm said


def update_key(node: str, update: NodeUpdate) -> tuple[str, str]:
    return node, json.dumps(update.body(), sort_keys=True, separators=(",", ":"))


def slurm_value(node: Node | None, update: NodeUpdate) -> str:
    """Slurm's current value of the fields ``update`` sets (a changed one re-sends a refused update)."""
    if node is None:
        return ""
    fields = sorted({f for key in update.body() for f in _UPDATE_FIELDS.get(key, ())})
    values = {f: sorted(v) if isinstance(v := getattr(node, f), (frozenset, tuple)) else v for f in fields}
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def is_refusal(exc: SlurmError) -> bool:
    """Slurm (or the REST version it speaks) will keep saying no to this very update."""
    if isinstance(exc, SlurmUnsupported):
        return True
    return isinstance(exc, SlurmRejected) and exc.status not in _AUTH_STATUSES and not (exc.numbers & _AUTH_NUMBERS)


def refusal_reason(exc: SlurmError) -> str:
    """A low-cardinality label: Slurm's error number(s), else the HTTP status or the kind."""
    if isinstance(exc, SlurmRejected):
        return ",".join(str(n) for n in sorted(exc.numbers)) or f"http_{exc.status}"
    return "unsupported"


class OperatorLoop:
    """The Slurm <-> Kubernetes loop for one cluster; keeps only the node watch between passes."""

    def __init__(
        self,
        name: str,
        namespace: str,
        controller: str,
        slurm: SlurmClient,
        kube: Kube,
        metrics: Metrics,
        now: Callable[[], str] = utc_now,
        propagated_conditions: tuple[str, ...] = (),
        clock: Callable[[], float] = time.monotonic,
        absence_confirm_seconds: float = 5.0,
        deletion_grace: float = deletion.DEFAULT_GRACE,
        events: Events | None = None,
        full_replan_interval: float = FULL_REPLAN_INTERVAL,
        writers: int = WRITERS,
    ) -> None:
        self.name = name
        self.writers = writers
        self._pool: ThreadPoolExecutor | None = None  # made at the first pass with two pods to write
        self.events = events if events is not None else Events(kube)
        self.propagated_conditions = propagated_conditions
        self.namespace = namespace
        self.controller = controller
        self.slurm = slurm
        self.kube = kube
        self.metrics = metrics
        self._now = now
        self._watch: ListingWatch[str, Node] = slurm.node_watch()
        self._jobs: ListingWatch[int, Job] = slurm.job_watch()
        self._deadlines: tuple[Mapping[int, Job], dict[str, int | None]] | None = None  # (job view, its node_deadlines)
        self._clock = clock
        # In memory only (rebuilt after a restart at the cost of one update each):
        self._refused: dict[tuple[str, str], Refusal] = {}  # (node, update body) -> Slurm's refusal
        self._applied_topology: dict[str, str] = {}  # node -> topology_str last set successfully
        self._planned: set[tuple[str, str]] = set()  # this pass's updates (stale refusals are forgotten)
        self._absence: AbsenceProof[str] = AbsenceProof(absence_confirm_seconds, clock)
        self._lost_gone: set[str] = set()  # nodes of a suspect listing that Slurm said are gone
        self.deleted_nodes: set[str] = set()  # node records we deleted ourselves (their loss is expected)
        self.job_absence: AbsenceProof[int] = AbsenceProof(absence_confirm_seconds, clock)  # jobs of deleting NodeSets
        self.reservation_absence: AbsenceProof[str] = AbsenceProof(absence_confirm_seconds, clock)  # ScheduledUpdate
        self.leftover_pods: AbsenceProof[str] = AbsenceProof(absence_confirm_seconds, clock)  # leftover records
        # deleting NodeSets with nothing left in Slurm: said once, the report that ends finalize waits for a later pass
        self.nothing_left: AbsenceProof[str] = AbsenceProof(absence_confirm_seconds, clock)
        self.deletion_grace = deletion_grace
        # What makes a pass cost what changed (docs/architecture.md §4.8), all dropped at each full re-plan:
        self.full_replan_interval = full_replan_interval
        self._replan_at = clock() + full_replan_interval
        self._views = ClusterViews()
        self._quiet: dict[str, tuple[tuple[object, ...], PodState]] = {}  # pod -> inputs and state of a plan
        self._marks: dict[str, tuple[str | None, bool]] = {}  # pod -> (drained, absent) this term wrote (_own_marks)
        self._hashes: tuple[object, dict[str, str]] | None = None  # (what they hash, each NodeSet's observed_hash)
        self._settled_read: tuple[ClusterView, SlurmView] | None = None  # what a pass with nothing to do read
        # what the last pass read: its cluster, Slurm's node listing, where the watched collections were
        self._seen: tuple[ClusterView, Mapping[str, Node] | None, ChangeMarks | None] | None = None

    def read_slurm(self, tally: Tally) -> SlurmView:
        """Slurm's node and job listings, and the ping only when the node listing failed: it then tells
        whether slurmrestd reaches any slurmctld. A pass whose listing answered pings only when the active
        slurmctld label may have to move (``planning.needs_ping``)."""
        nodes = jobs = None
        try:
            nodes = self._watch.poll(self._check_listing).items
        except SlurmError as exc:
            self._slurm_error(tally, "list nodes", exc)
        try:
            jobs = self._jobs.poll().items if nodes is not None else None  # jobs are read only next to their nodes
        except SlurmError as exc:
            self._slurm_error(tally, "list jobs", exc)
        view = SlurmView(nodes=nodes, ping=None, jobs=jobs, deadlines=self._node_deadlines(jobs, tally))
        return view if nodes is not None else self._pinged(view, tally)[0]

    def _pinged(self, slurm: SlurmView, tally: Tally) -> tuple[SlurmView, bool]:
        """``slurm`` with Slurm's ping, and whether it answered."""
        try:
            return dataclasses.replace(slurm, ping=self.slurm.ping()), True
        except SlurmError as exc:
            self._slurm_error(tally, "ping", exc)
            return slurm, False

    def _node_deadlines(self, jobs: Mapping[int, Job] | None, tally: Tally) -> Mapping[str, int | None] | None:
        """Each node's job deadline, computed again only when the job listing changed (an unchanged
        listing is the very same view), so an idle pass costs nothing per job."""
        if jobs is None:
            return None
        if self._deadlines is not None and self._deadlines[0] is jobs:
            return self._deadlines[1]
        try:
            deadlines = planning.node_deadlines(jobs.values())
        except ValueError as exc:
            tally.errors.append(f"job deadlines: {exc}; no deadline written")
            log.warning(
                "cluster %s: a job's node list is unreadable (%s): no pod deadline written this pass", self.name, exc
            )
            return None
        self._deadlines = (jobs, deadlines)
        return deadlines

    def _check_listing(self, before: Mapping[str, Node], now: Mapping[str, Node]) -> None:
        """Refuse (SlurmSuspect) a listing that suddenly lacks many nodes it had, until Slurm says of
        each one, asked by name, that it is gone; a node Slurm still has proves the listing wrong."""
        lost = sudden_loss(before, now, self.deleted_nodes)
        if not lost:
            self._lost_gone.clear()
            return
        self._relist()  # accepted or not, a listing that lost this much is checked whole next pass
        refuse_unproven_loss(lost, len(before), self._lost_gone, self.slurm.get_node, "node")
        log.warning(
            "cluster %s: %d nodes left Slurm's listing at once; Slurm confirmed each is gone", self.name, len(lost)
        )

    def run_pass(self) -> PassResult:
        with collector_paused():
            return self._run_pass()

    def _run_pass(self) -> PassResult:
        started = time.perf_counter()
        tally = Tally()
        self._drain_at_once(tally)
        slurm = self.read_slurm(tally)
        slurm_ok = slurm.nodes is not None
        read_ok = True
        if self._clock() >= self._replan_at:
            self._forget_plans()
        marks = self.kube.change_marks(self.namespace, {names.LABEL_CLUSTER: self.controller}, "nodesets")
        try:
            cluster = read_cluster(self.kube, self.namespace, self.controller, self.propagated_conditions, self._views)
        except Exception as exc:  # an ApiException, the apiserver unreachable, a cache not synced: no write at all
            read_ok = False
            passes.kube_read_failed(tally, f"cluster {self.name}", exc)
        else:
            if slurm_ok and planning.needs_ping(cluster.controller_pods):
                slurm, slurm_ok = self._pinged(slurm, tally)
            self._seen = (cluster, slurm.nodes, marks)
            if self._unchanged(cluster, slurm):
                log.debug("cluster %s: nothing changed since a pass that had nothing to do", self.name)
            else:
                self._execute(cluster, slurm, tally)
        self.metrics.poll_seconds.labels(self.name).observe(time.perf_counter() - started)
        self.metrics.cluster_up.labels(self.name).set(1 if slurm_ok else 0)
        return PassResult(
            slurm_ok=slurm_ok,
            errors=tuple(tally.errors),
            kube_writes=tally.kube_writes,
            slurm_writes=tally.slurm_writes,
            read_ok=read_ok,
            unready=tuple(tally.unready),
            cluster=self.name,
            wrong_cluster=tally.wrong_cluster,
            follow_up=self._follow_up(tally),
        )

    def _drain_at_once(self, tally: Tally) -> None:
        """Drain the nodes of a few pods whose drain intent appeared since the last pass (a pod or Node cordoned,
        a NodeSet's rolling update) before reading Slurm's whole listing, which at 20,000 nodes takes longer
        than the rest of the reaction (issue 28); what changed comes from the watches, at no cost per pod. Each
        node is asked for by name, so the drain is decided on what Slurm says of it now (never over someone
        else's reason, never twice); anything unknown is left to the pass, which plans every pod as always.
        Only drains: they keep jobs off a node, and lifting one waits for the pass."""
        if self._seen is None:
            return
        cluster, listed, marks = self._seen
        if listed is None:
            return
        changed = self.kube.changes_since(self.namespace, {names.LABEL_CLUSTER: self.controller}, "nodesets", marks)
        if changed is None:  # no cache, or it cannot tell: the pass finds every drain
            return
        pods, nodesets, nodes = changed
        found = planning.new_drain_intents(
            cluster,
            (view for obj in pods if (view := read_pod(obj)) is not None),
            (ns for obj in nodesets if (ns := read_nodeset(obj)).controller == self.controller),
            (read_kube_node(obj) for obj in nodes if (obj.get("spec") or {}).get("unschedulable")),
            listed,
        )
        if len(found) > AT_ONCE:
            return
        for pod, intent in found:
            try:
                node = self.slurm.get_node(pod.slurm_node)
            except SlurmError as exc:  # gone, unreachable, another cluster: the pass finds out and says so
                log.debug("cluster %s: node %s not drained before the listing: %s", self.name, pod.slurm_node, exc)
                continue
            action = planning.drain_action(pod, node, intent)
            if action is not None and not action.lifts_drain:
                drain = PodPlan(pod, (), (action,), planning.observed_state(pod))
                self._slurm_updates(drain, SlurmView(nodes={node.name: node}, ping=None), tally, lifts_allowed=False)

    def _follow_up(self, tally: Tally) -> float | None:
        """When the next pass has work (docs/architecture.md §4.8): FOLLOW_UP after a Slurm write (its
        effect: a drained node's record to delete, a deleted one to prove absent), and as soon as the
        youngest absence evidence is old enough to confirm; every POWER_POLL while an elastic NodeSet waits on
        Slurm's power decisions, and just past the second a node Slurm powers up may be listed up in."""
        proofs = (self._absence, self.job_absence, self.reservation_absence, self.leftover_pods, self.nothing_left)
        dues = [d + CONFIRM_MARGIN for proof in proofs if (d := proof.due()) is not None]
        if tally.slurm_writes:
            dues.append(passes.FOLLOW_UP)
        if tally.watch_power:
            dues.append(power.POWER_POLL)
        if tally.power_due is not None:
            dues.append(max(tally.power_due, 0.0) + power.RISING_MARGIN)
        return min(dues, default=None)

    def _unchanged(self, cluster: ClusterView, slurm: SlurmView) -> bool:
        """This pass read the very objects of a pass that had nothing to do and left nothing waiting on time
        (``_settled``): it would do nothing either, so it is not made (an idle pass costs nothing per pod or
        node, issue 28). Every view is the last one's own object while its source is unchanged: the cache's
        lists (slurm_sync/cache.py), Slurm's listings answered "not modified since" (the same snapshot)."""
        last = self._settled_read
        return (
            last is not None
            and cluster is last[0]
            and slurm.nodes is last[1].nodes
            and slurm.jobs is last[1].jobs
            and slurm.deadlines is last[1].deadlines
            and slurm.ping == last[1].ping
        )

    def _settled(self, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> bool:
        """Whether this pass (``slurm`` its view, absence proofs included) had nothing to do and leaves nothing
        that waits on time: no write, error or refusal; no pod with work planned; no mark not seen yet; no
        evidence to confirm or other follow-up; no NodeSet being deleted, elastic or with a maintenance window
        (their steps go by the clock); nothing its later steps would act on (records, leftovers, pruning)."""
        if tally.kube_writes or tally.slurm_writes or tally.errors or tally.unready or tally.wrong_cluster:
            return False
        if self._follow_up(tally) is not None or self._marks or self._refused or len(self._quiet) != len(cluster.pods):
            return False
        if any(n.deleting or n.on_demand_nodes for n in cluster.nodesets.values()) or reservations.in_scope(cluster):
            return False
        return not (
            planning.controller_patches(cluster.controller_pods, slurm.ping)
            or any(True for _ in records.record_deletes(cluster, slurm))
            or any(True for _ in records.leftovers(cluster, slurm))
            or planning.prune_candidates(cluster, slurm)
        )

    def _execute(self, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
        given = slurm
        self._settled_read = None
        now = self._now()
        states: dict[str, PodState] = {}
        self._planned = set()
        slurm = self._prove_absence(cluster, slurm, now, tally)
        quiet: dict[str, tuple[tuple[object, ...], PodState]] = {}
        self._marks = {p.name: m for p in cluster.pods if (m := self._marks.get(p.name)) is not None}
        writes = PodWrites(partial(self._apply_pod, cluster=cluster, slurm=slurm, now=now), self._writers())
        try:
            for pod in map(self._own_marks, cluster.pods):
                inputs = planning.plan_inputs(pod, cluster, slurm, self._applied_topology)
                last = self._quiet.get(pod.name)
                if last is not None and last[0] == inputs:
                    quiet[pod.name] = (inputs, last[1])  # the equal inputs of now: the old ones' Slurm node goes
                    states[pod.name] = last[1]
                    continue
                pod_plan = topology_copy.plan_pod_with_topology(pod, cluster, slurm, now, self._applied_topology)
                if not pod_plan.patches and not pod_plan.slurm:
                    quiet[pod.name] = (inputs, pod_plan.state)
                    states[pod.name] = pod_plan.state
                else:
                    writes.add(pod_plan)
        except BaseException:
            writes.abandon()
            raise
        states.update(writes.finish(tally))
        self._quiet = quiet
        self._forget(slurm)
        for patch in planning.controller_patches(cluster.controller_pods, slurm.ping):
            self._kube_write(
                tally, f"pod {patch.name}", partial(self.kube.patch_pod, patch.namespace, patch.name, patch.body)
            )
        for touch in planning.nodeset_touches(cluster, states, self._nodeset_hashes(cluster, states)):
            self._kube_write(
                tally,
                f"nodeset {touch.name}",
                partial(
                    self.kube.annotate_nodeset,
                    touch.namespace,
                    touch.name,
                    names.ANNOTATION_SLURM_OBSERVED,
                    touch.value,
                ),
            )
        steps = self.step_context(now)
        reservations.execute(steps, cluster, slurm, tally)  # ScheduledUpdate maintenance reservations
        deletion.execute(steps, cluster, slurm, tally)  # deleting NodeSets: pending jobs, node records
        power.execute(steps, cluster, slurm, tally)  # elastic NodeSets: what Slurm's power saving wants
        records.execute(steps, cluster, slurm, tally)  # records of pods replaced with new resources or scaled in
        for nodeset in sorted(cluster.nodesets.values(), key=lambda n: n.name):
            if nodeset.releases_claims:
                release_retained_claims(self.kube, nodeset, tally, self.events)
        for candidate in planning.prune_candidates(cluster, slurm):
            self._prune(candidate, tally)
        if self._settled(cluster, slurm, tally):
            self._settled_read = (cluster, given)

    def _nodeset_hashes(self, cluster: ClusterView, states: Mapping[str, PodState]) -> dict[str, str]:
        """planning.nodeset_hashes, computed again only when a pod's state or NodeSet changed."""
        key = (tuple(sorted(cluster.nodesets)), tuple((p.name, p.nodeset, states.get(p.name)) for p in cluster.pods))
        if self._hashes is None or self._hashes[0] != key:
            self._hashes = (key, planning.nodeset_hashes(cluster, states))
        return self._hashes[1]

    def _forget_plans(self) -> None:
        """The periodic full re-plan: every view made again, every pod planned again."""
        self._replan_at = self._clock() + self.full_replan_interval
        self._relist()  # bounds what Slurm's "not modified since" can hide (a deletion by anyone else)
        self._views = ClusterViews()
        self._quiet = {}
        self._hashes = None
        self._settled_read = None

    def _prove_absence(self, cluster: ClusterView, slurm: SlurmView, now: str, tally: Tally) -> SlurmView:
        """The listing's view plus the nodes proven absent: each pod's node the listing lacks is asked
        about by name (when marking it absent would change anything), and counts as absent only once
        Slurm's not-found answer held on a later pass; one Slurm has has the listing read again at once
        (``_listed_again``). Busy evidence wins: while the job listing of the
        pass cannot be read, no node is absent; while it shows a job on a node the node listing lacks, the
        node listing is proven wrong and counts as unread (nothing that depends on it is written)."""
        self._absence.next_pass()
        if slurm.nodes is None:
            return slurm
        missing = sorted({p.slurm_node for p in cluster.pods if p.slurm_node not in slurm.nodes})
        self._absence.forget_except(missing)
        if not missing:
            return slurm
        busy = self._busy(slurm, missing, tally)
        if busy is None:
            return slurm  # which of them run jobs is unknown: none is absent this pass
        if busy:
            self._contradicted(busy, tally)
            return dataclasses.replace(slurm, nodes=None)
        assumed = dataclasses.replace(slurm, absent=frozenset(missing))
        settled = {p.slurm_node for p in cluster.pods if p.slurm_node in missing}
        for pod in cluster.pods:
            plan = (
                planning.plan_pod(pod, cluster, assumed, now, self._applied_topology)
                if pod.slurm_node in settled
                else None
            )
            if plan is not None and (plan.patches or plan.slurm):
                settled.discard(pod.slurm_node)  # marking it absent would write: needs proof
        absent = set(settled)  # already marked as absent: nothing to write, nothing to prove
        found: dict[str, Node] = {}
        for name in [n for n in missing if n not in settled][:PROBES_PER_PASS]:
            try:
                found[name] = self.slurm.get_node(name)
            except SlurmNotFound:
                if self._absence.not_found(name):
                    absent.add(name)
                else:
                    log.info(
                        "cluster %s: Slurm says node %s does not exist; confirming on a later pass", self.name, name
                    )
                continue
            except SlurmError as exc:
                self._slurm_error(tally, f"get node {name}", exc)
                continue
            self._absence.found(name)
        if found:
            slurm = self._listed_again(slurm, found, tally)
            absent = {name for name in absent if name not in (slurm.nodes or {})}
        return dataclasses.replace(slurm, absent=frozenset(absent))

    def _listed_again(self, slurm: SlurmView, found: Mapping[str, Node], tally: Tally) -> SlurmView:
        """The pass's view from the whole node listing read again now, for nodes Slurm has that the listing
        read at its start lacked: most often registered in between (a pod's slurmd starting while the pass
        runs), so the pass plans them at once. A node this listing lacks too is a wrong listing: nothing is
        written for it, and the next listing is read whole."""
        self._watch.relist()
        try:
            nodes = self._watch.poll(self._check_listing).items
        except SlurmError as exc:
            self._slurm_error(tally, "list nodes again", exc)
            nodes = slurm.nodes or {}
        else:
            slurm = dataclasses.replace(slurm, nodes=nodes)
        for name, node in sorted(found.items()):
            if name in nodes:
                log.info("cluster %s: node %s registered after the pass read the listing; read again", self.name, name)
                continue
            self._relist()
            log.warning(
                "cluster %s: node %s is missing from the listing but Slurm has it (%s); nothing written for it",
                self.name,
                name,
                ",".join(sorted(node.state)),
            )
        return slurm

    def _busy(self, slurm: SlurmView, nodes: list[str], tally: Tally) -> dict[str, tuple[int, ...]] | None:
        """The jobs this pass's job listing shows on each of ``nodes``; None when it cannot tell."""
        if slurm.jobs is None:
            return None
        try:
            return planning.holding_jobs(slurm.jobs.values(), nodes)
        except ValueError as exc:
            tally.errors.append(f"jobs on missing nodes: {exc}; no node is absent this pass")
            return None

    def _contradicted(self, busy: Mapping[str, tuple[int, ...]], tally: Tally) -> None:
        """Slurm's answers of one pass disagree (a node gone from the node listing, or said not found,
        runs jobs per the job listing): the absence evidence gathered so far is void, readiness names
        each such node, and both listings are read whole next pass, so a view built from the wrong
        answer does not outlive the fault."""
        self._absence.forget_except(())
        for node, jobs in sorted(busy.items()):
            why = (
                f"node {node}: missing from Slurm's node listing, yet its job listing shows job(s) "
                f"{', '.join(map(str, jobs))} running there: contradicting answers, nothing written for it"
            )
            tally.errors.append(why)
            tally.unready.append(why)
            log.error("cluster %s: %s", self.name, why)
        self._relist()

    def _relist(self) -> None:
        """Both listings are read whole next pass: the current view is suspect."""
        self._watch.relist()
        self._jobs.relist()

    def _own_marks(self, pod: PodView) -> PodView:
        """The pod as planned: a drained or absent mark this term wrote counts as there until the watch cache shows
        the write. A patch carries only what differs from the view, so a mark the cache does not show yet would
        never be removed: its drain lifted under it, or a wrong answer's mark not corrected, the NodeSet could
        delete the pod while a job starts there (model/drain.pml, -DNO_OWN_MARKS). A new term lists anew."""
        wrote = self._marks.get(pod.name)
        if wrote is None:
            return pod
        seen = planning.observed_state(pod)
        if (seen.drained, seen.absent) == wrote:
            del self._marks[pod.name]  # the cache shows our write
            return pod
        keys = (
            (names.ANNOTATION_DRAINED, wrote[0], seen.drained),
            (names.ANNOTATION_SLURM_NODE_ABSENT, "true" if wrote[1] else None, "true" if seen.absent else None),
        )
        extra = {key: mine for key, mine, shown in keys if mine is not None and mine != shown}
        return dataclasses.replace(pod, annotations={**pod.annotations, **extra}) if extra else pod

    def _writers(self) -> ThreadPoolExecutor | None:
        """The loop's write workers (slurm_sync/operator/writes.py); None with one writer. Threads start only
        when a pass has two pods or more to write at once."""
        if self.writers <= 1:
            return None
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.writers, thread_name_prefix=f"writes-{self.name}")
        return self._pool

    def close(self) -> None:
        """Stop the write workers (a loop the service drops; its last pass has ended)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def _apply_pod(
        self, pod_plan: PodPlan, tally: Tally, *, cluster: ClusterView, slurm: SlurmView, now: str
    ) -> PodState:
        """Patches (retried from a fresh read on 409), then Slurm updates; the hook-visible state. Run by the
        pass's write workers (slurm_sync/operator/writes.py): it touches only its own pod's and node's entries
        of the loop's bookkeeping."""
        for attempt in range(CONFLICT_ATTEMPTS):
            try:
                for patch in pod_plan.patches:
                    if patch.subresource == "status":
                        self.kube.patch_pod_status(patch.namespace, patch.name, patch.body)
                    else:
                        self.kube.patch_pod(patch.namespace, patch.name, patch.body)
                        self._notify(pod_plan.pod, mark_notices(pod_plan.pod.slurm_node, patch.body))
                    tally.kube_writes += 1
                if pod_plan.patches:
                    self._marks[pod_plan.pod.name] = (pod_plan.state.drained, pod_plan.state.absent)
                break
            except ApiException as exc:
                if exc.status == 409 and attempt + 1 < CONFLICT_ATTEMPTS:
                    log.info(
                        "pod %s/%s: conflict, retrying from fresh state", pod_plan.pod.namespace, pod_plan.pod.name
                    )
                    fresh = self._reread(pod_plan.pod, tally)
                    if fresh is None:
                        return planning.observed_state(pod_plan.pod)
                    pod_plan = topology_copy.plan_pod_with_topology(fresh, cluster, slurm, now, self._applied_topology)
                    continue
                tally.errors.append(f"patch pod {pod_plan.pod.name}: HTTP {exc.status}")
                log.error(
                    "pod %s/%s: patch failed: HTTP %s %s",
                    pod_plan.pod.namespace,
                    pod_plan.pod.name,
                    exc.status,
                    exc.reason,
                )
                self._slurm_updates(pod_plan, slurm, tally, lifts_allowed=False)
                return planning.observed_state(pod_plan.pod)
        self._slurm_updates(pod_plan, slurm, tally, lifts_allowed=True)
        return pod_plan.state

    def _reread(self, pod: PodView, tally: Tally) -> PodView | None:
        try:
            return read_pod(self.kube.read_pod(pod.namespace, pod.name))
        except Exception as exc:  # unknown: this pod gets no write and no Slurm update this pass
            tally.errors.append(f"read pod {pod.name}: {describe_error(exc)}")
            return None

    def _slurm_updates(self, pod_plan: PodPlan, slurm: SlurmView, tally: Tally, lifts_allowed: bool) -> None:
        comment_sent = False
        for action in pod_plan.slurm:
            if action.lifts_drain and not lifts_allowed:
                continue
            if action.after_comment and not comment_sent:
                continue  # the IDLE after a move follows only a comment update that succeeded
            what = ",".join(action.update.state) or ",".join(action.update.body()) or "nothing"
            key = update_key(action.node, action.update)
            self._planned.add(key)
            seen = slurm_value((slurm.nodes or {}).get(action.node), action.update)
            refusal = self._refused.get(key)
            if refusal is not None and refusal.seen != seen:
                refusal = None  # Slurm's value changed since: a new attempt, reported anew
            if refusal is not None and self._clock() < refusal.retry_at:
                log.debug("cluster %s: node %s: %s refused before, not re-sent yet", self.name, action.node, what)
                tally.unready.append(f"update node {action.node} ({what}): refused by Slurm: {refusal.message}")
                continue
            try:
                self.slurm.update_node(action.node, action.update)
            except SlurmError as exc:
                if is_refusal(exc):
                    self._refusal(key, seen, refusal, what, exc)
                    tally.unready.append(f"update node {action.node} ({what}): refused by Slurm: {exc}")
                    self.events.warn(
                        pod_ref(pod_plan.pod.namespace, pod_plan.pod.name, pod_plan.pod.uid),
                        "SlurmWriteRefused",
                        f"Slurm refused to update node {action.node} ({what}): {exc}. Not sent again until "
                        "the wanted update or Slurm's node changes; slurm_sync's /readyz names it meanwhile.",
                        "UpdateNode",
                    )
                else:
                    self._slurm_error(tally, f"update node {action.node} ({what})", exc)
                continue
            self._refused.pop(key, None)
            if action.update.comment is not None:
                comment_sent = True
            if action.update.topology_str is not None:
                self._applied_topology[action.node] = action.update.topology_str
            tally.slurm_writes += 1
            self.metrics.slurm_writes.labels(self.name, what).inc()
            log.info("cluster %s: node %s: %s %s", self.name, action.node, what, action.update.reason or "")
            notice = node_update_notice(action.node, action.update.state, action.update.reason)
            self._notify(pod_plan.pod, [notice] if notice else [])

    def _refusal(self, key: tuple[str, str], seen: str, before: Refusal | None, what: str, exc: SlurmError) -> None:
        """Remember a refused update: not re-sent until it or Slurm's value changes, or the backoff
        ends. Reported (log + metric) once, not as a pass error: readiness follows reads only."""
        self.metrics.count_slurm_error(self.name, exc)
        delay = REFUSAL_RETRY_FIRST if before is None else min(before.delay * 2, REFUSAL_RETRY_MAX)
        self._refused[key] = Refusal(seen, self._clock() + delay, delay, str(exc))
        if before is None:
            self.metrics.slurm_refused.labels(self.name, what, refusal_reason(exc)).inc()
            log.warning(
                "cluster %s: node %s: Slurm refused %s: %s (not re-sent until it or Slurm's value changes; retry in "
                "%.0fs)",
                self.name,
                key[0],
                what,
                exc,
                delay,
            )
        else:
            log.info(
                "cluster %s: node %s: Slurm refused %s again: %s (retry in %.0fs)", self.name, key[0], what, exc, delay
            )

    def _forget(self, slurm: SlurmView) -> None:
        """Drop refusals of updates no longer planned, and what we know of nodes Slurm no longer lists."""
        nodes = {key[0] for key in self._planned}
        self._refused = {k: v for k, v in self._refused.items() if k in self._planned or k[0] not in nodes}
        if slurm.nodes is not None:
            self._refused = {k: v for k, v in self._refused.items() if k[0] in slurm.nodes}
            self._applied_topology = {n: t for n, t in self._applied_topology.items() if n in slurm.nodes}

    def _prune(self, candidate: planning.PruneCandidate, tally: Tally) -> None:
        self.delete_record(
            candidate.node,
            candidate.namespace,
            candidate.pod,
            tally,
            f"defunct: its pod {candidate.namespace}/{candidate.pod} and Kubernetes node are gone "
            "(pruneSlurmNodeRecords: NodeNotFound)",
            nodeset_ref(candidate.namespace, candidate.nodeset, candidate.nodeset_uid),
            "SlurmNodePruned",
        )

    def _notify(self, pod: PodView, notices: list[Notice]) -> None:
        for notice in notices:
            self.events.notify(pod_ref(pod.namespace, pod.name, pod.uid), notice)

    def step_context(self, now: str | None = None) -> StepContext:
        """What the pass's later steps need of it (slurm_sync/operator/steps.py); ``now`` the pass's clock."""
        return StepContext(
            cluster=self.name,
            now=self._now() if now is None else now,
            slurm=self.slurm,
            kube=self.kube,
            events=self.events,
            metrics=self.metrics,
            kube_write=self._kube_write,
            slurm_error=self._slurm_error,
            delete_record=self.delete_record,
            delete_slurm_node=self.delete_slurm_node,
            job_absence=self.job_absence,
            reservation_absence=self.reservation_absence,
            leftover_pods=self.leftover_pods,
            nothing_left=self.nothing_left,
            deletion_grace=self.deletion_grace,
        )

    def delete_slurm_node(self, node: str) -> None:
        """DELETE node record ``node``; one Slurm says it no longer has counts as deleted. Its leaving the
        listing is expected, and the next listing is read whole: slurmctld does not advance the node
        listing's ``last_update`` for a deletion (docs/architecture.md §4.2)."""
        try:
            self.slurm.delete_node(node)
        except SlurmNotFound:
            log.info("cluster %s: Slurm node %s was already deleted", self.name, node)
        self.deleted_nodes.add(node)
        self._relist()

    def delete_record(
        self, node: str, namespace: str, pod: str, tally: Tally, why: str, about: ObjectRef, reason: str
    ) -> str:
        """Delete Slurm node record ``node`` once its pod is confirmed gone: only a NotFound answer to
        GET pod counts (any other answer or error deletes nothing). Slurm's error, or "". The event
        (``reason`` on ``about``) says what was deleted and why, or what Slurm said instead."""
        gone, unknown = pod_gone(self.kube, namespace, pod)
        if unknown:
            tally.errors.append(unknown)
        if not gone:
            return ""  # the pod exists (not labelled as ours, or just created), or nobody knows
        try:
            self.delete_slurm_node(node)
        except SlurmError as exc:  # e.g. a job is still allocated on it: Slurm refuses
            self._slurm_error(tally, f"delete node {node}", exc)
            self.events.warn(
                about,
                "SlurmNodeDeleteFailed",
                f"Slurm did not delete node record {node}: {exc}. Retried on the next pass.",
                "DeleteNode",
            )
            return f"delete node {node}: {exc}"
        tally.slurm_writes += 1
        self.metrics.slurm_writes.labels(self.name, "delete").inc()
        log.info("cluster %s: Slurm node %s deleted: %s", self.name, node, why)
        self.events.normal(about, reason, f"Slurm node record {node} deleted: {why}.", "DeleteNode")
        return ""

    def _kube_write(self, tally: Tally, what: str, write: Callable[[], object]) -> None:
        passes.kube_write(tally, f"cluster {self.name}", what, write)

    def _slurm_error(self, tally: Tally, what: str, exc: SlurmError) -> None:
        """A failed call, read or write: an error of the pass and a reason to be unready (Slurm's
        state is unknown, or Slurm did not take our write)."""
        passes.slurm_failed(tally, self.metrics, self.name, what, exc)
        if isinstance(exc, SlurmWrongCluster):
            tally.wrong_cluster = str(exc)
        level = logging.ERROR if isinstance(exc, (SlurmWrongCluster, SlurmSuspect)) else logging.WARNING
        log.log(level, "cluster %s: %s failed: %s", self.name, what, exc)

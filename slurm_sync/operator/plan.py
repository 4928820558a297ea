"""One pass of the operator loop as a pure function: (Slurm's answer, Kubernetes views) -> writes.

Safety rules (docs/architecture.md §4), all decided here so they are unit-testable:

* ``SlurmView.nodes is None`` means the listing failed: no node-derived write at all (no mark
  set or cleared, no drain lifted, no condition touched). Unknown is not false.
* A node is "absent" (the absent mark, its conditions gone) only when the caller proved it
  (``SlurmView.absent``: Slurm's own not-found answer, confirmed); a node the listing merely lacks
  is unknown: its pod gets no write at all.
* We lift only drains whose reason starts with our prefix and whose intent is gone, and never
  touch a node whose reason is someone else's (an administrator's or Slurm's own).
* Every write is the difference between desired and observed; equal state plans nothing.
* A deleted NodeSet's retained PVCs (whenDeleted=Retain) lose its ownerReference by a JSON patch
  whose `test` op pins the whole ownerReferences list as read: a concurrent change makes the
  apiserver refuse the patch (422) instead of our write clobbering it; the next pass re-reads.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slinky_common import names, slurmstate
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.operator.view import JSON, ClusterView, ControllerPodView, KubeNodeView, NodeSetView, PodView
from slurm_sync.passes import rfc3339
from slurm_sync.slurm.types import Job, Node, NodeUpdate, PingResult

MAX_REASON = 256
# What a topology spec may hold ("topo-switch:s2,topo-block:b2"): it becomes POD_TOPOLOGY, which the
# slurmd image adds to its --conf string, so nothing that could end the Topology= item (spaces, quotes) is copied.
_TOPOLOGY = re.compile(r"[A-Za-z0-9._:,-]+")
_FEATURE = re.compile(r"[A-Za-z0-9._:=+/-]+")
_WHITESPACE_CONTROLS = str.maketrans({"\t": " ", "\r": " ", "\n": " "})
# Job states in which a job still holds its nodes: their end times make a node's deadline.
_HOLDING_STATES = frozenset({"RUNNING", "SUSPENDED", "COMPLETING"})


@dataclass(frozen=True)
class SlurmView:
    """What Slurm told us this pass; None where the call failed (unknown, never empty)."""

    nodes: Mapping[str, Node] | None
    ping: PingResult | None
    absent: frozenset[str] = frozenset()  # nodes the listing lacks that Slurm said are gone (proven)
    jobs: Mapping[int, Job] | None = None  # every job Slurm holds (one conditional listing per pass)
    deadlines: Mapping[str, int | None] | None = None  # node_deadlines(jobs); None: not known this pass


@dataclass(frozen=True)
class SlurmAction:
    node: str
    update: NodeUpdate
    lifts_drain: bool  # UNDRAIN/RESUME: only after the pod's marks were cleared
    after_comment: bool = False  # sent only when this pass's comment update of the node succeeded


@dataclass(frozen=True)
class PodPatch:
    """A strategic-merge patch of a pod (``subresource`` "status" for conditions)."""

    namespace: str
    name: str
    subresource: str
    body: dict[str, Any]  # a dict: the client sends a dict body as a strategic merge patch


@dataclass(frozen=True)
class NodeSetTouch:
    namespace: str
    name: str
    value: str


@dataclass(frozen=True)
class PodState:
    """What the NodeSet hook reads from a pod, after this pass's writes."""

    drained: str | None  # the drained mark's value: its intent's epoch (drained_mark), None when not drained
    absent: bool
    states: tuple[str, ...]  # SlurmNodeState* condition types


@dataclass(frozen=True)
class PodPlan:
    pod: PodView
    patches: tuple[PodPatch, ...]
    slurm: tuple[SlurmAction, ...]
    state: PodState


# --- reasons --------------------------------------------------------------------------------


def sanitize_reason(text: str) -> str:
    """Slinky's rule for the node-cordon-reason annotation: tab/CR/LF become spaces, other
    control characters go, then trim and cut to 256 characters (Slurm stores one line)."""
    text = text.translate(_WHITESPACE_CONTROLS)
    text = "".join(ch for ch in text if unicodedata.category(ch) != "Cc")
    return text.strip()[:MAX_REASON].strip()


def operator_reason(reason: str) -> str:
    """Our reasons carry the prefix so that we can tell our drains from everyone else's."""
    return reason if slurmstate.is_operator_reason(reason) else f"{names.DRAIN_REASON_PREFIX} {reason}"


def drain_intent(pod: PodView, cluster: ClusterView) -> str | None:
    """Why the pod's Slurm node must be drained (prefixed), or None: node cordon, NodeSet intent, pod cordon,
    a requested cordon (each reason names its source, and shows on the pod as the Drain condition's message)."""
    node = cluster.kube_nodes.get(pod.node_name or "")
    if node is not None and node.unschedulable:
        reason = sanitize_reason(node.cordon_reason or "") or condition_reason(node, cluster.propagated_conditions)
        return operator_reason(
            reason or f"Node ({node.name}) was cordoned, Pod ({pod.namespace}/{pod.name}) must be cordoned"
        )
    nodeset = cluster.nodesets.get(pod.nodeset or "")
    if nodeset is not None and pod.name in nodeset.intents:
        return operator_reason(nodeset.intents[pod.name])
    if pod.cordoned:
        return operator_reason(f"Pod ({pod.namespace}/{pod.name}) was cordoned")
    if pod.cordon_requested:
        return operator_reason(
            f"Pod ({pod.namespace}/{pod.name}) cordon requested ({names.ANNOTATION_POD_CORDON_REQUESTED})"
        )
    return None


def condition_reason(node: KubeNodeView, propagated: Iterable[str]) -> str:
    """Slinky's reason from the Node's True conditions listed in --propagated-node-conditions:
    ``(<reason>: <message>)`` each, in the order of that list (as Slinky's nodeset_sync.go), joined by ``; ``;
    sanitized; "" when none."""
    parts = [
        f"({c.reason}: {c.message})"
        for wanted in dict.fromkeys(propagated)
        for c in node.conditions
        if c.type == wanted and c.status == "True"
    ]
    return sanitize_reason("; ".join(parts))


def drain_action(pod: PodView, node: Node, intent: str | None) -> SlurmAction | None:
    """DRAIN for an intent, UNDRAIN/RESUME for our own drain without one; never someone else's."""
    if pod.terminating or (node.reason and not slurmstate.is_operator_reason(node.reason)):
        return None
    if intent is not None:
        if slurmstate.is_drain(node.state) and node.reason == intent:
            return None
        if slurmstate.is_powered_down(node.state) and not node.busy:
            return None  # released already; a drain would outlive the pod and keep Slurm from powering it up
        return SlurmAction(node.name, NodeUpdate(state=("DRAIN",), reason=intent), lifts_drain=False)
    if not node.reason:
        return None
    if slurmstate.is_drain(node.state):
        return SlurmAction(node.name, NodeUpdate(state=("UNDRAIN",)), lifts_drain=True)
    # our DOWN (the pod's preStop): back to service once the new pod runs
    if node.base_state == "DOWN" and "NOT_RESPONDING" not in node.state and pod.healthy:
        return SlurmAction(node.name, NodeUpdate(state=("RESUME",)), lifts_drain=True)
    return None


def new_drain_intents(
    cluster: ClusterView,
    pods: Iterable[PodView],
    nodesets: Iterable[NodeSetView],
    kube_nodes: Iterable[KubeNodeView],
    listed: Mapping[str, Node],
) -> list[tuple[PodView, str]]:
    """The pods whose drain intent may have appeared with the objects changed since ``cluster`` was read (its
    pods, NodeSets and Nodes), and whose node, as last ``listed``, is not drained for it: what a pass drains
    before it reads Slurm's whole listing (``OperatorLoop._drain_at_once``). Only a change can start a drain,
    so only the changed pods and the pods a changed NodeSet or a cordoned Node names are looked at; a node the
    listing lacks is left to the pass (unknown, or not there)."""
    nodesets = [
        n
        for n in nodesets
        if (old := cluster.nodesets.get(n.name)) is None or (old.intents, old.epochs) != (n.intents, n.epochs)
    ]
    cordoned = {n.name: n for n in kube_nodes if n.unschedulable and n.name in cluster.kube_nodes}
    now = dataclasses.replace(
        cluster,
        nodesets={**cluster.nodesets, **{n.name: n for n in nodesets}},
        kube_nodes={**cluster.kube_nodes, **cordoned} if cordoned else cluster.kube_nodes,
    )
    candidates = {pod.name: pod for pod in pods}
    named = {name for nodeset in nodesets for name in nodeset.intents}
    if named or cordoned:  # a NodeSet's intents or a Node's cordon changed: which pods they concern
        for pod in cluster.pods:
            if pod.name in named or (pod.node_name or "") in cordoned:
                candidates.setdefault(pod.name, pod)
    found = []
    for pod in candidates.values():
        intent = None if pod.terminating else drain_intent(pod, now)
        node = listed.get(pod.slurm_node)
        if intent is not None and node is not None and drain_action(pod, node, intent) is not None:
            found.append((pod, intent))
    return found


# --- pod writes -----------------------------------------------------------------------------


def pod_comment(pod: PodView, nodeset: NodeSetView | None) -> str:
    """The Slurm node comment linking back to the pod (Slinky's podInfo JSON)."""
    info = {
        "namespace": pod.namespace,
        "podName": pod.name,
        "node": pod.node_name or "",
        "nodeSetName": nodeset.name if nodeset else (pod.nodeset or ""),
        "nodeSetUID": nodeset.uid if nodeset else "",
    }
    return json.dumps(info, separators=(",", ":"))


def pod_info(comment: str) -> dict[str, str] | None:
    """A Slurm node comment read back as Slinky's podInfo; None when it is not one."""
    try:
        info = json.loads(comment) if comment else None
    except ValueError:
        return None
    if not isinstance(info, dict) or not all(
        isinstance(info.get(k, ""), str) for k in ("namespace", "podName", "node", "nodeSetName", "nodeSetUID")
    ):
        return None
    return {k: info.get(k, "") for k in ("namespace", "podName", "node", "nodeSetName", "nodeSetUID")}


def moved_action(pod: PodView, node: Node, intent: str | None, comment: str) -> SlurmAction | None:
    """Slinky's second update after a pod moved to another Kubernetes node (the comment's non-empty
    ``node`` changed): ``state: IDLE``. Slurm's IDLE also clears DRAIN and FAIL and brings a DOWN
    node up, so it is sent only when nothing is lost: no drain intent, not DOWN, no DRAIN/FAIL/
    UNDRAIN flag, no reboot or power operation under way (REBOOT_*, POWER*), no reason (ours is
    lifted by drain_action, anyone else's is never touched), not busy, and slurmd is answering.
    It follows the comment update and is sent only when that succeeded in the same pass."""
    old = pod_info(node.comment)
    if old is None or not old["node"] or old["node"] == (pod_info(comment) or {}).get("node"):
        return None
    if intent is not None or node.reason or node.busy or node.base_state == "DOWN" or not _idle_safe(node.state):
        return None
    return SlurmAction(node.name, NodeUpdate(state=("IDLE",)), lifts_drain=False, after_comment=True)


_NOT_IDLED = frozenset({"DOWN", "DRAIN", "FAIL", "NOT_RESPONDING", "UNDRAIN"})
_NOT_IDLED_PREFIXES = ("REBOOT", "POWER")  # REBOOT_REQUESTED/ISSUED/CANCELED, POWER_DOWN/UP, POWERED_DOWN, POWERING_*


def _idle_safe(state: frozenset[str]) -> bool:
    return not (state & _NOT_IDLED) and not any(word.startswith(_NOT_IDLED_PREFIXES) for word in state)


def _same_topology(a: str, b: str) -> bool:
    return sorted(p.strip() for p in a.split(",") if p.strip()) == sorted(p.strip() for p in b.split(",") if p.strip())


def topology_spec(kube_node: KubeNodeView) -> str | None:
    """The Node's topology annotation when it is a usable spec; None when absent, empty or unsafe."""
    spec = (kube_node.topology or "").strip()
    return spec if spec and _TOPOLOGY.fullmatch(spec) else None


def topology_action(node: Node, kube_node: KubeNodeView, applied: str | None = None) -> SlurmAction | None:
    """Push the Node's topology to Slurm (``topology_str``) when it differs; never clears one.

    ``applied`` is what the loop last set successfully on this node (remembered in memory): the
    spec is compared with it rather than with Slurm's ``topology``, which a topology plugin may
    report in a normalised form (that would otherwise be "different" on every pass). Without it
    (first sight, or after a restart) Slurm's value is compared."""
    spec = topology_spec(kube_node)
    if spec is None or _same_topology(node.topology if applied is None else applied, spec):
        return None
    return SlurmAction(node.name, NodeUpdate(topology_str=spec), lifts_drain=False)


def k8s_features(kube_node: KubeNodeView) -> tuple[str, ...] | None:
    """``k8s/<value>`` for each CSV value of the Node's features annotation (absent: none);
    None when a value is unusable (then the features are left as they are)."""
    values: list[str] = []
    for raw in (kube_node.features or "").split(","):
        value = raw.strip()
        if not value:
            continue
        if not _FEATURE.fullmatch(value):
            return None
        feature = names.K8S_FEATURE_PREFIX + value
        if feature not in values:
            values.append(feature)
    return tuple(values)


def features_action(node: Node, kube_node: KubeNodeView) -> SlurmAction | None:
    """Replace the Slurm node's ``k8s/`` features (available and active) by the Node's; others stay."""
    wanted = k8s_features(kube_node)
    if wanted is None:
        return None

    def merged(current: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(f for f in current if not f.startswith(names.K8S_FEATURE_PREFIX)) + wanted

    def ours(current: tuple[str, ...]) -> set[str]:
        return {f for f in current if f.startswith(names.K8S_FEATURE_PREFIX)}

    if ours(node.features) == set(wanted) and ours(node.active_features) == set(wanted):
        return None
    update = NodeUpdate(features=merged(node.features), features_act=merged(node.active_features))
    return SlurmAction(node.name, update, lifts_drain=False)


def conditions_patch(pod: PodView, desired: list[dict[str, Any]], now: str) -> dict[str, Any] | None:
    """Strategic merge on ``status.conditions`` (merge key ``type``): changed ones, and a
    ``$patch: delete`` for each stale SlurmNodeState* condition. Other conditions are untouched."""
    items: list[dict[str, Any]] = []
    wanted = {c["type"] for c in desired}
    for cond in desired:
        seen = pod.state_conditions.get(cond["type"])
        if seen is None or seen.get("status") != cond["status"]:
            items.append({**cond, "lastTransitionTime": now})
        elif seen.get("message", "") != cond["message"]:
            items.append({"type": cond["type"], "message": cond["message"]})
    items += [{"type": t, "$patch": "delete"} for t in sorted(pod.state_conditions) if t not in wanted]
    return {"status": {"conditions": items}} if items else None


def metadata_patch(
    pod: PodView, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
) -> dict[str, Any] | None:
    """Only the keys whose value differs; None deletes (strategic merge treats null as delete)."""
    meta: dict[str, Any] = {}
    for field, current, wanted in (("labels", pod.labels, labels), ("annotations", pod.annotations, annotations)):
        diff = {k: v for k, v in wanted.items() if current.get(k) != v}
        if diff:
            meta[field] = diff
    return {"metadata": meta} if meta else None


def _flag(value: bool) -> str | None:
    return "true" if value else None


# --- job deadlines (docs/architecture.md §4.3) -------------------------------------------------


def job_end(job: Job) -> int | None:
    """When Slurm expects the job to end (epoch seconds): its ``end_time``, else start + time limit;
    None when neither is known."""
    if job.end_time:
        return job.end_time
    if job.start_time and job.time_limit_minutes is not None:
        return job.start_time + 60 * job.time_limit_minutes
    return None


def node_deadlines(jobs: Iterable[Job]) -> dict[str, int | None]:
    """The latest end of the jobs holding each Slurm node; None for a node one of whose jobs has no
    known end (its deadline is then unknown, not absent). ValueError when a job's node list cannot be
    read: which nodes it holds is unknown, so no deadline is known anywhere."""
    deadlines: dict[str, int | None] = {}
    for job in jobs:
        if not job.state & _HOLDING_STATES or not job.nodes:
            continue
        end = job_end(job)
        for name in expand_hostlist(job.nodes):
            before = deadlines.get(name, end)
            deadlines[name] = None if end is None or before is None else max(end, before)
    return deadlines


def holding_jobs(jobs: Iterable[Job], nodes: Collection[str]) -> dict[str, tuple[int, ...]]:
    """The jobs Slurm's job listing shows holding each of ``nodes`` (only those with one): busy
    evidence that outweighs any answer saying the node is gone. ValueError when a job's node list
    cannot be read (then no node can be said idle)."""
    wanted = set(nodes)
    held: dict[str, tuple[int, ...]] = {}
    for job in jobs:
        if not job.state & _HOLDING_STATES or not job.nodes:
            continue
        for name in wanted.intersection(expand_hostlist(job.nodes)):
            held[name] = (*held.get(name, ()), job.job_id)
    return {name: tuple(sorted(ids)) for name, ids in held.items()}


def deadline_annotation(
    node: Node | None, name: str, deadlines: Mapping[str, int | None] | None
) -> dict[str, str | None]:
    """The ``pod-deadline`` write for Slurm node ``name`` ({} leaves the annotation as it is): the latest
    end of the jobs Slurm lists there; removed only when Slurm says the node runs nothing (not busy, or
    proven absent). Fail closed: no job listing, a job without a known end, or a busy node the job
    listing shows no job on (the two listings were taken apart) change nothing."""
    if deadlines is None:
        return {}
    if name in deadlines:
        end = deadlines[name]
        return (
            {}
            if end is None
            else {names.ANNOTATION_POD_DEADLINE: rfc3339(datetime.datetime.fromtimestamp(end, datetime.UTC))}
        )
    if node is None or not node.busy:
        return {names.ANNOTATION_POD_DEADLINE: None}
    return {}


def observed_state(pod: PodView) -> PodState:
    """The hook's inputs as they are on the pod now."""
    return PodState(
        drained=pod.annotations.get(names.ANNOTATION_DRAINED) or None,
        absent=pod.annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true",
        states=tuple(sorted(pod.state_conditions)),
    )


def plan_inputs(
    pod: PodView, cluster: ClusterView, slurm: SlurmView, applied_topology: Mapping[str, str]
) -> tuple[object, ...]:
    """Everything ``plan_pod`` and the topology copy read about one pod, but the clock (it only stamps
    what a plan writes): equal inputs make an equal plan, so a plan that wrote nothing need not be made
    again while its inputs stay equal (docs/architecture.md §4.8). Keep it in step with ``plan_pod``."""
    nodes, deadlines = slurm.nodes, slurm.deadlines
    nodeset = cluster.nodesets.get(pod.nodeset or "")
    return (
        pod,
        nodes is None,
        None if nodes is None else nodes.get(pod.slurm_node),
        pod.slurm_node in slurm.absent,
        # of its NodeSet only what concerns this pod (a touch of the NodeSet re-plans none of its pods)
        None
        if nodeset is None
        else (nodeset.name, nodeset.uid, nodeset.protect, nodeset.intents.get(pod.name), nodeset.epochs.get(pod.name)),
        cluster.kube_nodes.get(pod.node_name or ""),
        cluster.propagated_conditions,
        deadlines is None,
        deadlines is not None and pod.slurm_node in deadlines,
        None if deadlines is None else deadlines.get(pod.slurm_node),
        applied_topology.get(pod.slurm_node),
    )


def plan_pod(
    pod: PodView, cluster: ClusterView, slurm: SlurmView, now: str, applied_topology: Mapping[str, str] | None = None
) -> PodPlan:
    """Everything one pod needs this pass. Without a listing: nothing. ``applied_topology``: the
    topology spec last applied successfully per Slurm node (see topology_action)."""
    node = None if slurm.nodes is None else slurm.nodes.get(pod.slurm_node)
    if node is None and pod.slurm_node not in slurm.absent:
        return PodPlan(pod, (), (), observed_state(pod))  # no listing, or lacking it: unknown, not absent
    nodeset = cluster.nodesets.get(pod.nodeset or "")
    kube_node = cluster.kube_nodes.get(pod.node_name or "")
    actions: list[SlurmAction] = []
    if node is None:
        desired: list[dict[str, Any]] = []
        drained = busy = False
    else:
        desired = slurmstate.node_conditions(node.state, node.reason)
        busy = node.busy
        action = drain_action(pod, node, drain_intent(pod, cluster))
        # a drain being lifted no longer holds, even though the listing still shows it
        drained = slurmstate.is_released(node.state) and not (action is not None and action.lifts_drain)
        if action is not None:
            actions.append(action)
        comment = pod_comment(pod, nodeset)
        if pod.healthy and pod.node_name and node.comment != comment:
            actions.append(SlurmAction(node.name, NodeUpdate(comment=comment), lifts_drain=False))
            moved = moved_action(pod, node, drain_intent(pod, cluster), comment)
            if moved is not None and action is None:
                actions.append(moved)
        if kube_node is not None and not pod.terminating:
            topology = topology_action(node, kube_node, (applied_topology or {}).get(node.name))
            actions += [a for a in (features_action(node, kube_node), topology) if a is not None]
    protect = busy and (nodeset.protect if nodeset else True)
    mark = drained_mark(pod, nodeset) if drained else None
    annotations = {
        names.ANNOTATION_DRAINED: mark,
        names.ANNOTATION_SLURM_NODE_ABSENT: _flag(node is None),
        **deadline_annotation(node, pod.slurm_node, slurm.deadlines),
    }
    if (
        kube_node is not None
        and not pod.terminating
        and (kube_node.topology is None or topology_spec(kube_node) is not None)
    ):
        # the Node's topology on the pod (POD_TOPOLOGY at its next start); an unsafe one is not copied
        annotations[names.ANNOTATION_TOPOLOGY_SPEC] = topology_spec(kube_node)
    patches = []  # the label that keeps a running job's pod from eviction first, conditions after
    meta = metadata_patch(pod, {names.LABEL_POD_PROTECT: _flag(protect)}, annotations)
    if meta is not None:
        patches.append(PodPatch(pod.namespace, pod.name, "", meta))
    status = conditions_patch(pod, desired, now)
    if status is not None:
        patches.append(PodPatch(pod.namespace, pod.name, "status", status))
    state = PodState(drained=mark, absent=node is None, states=tuple(sorted(c["type"] for c in desired)))
    return PodPlan(pod, tuple(patches), tuple(actions), state)


def drained_mark(pod: PodView, nodeset: NodeSetView | None) -> str:
    """The drained mark's value: the epoch of the NodeSet's intent for the pod, which the hook lets the pod go on
    (and on no earlier intent's mark: docs/architecture.md §4.1); a pod no epoch names gets the plain mark."""
    epoch = nodeset.epochs.get(pod.name) if nodeset is not None else None
    return epoch or names.DRAINED_NO_EPOCH


def write_order(plan: PodPlan) -> tuple[int, str]:
    """The order a pass writes its pods in (issue 28), busiest first: a pod whose node took a job and
    is not protected yet (its ``pod-protect`` label is what keeps a node drain from evicting that job),
    then pods with a Slurm update to make (a drain asked for, a drain to lift), then the rest; by name
    within each."""
    protects = any(
        patch.body.get("metadata", {}).get("labels", {}).get(names.LABEL_POD_PROTECT) == "true"
        for patch in plan.patches
    )
    return (0 if protects else 1 if plan.slurm else 2), plan.pod.name


# --- retained PVCs of a deleted NodeSet ---------------------------------------------------------


def claim_release_patch(claim: JSON, owner_uid: str) -> list[dict[str, Any]] | None:
    """JSON patch removing the ownerReference with `owner_uid` from a PVC; None when it has none.

    Metacontroller owns every child it creates, so garbage collection would delete the PVCs with
    their NodeSet; without the reference they outlive it (the NodeSet hook keeps returning them
    until then, and a parent being deleted adopts no orphan).
    """
    refs = _obj_list((claim.get("metadata") or {}).get("ownerReferences"))
    if refs is None or not owner_uid:
        return None
    keep = [r for r in refs if not (isinstance(r, Mapping) and r.get("uid") == owner_uid)]
    if len(keep) == len(refs):
        return None
    change: dict[str, Any] = (
        {"op": "replace", "path": "/metadata/ownerReferences", "value": keep}
        if keep
        else {"op": "remove", "path": "/metadata/ownerReferences"}
    )
    return [{"op": "test", "path": "/metadata/ownerReferences", "value": refs}, change]


def _obj_list(value: Any) -> list[Any] | None:
    return value if isinstance(value, list) else None


# --- NodeSet touch and the active controller ------------------------------------------------


def observed_hash(states: Iterable[tuple[str, PodState]]) -> str:
    """A digest of what the NodeSet hook reads from its pods (marks and Slurm states). A plain drained mark counts
    as it did before marks carried an epoch, so an upgrade does not touch every NodeSet."""
    data = [
        [name, s.drained if s.drained not in (None, names.DRAINED_NO_EPOCH) else s.drained is not None, s.absent,
         list(s.states)]
        for name, s in sorted(states, key=lambda item: item[0])
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(data, separators=(",", ":")).encode()).hexdigest()[:16]


def nodeset_hashes(cluster: ClusterView, states: Mapping[str, PodState]) -> dict[str, str]:
    """Each NodeSet's observed_hash of its pods' states."""
    mine: dict[str, list[tuple[str, PodState]]] = {name: [] for name in cluster.nodesets}
    for pod in cluster.pods:
        if pod.nodeset in mine and pod.name in states:
            mine[pod.nodeset].append((pod.name, states[pod.name]))
    return {name: observed_hash(pods) for name, pods in mine.items()}


def nodeset_touches(
    cluster: ClusterView, states: Mapping[str, PodState], hashes: Mapping[str, str] | None = None
) -> tuple[NodeSetTouch, ...]:
    """Annotate each NodeSet whose pods' hook inputs changed, so Metacontroller re-syncs it.
    ``hashes``: nodeset_hashes(cluster, states) when the caller has them already."""
    hashes = nodeset_hashes(cluster, states) if hashes is None else hashes
    return tuple(
        NodeSetTouch(nodeset.namespace, nodeset.name, hashes[nodeset.name])
        for nodeset in sorted(cluster.nodesets.values(), key=lambda n: n.name)
        if hashes[nodeset.name] != nodeset.observed_hash
    )


def active_hostname(ping: PingResult) -> str | None:
    """The slurmctld in charge: the responding one that says it is primary, else the first responding."""
    responding = ping.responding
    primary = [c for c in responding if c.primary]
    chosen = (primary or list(responding))[:1]
    return chosen[0].hostname if chosen else None


def needs_ping(pods: Collection[ControllerPodView]) -> bool:
    """Whether a pass whose node listing answered asks Slurm which slurmctld answers. Moving the active
    label is the ping's only use then, and it can move only among two slurmctld pods or more (a backup
    took over) or onto a lone pod not labelled yet; a lone pod labelled, or none (an external slurmctld),
    has nothing a ping could change."""
    return len(pods) > 1 or any(not pod.active for pod in pods)


def controller_patches(pods: Iterable[ControllerPodView], ping: PingResult | None) -> tuple[PodPatch, ...]:
    """Move the active label to the answering slurmctld; without an answer, leave it where it is."""
    active = active_hostname(ping) if ping is not None else None
    if active is None:
        return ()
    patches = []
    for pod in pods:
        wanted = pod.hostname == active
        if wanted != pod.active:
            body = {"metadata": {"labels": {names.LABEL_ACTIVE_CONTROLLER: _flag(wanted)}}}
            patches.append(PodPatch(pod.namespace, pod.name, "", body))
    return tuple(patches)


# --- defunct Slurm nodes (DaemonSet mode, pruneSlurmNodeRecords: NodeNotFound) -----------------


@dataclass(frozen=True)
class PruneCandidate:
    """A Slurm node to delete once its pod is confirmed gone (a GET answering NotFound)."""

    node: str
    namespace: str
    pod: str
    nodeset: str  # the pruning NodeSet named in the node's comment (the event is about it)
    nodeset_uid: str


def prune_candidates(cluster: ClusterView, slurm: SlurmView) -> tuple[PruneCandidate, ...]:
    """Slinky's syncSlurmNodeRecordsNodeNotFound, failing closed: only from a successful Slurm
    listing and a complete Node listing; only DOWN+NOT_RESPONDING nodes whose podInfo names a
    pruning NodeSet (namespace, name, UID) and a Kubernetes node; skipped while the pod is listed,
    a pod of ours uses the name, or any Node still maps to the name (its DaemonSet hostname)."""
    if slurm.nodes is None or not cluster.all_kube_nodes:
        return ()
    pruning = {(n.namespace, n.name, n.uid) for n in cluster.nodesets.values() if n.prunes_defunct_nodes and n.uid}
    if not pruning:
        return ()
    pod_names = {p.name for p in cluster.pods}
    in_use = {p.slurm_node for p in cluster.pods}
    mapped = {k.hostname for k in cluster.kube_nodes.values()}
    found = []
    for node in sorted(slurm.nodes.values(), key=lambda n: n.name):
        if node.base_state != "DOWN" or "NOT_RESPONDING" not in node.state or node.busy:
            continue
        info = pod_info(node.comment)
        if info is None or (info["namespace"], info["nodeSetName"], info["nodeSetUID"]) not in pruning:
            continue
        if info["namespace"] != cluster.namespace or not info["podName"] or info["podName"] in pod_names:
            continue
        if not info["node"] or node.name in in_use or node.name in mapped:
            continue
        found.append(
            PruneCandidate(node.name, info["namespace"], info["podName"], info["nodeSetName"], info["nodeSetUID"])
        )
    return tuple(found)

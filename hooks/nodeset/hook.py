"""NodeSet hooks: slurmd worker pods in StatefulSet or DaemonSet mode, drained before deleted.

Pods are `OnDelete` children: an existing pod is never changed, so the hook publishes the pods
that must go in `status.drainingPods` ({name, reason, epoch}) and keeps returning them until
slurm_sync marks them drained (or says no Slurm node exists for them) and no busy evidence
contradicts the mark (hooks/nodeset/observe.py). Only then is a pod left out, and Metacontroller
deletes it. Deleting the NodeSet (finalize) follows hooks/nodeset/deletion.py: what the
Controller's presence, its deletion or the administrator's force-delete annotation allow, and
slurm_sync's deletion report before the NodeSet's slurm.conf lines may go.

Children: Pods, PersistentVolumeClaims (volumeClaimTemplates) and the sshd ConfigMap.
PVC retention under Metacontroller, where leaving a child out deletes it:
* whenScaled=Retain keeps returning every observed PVC; whenScaled=Delete returns only the PVCs
  of pods still wanted (and of ordinals below replicas, so a pod replaced by a rolling update
  finds its data again);
* during finalize, whenDeleted=Delete drops a PVC once its pod is gone. whenDeleted=Retain (the
  default) keeps returning every observed PVC, because Metacontroller owns every child it creates
  and garbage collection would delete them with the NodeSet: slurm_sync removes the NodeSet's
  ownerReference from them (slurm_sync/operator/loop.py). An orphaned PVC is no longer observed (a
  parent being deleted adopts nothing) and is not returned (that would make Metacontroller create
  it again); the NodeSet is finalized once no pod and no owned retained PVC is left.
updateStrategy ScheduledUpdate (a Slurm maintenance reservation, hooks/nodeset/reservation.py):
sync publishes the wanted reservation in `status.reservation` and condemns old-revision pods once
slurm_sync reports their Slurm node in maintenance under it; finalize publishes none and waits
until slurm_sync reports the reservation gone.

**A spec value the hook cannot use** (the CRD let it through: an older CRD, a hand-made request, or
a pod field the API server would refuse, checked before any pod is condemned: hooks/podschema.py)
never answers 400, which would leave nothing but a Metacontroller event. sync keeps every
observed child exactly as last applied and the observed status (drainingPods included: drains
in flight continue) and adds an `InvalidSpec` condition naming the field; customize asks for
what the valid fields still name. finalize needs no spec beyond the Controller's name and the
retention policy, so it deletes anyway: every pod is drained and goes once drained, PVCs and
the ConfigMap are kept until no pod is left, and whenDeleted is read leniently (only an
explicit `Delete` deletes, as slurm_sync reads it).

**The clock.** A pod is available once Ready for minReadySeconds, and a job-end deadline is busy
evidence until it passes; both are statements about time: judging them against timestamps in the
request (as an earlier version did) never advances on a plain resync, so a RollingUpdate could
wait forever. `now()` is therefore the NodeSet hook's one clock read, made only when
minReadySeconds > 0 or a pod that may go carries a deadline (tests pin it). The output stays
byte-stable between crossings: availability (and with it status and the rolling-update budget)
changes only when a pod passes its threshold, and only `resyncAfterSeconds` (which
Metacontroller stores nowhere) counts down to that instant, so Metacontroller calls back on time.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Iterable, Mapping
from typing import Any

from hooks import invalidspec, podschema
from hooks.applied import Child, Kept, kept, kind_and_name, name_of
from hooks.contract import ChildReader, CompositeRequest, CustomizeRequest
from hooks.controller.model import Controller, controller_ref_name, controller_rule, find_controller
from hooks.nodeset import deletion, reservation
from hooks.nodeset.observe import ObservedPod, observe_pod, still_wanted
from hooks.nodeset.plan import Context, Plan, plan_daemonset, plan_finalize, plan_hold, plan_statefulset
from hooks.nodeset.pods import (
    PodSlot,
    WorkerPodBuilder,
    claims_for,
    revision_hash,
    ssh_config_map,
    ssh_config_name,
    statefulset_slot,
)
from hooks.nodeset.ready import deleting_ready, nodeset_ready
from hooks.nodeset.scheduling import node_fit
from hooks.nodeset.spec import (
    CONFIGMAP_TYPE_KEY,
    DAEMONSET,
    NODE_TYPE_KEY,
    POD_TYPE_KEY,
    PVC_TYPE_KEY,
    RETAIN,
    SECRET_TYPE_KEY,
    NodeSetSpec,
    check_pod_identity,
    lenient_when_deleted,
    parse_nodeset,
    related_nodes_selector,
    sssd_secret_name,
)
from hooks.status import condition
from slinky_common import fields, names
from slinky_common.errors import InvalidSpec
from slinky_common.nodesetconf import on_demand_nodes
from slinky_common.powerreport import read_report
from slinky_common.wellknown import selector_labels

JSON = dict[str, Any]

DRAIN_RESYNC_SECONDS = 10
CONDITION_RETAINED_CLAIMS = names.CONDITION_RETAINED_CLAIMS


def now() -> float:
    """Seconds since the epoch: the NodeSet hook's only clock read (see the module docstring; tests pin it)."""
    return time.time()


def customize(req: CustomizeRequest) -> JSON:
    """The Controller by name; Nodes for DaemonSet mode or pinToNode; the sssd.conf Secret.

    Each rule is derived on its own: an invalid field drops only the rule it shapes, so sync (and
    finalize, which needs the Controller) still runs and reports the field.
    """
    parent = req.parent
    namespace = parent["metadata"].get("namespace") or ""

    def controller() -> list[JSON]:
        return [controller_rule(namespace, controller_ref_name(fields.spec_of(parent)))]

    def nodes() -> list[JSON]:
        selector = related_nodes_selector(parent)
        return [] if selector is None else [{"apiVersion": "v1", "resource": "nodes", "labelSelector": selector}]

    def sssd() -> list[JSON]:
        name = sssd_secret_name(parent)
        return [{"apiVersion": "v1", "resource": "secrets", "namespace": namespace, "names": [name]}] if name else []

    return {"relatedResources": invalidspec.derivable(controller, nodes, sssd)}


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse_nodeset(req.parent)
    pods = _observed_pods(req, spec.name)
    controller = find_controller(req, spec.namespace, spec.controller_name)
    if controller is None:
        return _hold(req, spec, pods)
    revision = revision_hash(req.parent)
    power, boot_times = _power(req.parent, spec)
    builder = WorkerPodBuilder(req.parent, spec, controller, revision, _sssd_data(req, spec), boot_times)
    report = reservation.read_report(req.parent)
    ctx = Context(
        spec=spec,
        revision=revision,
        draining=_published_draining(req.parent),
        now=_clock(spec, pods),
        maintenance=reservation.maintenance_nodes(spec, report),
        power=power,
    )
    nodes = req.related_of(NODE_TYPE_KEY)
    ordinal_to_node = _ordinal_to_node(req.parent, spec, pods)
    if spec.scaling_mode == DAEMONSET:
        plan = plan_daemonset(ctx, pods, nodes, builder.scheduling_spec)
    else:
        fits = {n["metadata"]["name"]: node_fit(n, builder.scheduling_spec) for n in nodes} if spec.pin_to_node else {}
        plan = plan_statefulset(ctx, pods, ordinal_to_node, fits)
    for slot in plan.create:
        _check_identity(spec, slot)
    _check_pod_fields(builder, plan, pods, revision)
    if plan.condemned and spec.elastic is None:  # an elastic NodeSet's nodes are slurm.conf's, never deleted
        plan.delete_stale_records(pods, builder.registration)
    epochs = intent_epochs(req.parent, plan.condemned)
    wanted = still_wanted(pods, epochs, ctx.now, frozenset(plan.delete_node))
    built = [builder.build(slot) for slot in plan.create]
    pod_children = _kept(wanted) + built
    claim_owners = _claim_owners(spec, pods, plan, pod_children)
    children = pod_children + _claims(req, spec, claim_owners, retain=spec.pvc_when_scaled == RETAIN)
    children += _ssh_config(req.parent, spec, wanted, built, keep=True)
    status = _status(req.parent, spec, pods, plan, epochs, ctx, controller_condition(req.parent, spec, controller))
    if spec.pin_to_node:
        status[names.STATUS_ORDINAL_TO_NODE] = ordinal_to_node
    _add_reservation(status, req.parent, spec, reservation.intent(spec, pods, status, report), report)
    return _response(status, children, plan, ctx.seconds_until_available(pods))


def _power(parent: JSON, spec: NodeSetSpec) -> tuple[dict[int, str], dict[int, int]]:
    """An elastic NodeSet's on-demand ordinals by their power in slurm_sync's report, and by the second each was
    first seen powering up (its pod's boot time, slinky_common/powerreport.py); none without a report."""
    if spec.elastic is None:
        return {}, {}
    annotations = parent["metadata"].get("annotations")
    value = annotations.get(names.ANNOTATION_POWER_OBSERVED) if isinstance(annotations, dict) else None
    report = read_report(value if isinstance(value, str) else None)
    if report is None:
        return {}, {}
    ordinals = on_demand_nodes(parent)
    power = {ordinals[node]: state for node, state in report.power_of().items() if node in ordinals}
    return power, {ordinals[node]: second for node, second in report.since().items() if node in ordinals}


def _add_reservation(
    status: JSON, parent: JSON, spec: NodeSetSpec, wanted: JSON | None, report: reservation.Report | None
) -> None:
    """status.reservation (the intent slurm_sync executes) and the ReservationCreated condition."""
    if wanted is not None:
        status[names.STATUS_RESERVATION] = wanted
    found = reservation.reservation_condition(parent, spec, wanted, report)
    if found is not None:
        status["conditions"].append(found)


def finalize(req: CompositeRequest) -> JSON:
    """Drain every pod and delete each once drained; finished once nothing of the NodeSet is left.

    Which pods may go, and what else is waited for, depends on the Controller and on the
    administrator's force-delete annotation (hooks/nodeset/deletion.py). Retained PVCs are kept
    until slurm_sync has orphaned them (see the module docstring).
    """
    try:
        spec = parse_nodeset(req.parent)
        controller = find_controller(req, spec.namespace, spec.controller_name)
    except InvalidSpec as err:
        return _finalize_invalid(req, err)
    pods = _observed_pods(req, spec.name)
    mode, plan = _release_plan(req.parent, pods, controller)
    now = _clock(spec, pods, every_pod=mode == deletion.Release.NO_CONTROLLER)
    ctx = Context(spec=spec, revision=revision_hash(req.parent), draining=_published_draining(req.parent), now=now)
    epochs = intent_epochs(req.parent, plan.condemned)
    held = deletion.kept_pods(pods, epochs, mode, now)
    pod_children = _kept(held)
    children = pod_children + _finalize_claims(req, spec, held)
    children += _ssh_config(req.parent, spec, held, [], keep=False)
    retained = _retained_claims(req, spec.pvc_when_deleted)
    resolved = controller_condition(req.parent, spec, controller, mode)
    status = _status(req.parent, spec, pods, plan, epochs, ctx, resolved, deleting=True)
    status["conditions"].append(_retained_condition(req.parent, retained))
    report = reservation.read_report(req.parent)
    if mode == deletion.Release.DRAIN:
        _add_reservation(status, req.parent, spec, None, report)
    pending = mode == deletion.Release.DRAIN and reservation.pending_deletion(req.parent, spec.name, report)
    return _finalize_response(req.parent, status, children, plan, mode, held, pending, retained)


def _finalize_invalid(req: CompositeRequest, err: InvalidSpec) -> JSON:
    """Deleting with a spec we cannot use: drain and delete anyway, from the pods alone.

    The observed status is kept, with this finalize's drain intents and an InvalidSpec condition.
    PVCs and the ConfigMap stay while any pod is left (which PVC belongs to which pod needs the
    claim templates); then whenDeleted, read leniently, decides. An unreadable controllerRef
    (the CRD forbids it), or a related Controller no hook can use, finds no Controller: pods with
    busy evidence are kept, as when the Controller is not observed.
    """
    parent = req.parent
    namespace = parent["metadata"].get("namespace") or ""
    pods = _observed_pods(req, parent["metadata"]["name"])
    try:
        controller = find_controller(req, namespace, controller_ref_name(fields.spec_of(parent)))
    except InvalidSpec:
        controller = None
    mode, plan = _release_plan(parent, pods, controller)
    now = now_if_needed(pods, every_pod=mode == deletion.Release.NO_CONTROLLER)
    epochs = intent_epochs(parent, plan.condemned)
    held = deletion.kept_pods(pods, epochs, mode, now)
    pod_children = _kept(held)
    retained = _retained_claims(req, lenient_when_deleted(parent))
    children: list[Child]
    if pod_children:
        children = pod_children + [kept(obj) for t in (PVC_TYPE_KEY, CONFIGMAP_TYPE_KEY) for obj in req.children_of(t)]
    else:
        children = list(retained)
    status = dict(parent.get("status") or {})
    draining = [_drain_intent(name, plan, epochs) for name in sorted(plan.condemned)]
    status[names.STATUS_DRAINING_PODS] = draining
    replaced = (
        names.CONDITION_READY,
        names.CONDITION_INVALID_SPEC,
        names.CONDITION_PODS_DRAINING,
        CONDITION_RETAINED_CLAIMS,
        names.CONDITION_INCONSISTENT_PODS,
    )
    others = [c for c in status.get("conditions") or [] if isinstance(c, dict) and c.get("type") not in replaced]
    how = _FINALIZE_NOTES.get(mode, "; every pod is drained before it goes").removeprefix("; ")
    status["conditions"] = [
        deleting_ready(parent),
        *others,
        _draining_condition(parent, draining),
        _retained_condition(parent, retained),
        inconsistent_condition(parent, pods, now),
        condition(parent, names.CONDITION_INVALID_SPEC, True, "InvalidValue", f"{err}; deleted anyway: {how}"),
    ]
    status.pop(names.STATUS_RESERVATION, None)  # deleting: the reservation must go
    report = reservation.read_report(parent)
    name = parent["metadata"]["name"]
    pending = mode == deletion.Release.DRAIN and reservation.pending_deletion(parent, name, report)
    return _finalize_response(parent, status, children, plan, mode, held, pending, retained)


def _release_plan(
    parent: JSON, pods: list[ObservedPod], controller: Controller | None
) -> tuple[deletion.Release, Plan]:
    """How finalize lets pods go, and the drain intents it publishes (none when every pod goes at once)."""
    mode = deletion.release_mode(parent, controller is not None, controller is not None and controller.deleting)
    drains = mode in (deletion.Release.DRAIN, deletion.Release.NO_CONTROLLER)
    return mode, plan_finalize(pods) if drains else Plan()


def _finalize_response(
    parent: JSON,
    status: JSON,
    children: list[Child],
    plan: Plan,
    mode: deletion.Release,
    held: list[ObservedPod],
    reservation_pending: bool,
    retained: list[Kept],
) -> JSON:
    """finalized only when no pod, no retained claim and no Slurm-side blocker is left (DeletionBlocked says which)."""
    blockers = deletion.blockers(mode, deletion.read_report(parent), held, reservation_pending)
    status["conditions"] = [c for c in status["conditions"] if c.get("type") != names.CONDITION_DELETION_BLOCKED]
    status["conditions"].append(deletion.deletion_condition(parent, mode, blockers))
    response = _response(status, children, plan)
    if (retained or blockers) and "resyncAfterSeconds" not in response:
        response["resyncAfterSeconds"] = DRAIN_RESYNC_SECONDS
    response["finalized"] = not held and not retained and not blockers
    return response


def _retained_claims(req: CompositeRequest, when_deleted: str) -> list[Kept]:
    """whenDeleted=Retain: every PVC still owned (observed), kept until slurm_sync orphans it."""
    return [kept(pvc) for pvc in req.children_of(PVC_TYPE_KEY)] if when_deleted == RETAIN else []


def _retained_condition(parent: JSON, retained: list[Kept]) -> JSON:
    if not retained:
        return condition(
            parent,
            CONDITION_RETAINED_CLAIMS,
            False,
            "NoneOwned",
            "no retained PersistentVolumeClaim is owned by this NodeSet",
        )
    listing = ", ".join(c.name for c in retained)
    message = (
        f"{len(retained)} PersistentVolumeClaim(s) are kept (whenDeleted: Retain) until slurm_sync removes this "
        "NodeSet's "
        f"ownerReference from them: {listing}. Without slurm_sync for this cluster, remove it by hand or set "
        "whenDeleted: Delete"
    )
    return condition(parent, CONDITION_RETAINED_CLAIMS, True, "WaitingForOrphaning", message)


def _clock(spec: NodeSetSpec, pods: list[ObservedPod], every_pod: bool = False) -> float | None:
    """The clock, read only when availability or a pod's busy evidence depends on it."""
    return now() if spec.min_ready_seconds > 0 else now_if_needed(pods, every_pod)


def now_if_needed(pods: list[ObservedPod], every_pod: bool) -> float | None:
    """The clock, read only when a job-end deadline decides whether a pod may go.

    That is a pod slurm_sync marked (drained or absent) with a deadline, or, when `every_pod`
    (finalize without a Controller, where unmarked pods may go too), any pod with a deadline.
    """
    return now() if any((every_pod or p.marked) and p.needs_clock for p in pods) else None


def _check_identity(spec: NodeSetSpec, slot: PodSlot) -> None:
    """A pod the API server would reject (name or hostname over 63 characters) is an InvalidSpec, never sent."""
    if slot.node is not None:
        source = (
            f"metadata.name with Node {slot.node!r} (its name, or its {names.ANNOTATION_HOSTNAME_OVERRIDE} annotation)"
        )
    elif spec.template_spec.get("hostname"):
        source = f"spec.template.spec.hostname (ordinal {slot.ordinal})"
    else:
        source = f"metadata.name (ordinal {slot.ordinal})"
    check_pod_identity(slot.name, slot.hostname, source)


def _check_pod_fields(builder: WorkerPodBuilder, plan: Plan, pods: list[ObservedPod], revision: str) -> None:
    """Pod fields the API server would refuse are an InvalidSpec before this sync condemns or creates any pod
    (hooks/podschema.py): a rollout to a template no pod can be made from would drain the old pods for nothing.

    Checked whenever the sync would create or condemn a pod, or a pod of another revision waits for its
    turn; a steady sync leaves the template unmerged (WorkerPodBuilder) and checks nothing.
    """
    if not (plan.create or plan.condemned or any(p.ours and p.revision != revision for p in pods)):
        return
    problems = podschema.template_problems(builder.template, builder.template_bytes)
    if problems:
        raise InvalidSpec(
            f"the API server would refuse this NodeSet's pods ({invalidspec.POD_FIELD_SOURCES}): "
            + podschema.summary(problems)
        )


_FINALIZE_NOTES = {
    deletion.Release.NO_CONTROLLER: "; the NodeSet is being deleted: busy pods are kept, idle ones released",
    deletion.Release.CLUSTER_DELETED: "; the NodeSet is being deleted with its cluster: every pod is released",
    deletion.Release.FORCE: f"; deleted with {names.ANNOTATION_FORCE_DELETE}=true: every pod is released",
}


def controller_condition(
    parent: JSON, spec: NodeSetSpec, controller: Controller | None, mode: deletion.Release | None = None
) -> JSON:
    """`mode`: how finalize releases pods (None in sync)."""
    note = _FINALIZE_NOTES.get(mode, "") if mode is not None else ""
    if controller is None:
        message = f"Controller {spec.namespace}/{spec.controller_name} not found"
        message += note or ": existing pods are kept, none are created"
        return condition(parent, names.CONDITION_CONTROLLER_RESOLVED, False, "ControllerNotFound", message)
    if controller.deleting:
        message = f"Controller {controller.name} is being deleted" + note
        return condition(parent, names.CONDITION_CONTROLLER_RESOLVED, False, "ControllerDeleting", message)
    return condition(
        parent, names.CONDITION_CONTROLLER_RESOLVED, True, "ControllerFound", f"Controller {controller.name} found"
    )


def _hold(req: CompositeRequest, spec: NodeSetSpec, pods: list[ObservedPod]) -> JSON:
    """No Controller: keep every child as it is, keep the published drain intents, create nothing."""
    draining = _published_draining(req.parent)
    plan = plan_hold(pods, _published_reasons(req.parent))
    children = _kept(p for p in pods if p.name)
    for type_key in (PVC_TYPE_KEY, CONFIGMAP_TYPE_KEY):
        children += [kept(obj) for obj in req.children_of(type_key)]
    ctx = Context(spec=spec, revision=revision_hash(req.parent), draining=draining, now=_clock(spec, pods))
    epochs = intent_epochs(req.parent, plan.condemned)
    status = _status(req.parent, spec, pods, plan, epochs, ctx, controller_condition(req.parent, spec, None))
    published = (req.parent.get("status") or {}).get(names.STATUS_RESERVATION)
    if isinstance(published, dict):  # nothing can be decided: the published intent stays
        status[names.STATUS_RESERVATION] = published
    return _response(status, children, plan, ctx.seconds_until_available(pods))


def _observed_pods(req: CompositeRequest, nodeset: str) -> list[ObservedPod]:
    """The pods sorted by namespace and name, as CHILD_READERS read them while the contract checked them
    (or read here, for a request parsed without them)."""
    pods: list[ObservedPod] | None = req.readings.get(POD_TYPE_KEY)
    if pods is None:
        parent_uid = req.parent["metadata"].get("uid") or ""
        pods = [observe_pod(obj, nodeset, parent_uid) for obj in req.children_of(POD_TYPE_KEY)]
    return sorted(pods, key=lambda p: (p.namespace, p.name))


def _read_pod(obj: JSON, parent: JSON) -> ObservedPod:
    meta = parent["metadata"]
    return observe_pod(obj, meta["name"], meta.get("uid") or "")


# Every sync and finalize observes every pod: read each as soon as the contract has checked it.
CHILD_READERS: dict[str, ChildReader] = {POD_TYPE_KEY: _read_pod}


def _kept(pods: Iterable[ObservedPod]) -> list[Child]:
    """Named pods as we last returned them (observe_pod read each)."""
    return [p.kept for p in pods if p.kept is not None]


def _claim_owners(spec: NodeSetSpec, pods: list[ObservedPod], plan: Plan, pod_children: list[Child]) -> list[str]:
    """Pods whose PVCs must exist: our desired pods, and every ordinal below replicas."""
    if not spec.volume_claim_templates:
        return []  # no claim to own
    foreign = set(plan.unexpected)
    owners = [name for name in map(name_of, pod_children) if name not in foreign]
    if spec.scaling_mode != DAEMONSET:
        owners += [statefulset_slot(spec, ordinal).name for ordinal in range(spec.replicas)]
    return owners


def _claims(req: CompositeRequest, spec: NodeSetSpec, owners: list[str], retain: bool) -> list[Child]:
    wanted: dict[str, Child] = {}
    for owner in owners:
        for claim in claims_for(req.parent, spec, owner):
            wanted.setdefault(claim["metadata"]["name"], claim)
    if retain:
        for observed in req.children_of(PVC_TYPE_KEY):
            wanted.setdefault(observed["metadata"]["name"], kept(observed))
    return list(wanted.values())


def _finalize_claims(req: CompositeRequest, spec: NodeSetSpec, held: list[ObservedPod]) -> list[Child]:
    """While deleting, PVCs are only kept, never created: all (Retain) or those of pods still there."""
    remaining = {p.name for p in held if p.ours}
    owned = {claim["metadata"]["name"] for owner in remaining for claim in claims_for(req.parent, spec, owner)}
    retain = spec.pvc_when_deleted == RETAIN
    return [kept(pvc) for pvc in req.children_of(PVC_TYPE_KEY) if retain or pvc["metadata"]["name"] in owned]


def _ssh_config(
    parent: JSON, spec: NodeSetSpec, kept_pods: list[ObservedPod], built: list[JSON], keep: bool
) -> list[Child]:
    """The sshd ConfigMap while ssh is on (sync) or while a returned pod still mounts it (the volumes of
    a pod cannot change, so a kept pod's are read as observed)."""
    name = ssh_config_name(spec)
    wanted = (
        (keep and spec.ssh_enabled)
        or any(name in pod.config_maps for pod in kept_pods)
        or any((v.get("configMap") or {}).get("name") == name for pod in built for v in pod["spec"].get("volumes", ()))
    )
    return [ssh_config_map(parent, spec)] if wanted else []


def _response(status: JSON, children: list[Child], plan: Plan, until_available: int | None = None) -> JSON:
    """`resyncAfterSeconds`: the drain poll while pods are condemned, sooner if a pod becomes available first."""
    children.sort(key=kind_and_name)
    response: JSON = {"status": status, "children": children}
    waits = [w for w in (DRAIN_RESYNC_SECONDS if plan.condemned else None, until_available) if w is not None]
    if waits:
        response["resyncAfterSeconds"] = min(waits)
    return response


def _status(
    parent: JSON,
    spec: NodeSetSpec,
    pods: list[ObservedPod],
    plan: Plan,
    epochs: Mapping[str, str],
    ctx: Context,
    controller: JSON,
    deleting: bool = False,
) -> JSON:
    """Counts describe the observed pods of this NodeSet (foreign and terminating pods excluded); ``epochs``: each
    condemned pod's intent epoch (intent_epochs), published with its drain intent."""
    ours = [p for p in pods if p.ours and not p.terminating]
    available = sum(1 for p in ours if ctx.available(p))
    # DaemonSet: the Nodes that fit; elastic: the always-on ordinals and those Slurm powers up
    desired = plan.desired if spec.scaling_mode == DAEMONSET or spec.elastic else spec.replicas
    draining = [_drain_intent(name, plan, epochs) for name in sorted(plan.condemned)]
    return {
        "replicas": len(ours),
        "updatedReplicas": sum(1 for p in ours if p.revision == ctx.revision),
        "readyReplicas": sum(1 for p in ours if p.ready),
        "availableReplicas": available,
        "unavailableReplicas": max(0, desired - available),
        "desired": desired,
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector_labels("slurmd", spec.name).items())),
        "nodeSetHash": ctx.revision,
        "slurmIdle": sum(1 for p in ours if p.slurm_base == "IDLE"),
        "slurmAllocated": sum(1 for p in ours if p.slurm_base in ("ALLOCATED", "MIXED")),
        "slurmDown": sum(1 for p in ours if p.slurm_base == "DOWN"),
        "slurmDrain": sum(1 for p in ours if p.slurm_drain),
        names.STATUS_DRAINING_PODS: draining,
        "conditions": [
            nodeset_ready(parent, desired, ours, frozenset(plan.condemned), controller, deleting),
            controller,
            _draining_condition(parent, draining),
            _unexpected_condition(parent, plan),
            inconsistent_condition(parent, pods, ctx.now),
        ],
    }


def _drain_intent(name: str, plan: Plan, epochs: Mapping[str, str]) -> JSON:
    """One status.drainingPods item, with its epoch; flagged when slurm_sync must delete the pod's Slurm node
    record."""
    intent: JSON = {"name": name, "reason": plan.condemned[name], names.DRAIN_EPOCH: epochs[name]}
    if name in plan.delete_node:
        intent[names.DRAIN_DELETE_NODE] = True
    return intent


def _draining_condition(parent: JSON, draining: list[JSON]) -> JSON:
    if not draining:
        return condition(
            parent,
            names.CONDITION_PODS_DRAINING,
            False,
            "NoneDraining",
            "no pod is waiting for its Slurm node to drain",
        )
    message = f"{len(draining)} pod(s) wait for their Slurm node to drain before deletion; see status.drainingPods"
    return condition(parent, names.CONDITION_PODS_DRAINING, True, "Draining", message)


def inconsistent_condition(parent: JSON, pods: list[ObservedPod], now: float | None) -> JSON:
    """Pods whose drained/absent mark busy evidence contradicts: kept, and named here."""
    found = [(p, p.busy_evidence(now)) for p in pods if p.marked]
    listing = "; ".join(f"{p.name}: marked {p.marked}, but {why}" for p, why in found if why)
    if not listing:
        message = "no pod carries a drained or absent mark that busy evidence contradicts"
        return condition(parent, names.CONDITION_INCONSISTENT_PODS, False, "NoneObserved", message)
    message = f"kept until slurm_sync's words agree (busy evidence wins over a mark): {listing}"
    return condition(parent, names.CONDITION_INCONSISTENT_PODS, True, "MarkContradictsBusyEvidence", message)


def _unexpected_condition(parent: JSON, plan: Plan) -> JSON:
    if not plan.unexpected:
        return condition(
            parent,
            names.CONDITION_UNEXPECTED_PODS,
            False,
            "NoneObserved",
            "every observed pod is a worker of this NodeSet",
        )
    listing = "; ".join(f"{name}: {why}" for name, why in sorted(plan.unexpected.items()))
    return condition(
        parent, names.CONDITION_UNEXPECTED_PODS, True, "UnexpectedPodsObserved", f"kept, not counted: {listing}"
    )


def _published_draining(parent: JSON) -> frozenset[str]:
    return frozenset(_published_reasons(parent))


def intent_epochs(parent: JSON, condemned: Iterable[str]) -> dict[str, str]:
    """Each condemned pod's intent epoch (docs/architecture.md §4.1): the one published while its intent stands,
    else the NodeSet's resourceVersion now. No earlier intent for the pod carried that one: an intent is withdrawn
    by a published status (a write, a newer resourceVersion) before slurm_sync acts on the withdrawal.

    An intent published without an epoch (by a hook before epochs, or through a CRD that prunes the field) stands
    with the plain mark that slurm_sync then writes, as before epochs: an upgrade never stalls a drain."""
    items = (parent.get("status") or {}).get(names.STATUS_DRAINING_PODS)
    published = {
        i["name"]: epoch if isinstance(epoch := i.get(names.DRAIN_EPOCH), str) and epoch else names.DRAINED_NO_EPOCH
        for i in (items if isinstance(items, list) else [])
        if isinstance(i, dict) and isinstance(i.get("name"), str)
    }
    new = (parent.get("metadata") or {}).get("resourceVersion")
    new = new if isinstance(new, str) and new else "0"
    return {name: published.get(name, new) for name in condemned}


def _published_reasons(parent: JSON) -> dict[str, str]:
    """The drain intents of the last response, as Metacontroller stored them in the status."""
    items = (parent.get("status") or {}).get(names.STATUS_DRAINING_PODS)
    if not isinstance(items, list):
        return {}
    return {
        i["name"]: i["reason"] if isinstance(i.get("reason"), str) else "drain requested"
        for i in items
        if isinstance(i, dict) and isinstance(i.get("name"), str)
    }


def _ordinal_to_node(parent: JSON, spec: NodeSetSpec, pods: list[ObservedPod]) -> dict[str, str]:
    """pinToNode memory: the first node each ordinal ran on, kept in status across pod deletions."""
    if not spec.pin_to_node:
        return {}
    known = (parent.get("status") or {}).get(names.STATUS_ORDINAL_TO_NODE)
    result = {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}
    for pod in pods:
        index = pod.name.removeprefix(f"{spec.name}-")
        if pod.ours and pod.node_name and index.isdigit():
            result.setdefault(str(int(index)), pod.node_name)
    return dict(sorted(result.items()))


def _sssd_data(req: CompositeRequest, spec: NodeSetSpec) -> bytes | None:
    """The sssd.conf bytes for the pod's hash annotation; None when unknown."""
    ref = spec.sssd_conf_ref
    if ref is None:
        return None
    for secret in req.related_of(SECRET_TYPE_KEY):
        if secret["metadata"].get("name") == ref.name:
            value = (secret.get("data") or {}).get(ref.key)
            try:
                return base64.b64decode(value, validate=True) if isinstance(value, str) else None
            except binascii.Error:
                return None
    return None

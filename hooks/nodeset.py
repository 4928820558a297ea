"""NodeSet hooks: slurmd worker pods in StatefulSet or DaemonSet mode, drained before deleted.

Pods are `OnDelete` children: an existing pod is never changed, so the hook publishes the pods
that must go in `status.drainingPods` ({name, reason}) and keeps returning them until
slurm_sync marks them drained (or says no Slurm node exists for them). Only then is a pod left
out, and Metacontroller deletes it (DESIGN §4).

Children: Pods, PersistentVolumeClaims (volumeClaimTemplates) and the sshd ConfigMap.
PVC retention under Metacontroller, where leaving a child out deletes it:
* whenScaled=Retain keeps returning every observed PVC; whenScaled=Delete returns only the PVCs
  of pods still wanted (and of ordinals below replicas, so a pod replaced by a rolling update
  finds its data again);
* during finalize, whenDeleted=Delete drops a PVC once its pod is gone; whenDeleted=Retain keeps
  returning them, but Metacontroller owns every child it creates, so garbage collection still
  removes them with the NodeSet: truly retaining them needs the owner reference removed first.
updateStrategy ScheduledUpdate (a Slurm maintenance reservation) is not implemented here: old
pods are left alone as with OnDelete.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any


from hooks import cluster, names, slurmstate
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.nodeset_observe import ObservedPod, observe_pod, parse_time
from hooks.nodeset_plan import Context, Plan, plan_daemonset, plan_finalize, plan_hold, plan_statefulset
from hooks.nodeset_pods import WorkerPodBuilder, claims_for, revision_hash, ssh_config_map, ssh_config_name, statefulset_slot
from hooks.nodeset_scheduling import node_fit
from hooks.nodeset_spec import (
    CONFIGMAP_TYPE_KEY,
    DAEMONSET,
    NODE_TYPE_KEY,
    POD_TYPE_KEY,
    PVC_TYPE_KEY,
    RETAIN,
    SECRET_TYPE_KEY,
    ControllerInfo,
    NodeSetSpec,
    find_controller,
    parse_nodeset,
)
from hooks.objects import selector_labels
from hooks.status import condition

JSON = dict[str, Any]

DRAIN_RESYNC_SECONDS = 10


def customize(req: CustomizeRequest) -> JSON:
    """The Controller by name; Nodes for DaemonSet mode or pinToNode; the sssd.conf Secret."""
    spec = parse_nodeset(req.parent)
    rules: list[JSON] = [
        {"apiVersion": names.API_VERSION, "resource": "controllers", "namespace": spec.namespace, "names": [spec.controller_name]}
    ]
    if spec.wants_nodes:
        # A nodeSelector is a hard requirement, so Nodes failing it are never needed.
        rules.append({"apiVersion": "v1", "resource": "nodes", "labelSelector": {"matchLabels": dict(spec.template_spec.get("nodeSelector") or {})}})
    if spec.sssd_conf_ref:
        rules.append({"apiVersion": "v1", "resource": "secrets", "namespace": spec.namespace, "names": [spec.sssd_conf_ref.name]})
    return {"relatedResources": rules}


def sync(req: CompositeRequest) -> JSON:
    spec = parse_nodeset(req.parent)
    pods = _observed_pods(req, spec.name)
    controller = find_controller(req, spec)
    if controller is None:
        return _hold(req, spec, pods)
    revision = revision_hash(req.parent)
    builder = WorkerPodBuilder(req.parent, spec, controller, revision, _sssd_data(req, spec))
    ctx = Context(spec=spec, revision=revision, draining=_published_draining(req.parent), now=_request_clock(req, spec))
    nodes = req.related_of(NODE_TYPE_KEY)
    ordinal_to_node = _ordinal_to_node(req.parent, spec, pods)
    if spec.scaling_mode == DAEMONSET:
        plan = plan_daemonset(ctx, pods, nodes, builder.scheduling_spec)
    else:
        fits = {n["metadata"]["name"]: node_fit(n, builder.scheduling_spec) for n in nodes} if spec.pin_to_node else {}
        plan = plan_statefulset(ctx, pods, ordinal_to_node, fits)
    pod_children = _pod_children(pods, plan) + [builder.build(slot) for slot in plan.create]
    claim_owners = _claim_owners(spec, pods, plan, pod_children)
    children = pod_children + _claims(req, spec, claim_owners, retain=spec.pvc_when_scaled == RETAIN)
    children += _ssh_config(req.parent, spec, pod_children, keep=True)
    status = _status(req.parent, spec, pods, plan, ctx, controller_condition(req.parent, spec, controller))
    if spec.pin_to_node:
        status[names.STATUS_ORDINAL_TO_NODE] = ordinal_to_node
    return _response(status, children, plan)


def finalize(req: CompositeRequest) -> JSON:
    """Drain every pod, delete each once drained; finished when no pod is left.

    If the Controller is gone (or being deleted) there is no slurmctld to drain through and no
    job left to protect, so the pods are released at once and the NodeSet is finalized.
    """
    spec = parse_nodeset(req.parent)
    pods = _observed_pods(req, spec.name)
    controller = find_controller(req, spec)
    ctx = Context(spec=spec, revision=revision_hash(req.parent), draining=_published_draining(req.parent), now=_request_clock(req, spec))
    if controller is None or controller.deleting:
        plan = Plan()
        status = _status(req.parent, spec, pods, plan, ctx, controller_condition(req.parent, spec, controller))
        return {"status": status, "children": [], "finalized": True}
    plan = plan_finalize(pods)
    pod_children = _pod_children(pods, plan)
    children = pod_children + _finalize_claims(req, spec, pods, plan)
    children += _ssh_config(req.parent, spec, pod_children, keep=False)
    status = _status(req.parent, spec, pods, plan, ctx, controller_condition(req.parent, spec, controller))
    response = _response(status, children, plan)
    response["finalized"] = not pods
    return response


def controller_condition(parent: JSON, spec: NodeSetSpec, controller: ControllerInfo | None) -> JSON:
    if controller is None:
        message = f"Controller {spec.namespace}/{spec.controller_name} not found: existing pods are kept, none are created"
        return condition(parent, names.CONDITION_CONTROLLER_RESOLVED, False, "ControllerNotFound", message)
    if controller.deleting:
        return condition(parent, names.CONDITION_CONTROLLER_RESOLVED, False, "ControllerDeleting", f"Controller {controller.name} is being deleted")
    return condition(parent, names.CONDITION_CONTROLLER_RESOLVED, True, "ControllerFound", f"Controller {controller.name} found")


def _hold(req: CompositeRequest, spec: NodeSetSpec, pods: list[ObservedPod]) -> JSON:
    """No Controller: keep every child as it is, keep the published drain intents, create nothing."""
    draining = _published_draining(req.parent)
    plan = plan_hold(pods, _published_reasons(req.parent))
    children = [cluster.kept(p.obj) for p in pods if p.name]
    for type_key in (PVC_TYPE_KEY, CONFIGMAP_TYPE_KEY):
        children += [cluster.kept(obj) for obj in req.children_of(type_key)]
    ctx = Context(spec=spec, revision=revision_hash(req.parent), draining=draining, now=_request_clock(req, spec))
    status = _status(req.parent, spec, pods, plan, ctx, controller_condition(req.parent, spec, None))
    return _response(status, children, plan)


def _observed_pods(req: CompositeRequest, nodeset: str) -> list[ObservedPod]:
    parent_uid = req.parent["metadata"].get("uid") or ""
    return [observe_pod(obj, nodeset, parent_uid) for obj in req.children_of(POD_TYPE_KEY)]


def _pod_children(pods: list[ObservedPod], plan: Plan) -> list[JSON]:
    """Every observed pod stays, except a condemned one slurm_sync marked drained or absent."""
    return [cluster.kept(p.obj) for p in pods if p.name and not (p.name in plan.condemned and p.removable)]


def _claim_owners(spec: NodeSetSpec, pods: list[ObservedPod], plan: Plan, pod_children: list[JSON]) -> list[str]:
    """Pods whose PVCs must exist: our desired pods, and every ordinal below replicas."""
    foreign = set(plan.unexpected)
    owners = [c["metadata"]["name"] for c in pod_children if c["metadata"]["name"] not in foreign]
    if spec.scaling_mode != DAEMONSET:
        owners += [statefulset_slot(spec, ordinal).name for ordinal in range(spec.replicas)]
    return owners


def _claims(req: CompositeRequest, spec: NodeSetSpec, owners: list[str], retain: bool) -> list[JSON]:
    wanted: dict[str, JSON] = {}
    for owner in owners:
        for claim in claims_for(req.parent, spec, owner):
            wanted.setdefault(claim["metadata"]["name"], claim)
    if retain:
        for observed in req.children_of(PVC_TYPE_KEY):
            wanted.setdefault(observed["metadata"]["name"], cluster.kept(observed))
    return list(wanted.values())


def _finalize_claims(req: CompositeRequest, spec: NodeSetSpec, pods: list[ObservedPod], plan: Plan) -> list[JSON]:
    """While deleting, PVCs are only kept, never created: all (Retain) or those of pods still there."""
    remaining = {p.name for p in pods if p.ours and not (p.name in plan.condemned and p.removable)}
    owned = {claim["metadata"]["name"] for owner in remaining for claim in claims_for(req.parent, spec, owner)}
    retain = spec.pvc_when_deleted == RETAIN
    return [cluster.kept(pvc) for pvc in req.children_of(PVC_TYPE_KEY) if retain or pvc["metadata"]["name"] in owned]


def _ssh_config(parent: JSON, spec: NodeSetSpec, pod_children: list[JSON], keep: bool) -> list[JSON]:
    """The sshd ConfigMap while ssh is on (sync) or while a returned pod still mounts it."""
    name = ssh_config_name(spec)
    mounted = any(
        (v.get("configMap") or {}).get("name") == name for pod in pod_children for v in (pod.get("spec") or {}).get("volumes") or []
    )
    return [ssh_config_map(parent, spec)] if mounted or (keep and spec.ssh_enabled) else []


def _response(status: JSON, children: list[JSON], plan: Plan) -> JSON:
    children.sort(key=lambda c: (c["kind"], c["metadata"]["name"]))
    response: JSON = {"status": status, "children": children}
    if plan.condemned:
        response["resyncAfterSeconds"] = DRAIN_RESYNC_SECONDS
    return response


def _status(parent: JSON, spec: NodeSetSpec, pods: list[ObservedPod], plan: Plan, ctx: Context, controller: JSON) -> JSON:
    """Counts describe the observed pods of this NodeSet (foreign and terminating pods excluded)."""
    ours = [p for p in pods if p.ours and not p.terminating]
    available = sum(1 for p in ours if ctx.available(p))
    desired = plan.desired if spec.scaling_mode == DAEMONSET else spec.replicas
    draining = [{"name": name, "reason": plan.condemned[name]} for name in sorted(plan.condemned)]
    return {
        "replicas": len(ours),
        "updatedReplicas": sum(1 for p in ours if p.revision == ctx.revision),
        "readyReplicas": sum(1 for p in ours if p.ready),
        "availableReplicas": available,
        "unavailableReplicas": max(0, desired - available),
        "desired": desired,
        "selector": ",".join(f"{k}={v}" for k, v in sorted(selector_labels("slurmd", spec.name).items())),
        "nodeSetHash": ctx.revision,
        "slurmIdle": sum(1 for p in ours if slurmstate.base_state(p.slurm_states) == "IDLE"),
        "slurmAllocated": sum(1 for p in ours if slurmstate.base_state(p.slurm_states) in ("ALLOCATED", "MIXED")),
        "slurmDown": sum(1 for p in ours if slurmstate.base_state(p.slurm_states) == "DOWN"),
        "slurmDrain": sum(1 for p in ours if slurmstate.is_drain(p.slurm_states)),
        names.STATUS_DRAINING_PODS: draining,
        "conditions": [controller, _draining_condition(parent, draining), _unexpected_condition(parent, plan)],
    }


def _draining_condition(parent: JSON, draining: list[JSON]) -> JSON:
    if not draining:
        return condition(parent, names.CONDITION_PODS_DRAINING, False, "NoneDraining", "no pod is waiting for its Slurm node to drain")
    message = f"{len(draining)} pod(s) wait for their Slurm node to drain before deletion; see status.drainingPods"
    return condition(parent, names.CONDITION_PODS_DRAINING, True, "Draining", message)


def _unexpected_condition(parent: JSON, plan: Plan) -> JSON:
    if not plan.unexpected:
        return condition(parent, names.CONDITION_UNEXPECTED_PODS, False, "NoneObserved", "every observed pod is a worker of this NodeSet")
    listing = "; ".join(f"{name}: {why}" for name, why in sorted(plan.unexpected.items()))
    return condition(parent, names.CONDITION_UNEXPECTED_PODS, True, "UnexpectedPodsObserved", f"kept, not counted: {listing}")


def _published_draining(parent: JSON) -> frozenset[str]:
    return frozenset(_published_reasons(parent))


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


def _request_clock(req: CompositeRequest, spec: NodeSetSpec) -> float | None:
    """The newest timestamp in the request: a deterministic stand-in for "now" (a lower bound).

    Only minReadySeconds needs a clock; without it, this is not computed.
    """
    if spec.min_ready_seconds == 0:
        return None
    times: list[float | None] = []
    for obj in [req.parent, *req.children_of(POD_TYPE_KEY)]:
        meta = obj.get("metadata") or {}
        times.append(parse_time(meta.get("creationTimestamp")))
        times += [parse_time(f.get("time")) for f in meta.get("managedFields") or [] if isinstance(f, dict)]
        status = obj.get("status") if isinstance(obj.get("status"), dict) else {}
        times += [parse_time(c.get("lastTransitionTime")) for c in status.get("conditions") or [] if isinstance(c, dict)]
    known = [t for t in times if t is not None]
    return max(known) if known else None


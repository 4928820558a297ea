"""What one pass knows about a cluster's Kubernetes objects, read defensively into frozen views.

Objects come from the apiserver as plain JSON dicts (camelCase). Reading never fails: a field
that cannot be read takes the value that makes slurm_sync do nothing (no intent, not ours).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from slinky_common import names, nodesetconf, slurmstate
from slinky_common.errors import InvalidSpec
from slinky_common.nodesetconf import nodeset_conf
from slinky_common.wellknown import node_hostname

JSON = Mapping[str, Any]

# NodeSet.spec.workloadDisruptionProtection defaults to true (the CRD's default).
DEFAULT_PROTECTION = True


@dataclass(frozen=True)
class PodView:
    """A NodeSet worker pod: its identity, its Slurm node, and what slurm_sync last wrote on it."""

    namespace: str
    name: str
    slurm_node: str
    node_name: str | None
    nodeset: str | None
    phase: str
    ready: bool
    terminating: bool
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    state_conditions: Mapping[str, JSON]  # SlurmNodeState* conditions by type
    uid: str = ""

    @property
    def cordoned(self) -> bool:
        return self.annotations.get(names.ANNOTATION_POD_CORDON) == "true"

    @property
    def cordon_requested(self) -> bool:
        """A health checker asked for a drain (Slinky 1.3.0); drained as pod-cordon, under its own reason."""
        return self.annotations.get(names.ANNOTATION_POD_CORDON_REQUESTED) == "true"

    @property
    def healthy(self) -> bool:
        return self.phase == "Running" and self.ready and not self.terminating


@dataclass(frozen=True)
class NodeSetView:
    namespace: str
    name: str
    uid: str
    protect: bool  # workloadDisruptionProtection
    intents: Mapping[str, str]  # status.drainingPods: pod name -> reason
    # drainingPods flagged names.DRAIN_DELETE_NODE: their Slurm node record goes once drained and idle
    record_deletes: frozenset[str]
    observed_hash: str | None  # our ANNOTATION_SLURM_OBSERVED
    # drainingPods' epochs (names.DRAIN_EPOCH): the drained mark of a pod named here carries its intent's epoch
    epochs: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False  # metadata.deletionTimestamp is set (the hook's finalize runs)
    retain_claims: bool = True  # persistentVolumeClaimRetentionPolicy.whenDeleted is not Delete
    controller: str = ""  # spec.controllerRef.name
    scaling_mode: str = "StatefulSet"  # spec.scalingMode
    prune_records: str = "Never"  # spec.pruneSlurmNodeRecords
    reservation: Any = (
        None  # status.reservation as published (ScheduledUpdate; read by slurm_sync/operator/reservations.py)
    )
    reservation_report: str | None = None  # our ANNOTATION_RESERVATION_OBSERVED
    partition: str | None = None  # its Slurm partition (spec.partition.enabled), as slurm.conf names it
    deletion_report: str | None = None  # our ANNOTATION_DELETION_OBSERVED
    replicas: int | None = None  # spec.replicas; None when unreadable
    on_demand_nodes: Mapping[str, int] = field(default_factory=dict)  # elastic: Slurm node -> ordinal (§4.9)
    # elastic: every node slurm.conf names for it; Slurm keeps them without a pod and refuses to delete them
    conf_nodes: frozenset[str] = frozenset()
    power_report: str | None = None  # our ANNOTATION_POWER_OBSERVED

    @property
    def prunes_defunct_nodes(self) -> bool:
        """Slinky's gate for pruning defunct Slurm nodes: DaemonSet mode and NodeNotFound."""
        return self.scaling_mode == "DaemonSet" and self.prune_records == "NodeNotFound"

    @property
    def releases_claims(self) -> bool:
        """Being deleted with whenDeleted=Retain: its PVCs must lose its ownerReference first."""
        return self.deleting and self.retain_claims


@dataclass(frozen=True)
class NodeCondition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class KubeNodeView:
    name: str
    unschedulable: bool
    cordon_reason: str | None
    hostname: str = ""  # the Slurm node name a DaemonSet pod gets here (override annotation, else first DNS label)
    topology: str | None = None  # ANNOTATION_TOPOLOGY_SPEC, None when absent
    features: str | None = None  # ANNOTATION_FEATURES_SPEC (CSV), None when absent
    conditions: tuple[NodeCondition, ...] = ()


@dataclass(frozen=True)
class ControllerPodView:
    namespace: str
    name: str
    hostname: str  # the SlurmctldHost name slurmctld answers ping with
    active: bool


@dataclass(frozen=True)
class ClusterView:
    """The Kubernetes side of one Slurm cluster (one Controller)."""

    namespace: str
    controller: str
    pods: tuple[PodView, ...]
    nodesets: Mapping[str, NodeSetView]
    kube_nodes: Mapping[str, KubeNodeView]
    controller_pods: tuple[ControllerPodView, ...]
    # Node condition types whose True conditions become the cordon reason (--propagated-node-conditions)
    propagated_conditions: tuple[str, ...] = ()
    # kube_nodes holds every Node (a successful, complete listing): needed before pruning anything
    all_kube_nodes: bool = False


def _map(value: Any) -> Mapping[str, str]:
    """The string entries of a labels or annotations object: the object itself when it has no others (a
    view shares it with the cache, which never changes it: a copy per pod would cost memory for nothing)."""
    if not isinstance(value, Mapping):
        return {}
    if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return value
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _obj(value: Any) -> JSON:
    return value if isinstance(value, Mapping) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _nodeset_owner(meta: JSON) -> str | None:
    for ref in meta.get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("kind") == "NodeSet" and ref.get("controller") is True:
            return _str(ref.get("name")) or None
    return None


def read_pod(obj: JSON) -> PodView | None:
    """A worker pod, or None when it is not one (no NodeSet owner or hostname label)."""
    meta, spec, status = _obj(obj.get("metadata")), _obj(obj.get("spec")), _obj(obj.get("status"))
    labels = _map(meta.get("labels"))
    name = _str(meta.get("name"))
    nodeset = _nodeset_owner(meta)
    if not name or (nodeset is None and names.LABEL_NODESET_POD_HOSTNAME not in labels):
        return None
    conditions = [
        c for c in status.get("conditions") or [] if isinstance(c, Mapping) and isinstance(c.get("type"), str)
    ]
    ready = any(c["type"] == "Ready" and c.get("status") == "True" for c in conditions)
    return PodView(
        namespace=_str(meta.get("namespace")),
        name=name,
        slurm_node=labels.get(names.LABEL_NODESET_POD_HOSTNAME) or _str(spec.get("hostname")) or name,
        node_name=_str(spec.get("nodeName")) or None,
        nodeset=nodeset,
        phase=_str(status.get("phase")) or "Unknown",
        ready=ready,
        terminating=bool(meta.get("deletionTimestamp")),
        labels=labels,
        annotations=_map(meta.get("annotations")),
        state_conditions={c["type"]: c for c in conditions if slurmstate.is_state_condition(c["type"])},
        uid=_str(meta.get("uid")),
    )


def read_nodeset(obj: JSON) -> NodeSetView:
    meta, spec, status = _obj(obj.get("metadata")), _obj(obj.get("spec")), _obj(obj.get("status"))
    protect = spec.get("workloadDisruptionProtection")
    intents, epochs, record_deletes = {}, {}, set()
    for item in status.get(names.STATUS_DRAINING_PODS) or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            intents[item["name"]] = _str(item.get("reason")) or "drain requested"
            if _str(item.get(names.DRAIN_EPOCH)):
                epochs[item["name"]] = _str(item.get(names.DRAIN_EPOCH))
            if item.get(names.DRAIN_DELETE_NODE) is True:
                record_deletes.add(item["name"])
    return NodeSetView(
        namespace=_str(meta.get("namespace")),
        name=_str(meta.get("name")),
        uid=_str(meta.get("uid")),
        protect=protect if isinstance(protect, bool) else DEFAULT_PROTECTION,
        intents=intents,
        record_deletes=frozenset(record_deletes),
        epochs=epochs,
        observed_hash=_map(meta.get("annotations")).get(names.ANNOTATION_SLURM_OBSERVED),
        deleting=bool(meta.get("deletionTimestamp")),
        # Read as the NodeSet hook reads a spec it cannot parse: only an explicit Delete deletes.
        retain_claims=_obj(spec.get("persistentVolumeClaimRetentionPolicy")).get("whenDeleted") != "Delete",
        controller=nodeset_controller(obj),
        scaling_mode=_str(spec.get("scalingMode")) or "StatefulSet",
        prune_records=_str(spec.get("pruneSlurmNodeRecords")) or "Never",
        reservation=status.get(names.STATUS_RESERVATION),
        reservation_report=_map(meta.get("annotations")).get(names.ANNOTATION_RESERVATION_OBSERVED),
        partition=_partition(obj),
        deletion_report=_map(meta.get("annotations")).get(names.ANNOTATION_DELETION_OBSERVED),
        replicas=_count(spec.get("replicas")),
        on_demand_nodes=_elastic_nodes(obj, nodesetconf.on_demand_nodes),
        conf_nodes=frozenset(_elastic_nodes(obj, nodesetconf.elastic_nodes)),
        power_report=_map(meta.get("annotations")).get(names.ANNOTATION_POWER_OBSERVED),
    )


def _elastic_nodes(obj: JSON, read: Callable[[JSON], dict[str, int]]) -> Mapping[str, int]:
    """Nodes of an elastic NodeSet (`read`: nodesetconf.on_demand_nodes or elastic_nodes); none when it is not
    elastic or its spec cannot be read (the hook then answers InvalidSpec and keeps its pods: nothing to do)."""
    if not _obj(obj.get("spec")).get("elastic"):
        return {}
    try:
        return read(obj)
    except (InvalidSpec, KeyError, TypeError, AttributeError):
        return {}


def _partition(obj: JSON) -> str | None:
    """The NodeSet's partition name as the Controller hook writes it into slurm.conf; None without one
    (or when the hook could not compute it either)."""
    if not _obj(_obj(obj.get("spec")).get("partition")).get("enabled"):
        return None
    try:
        return nodeset_conf(obj, "nodeset").name
    except (InvalidSpec, KeyError, TypeError):
        return None


def nodeset_controller(obj: JSON) -> str:
    return _str(_obj(_obj(obj.get("spec")).get("controllerRef")).get("name"))


def read_kube_node(obj: JSON) -> KubeNodeView:
    meta, spec, status = _obj(obj.get("metadata")), _obj(obj.get("spec")), _obj(obj.get("status"))
    annotations = _map(meta.get("annotations"))
    conditions = tuple(
        NodeCondition(_str(c.get("type")), _str(c.get("status")), _str(c.get("reason")), _str(c.get("message")))
        for c in status.get("conditions") or []
        if isinstance(c, Mapping) and _str(c.get("type"))
    )
    return KubeNodeView(
        name=_str(meta.get("name")),
        unschedulable=spec.get("unschedulable") is True,
        cordon_reason=annotations.get(names.ANNOTATION_NODE_CORDON_REASON),
        hostname=node_hostname(
            {"metadata": {"name": _str(meta.get("name")), "annotations": annotations}},
            names.ANNOTATION_HOSTNAME_OVERRIDE,
        ),
        topology=annotations.get(names.ANNOTATION_TOPOLOGY_SPEC),
        features=annotations.get(names.ANNOTATION_FEATURES_SPEC),
        conditions=conditions,
    )


def read_controller_pod(obj: JSON) -> ControllerPodView:
    meta, spec = _obj(obj.get("metadata")), _obj(obj.get("spec"))
    name = _str(meta.get("name"))
    return ControllerPodView(
        namespace=_str(meta.get("namespace")),
        name=name,
        hostname=_str(spec.get("hostname")) or name,
        active=_map(meta.get("labels")).get(names.LABEL_ACTIVE_CONTROLLER) == "true",
    )

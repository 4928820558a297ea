"""Observed NodeSet pods, read defensively.

Observed pods come from the cluster and may be in any shape (no status, an unknown phase, labels
someone edited, a pod adopted by label). Reading one never fails: whatever cannot be read takes
the value that keeps the pod alive (not drained, not absent, not ours to count, busy).

**Busy evidence always wins.** slurm_sync's drained and absent marks let a condemned pod go, but
only while nothing says a job may still run on its Slurm node: a busy SlurmNodeState condition
(ALLOCATED, MIXED, COMPLETING), the pod-protect label, or a job-end deadline (pod-deadline) that
has not passed or cannot be read. Marks and evidence both come from slurm_sync, so disagreement
means one of them is stale (an empty Slurm listing once marked every pod absent); the pod stays.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from hooks.applied import Kept, kept
from slinky_common import names, slurmstate
from slinky_common.jsontypes import dict_field, list_field

JSON = dict[str, Any]

KNOWN_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
# Slinky's (and Kubernetes' ActivePods) phase rank: a lower rank is a cheaper victim.
_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}
# SlurmNodeState<State> condition type -> Slurm state word, for every state slurm_sync mirrors.
_STATE_OF_CONDITION = {slurmstate.condition_type(s): s for s in (*slurmstate.BASE_STATES, *slurmstate.FLAG_STATES)}


@dataclass(eq=False)  # one per observed pod, compared by identity
class ObservedPod:
    """One observed pod, with everything the plan and the status need.

    What every sync reads of every pod is read when it is observed; the rest (timestamps, the
    deletion cost, the hostname, a pinned node) on first use: a steady-state resync decides
    nothing by them, and reading all of them for every pod was a tenth of a 1,000-pod sync.
    """

    name: str
    namespace: str
    obj: JSON
    kept: Kept | None  # the pod as we last returned it (hooks/applied.py); None without a name
    config_maps: tuple[str, ...]  # the ConfigMaps its volumes mount
    ours: bool
    scaling_mode: str | None
    revision: str
    node_name: str | None
    phase: str
    ready: bool
    terminating: bool
    drained_mark: str | None  # the epoch of the intent slurm_sync's drained mark answers (names.DRAIN_EPOCH)
    absent_mark: bool
    registration: str | None  # names.ANNOTATION_REGISTRATION_HASH; None on pods made before it existed
    slurm_states: frozenset[str]  # Slurm state words (IDLE, DRAIN ...) from the SlurmNodeState* conditions
    slurm_base: str | None  # the base state among them (slurmstate.base_state)
    slurm_drain: bool  # a drain in force (slurmstate.is_drain)
    protected: bool  # the pod-protect label: slurm_sync saw jobs on the node
    labels: JSON  # metadata.labels ({} when absent or not an object), and so on
    annotations: JSON
    spec: JSON
    ready_condition: JSON

    @cached_property
    def hostname(self) -> str:
        return _str(self.labels.get(names.LABEL_NODESET_POD_HOSTNAME)) or _str(self.spec.get("hostname")) or self.name

    @cached_property
    def pinned_node(self) -> str | None:
        return _pinned_node(self.spec)

    @property
    def pod_cordon(self) -> bool:
        """Someone asked for a drain on the pod: pod-cordon, or a health checker's pod-cordon-requested."""
        return any(
            self.annotations.get(a) == "true"
            for a in (names.ANNOTATION_POD_CORDON, names.ANNOTATION_POD_CORDON_REQUESTED)
        )

    @cached_property
    def deletion_cost(self) -> int:
        return _int32(_str_or_none(self.annotations.get(names.ANNOTATION_POD_DELETION_COST)))

    @cached_property
    def ready_since(self) -> float | None:
        return parse_time(self.ready_condition.get("lastTransitionTime")) if self.ready else None

    @cached_property
    def created(self) -> float | None:
        return parse_time(dict_field(self.obj, "metadata").get("creationTimestamp"))

    @property
    def deadline_text(self) -> Any:
        """The pod-deadline annotation, as sent."""
        return self.annotations.get(names.ANNOTATION_POD_DEADLINE)

    @cached_property
    def deadline(self) -> float | None:
        """The job-end deadline; None when there is none or it cannot be read (see deadline_unreadable)."""
        return parse_time(self.deadline_text)

    @property
    def deadline_unreadable(self) -> bool:
        """Present, not empty, and not a time: it may hide a deadline, so it counts as one not yet passed."""
        return self.deadline_text not in (None, "") and self.deadline is None

    @property
    def busy(self) -> bool:
        """Slurm says jobs are (still) on the node."""
        return slurmstate.is_busy(self.slurm_states)

    @property
    def finished(self) -> bool:
        """A pod that ended holds no running job and is replaced (Slinky deletes and recreates it)."""
        return self.phase in ("Failed", "Succeeded")

    @property
    def marked(self) -> str | None:
        """slurm_sync's word that the pod may go: "absent" (no Slurm node), "drained", or None."""
        return "absent" if self.absent_mark else "drained" if self.drained_mark else None

    @property
    def needs_clock(self) -> bool:
        """Whether busy_evidence depends on the time (a readable deadline)."""
        return self.deadline is not None

    def busy_evidence(self, now: float | None) -> str | None:
        """Why a job may still run on the pod's Slurm node, or None when nothing says so.

        `now` None (the clock was not read) counts every deadline as not yet passed.
        """
        busy = sorted(slurmstate.BUSY_STATES & self.slurm_states)
        if busy:
            return f"Slurm state {'+'.join(busy)}"
        if self.protected:
            return f"label {names.LABEL_POD_PROTECT}"
        if self.deadline_unreadable:
            return f"unreadable {names.ANNOTATION_POD_DEADLINE}"
        if self.deadline is not None and (now is None or now < self.deadline):
            return f"{names.ANNOTATION_POD_DEADLINE} {format_time(self.deadline)} not passed"
        return None

    def removable(self, now: float | None, epoch: str) -> bool:
        """slurm_sync marked the pod drained for the intent of this ``epoch``, or its Slurm node absent, and no busy
        evidence says otherwise. A drained mark left from an earlier intent is not enough: slurm_sync may be lifting
        that drain, having seen it withdrawn (model/drain.pml, -DNO_EPOCH)."""
        return (self.absent_mark or self.drained_mark == epoch) and self.busy_evidence(now) is None

    @property
    def healthy(self) -> bool:
        return self.phase == "Running" and self.ready and not self.terminating


def observe_pod(obj: JSON, nodeset: str, parent_uid: str) -> ObservedPod:
    """Read one observed pod, of the JSON types the contract checked (slinky_common/shapes.py); no value
    makes it raise."""
    meta = dict_field(obj, "metadata")
    name = str(meta.get("name") or "")
    # Only the string values of these maps count; look up the few keys read (a sync reads every
    # pod, so copying both maps per pod was a tenth of a 1,000-pod sync).
    labels = dict_field(meta, "labels")
    annotations = dict_field(meta, "annotations")
    spec = dict_field(obj, "spec")
    status = dict_field(obj, "status")
    ready_condition, slurm_states = _read_conditions(list_field(status, "conditions"))
    return ObservedPod(
        name=name,
        namespace=_str(meta.get("namespace")),
        obj=obj,
        kept=kept(obj) if name else None,
        config_maps=_config_maps(spec),
        ours=_is_ours(meta, labels, nodeset, parent_uid),
        scaling_mode=_str_or_none(labels.get(names.LABEL_NODESET_SCALING_MODE)),
        revision=_str(labels.get(names.LABEL_NODESET_REVISION)),
        node_name=_str(spec.get("nodeName")) or None,
        phase=str(status.get("phase")) if status.get("phase") in KNOWN_PHASES else "Unknown",
        ready=ready_condition.get("status") == "True",
        terminating=bool(meta.get("deletionTimestamp")),
        drained_mark=_str_or_none(annotations.get(names.ANNOTATION_DRAINED)) or None,
        absent_mark=annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true",
        registration=_str_or_none(annotations.get(names.ANNOTATION_REGISTRATION_HASH)),
        slurm_states=slurm_states,
        slurm_base=_base_state(slurm_states),
        slurm_drain=_is_drain(slurm_states),
        protected=_protected(labels.get(names.LABEL_POD_PROTECT)),
        labels=labels,
        annotations=annotations,
        spec=spec,
        ready_condition=ready_condition,
    )


def still_wanted(
    pods: list[ObservedPod], epochs: Mapping[str, str], now: float | None, delete_node: frozenset[str] = frozenset()
) -> list[ObservedPod]:
    """Every named pod but the condemned ones (``epochs``: each one's intent epoch) slurm_sync marked for that
    intent and no busy evidence holds; a pod in `delete_node` needs the absent mark (its Slurm node record
    deleted), drained is not enough."""
    return [
        p
        for p in pods
        if p.name
        and not (p.name in epochs and p.removable(now, epochs[p.name]) and (p.absent_mark or p.name not in delete_node))
    ]


def victim_order(pod: ObservedPod, ordinal: int | None, draining: frozenset[str]) -> tuple[Any, ...]:
    """Sort key: the pod to remove first sorts first (Slinky's ActivePods order).

    Pods already draining (listed in the last published status or marked drained) count as
    cordoned, as Slinky cordons every pod it condemns; that keeps one victim chosen across syncs
    instead of draining a different node each time.
    """
    cordoned = pod.pod_cordon or pod.name in draining or pod.drained_mark
    return (
        pod.node_name is not None,
        _PHASE_RANK.get(pod.phase, 0),
        pod.ready,
        pod.deletion_cost,
        (pod.deadline is not None, pod.deadline or 0.0),
        not cordoned,
        -(ordinal if ordinal is not None else 0),
        -(pod.ready_since or 0.0),
        -(pod.created or 0.0),
        pod.name,
    )


def parse_time(value: Any) -> float | None:
    """An RFC 3339 timestamp as epoch seconds; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def format_time(epoch: float) -> str:
    """Epoch seconds as RFC 3339 UTC (for messages; whole seconds). An instant a user's offset puts past year 9999
    (`9999-12-31T23:59:59-10:00` parses) has no RFC 3339 UTC form; the message says so instead of failing the sync."""
    try:
        return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (ValueError, OverflowError):
        return "after 9999-12-31T23:59:59Z"


def _protected(value: Any) -> bool:
    """Any value but an explicit "false" counts: an unknown value is not proof that the node is idle."""
    return value is not None and value != "false"


def _is_ours(meta: JSON, labels: JSON, nodeset: str, parent_uid: str) -> bool:
    """Built by this NodeSet: worker labels for it, and no controller other than it."""
    if labels.get(names.LABEL_INSTANCE) != nodeset or labels.get(names.LABEL_NAME) != "slurmd":
        return False
    if not parent_uid:
        return True
    for ref in list_field(meta, "ownerReferences"):
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("uid") != parent_uid:
            return False
    return True


def _pinned_node(spec: JSON) -> str | None:
    """The node a DaemonSet-mode pod is pinned to by its required `metadata.name` node affinity."""
    affinity = spec.get("affinity")
    if not isinstance(affinity, dict) or "nodeAffinity" not in affinity:
        return None  # the common case, decided without raising
    try:
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        for term in terms:
            for field in term.get("matchFields") or []:
                if (
                    field.get("key") == "metadata.name"
                    and field.get("operator") == "In"
                    and len(field.get("values") or []) == 1
                ):
                    return str(field["values"][0])
    except (KeyError, TypeError, AttributeError):
        return None
    return None


def _config_maps(spec: JSON) -> tuple[str, ...]:
    volumes = list_field(spec, "volumes")
    return tuple(
        name
        for volume in volumes
        if isinstance(volume, dict) and isinstance(name := dict_field(volume, "configMap").get("name"), str)
    )


def _read_conditions(conditions: list[Any]) -> tuple[JSON, frozenset[str]]:
    """The first Ready condition ({} when none), and the Slurm state words of the SlurmNodeState* ones that hold."""
    ready: JSON = {}
    words = []
    for item in conditions:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "Ready":
            ready = ready or item
        elif kind in _STATE_OF_CONDITION and item.get("status") == "True":
            words.append(_STATE_OF_CONDITION[kind])
    return ready, frozenset(words)


# The state words of most pods are one of a few sets; each set's reading is remembered.
_base_state = functools.lru_cache(maxsize=256)(slurmstate.base_state)
_is_drain = functools.lru_cache(maxsize=256)(slurmstate.is_drain)


def _int32(value: str | None) -> int:
    if value is None or not re.fullmatch(r"-?[0-9]{1,10}", value.strip()):
        return 0
    number = int(value)
    return number if -(2**31) <= number < 2**31 else 0


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None

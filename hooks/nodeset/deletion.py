"""Deleting a NodeSet: how finalize lets pods go, and what else it waits for before it finishes.

Which pods may go depends on what is known about the Controller (the slurmctld to drain through):
* **Drain** (the Controller is observed): every pod is condemned and goes once slurm_sync marks it
  drained or absent and no busy evidence contradicts the mark. Finalize finishes only when no pod
  and no retained claim is left, our maintenance reservation is gone, and slurm_sync's deletion
  report (names.ANNOTATION_DELETION_OBSERVED) lists no pending job and no Slurm node record: only
  then may the Controller hook drop the NodeSet's slurm.conf lines, which would end every job
  still queued in its partition.
* **Cluster deleted** (the Controller carries a deletionTimestamp): the user is tearing the whole
  cluster down and slurmctld goes with it, so every pod is released at once.
* **No Controller** (none among the related objects): that is not proof that it was deleted (a
  cache or a customize answer can omit it), so a pod with busy evidence is kept (drain intents
  are still published, for a slurm_sync that still serves it), an idle one goes, and a deletion
  report that lists pending jobs holds the deletion. When the Controller really is gone, nothing
  will ever update that evidence: the administrator says so with the NodeSet annotation
  names.ANNOTATION_FORCE_DELETE="true".
* **Force** (that annotation): every pod is released at once, busy or not, and neither the
  deletion report nor the reservation is waited for. Retained claims still are.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeGuard

from hooks.nodeset.observe import ObservedPod, still_wanted
from hooks.status import condition
from slinky_common import names

JSON = dict[str, Any]


class Release(Enum):
    DRAIN = "drain"
    CLUSTER_DELETED = "cluster deleted"
    NO_CONTROLLER = "no controller"
    FORCE = "force"


@dataclass(frozen=True)
class Report:
    """slurm_sync's deletion report; `readable` False when the annotation exists but cannot be read."""

    readable: bool
    pending_jobs: tuple[str, ...] = ()
    cancel_at: str | None = None
    nodes_left: tuple[str, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class Blocker:
    reason: str
    message: str


def release_mode(parent: JSON, controller_found: bool, controller_deleting: bool) -> Release:
    if force_delete(parent):
        return Release.FORCE
    if not controller_found:
        return Release.NO_CONTROLLER
    return Release.CLUSTER_DELETED if controller_deleting else Release.DRAIN


def force_delete(parent: JSON) -> bool:
    annotations = (parent.get("metadata") or {}).get("annotations")
    return isinstance(annotations, dict) and annotations.get(names.ANNOTATION_FORCE_DELETE) == "true"


def kept_pods(
    pods: list[ObservedPod], epochs: Mapping[str, str], mode: Release, now: float | None
) -> list[ObservedPod]:
    """The pods finalize still returns: every pod a drain (``epochs``: each condemned pod's intent epoch) or busy
    evidence still holds."""
    if mode in (Release.FORCE, Release.CLUSTER_DELETED):
        return []
    if mode == Release.NO_CONTROLLER:
        return [p for p in pods if p.name and p.busy_evidence(now) is not None]
    return still_wanted(pods, epochs, now)


def read_report(parent: JSON) -> Report | None:
    """The report slurm_sync writes on a deleting NodeSet; None when there is none yet."""
    annotations = (parent.get("metadata") or {}).get("annotations")
    raw = annotations.get(names.ANNOTATION_DELETION_OBSERVED) if isinstance(annotations, dict) else None
    if raw is None:
        return None
    try:
        data = json.loads(raw) if isinstance(raw, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return Report(readable=False)
    jobs, nodes = data.get("pendingJobs"), data.get("nodesLeft")
    cancel_at, error = data.get("cancelAt"), data.get("error", "")
    if not (_list_of(jobs, (int, str)) and _list_of(nodes, (str,))):
        return Report(readable=False)
    if not isinstance(cancel_at, str | None) or not isinstance(error, str):
        return Report(readable=False)
    return Report(True, tuple(str(j) for j in jobs), cancel_at, tuple(nodes), error)


def blockers(mode: Release, report: Report | None, held: list[ObservedPod], reservation_pending: bool) -> list[Blocker]:
    """What the deletion still waits for on the Slurm side, first reason first (claims have their own condition)."""
    if mode in (Release.FORCE, Release.CLUSTER_DELETED):
        return []
    found: list[Blocker] = []
    if held and mode == Release.NO_CONTROLLER:
        listing = ", ".join(p.name for p in held)
        found.append(
            Blocker(
                "BusyPodsWithoutController",
                f"no Controller is observed to drain through, and these pods show busy evidence: {listing}. "
                f"If the Controller was deleted on purpose, annotate this NodeSet {names.ANNOTATION_FORCE_DELETE}=true "
                "to release them at once (their jobs end)",
            )
        )
    elif held:
        message = f"{len(held)} pod(s) wait for their Slurm node to drain; see status.drainingPods"
        found.append(Blocker("PodsDraining", message))
    if reservation_pending and mode == Release.DRAIN:
        message = "waiting for slurm_sync to delete this NodeSet's maintenance reservation"
        found.append(Blocker("ReservationLeft", message))
    found += _report_blockers(mode, report)
    return found


def deletion_condition(parent: JSON, mode: Release, found: list[Blocker]) -> JSON:
    if found:
        message = "; ".join(b.message for b in found)
        return condition(parent, names.CONDITION_DELETION_BLOCKED, True, found[0].reason, message)
    if mode == Release.FORCE:
        message = f"{names.ANNOTATION_FORCE_DELETE}=true: every pod was released at once and Slurm was not waited for"
        return condition(parent, names.CONDITION_DELETION_BLOCKED, False, "ForceDelete", message)
    if mode == Release.CLUSTER_DELETED:
        message = "the Controller is being deleted: the cluster goes with it, every pod was released"
        return condition(parent, names.CONDITION_DELETION_BLOCKED, False, "ClusterDeleted", message)
    message = "no pod, no pending job and no Slurm node record of this NodeSet is left"
    return condition(parent, names.CONDITION_DELETION_BLOCKED, False, "NothingLeft", message)


def _report_blockers(mode: Release, report: Report | None) -> list[Blocker]:
    where = f"annotation {names.ANNOTATION_DELETION_OBSERVED}"
    if report is None:
        if mode == Release.DRAIN:
            return [Blocker("WaitingForReport", f"waiting for slurm_sync's deletion report ({where})")]
        return []
    if not report.readable:
        message = f"slurm_sync's deletion report ({where}) cannot be read; waiting for a readable one"
        return [Blocker("ReportUnreadable", message)]
    found = []
    if report.pending_jobs:
        when = f"slurm_sync cancels them at {report.cancel_at}" if report.cancel_at else "no cancel time is set"
        jobs = ", ".join(report.pending_jobs)
        message = f"{len(report.pending_jobs)} job(s) pending in this NodeSet's partition: {jobs} ({when})"
        found.append(Blocker("PendingJobs", message))
    if report.nodes_left and mode == Release.DRAIN:
        found.append(Blocker("NodesLeft", f"Slurm node records still in slurmctld: {', '.join(report.nodes_left)}"))
    if found and report.error:
        found[-1] = Blocker(found[-1].reason, f"{found[-1].message}; last Slurm error: {report.error}")
    return found


def _list_of(value: Any, types: tuple[type, ...]) -> TypeGuard[list[Any]]:
    return isinstance(value, list) and all(isinstance(v, types) and not isinstance(v, bool) for v in value)

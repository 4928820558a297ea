"""updateStrategy ScheduledUpdate: the Slurm maintenance reservation, as intent and report (docs/architecture.md §4).

The hook never talks to Slurm. It publishes the reservation it wants in `status.reservation`
({name, startTime, duration, flags, nodes}) and reads back what slurm_sync did from the NodeSet
annotation `names.ANNOTATION_RESERVATION_OBSERVED` (JSON {name, state, active, maintenance,
error}). Slinky's rules:
* the reservation is `SlurmOperatorMaint-<nodeset>`, flags MAINT, IGNORE_JOBS plus the user's,
  users slurm, nodes = the NodeSet's Slurm nodes, start = scheduledUpdate.startTime, duration
  in minutes;
* it is wanted only while pods are wanted (replicas, or DaemonSet desired, > 0) and Slurm counts
  an idle or allocated node among them. Once slurm_sync reports it created, a dip of those
  counts (nodes DOWN for a moment), or every pod terminating (no hostname to list), keeps the
  last published intent rather than deleting the reservation mid-window;
* old-revision pods whose Slurm node is MAINTENANCE under it are condemned (hooks/nodeset_plan),
  and then drained before deletion like every other condemned pod: MAINTENANCE alone is not
  drained (jobs started before the window under IGNORE_JOBS may still run);
* deleting the NodeSet (finalize) or leaving ScheduledUpdate drops the intent; finalize is
  finished only once slurm_sync reports the reservation gone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hooks.nodeset.observe import ObservedPod
from hooks.nodeset.spec import NodeSetSpec
from hooks.status import condition
from slinky_common import names

JSON = dict[str, Any]


@dataclass(frozen=True)
class Report:
    """slurm_sync's word on the NodeSet's reservation, from the annotation."""

    name: str
    exists: bool
    active: bool
    maintenance: frozenset[str]
    error: str
    absent: bool = False  # state Absent: slurm_sync saw no reservation of this name
    published: JSON | None = None  # the parent's last published status.reservation (kept while Created)


def reservation_name(nodeset: str) -> str:
    return names.RESERVATION_PREFIX + nodeset


def read_report(parent: JSON) -> Report | None:
    """The annotation slurm_sync writes; None when absent or unreadable (then nothing is known)."""
    annotations = (parent.get("metadata") or {}).get("annotations")
    raw = annotations.get(names.ANNOTATION_RESERVATION_OBSERVED) if isinstance(annotations, dict) else None
    if not isinstance(raw, str):
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    nodes = data.get("maintenance")
    published = (parent.get("status") or {}).get(names.STATUS_RESERVATION)
    return Report(
        name=data["name"],
        exists=data.get("state") == names.RESERVATION_STATE_CREATED,
        active=data.get("active") is True,
        maintenance=frozenset(n for n in nodes if isinstance(n, str)) if isinstance(nodes, list) else frozenset(),
        error=data["error"] if isinstance(data.get("error"), str) else "",
        absent=data.get("state") == names.RESERVATION_STATE_ABSENT,
        published=published if isinstance(published, dict) and published.get("name") == data["name"] else None,
    )


def ours(report: Report | None, nodeset: str) -> Report | None:
    """The report, if it is about this NodeSet's reservation."""
    return report if report is not None and report.name == reservation_name(nodeset) else None


def maintenance_nodes(spec: NodeSetSpec, report: Report | None) -> frozenset[str]:
    """Slurm nodes in maintenance under our reservation (only meaningful for ScheduledUpdate)."""
    mine = ours(report, spec.name)
    return mine.maintenance if spec.scheduled is not None and mine is not None and mine.exists else frozenset()


def intent(spec: NodeSetSpec, pods: list[ObservedPod], status: JSON, report: Report | None) -> JSON | None:
    """The reservation the NodeSet wants now, or None (slurm_sync then deletes ours if it exists)."""
    scheduled = spec.scheduled
    if scheduled is None or status.get("desired", 0) <= 0:
        return None
    nodes = sorted({p.hostname for p in pods if p.ours and not p.terminating and p.hostname})
    mine = ours(report, spec.name)
    if not nodes:  # every pod terminating: keep what slurm_sync created rather than delete it mid-window
        return mine.published if mine is not None and mine.exists else None
    if status.get("slurmIdle", 0) + status.get("slurmAllocated", 0) == 0 and not (mine is not None and mine.exists):
        return None
    flags = list(dict.fromkeys([*names.RESERVATION_FLAGS, *scheduled.flags]))
    return {
        "name": reservation_name(spec.name),
        "startTime": scheduled.start_time,
        "duration": scheduled.minutes,
        "flags": flags,
        "nodes": nodes,
    }


def reservation_condition(parent: JSON, spec: NodeSetSpec, wanted: JSON | None, report: Report | None) -> JSON | None:
    """ReservationCreated, for ScheduledUpdate or while a reservation of ours still exists; else None."""
    mine = ours(report, spec.name)
    name = reservation_name(spec.name)
    if wanted is None:
        if mine is not None and mine.exists:
            return condition(
                parent,
                names.CONDITION_RESERVATION_CREATED,
                False,
                "Deleting",
                _with_error(f"slurm_sync deletes reservation {name}", mine),
            )
        if spec.scheduled is None:
            return None
        why = "no pod is wanted" if _wants_no_pods(spec) else "no Slurm node of this NodeSet is idle or allocated yet"
        return condition(
            parent, names.CONDITION_RESERVATION_CREATED, False, "NotNeeded", f"reservation {name} is not created: {why}"
        )
    if mine is None or not mine.exists:
        message = _with_error(
            f"waiting for slurm_sync to create reservation {name} for {', '.join(wanted['nodes'])}", mine
        )
        return condition(parent, names.CONDITION_RESERVATION_CREATED, False, "Pending", message)
    window = (
        "active: old pods in maintenance are drained and replaced" if mine.active else f"starts {wanted['startTime']}"
    )
    result = condition(
        parent,
        names.CONDITION_RESERVATION_CREATED,
        True,
        "Created",
        _with_error(f"reservation {name} exists ({window})", mine),
    )
    result["lastTransitionTime"] = wanted["startTime"]  # Slinky's choice: the window's start
    return result


def _wants_no_pods(spec: NodeSetSpec) -> bool:
    """replicas 0 in StatefulSet mode (DaemonSet mode: reported as "no node idle or allocated")."""
    return spec.replicas == 0 and spec.scaling_mode != "DaemonSet"


def pending_deletion(parent: JSON, spec_name: str, report: Report | None) -> bool:
    """Finalize must wait: a reservation of ours may exist in Slurm.

    Only slurm_sync's report "Absent" about our name says it does not. Without a report, one may
    exist only if an intent was published (status.reservation); an unreadable report, or one about
    another name or in another state, may hide one.
    """
    mine = ours(report, spec_name)
    if mine is not None:
        return not mine.absent
    annotations = (parent.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict) and names.ANNOTATION_RESERVATION_OBSERVED in annotations:
        return True
    return (parent.get("status") or {}).get(names.STATUS_RESERVATION) is not None


def _with_error(message: str, report: Report | None) -> str:
    return f"{message}; last Slurm error: {report.error}" if report is not None and report.error else message

"""ScheduledUpdate: the NodeSets' Slurm maintenance reservations (hooks/nodeset_reservation.py).

The NodeSet hook publishes the reservation it wants in `status.reservation`; this module makes
Slurm match and reports back in the NodeSet annotation `names.ANNOTATION_RESERVATION_OBSERVED`
(JSON {name, state, active, maintenance, error}), which wakes the hook.

* Only ours: only reservations named `SlurmOperatorMaint-<nodeset>` are read, changed or deleted.
* Fail closed: without a successful node listing and reservation listing nothing is written.
* Writes only on change: an existing reservation that matches is left alone; an active one
  (the window has begun) only gets its node list updated; an inactive one whose start, length
  or flags differ is deleted and created again (POST only adds flags, it cannot drop one).
* A reservation whose NodeSet has no intent (ScheduledUpdate left, scaled to zero, being
  deleted) or no longer exists is deleted.
* A window that has begun is created from now to its end (Slurm refuses a start more than a
  few minutes in the past); one that has ended is not created. Recurring windows (HOURLY,
  DAILY, WEEKLY) are moved forward to their next occurrence, and Slurm moves them on itself, so
  their start matches modulo the period.
* Nothing is read when no NodeSet of the cluster has an intent or a report (no Slurm call).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hooks import names
from slurm_sync.bridge_plan import expand_hostlist
from slurm_sync.slurm_errors import SlurmError, SlurmNotFound
from slurm_sync.slurm_types import Node, Reservation
from slurm_sync.view import ClusterView, NodeSetView

if TYPE_CHECKING:  # the loop imports this module; only its attributes are used
    from slurm_sync.operator import OperatorLoop, Tally
    from slurm_sync.plan import SlurmView

log = logging.getLogger(__name__)

PERIODS = {"HOURLY": 3600, "DAILY": 86400, "WEEKLY": 7 * 86400}
RECURRING = frozenset({*PERIODS, "WEEKDAY", "WEEKEND"})
SLURM_ADDED_FLAGS = frozenset({"SPEC_NODES"})  # flags Slurm sets on its own


@dataclass(frozen=True)
class Wanted:
    """A NodeSet's published reservation intent, checked."""

    nodeset: str
    name: str
    start: int  # epoch seconds
    minutes: int
    flags: tuple[str, ...]
    nodes: tuple[str, ...]

    @property
    def period(self) -> int | None:
        return next((PERIODS[f] for f in self.flags if f in PERIODS), None)

    @property
    def recurring(self) -> bool:
        return any(f in RECURRING for f in self.flags)


@dataclass(frozen=True)
class Action:
    """One Slurm write: create (body), update (body: changes), delete."""

    verb: str
    name: str
    body: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class NodeSetPlan:
    """What to do for one NodeSet's reservation, and what to report if it all succeeds."""

    nodeset: NodeSetView
    name: str
    actions: tuple[Action, ...]
    exists_after: bool  # the reservation exists once the actions succeeded
    active: bool
    note: str = ""  # why nothing could be done (reported as the error)


@dataclass
class Outcome:
    errors: list[str] = field(default_factory=list)


def reservation_name(nodeset: str) -> str:
    return names.RESERVATION_PREFIX + nodeset


def parse_time(text: Any) -> int | None:
    if not isinstance(text, str):
        return None
    try:
        return int(datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return None


def read_wanted(nodeset: NodeSetView) -> Wanted | None:
    """status.reservation read defensively: anything unreadable or not ours is no intent."""
    raw = nodeset.reservation
    if not isinstance(raw, Mapping) or raw.get("name") != reservation_name(nodeset.name) or nodeset.deleting:
        return None
    start, minutes = parse_time(raw.get("startTime")), raw.get("duration")
    flags, nodes = raw.get("flags"), raw.get("nodes")
    if start is None or not isinstance(minutes, int) or minutes < 1:
        return None
    if not isinstance(flags, list) or not isinstance(nodes, list):
        return None
    flag_words = tuple(dict.fromkeys([*names.RESERVATION_FLAGS, *(f.upper() for f in flags if isinstance(f, str))]))
    node_names = tuple(sorted({n for n in nodes if isinstance(n, str) and n}))
    return Wanted(nodeset.name, raw["name"], start, minutes, flag_words, node_names)


def in_scope(cluster: ClusterView) -> list[NodeSetView]:
    """NodeSets with an intent or a report: the only ones this pass looks at."""
    return [n for n in sorted(cluster.nodesets.values(), key=lambda n: n.name) if n.reservation is not None or n.reservation_report is not None]


def window(wanted: Wanted, now: int) -> tuple[int, int] | None:
    """(start, minutes) to create now, or None when a one-off window has already ended."""
    start, length = wanted.start, wanted.minutes * 60
    period = wanted.period
    if period is not None:
        while start + length <= now:
            start += period
    elif wanted.recurring:
        return start, wanted.minutes
    if start + length <= now:
        return None
    if start < now:
        return now, max(1, math.ceil((start + length - now) / 60))
    return start, wanted.minutes


def create_body(wanted: Wanted, nodes: Sequence[str], start: int, minutes: int) -> dict[str, Any]:
    return {
        "name": wanted.name,
        "node_list": list(nodes),
        "users": [names.RESERVATION_USER],
        "flags": list(wanted.flags),
        "start_time": {"set": True, "number": start},
        "duration": {"set": True, "number": minutes},
    }


def _matches(wanted: Wanted, existing: Reservation) -> bool:
    """Start, length and flags as wanted (recurring: start modulo the period)."""
    flags = set(wanted.flags)
    if not flags <= existing.flags or existing.flags - flags - SLURM_ADDED_FLAGS:
        return False
    if existing.start_time is None or existing.end_time is None or existing.end_time - existing.start_time != wanted.minutes * 60:
        return False
    period = wanted.period
    if period is not None:
        return (existing.start_time - wanted.start) % period == 0
    return existing.start_time == wanted.start


def plan_nodeset(nodeset: NodeSetView, existing: Reservation | None, nodes: Mapping[str, Node], now: int) -> NodeSetPlan:
    """The writes that make Slurm hold what the NodeSet wants (pure)."""
    name = reservation_name(nodeset.name)
    wanted = read_wanted(nodeset)
    active = existing is not None and existing.start_time is not None and existing.start_time <= now < (existing.end_time or 0)
    if wanted is None:
        if existing is None:
            return NodeSetPlan(nodeset, name, (), exists_after=False, active=False)
        return NodeSetPlan(nodeset, name, (Action("delete", name),), exists_after=False, active=False)
    known = [n for n in wanted.nodes if n in nodes]
    missing = [n for n in wanted.nodes if n not in nodes]
    note = f"not in Slurm, left out: {','.join(missing)}" if missing else ""
    if existing is None:
        when = window(wanted, now)
        if when is None:
            return NodeSetPlan(nodeset, name, (), False, False, "the maintenance window has ended; not created")
        if not known:
            return NodeSetPlan(nodeset, name, (), False, False, "none of the NodeSet's nodes is known to Slurm; not created")
        start, minutes = when
        return NodeSetPlan(nodeset, name, (Action("create", name, create_body(wanted, known, start, minutes)),), True, start <= now, note)
    try:
        current = set(expand_hostlist(existing.node_list))
    except ValueError:
        current = set()
    if not known:
        return NodeSetPlan(nodeset, name, (), True, active, note)
    if not active and not _matches(wanted, existing):
        when = window(wanted, now)
        if when is None:
            return NodeSetPlan(nodeset, name, (Action("delete", name),), False, False, "the maintenance window has ended")
        start, minutes = when
        recreate = (Action("delete", name), Action("create", name, create_body(wanted, known, start, minutes)))
        return NodeSetPlan(nodeset, name, recreate, True, start <= now, note)
    if current != set(known):
        return NodeSetPlan(nodeset, name, (Action("update", name, {"node_list": known}),), True, active, note)
    return NodeSetPlan(nodeset, name, (), True, active, note)


def report(plan: NodeSetPlan, exists: bool, nodes: Mapping[str, Node], error: str) -> str:
    """The annotation value (compact JSON, stable key order)."""
    maintenance = sorted(n.name for n in nodes.values() if n.reservation == plan.name and "MAINTENANCE" in n.state) if exists else []
    state = names.RESERVATION_STATE_CREATED if exists else names.RESERVATION_STATE_ABSENT
    body = {"name": plan.name, "state": state, "active": exists and plan.active, "maintenance": maintenance, "error": error}
    return json.dumps(body, separators=(",", ":"))


def plan_cluster(cluster: ClusterView, reservations: Sequence[Reservation], nodes: Mapping[str, Node], now: int) -> tuple[list[NodeSetPlan], list[Action]]:
    """Per-NodeSet plans, plus deletions of our reservations whose NodeSet is gone."""
    ours = {r.name: r for r in reservations if r.name.startswith(names.RESERVATION_PREFIX)}
    plans = [plan_nodeset(n, ours.get(reservation_name(n.name)), nodes, now) for n in in_scope(cluster)]
    known = {reservation_name(n) for n in cluster.nodesets}
    orphans = [Action("delete", name) for name in sorted(ours) if name not in known]
    return plans, orphans


def epoch(text: str) -> int:
    return parse_time(text) or 0


def execute(loop: OperatorLoop, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Reconcile the cluster's reservations; report on each NodeSet in scope (the one call from the loop)."""
    scope = in_scope(cluster)
    if not scope or slurm.nodes is None:
        return
    try:
        listing = loop.slurm.list_reservations()
    except SlurmError as exc:
        loop._slurm_error(tally, "list reservations", exc)
        return
    nodes = slurm.nodes
    plans, orphans = plan_cluster(cluster, listing.items, nodes, epoch(loop._now()))
    for action in orphans:
        _write(loop, tally, action)
    for plan in plans:
        exists = plan.exists_after
        error = plan.note
        for action in plan.actions:
            failure = _write(loop, tally, action)
            if failure is not None:
                exists = _exists_after_failure(plan, action)
                error = failure
                break
        value = report(plan, exists, nodes, error)
        if value != plan.nodeset.reservation_report:
            loop._kube_write(
                tally,
                f"nodeset {plan.nodeset.name} reservation report",
                lambda p=plan, v=value: loop.kube.annotate_nodeset(p.nodeset.namespace, p.nodeset.name, names.ANNOTATION_RESERVATION_OBSERVED, v),
            )


def _exists_after_failure(plan: NodeSetPlan, failed: Action) -> bool:
    """What a failed write leaves: a failed delete or update leaves it; a failed create leaves none."""
    return failed.verb in ("delete", "update")


def _write(loop: OperatorLoop, tally: Tally, action: Action) -> str | None:
    """One Slurm write; the error text on failure (a delete of a reservation already gone succeeds)."""
    try:
        if action.verb == "create":
            loop.slurm.create_reservation(action.body or {})
        elif action.verb == "update":
            loop.slurm.update_reservation(action.name, action.body or {})
        else:
            try:
                loop.slurm.delete_reservation(action.name)
            except SlurmNotFound:
                log.info("cluster %s: reservation %s already gone", loop.name, action.name)
                return None
    except SlurmError as exc:
        loop._slurm_error(tally, f"{action.verb} reservation {action.name}", exc)
        return str(exc)
    tally.slurm_writes += 1
    loop.metrics.slurm_writes.labels(loop.name, f"reservation-{action.verb}").inc()
    log.info("cluster %s: reservation %s: %s", loop.name, action.name, action.verb)
    return None

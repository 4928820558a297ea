"""ScheduledUpdate: the NodeSets' Slurm maintenance reservations (hooks/nodeset/reservation.py).

The NodeSet hook publishes the reservation it wants in `status.reservation`; this module makes
Slurm match and reports back in the NodeSet annotation `names.ANNOTATION_RESERVATION_OBSERVED`
(JSON {name, state, active, maintenance, error}), which wakes the hook.

* Only ours: only reservations named `SlurmOperatorMaint-<nodeset>` for a NodeSet in scope are
  changed or deleted. One whose NodeSet is gone is deleted only if it carries our mark (comment
  "slinky-metacontroller <ns>/<nodeset> <uid>", set at create) for this Controller's namespace;
  slurmrestd v0.0.45 does not list the comment back, so there such leftovers are left alone.
* Fail closed: without a successful node listing and reservation listing nothing is written.
* Absence is proven (docs/architecture.md §4.2): a listing that lacks a reservation the report
  does not already call Absent only makes us ask Slurm for it by name (``GET reservation/<name>``);
  the report says Absent once Slurm's not-found answer held on a later pass. Our own successful
  delete is Slurm's answer already.
* Writes only on change: an existing reservation that matches is left alone; an active one
  (the window has begun) only gets its node list updated; an inactive one whose start, length
  or flags differ is deleted and created again (POST only adds flags, it cannot drop one).
  Flags compare as sets over names.RESERVATION_USER_FLAGS (those Slurm lists back unchanged):
  others in a status are ignored, others listed by Slurm (SPEC_NODES, ...) too. An unparsable
  node list or clock is reported, never written over.
* A reservation whose NodeSet has no intent (ScheduledUpdate left, scaled to zero, being
  deleted) or no longer exists is deleted.
* A one-off window that has begun is created from now to its end (Slurm refuses a start more
  than a few minutes in the past) and then matches while it ends when wanted; one that has ended
  is not created. Recurring windows (HOURLY, DAILY, WEEKLY) are created at their next occurrence
  not yet begun (so Slurm's recurrence stays aligned), and Slurm moves them on itself, so their
  start matches modulo the period.
* Nothing is read when no NodeSet of the cluster has an intent or a report other than Absent
  (no Slurm call).
"""

from __future__ import annotations

import datetime
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from slinky_common import names
from slurm_sync.events import ObjectRef, controller_ref, nodeset_ref
from slurm_sync.hostlist import expand_hostlist
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.operator.view import ClusterView, NodeSetView
from slurm_sync.slurm.errors import SlurmError, SlurmNotFound
from slurm_sync.slurm.types import Node, Reservation

log = logging.getLogger(__name__)

PERIODS = {"HOURLY": 3600, "DAILY": 86400, "WEEKLY": 7 * 86400}


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
    def end(self) -> int:
        return self.start + self.minutes * 60


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
    words = (f.upper() for f in flags if isinstance(f, str))
    flag_words = tuple(
        dict.fromkeys([*names.RESERVATION_FLAGS, *(f for f in words if f in names.RESERVATION_USER_FLAGS)])
    )
    node_names = tuple(sorted({n for n in nodes if isinstance(n, str) and n}))
    return Wanted(nodeset.name, raw["name"], start, minutes, flag_words, node_names)


def _reported_state(nodeset: NodeSetView) -> str | None:
    """The state our last report gives (Created, Absent), or None without a readable one."""
    try:
        data = json.loads(nodeset.reservation_report or "")
    except ValueError:
        return None
    return data.get("state") if isinstance(data, dict) and data.get("name") == reservation_name(nodeset.name) else None


def _reported_absent(nodeset: NodeSetView) -> bool:
    return _reported_state(nodeset) == names.RESERVATION_STATE_ABSENT


def in_scope(cluster: ClusterView) -> list[NodeSetView]:
    """NodeSets with an intent, or a report other than Absent: the only ones this pass looks at."""
    nodesets = sorted(cluster.nodesets.values(), key=lambda n: n.name)
    return [
        n
        for n in nodesets
        if n.reservation is not None or (n.reservation_report is not None and not _reported_absent(n))
    ]


def window(wanted: Wanted, now: int) -> tuple[int, int] | None:
    """(start, minutes) to create now, or None when a one-off window has already ended."""
    start, length = wanted.start, wanted.minutes * 60
    period = wanted.period
    if period is not None:  # the next occurrence not yet begun: a start of "now" would skew the recurrence
        if start < now:
            start += math.ceil((now - start) / period) * period
        return start, wanted.minutes
    if start + length <= now:
        return None
    if start < now:
        return now, max(1, math.ceil((start + length - now) / 60))
    return start, wanted.minutes


def mark(nodeset: NodeSetView) -> str:
    return f"{names.RESERVATION_MARK}{nodeset.namespace}/{nodeset.name} {nodeset.uid}"


def create_body(wanted: Wanted, nodeset: NodeSetView, nodes: Sequence[str], start: int, minutes: int) -> dict[str, Any]:
    return {
        "name": wanted.name,
        "comment": mark(nodeset),
        "node_list": list(nodes),
        "users": [names.RESERVATION_USER],
        "flags": list(wanted.flags),
        "start_time": {"set": True, "number": start},
        "duration": {"set": True, "number": minutes},
    }


def _matches(wanted: Wanted, existing: Reservation, now: int) -> bool:
    """Flags, start and length as wanted.

    Flags: as sets over the flags we may ask for. Recurring: start modulo the period, same length.
    One-off: same start and end, or, once the wanted window has begun, the same end and a later
    start (we created it from "now").
    """
    vocabulary = names.RESERVATION_USER_FLAGS | set(names.RESERVATION_FLAGS)
    if set(wanted.flags) != existing.flags & vocabulary:
        return False
    if existing.start_time is None or existing.end_time is None:
        return False
    period = wanted.period
    if period is not None:
        return (
            existing.end_time - existing.start_time == wanted.minutes * 60
            and (existing.start_time - wanted.start) % period == 0
        )
    if existing.end_time != wanted.end:
        return False
    return existing.start_time == wanted.start or (wanted.start < existing.start_time and wanted.start <= now)


def plan_nodeset(
    nodeset: NodeSetView, existing: Reservation | None, nodes: Mapping[str, Node], now: int
) -> NodeSetPlan:
    """The writes that make Slurm hold what the NodeSet wants (pure)."""
    name = reservation_name(nodeset.name)
    wanted = read_wanted(nodeset)
    active = (
        existing is not None
        and existing.start_time is not None
        and existing.start_time <= now < (existing.end_time or 0)
    )
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
            return NodeSetPlan(
                nodeset, name, (), False, False, "none of the NodeSet's nodes is known to Slurm; not created"
            )
        start, minutes = when
        return NodeSetPlan(
            nodeset,
            name,
            (Action("create", name, create_body(wanted, nodeset, known, start, minutes)),),
            True,
            start <= now,
            note,
        )
    if not known:
        return NodeSetPlan(nodeset, name, (), True, active, note)
    if not active and not _matches(wanted, existing, now):
        when = window(wanted, now)
        if when is None:
            return NodeSetPlan(
                nodeset, name, (Action("delete", name),), False, False, "the maintenance window has ended"
            )
        start, minutes = when
        recreate = (Action("delete", name), Action("create", name, create_body(wanted, nodeset, known, start, minutes)))
        return NodeSetPlan(nodeset, name, recreate, True, start <= now, note)
    try:
        current = set(expand_hostlist(existing.node_list))
        if not current and existing.node_list.strip():
            raise ValueError(existing.node_list)  # expand_hostlist yields nothing for some malformed lists
    except ValueError:
        unreadable = f"Slurm's node list {existing.node_list!r} is unreadable; not updated"
        return NodeSetPlan(nodeset, name, (), True, active, f"{note}; {unreadable}" if note else unreadable)
    if current != set(known):
        return NodeSetPlan(nodeset, name, (Action("update", name, {"node_list": known}),), True, active, note)
    return NodeSetPlan(nodeset, name, (), True, active, note)


def report(plan: NodeSetPlan, exists: bool, nodes: Mapping[str, Node], error: str) -> str:
    """The annotation value (compact JSON, stable key order)."""
    maintenance = (
        sorted(n.name for n in nodes.values() if n.reservation == plan.name and "MAINTENANCE" in n.state)
        if exists
        else []
    )
    state = names.RESERVATION_STATE_CREATED if exists else names.RESERVATION_STATE_ABSENT
    body = {
        "name": plan.name,
        "state": state,
        "active": exists and plan.active,
        "maintenance": maintenance,
        "error": error,
    }
    return json.dumps(body, separators=(",", ":"))


def plan_cluster(
    cluster: ClusterView, reservations: Sequence[Reservation], nodes: Mapping[str, Node], now: int
) -> tuple[list[NodeSetPlan], list[Action]]:
    """Per-NodeSet plans, plus deletions of reservations marked ours whose NodeSet (of this namespace) is gone."""
    ours = {r.name: r for r in reservations if r.name.startswith(names.RESERVATION_PREFIX)}
    plans = [plan_nodeset(n, ours.get(reservation_name(n.name)), nodes, now) for n in in_scope(cluster)]
    orphans = [Action("delete", name) for name, r in sorted(ours.items()) if _orphan(cluster, r)]
    return plans, orphans


def _orphan(cluster: ClusterView, existing: Reservation) -> bool:
    """Marked by us at create for a NodeSet of this namespace that no longer exists."""
    owner = (
        existing.comment.removeprefix(names.RESERVATION_MARK)
        if existing.comment.startswith(names.RESERVATION_MARK)
        else ""
    )
    namespace, _, rest = owner.partition("/")
    nodeset = rest.split(" ", 1)[0]
    if namespace != cluster.namespace or not nodeset or existing.name != reservation_name(nodeset):
        return False
    return nodeset not in cluster.nodesets


def execute(ctx: StepContext, cluster: ClusterView, slurm: SlurmView, tally: Tally) -> None:
    """Reconcile the cluster's reservations; report on each NodeSet in scope (the one call from the loop)."""
    scope = in_scope(cluster)
    if not scope or slurm.nodes is None:
        return
    now = parse_time(ctx.now)
    try:
        listing = ctx.slurm.list_reservations()
    except SlurmError as exc:
        ctx.slurm_error(tally, "list reservations", exc)
        return
    if now is None:  # every window would look past or active: write nothing
        tally.errors.append(f"reservations: unreadable clock {ctx.now!r}; nothing written")
        log.warning("cluster %s: reservations skipped: unreadable clock", ctx.cluster)
        return
    nodes = slurm.nodes
    plans, orphans = plan_cluster(cluster, listing.items, nodes, now)
    for action in orphans:
        _write(ctx, tally, action, controller_ref(cluster.namespace, cluster.controller))
    ctx.reservation_absence.next_pass()
    unproven = [p.name for p in plans if _absence_unproven(p)]
    ctx.reservation_absence.forget_except(unproven)
    for plan in plans:
        if plan.name in unproven and not _proven_absent(ctx, tally, plan.name):
            continue  # the listing lacks it: the report stays as it is until Slurm says, twice, that it is gone
        exists = plan.exists_after
        error = plan.note
        for action in plan.actions:
            failure = _write(
                ctx, tally, action, nodeset_ref(plan.nodeset.namespace, plan.nodeset.name, plan.nodeset.uid)
            )
            if failure is not None:
                exists = _exists_after_failure(plan, action)
                error = failure
                break
        value = report(plan, exists, nodes, error)
        if value != plan.nodeset.reservation_report:
            ctx.kube_write(
                tally,
                f"nodeset {plan.nodeset.name} reservation report",
                partial(
                    ctx.kube.annotate_nodeset,
                    plan.nodeset.namespace,
                    plan.nodeset.name,
                    names.ANNOTATION_RESERVATION_OBSERVED,
                    value,
                ),
            )


def _absence_unproven(plan: NodeSetPlan) -> bool:
    """The plan would report Absent only because the listing lacks the reservation (no delete of ours
    removed it), and the report says otherwise now: that needs Slurm's own word (docs/architecture.md §4.2)."""
    return (
        not plan.exists_after and not plan.actions and _reported_state(plan.nodeset) != names.RESERVATION_STATE_ABSENT
    )


def _proven_absent(ctx: StepContext, tally: Tally, name: str) -> bool:
    """Slurm, asked for the reservation by name, said it has none, on two passes (slurm_sync/proof.py)."""
    try:
        ctx.slurm.get_reservation(name)
    except SlurmNotFound:
        if ctx.reservation_absence.not_found(name):
            return True
        log.info("cluster %s: Slurm says reservation %s does not exist; confirming on a later pass", ctx.cluster, name)
        return False
    except SlurmError as exc:
        ctx.slurm_error(tally, f"get reservation {name}", exc)
        return False
    ctx.reservation_absence.found(name)
    log.warning(
        "cluster %s: reservation %s is missing from the listing but Slurm has it; its report is left as it is",
        ctx.cluster,
        name,
    )
    return False


def _exists_after_failure(plan: NodeSetPlan, failed: Action) -> bool:
    """What a failed write leaves: a failed delete or update leaves it; a failed create leaves none."""
    return failed.verb in ("delete", "update")


_DONE = {"create": "ReservationCreated", "update": "ReservationUpdated", "delete": "ReservationDeleted"}
_WHY = {
    "create": "for the NodeSet's ScheduledUpdate maintenance window",
    "update": "to the NodeSet's current nodes",
    "delete": "no NodeSet wants it any more",
}


def _write(ctx: StepContext, tally: Tally, action: Action, about: ObjectRef) -> str | None:
    """One Slurm write, told as an event on ``about``; the error text on failure (a delete of a
    reservation already gone succeeds)."""
    try:
        if action.verb == "create":
            ctx.slurm.create_reservation(action.body or {})
        elif action.verb == "update":
            ctx.slurm.update_reservation(action.name, action.body or {})
        else:
            try:
                ctx.slurm.delete_reservation(action.name)
            except SlurmNotFound:
                log.info("cluster %s: reservation %s already gone", ctx.cluster, action.name)
                return None
    except SlurmError as exc:
        ctx.slurm_error(tally, f"{action.verb} reservation {action.name}", exc)
        ctx.events.warn(
            about,
            "ReservationFailed",
            f"Slurm did not {action.verb} reservation {action.name}: {exc}. Retried on the next pass.",
            "Reserve",
        )
        return str(exc)
    tally.slurm_writes += 1
    ctx.metrics.slurm_writes.labels(ctx.cluster, f"reservation-{action.verb}").inc()
    log.info("cluster %s: reservation %s: %s", ctx.cluster, action.name, action.verb)
    nodes = f" on {','.join((action.body or {}).get('node_list') or [])}" if action.verb != "delete" else ""
    ctx.events.normal(
        about,
        _DONE[action.verb],
        f"Slurm reservation {action.name}{nodes} {action.verb}d: {_WHY[action.verb]}.",
        "Reserve",
    )
    return None

"""ScheduledUpdate reservations in slurm_sync: the pure plan, the loop against a pinned fake
apiserver (pytest-httpserver, official client), and the real Slurm lab."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.reservations import execute, in_scope, parse_time, plan_cluster, plan_nodeset, report
from slurm_sync.operator.view import ClusterView, read_nodeset
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmNotFound, SlurmUnavailable
from slurm_sync.slurm.types import Listing, Node, Reservation, parse_node
from tests.slurm_sync.kubefixtures import CLUSTER, NS, FakeSlurm, RecordedEvents, api_client, nodeset
from tests.slurm_sync.operator.looprig import MERGE, expect_patch, expect_reads, run, settled_hash

NOW_EPOCH = 1_767_323_045  # kubefixtures.NOW, 2026-01-02T03:04:05Z
FUTURE = "2026-01-02T05:00:00Z"
FUTURE_EPOCH = NOW_EPOCH + 3600 + 55 * 60 + 55
RESV = "SlurmOperatorMaint-gpu"


def node(name: str, *state: str, reservation: str = "") -> Node:
    return parse_node({"name": name, "state": list(state or ("IDLE",)), "reservation": reservation})


NODES = {n: node(n) for n in ("gpu-0", "gpu-1")}


def scheduled(
    nodes=("gpu-0", "gpu-1"),
    start=FUTURE,
    duration=30,
    flags=("MAINT", "IGNORE_JOBS"),
    report_value=None,
    deleting=False,
) -> dict:
    obj = nodeset(deleting=deleting, when_deleted="Delete" if deleting else None)  # no PVC release to pin
    obj["status"][names.STATUS_RESERVATION] = {
        "name": RESV,
        "startTime": start,
        "duration": duration,
        "flags": list(flags),
        "nodes": list(nodes),
    }
    if report_value is not None:
        obj["metadata"].setdefault("annotations", {})[names.ANNOTATION_RESERVATION_OBSERVED] = report_value
    return obj


def resv(
    nodes="gpu-[0-1]",
    start=FUTURE_EPOCH,
    minutes=30,
    flags=("MAINT", "IGNORE_JOBS", "SPEC_NODES"),
    name=RESV,
    comment="",
) -> Reservation:
    return Reservation(name, nodes, frozenset(flags), start, start + minutes * 60, "slurm", "", "", comment=comment)


def cluster_of(*objs: dict) -> ClusterView:
    views = [read_nodeset(o) for o in objs]
    return ClusterView(NS, CLUSTER, (), {v.name: v for v in views}, {}, ())


def verbs(plan) -> list[str]:
    return [a.verb for a in plan.actions]


# --- the pure plan ------------------------------------------------------------------------


def test_creates_the_reservation_with_maint_ignore_jobs_for_known_nodes_at_the_start():
    plan = plan_nodeset(read_nodeset(scheduled(nodes=("gpu-0", "gpu-1", "gpu-9"))), None, NODES, NOW_EPOCH)
    (action,) = plan.actions
    assert action.verb == "create" and action.body == {
        "name": RESV,
        "comment": f"slinky-metacontroller {NS}/gpu uid-gpu",
        "node_list": ["gpu-0", "gpu-1"],
        "users": ["slurm"],
        "flags": ["MAINT", "IGNORE_JOBS"],
        "start_time": {"set": True, "number": FUTURE_EPOCH},
        "duration": {"set": True, "number": 30},
    }
    assert plan.exists_after and not plan.active and "gpu-9" in plan.note


def test_a_matching_reservation_is_left_alone():
    assert verbs(plan_nodeset(read_nodeset(scheduled()), resv(), NODES, NOW_EPOCH)) == []


def test_an_active_reservation_only_gets_its_node_list_updated():
    active = resv(nodes="gpu-0", start=NOW_EPOCH - 60, flags=("MAINT",))  # flags and start differ too
    plan = plan_nodeset(read_nodeset(scheduled()), active, NODES, NOW_EPOCH)
    assert [(a.verb, a.body) for a in plan.actions] == [("update", {"node_list": ["gpu-0", "gpu-1"]})]
    assert plan.active


def test_an_inactive_reservation_with_other_flags_or_start_is_recreated():
    for existing in (resv(flags=("MAINT", "IGNORE_JOBS", "DAILY")), resv(start=FUTURE_EPOCH + 60), resv(minutes=60)):
        assert verbs(plan_nodeset(read_nodeset(scheduled()), existing, NODES, NOW_EPOCH)) == ["delete", "create"]


def test_a_recurring_reservation_matches_modulo_its_period():
    wanted = read_nodeset(scheduled(flags=("MAINT", "IGNORE_JOBS", "DAILY")))
    moved = resv(start=FUTURE_EPOCH + 2 * 86400, flags=("MAINT", "IGNORE_JOBS", "DAILY", "SPEC_NODES"))
    assert verbs(plan_nodeset(wanted, moved, NODES, NOW_EPOCH)) == []


def test_a_begun_window_is_created_from_now_and_an_ended_one_not_at_all():
    begun = plan_nodeset(read_nodeset(scheduled(start="2026-01-02T03:00:00Z", duration=30)), None, NODES, NOW_EPOCH)
    body = begun.actions[0].body
    assert body["start_time"]["number"] == NOW_EPOCH and body["duration"]["number"] == 26 and begun.active
    ended = plan_nodeset(read_nodeset(scheduled(start="2026-01-02T01:00:00Z", duration=30)), None, NODES, NOW_EPOCH)
    assert ended.actions == () and not ended.exists_after and "ended" in ended.note


def test_no_intent_deletes_ours_and_orphans_but_never_other_reservations():
    without = nodeset()
    without.setdefault("metadata", {}).setdefault("annotations", {})[names.ANNOTATION_RESERVATION_OBSERVED] = "{}"
    others = [resv(), resv(name="SlurmOperatorMaint-gone"), resv(name="admin-maint"), resv(name="slurmoperatormaint-x")]
    plans, orphans = plan_cluster(cluster_of(without), others, NODES, NOW_EPOCH)
    assert [(p.name, verbs(p)) for p in plans] == [(RESV, ["delete"])]
    assert orphans == []  # SlurmOperatorMaint-gone carries no mark of ours: not ours to delete
    deleting = read_nodeset(scheduled(deleting=True))  # a NodeSet being deleted wants none, whatever its status says
    assert verbs(plan_nodeset(deleting, resv(), NODES, NOW_EPOCH)) == ["delete"]


def test_report_names_the_nodes_in_maintenance_under_our_reservation_only():
    nodes = {
        "gpu-0": node("gpu-0", "IDLE", "MAINTENANCE", reservation=RESV),
        "gpu-1": node("gpu-1", "IDLE", "MAINTENANCE", reservation="admin"),
    }
    plan = plan_nodeset(read_nodeset(scheduled()), resv(start=NOW_EPOCH - 60), nodes, NOW_EPOCH)
    assert json.loads(report(plan, True, nodes, "")) == {
        "name": RESV,
        "state": "Created",
        "active": True,
        "maintenance": ["gpu-0"],
        "error": "",
    }


# --- the loop against a pinned fake apiserver -------------------------------------------------


@dataclass
class ReservingSlurm(FakeSlurm):
    reservations: list[Reservation] = field(default_factory=list)
    # Slurm has them; the listing leaves them out
    unlisted_reservations: list[Reservation] = field(default_factory=list)
    list_fails: bool = False
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def list_reservations(self) -> Listing[Reservation]:
        self.calls.append(("list", None))
        if self.list_fails:
            raise SlurmUnavailable("slurmrestd down")
        return Listing(tuple(self.reservations), 1, False)

    def create_reservation(self, body: dict) -> None:
        self.calls.append(("create", body))

    def update_reservation(self, name: str, changes: dict) -> None:
        self.calls.append(("update", (name, changes)))

    def delete_reservation(self, name: str) -> None:
        self.calls.append(("delete", name))
        if name not in {r.name for r in self.reservations}:
            raise SlurmNotFound("gone", status=404)
        self.reservations = [r for r in self.reservations if r.name != name]

    def get_reservation(self, name: str) -> Reservation:
        self.calls.append(("get", name))
        if self.list_fails:
            raise SlurmUnavailable("slurmrestd down")
        found = [r for r in [*self.reservations, *self.unlisted_reservations] if r.name == name]
        if not found:
            raise SlurmNotFound(f"GET reservation/{name}: Slurm has no reservation {name!r}", status=422)
        return found[0]


@pytest.fixture
def server(httpserver: HTTPServer) -> Iterator[HTTPServer]:
    yield httpserver
    httpserver.clear()


def loop(server: HTTPServer, slurm: FakeSlurm) -> OperatorLoop:
    metrics = Metrics()
    kube = Kube(api_client(server.url_for("/")), metrics.count_kube_write)
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,
        kube,
        metrics,  # type: ignore[arg-type]
        events=RecordedEvents(),
        now=lambda: "2026-01-02T03:04:05Z",
    )


def created_report(active: bool = False, maintenance: list[str] | None = None) -> str:
    return json.dumps(
        {"name": RESV, "state": "Created", "active": active, "maintenance": maintenance or [], "error": ""},
        separators=(",", ":"),
    )


def with_observed(obj: dict) -> dict:
    obj["metadata"].setdefault("annotations", {})[names.ANNOTATION_SLURM_OBSERVED] = settled_hash()
    return obj


def test_loop_creates_then_reports_once_then_stays_quiet(server: HTTPServer) -> None:
    slurm = ReservingSlurm(dict(NODES))
    expect_reads(server, [], [with_observed(scheduled())], None, [])
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {"metadata": {"annotations": {names.ANNOTATION_RESERVATION_OBSERVED: created_report()}}},
    )
    result = run(server, loop(server, slurm))
    assert result.ok and result.kube_writes == 1 and result.slurm_writes == 1
    assert [c[0] for c in slurm.calls] == ["list", "create"]
    # next pass: Slurm has it, the report is there: no write on either side
    slurm = ReservingSlurm(dict(NODES), reservations=[resv()])
    expect_reads(server, [], [with_observed(scheduled(report_value=created_report()))], None, [])
    result = run(server, loop(server, slurm))
    assert (
        result.ok and result.kube_writes == 0 and result.slurm_writes == 0 and [c[0] for c in slurm.calls] == ["list"]
    )


def test_loop_fails_closed_when_the_listing_fails(server: HTTPServer) -> None:
    slurm = ReservingSlurm(dict(NODES), list_fails=True)
    expect_reads(server, [], [with_observed(scheduled())], None, [])
    result = run(server, loop(server, slurm))
    assert not result.ok and result.kube_writes == 0 and slurm.calls == [("list", None)]


def test_loop_deletes_for_a_nodeset_being_deleted_and_reports_it_absent(server: HTTPServer) -> None:
    slurm = ReservingSlurm(dict(NODES), reservations=[resv()])
    obj = with_observed(scheduled(report_value=created_report(), deleting=True))
    expect_reads(server, [], [obj], None, [])
    absent = json.dumps(
        {"name": RESV, "state": "Absent", "active": False, "maintenance": [], "error": ""}, separators=(",", ":")
    )
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {"metadata": {"annotations": {names.ANNOTATION_RESERVATION_OBSERVED: absent}}},
    )
    result = run(server, loop(server, slurm))
    assert slurm.calls == [("list", None), ("delete", RESV)] and slurm.reservations == []
    assert result.ok and result.slurm_writes == 1 and result.kube_writes == 1


def proving_loop(server: HTTPServer, slurm: FakeSlurm) -> OperatorLoop:
    """A loop whose absence proof needs two passes but no wait."""
    kube = Kube(api_client(server.url_for("/")))
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,
        kube,
        Metrics(),
        events=RecordedEvents(),  # type: ignore[arg-type]
        now=lambda: "2026-01-02T03:04:05Z",
        absence_confirm_seconds=0,
    )


def absent_report(error: str = "") -> str:
    return json.dumps(
        {"name": RESV, "state": "Absent", "active": False, "maintenance": [], "error": error}, separators=(",", ":")
    )


def test_a_listing_that_lacks_the_reservation_reports_absent_only_on_slurms_word_twice(server: HTTPServer) -> None:
    """No intent any more, the report says Created, the listing lacks it: ask Slurm by name; Absent only
    once the not-found answer held on a later pass."""
    slurm = ReservingSlurm(dict(NODES))
    looper = proving_loop(server, slurm)
    created = with_observed(nodeset())
    created["metadata"]["annotations"][names.ANNOTATION_RESERVATION_OBSERVED] = created_report()
    expect_reads(server, [], [created], None, [])
    result = run(server, looper)
    assert result.ok and result.kube_writes == 0 and slurm.calls == [("list", None), ("get", RESV)]
    server.clear()
    expect_reads(server, [], [created], None, [])
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {"metadata": {"annotations": {names.ANNOTATION_RESERVATION_OBSERVED: absent_report()}}},
    )
    result = run(server, looper)
    assert result.ok and result.kube_writes == 1 and slurm.calls[2:] == [("list", None), ("get", RESV)]


@pytest.mark.parametrize("slurm_says", ["it exists", "an error"])
def test_a_listing_that_lacks_a_reservation_slurm_still_has_or_cannot_answer_for_changes_no_report(
    server: HTTPServer, slurm_says: str
) -> None:
    slurm = ReservingSlurm(dict(NODES), unlisted_reservations=[resv()] if slurm_says == "it exists" else [])
    looper = proving_loop(server, slurm)
    if slurm_says == "an error":
        down = SlurmUnavailable("HTTP 503", status=503)
        slurm.get_reservation = lambda name: (_ for _ in ()).throw(down)  # type: ignore[method-assign]
    created = with_observed(nodeset())
    created["metadata"]["annotations"][names.ANNOTATION_RESERVATION_OBSERVED] = created_report()
    for _ in range(3):
        server.clear()
        expect_reads(server, [], [created], None, [])
        result = run(server, looper)
        assert result.kube_writes == 0 and result.slurm_writes == 0
    assert result.ok == (slurm_says == "it exists") and result.ready == (slurm_says == "it exists")


def test_a_window_that_ended_before_anything_was_created_is_reported_absent_after_proof(server: HTTPServer) -> None:
    slurm = ReservingSlurm(dict(NODES))
    looper = proving_loop(server, slurm)
    ended = with_observed(scheduled(start="2026-01-02T01:00:00Z", duration=30))
    expect_reads(server, [], [ended], None, [])
    assert run(server, looper).kube_writes == 0
    server.clear()
    expect_reads(server, [], [ended], None, [])
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {
            "metadata": {
                "annotations": {
                    names.ANNOTATION_RESERVATION_OBSERVED: absent_report(
                        "the maintenance window has ended; not created"
                    )
                }
            }
        },
    )
    assert run(server, looper).kube_writes == 1


def test_loop_reads_no_reservation_when_no_nodeset_has_an_intent_or_report(server: HTTPServer) -> None:
    slurm = ReservingSlurm(dict(NODES), reservations=[resv()])
    expect_reads(server, [], [with_observed(nodeset())], None, [])
    run(server, loop(server, slurm))
    assert slurm.calls == []


# --- review fixes ---------------------------------------------------------------------------


def test_orphans_are_deleted_only_when_marked_ours_for_this_namespace():
    mine = f"slinky-metacontroller {NS}/gone uid-1"
    listed = [
        resv(name="SlurmOperatorMaint-gone", comment=mine),
        resv(name="SlurmOperatorMaint-admin"),
        resv(name="SlurmOperatorMaint-other", comment="slinky-metacontroller elsewhere/other uid-2"),
        resv(name="SlurmOperatorMaint-gpu", comment=f"slinky-metacontroller {NS}/gpu uid-3"),
    ]  # its NodeSet exists
    _, orphans = plan_cluster(cluster_of(nodeset()), listed, NODES, NOW_EPOCH)
    assert [(a.verb, a.name) for a in orphans] == [("delete", "SlurmOperatorMaint-gone")]


def test_create_marks_the_reservation_as_ours():
    (action,) = plan_nodeset(read_nodeset(scheduled()), None, NODES, NOW_EPOCH).actions
    assert action.body["comment"] == f"slinky-metacontroller {NS}/gpu {read_nodeset(scheduled()).uid}"


def test_recurring_window_goes_to_its_next_unbegun_occurrence_and_weekday_is_not_recurring_garbage():
    begun = read_nodeset(scheduled(start="2026-01-02T03:00:00Z", duration=30, flags=("MAINT", "IGNORE_JOBS", "DAILY")))
    (action,) = plan_nodeset(begun, None, NODES, NOW_EPOCH).actions
    assert (
        action.body["start_time"]["number"] == parse_time("2026-01-03T03:00:00Z")
        and action.body["duration"]["number"] == 30
    )
    # WEEKDAY/WEEKEND are not accepted by the hook; in a status they are ignored, never a past start
    weekday = read_nodeset(
        scheduled(start="2026-01-01T03:00:00Z", duration=30, flags=("MAINT", "IGNORE_JOBS", "WEEKDAY"))
    )
    plan = plan_nodeset(weekday, None, NODES, NOW_EPOCH)
    assert plan.actions == () and "ended" in plan.note


def test_a_window_created_from_now_is_left_alone_on_later_passes_even_before_slurm_counts_it_begun():
    wanted = read_nodeset(scheduled(start="2026-01-02T03:00:00Z", duration=30))
    (action,) = plan_nodeset(wanted, None, NODES, NOW_EPOCH).actions
    start = action.body["start_time"]["number"]
    made = Reservation(
        RESV,
        "gpu-[0-1]",
        frozenset({"MAINT", "IGNORE_JOBS", "SPEC_NODES"}),
        start + 5,
        parse_time("2026-01-02T03:30:00Z"),
        "slurm",
        "",
        "",
    )
    assert verbs(plan_nodeset(wanted, made, NODES, NOW_EPOCH)) == []  # Slurm's clock a little ahead: not active yet


def test_flags_compare_as_sets_ignoring_flags_slurm_adds_or_we_do_not_know():
    extra = resv(flags=("IGNORE_JOBS", "MAINT", "SPEC_NODES", "TRES_PER_NODE"))
    assert verbs(plan_nodeset(read_nodeset(scheduled()), extra, NODES, NOW_EPOCH)) == []
    # a flag Slurm drops or renames (SKIP, STATIC_ALLOC) in a status: not asked for, so no recreate every pass
    odd = read_nodeset(scheduled(flags=("MAINT", "IGNORE_JOBS", "SKIP", "STATIC_ALLOC", "NO_MAINT")))
    assert verbs(plan_nodeset(odd, resv(), NODES, NOW_EPOCH)) == []
    (create,) = plan_nodeset(odd, None, NODES, NOW_EPOCH).actions
    assert create.body["flags"] == ["MAINT", "IGNORE_JOBS"]
    assert verbs(
        plan_nodeset(read_nodeset(scheduled()), resv(flags=("MAINT", "IGNORE_JOBS", "STATIC")), NODES, NOW_EPOCH)
    ) == ["delete", "create"]


def test_an_absent_report_without_intent_is_out_of_scope():
    obj = nodeset()
    obj["metadata"]["annotations"] = {
        names.ANNOTATION_RESERVATION_OBSERVED: json.dumps(
            {"name": RESV, "state": "Absent", "active": False, "maintenance": [], "error": ""}
        )
    }
    assert in_scope(cluster_of(obj)) == []
    created = nodeset()
    created["metadata"]["annotations"] = {names.ANNOTATION_RESERVATION_OBSERVED: created_report()}
    assert [n.name for n in in_scope(cluster_of(created))] == ["gpu"]
    garbled = nodeset()
    garbled["metadata"]["annotations"] = {names.ANNOTATION_RESERVATION_OBSERVED: "{oops"}
    assert [n.name for n in in_scope(cluster_of(garbled))] == ["gpu"]


def test_an_unparsable_hostlist_is_not_overwritten_every_pass_and_is_reported():
    for garbled in ("gpu-[0-", "gpu-[a-b]"):
        plan = plan_nodeset(read_nodeset(scheduled()), resv(nodes=garbled), NODES, NOW_EPOCH)
        assert plan.actions == () and garbled in plan.note and plan.exists_after


def test_loop_with_an_unreadable_clock_writes_nothing_and_says_so(server: HTTPServer) -> None:
    slurm = ReservingSlurm(
        dict(NODES), reservations=[resv(name="SlurmOperatorMaint-gone", comment=f"slinky-metacontroller {NS}/gone u")]
    )
    expect_reads(server, [], [with_observed(scheduled(report_value=created_report()))], None, [])
    looper = loop(server, slurm)
    looper._now = lambda: "not a time"  # type: ignore[method-assign]
    result = run(server, looper)
    assert result.kube_writes == 0 and result.slurm_writes == 0 and [c[0] for c in slurm.calls] == ["list"]
    assert not result.ok


def test_loop_second_pass_after_the_window_began_rewrites_nothing(server: HTTPServer) -> None:
    begun = "2026-01-02T03:00:00Z"
    slurm = ReservingSlurm(dict(NODES))
    expect_reads(server, [], [with_observed(scheduled(start=begun))], None, [])
    active = created_report(active=True)
    expect_patch(
        server,
        f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets/gpu",
        MERGE,
        {"metadata": {"annotations": {names.ANNOTATION_RESERVATION_OBSERVED: active}}},
    )
    result = run(server, loop(server, slurm))
    assert result.ok and result.slurm_writes == 1 and result.kube_writes == 1
    (body,) = [c[1] for c in slurm.calls if c[0] == "create"]
    slurm = ReservingSlurm(
        dict(NODES),
        reservations=[
            Reservation(
                RESV,
                "gpu-[0-1]",
                frozenset({"MAINT", "IGNORE_JOBS", "SPEC_NODES"}),
                body["start_time"]["number"],
                parse_time("2026-01-02T03:30:00Z"),
                "slurm",
                "",
                "",
            )
        ],
    )
    server.clear()
    expect_reads(server, [], [with_observed(scheduled(start=begun, report_value=active))], None, [])
    result = run(server, loop(server, slurm))
    assert (
        result.ok and result.kube_writes == 0 and result.slurm_writes == 0 and [c[0] for c in slurm.calls] == ["list"]
    )


# --- the real Slurm lab -------------------------------------------------------------------


class _Recorder:
    """The one Kubernetes write reservations.execute makes: the NodeSet report."""

    def __init__(self) -> None:
        self.annotations: list[str] = []

    def annotate_nodeset(self, namespace: str, nodeset_name: str, key: str, value: str) -> None:
        self.annotations.append(value)


@pytest.mark.slurm
def test_real_slurm_reservation_created_for_the_nodesets_nodes_and_removed_on_deletion(slurm_lab) -> None:
    name = "SlurmOperatorMaint-restest"
    start = int(time.time()) + 7200
    start_text = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start))

    def obj(deleting: bool, report_value: str | None) -> dict:
        o = nodeset(deleting=deleting)
        o["metadata"]["name"] = "restest"
        o["status"][names.STATUS_RESERVATION] = {
            "name": name,
            "startTime": start_text,
            "duration": 45,
            "flags": ["MAINT", "IGNORE_JOBS"],
            "nodes": ["n3", "n4"],
        }
        if report_value is not None:
            o["metadata"]["annotations"] = {names.ANNOTATION_RESERVATION_OBSERVED: report_value}
        return o

    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30) as client:
        kube = _Recorder()
        looper = OperatorLoop(
            CLUSTER,
            NS,
            CLUSTER,
            client,
            kube,
            Metrics(),  # type: ignore[arg-type]
            events=RecordedEvents(),
            now=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        nodes = {n.name: n for n in client.list_nodes().items}
        from slurm_sync.operator.plan import SlurmView
        from slurm_sync.operator.steps import Tally

        try:
            tally = Tally()
            execute(looper.step_context(), cluster_of(obj(False, None)), SlurmView(nodes=nodes, ping=None), tally)
            assert tally.errors == [] and tally.slurm_writes == 1
            (made,) = [r for r in client.list_reservations().items if r.name == name]
            assert {"MAINT", "IGNORE_JOBS"} <= made.flags and made.node_list == "n[3-4]" and "slurm" in made.users
            assert made.start_time == start and made.end_time == start + 45 * 60
            assert json.loads(kube.annotations[-1])["state"] == "Created"
            created = ("Normal", "ReservationCreated", "NodeSet", "restest")
            assert looper.events.posted == [created]  # type: ignore[attr-defined]
            tally = Tally()  # unchanged: no write
            execute(
                looper.step_context(),
                cluster_of(obj(False, kube.annotations[-1])),
                SlurmView(nodes=nodes, ping=None),
                tally,
            )
            assert tally.slurm_writes == 0 and len(kube.annotations) == 1
            tally = Tally()
            execute(
                looper.step_context(),
                cluster_of(obj(True, kube.annotations[-1])),
                SlurmView(nodes=nodes, ping=None),
                tally,
            )
            assert tally.errors == [] and name not in {r.name for r in client.list_reservations().items}
            assert json.loads(kube.annotations[-1])["state"] == "Absent"
            deleted = ("Normal", "ReservationDeleted", "NodeSet", "restest")
            assert looper.events.posted[1:] == [deleted]  # type: ignore[attr-defined]
        finally:
            with contextlib.suppress(Exception):  # already gone, as the test expects
                client.delete_reservation(name)


@pytest.mark.slurm
def test_real_slurm_update_reservation_changes_the_node_list(slurm_lab) -> None:
    name = "SlurmOperatorMaint-updtest"
    start = int(time.time()) + 7200
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30) as client:
        client.create_reservation(
            {
                "name": name,
                "node_list": ["n3"],
                "users": ["slurm"],
                "flags": ["MAINT", "IGNORE_JOBS"],
                "start_time": {"set": True, "number": start},
                "duration": {"set": True, "number": 10},
            }
        )
        try:
            client.update_reservation(name, {"node_list": ["n3", "n4"]})
            (made,) = [r for r in client.list_reservations().items if r.name == name]
            assert made.node_list == "n[3-4]" and made.start_time == start
        finally:
            client.delete_reservation(name)


@pytest.mark.slurm
def test_real_slurm_says_no_such_reservation_in_both_of_its_forms(slurm_lab) -> None:
    """slurmrestd 26.05 answers a missing reservation with HTTP 200 + error number 0 'Unable to query
    reservations' while slurmctld has none at all, and HTTP 422 'Unable to find reservation <name>'
    while it has others: both are Slurm's not-found; an existing one is returned."""
    other = "SlurmOperatorMaint-probe"
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30) as client:
        assert client.list_reservations().items == ()  # the lab holds none of its own
        with pytest.raises(SlurmNotFound) as none_at_all:
            client.get_reservation("SlurmOperatorMaint-nothing")
        assert none_at_all.value.status == 200
        client.create_reservation(
            {
                "name": other,
                "node_list": ["n3"],
                "users": ["slurm"],
                "flags": ["MAINT"],
                "start_time": {"set": True, "number": int(time.time()) + 7200},
                "duration": {"set": True, "number": 10},
            }
        )
        try:
            with pytest.raises(SlurmNotFound) as among_others:
                client.get_reservation("SlurmOperatorMaint-nothing")
            assert among_others.value.status == 422
            assert client.get_reservation(other).node_list == "n3"
        finally:
            client.delete_reservation(other)


@pytest.mark.slurm
def test_real_slurm_reservation_deleted_behind_our_back_is_absent_only_on_slurms_word_twice(slurm_lab) -> None:
    """The report says Created; an administrator deletes the reservation (`scontrol delete`). A listing
    that merely lacks it changes nothing while Slurm, asked by name, still has it; once it is gone,
    the first not-found is confirmed on the next pass and only then is Absent reported."""
    from slurm_sync.operator.plan import SlurmView
    from slurm_sync.operator.steps import Tally

    name = "SlurmOperatorMaint-gpu"
    created = nodeset()
    created["metadata"]["annotations"] = {names.ANNOTATION_RESERVATION_OBSERVED: created_report()}
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30) as client:
        client.create_reservation(
            {
                "name": name,
                "node_list": ["n3"],
                "users": ["slurm"],
                "flags": ["MAINT"],
                "start_time": {"set": True, "number": int(time.time()) + 7200},
                "duration": {"set": True, "number": 10},
            }
        )
        kube = _Recorder()
        looper = OperatorLoop(
            CLUSTER,
            NS,
            CLUSTER,
            client,
            kube,
            Metrics(),  # type: ignore[arg-type]
            absence_confirm_seconds=0,
            events=RecordedEvents(),
            now=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
        view = SlurmView(nodes={n.name: n for n in client.list_nodes().items}, ping=None)
        try:
            listing = client.list_reservations
            wrong = lambda: Listing(tuple(r for r in listing().items if r.name != name), 1, False)  # noqa: E731 - swapped in for the client method
            client.list_reservations = wrong  # type: ignore[method-assign]
            for _ in range(2):  # a wrong listing: Slurm has it
                tally = Tally()
                execute(looper.step_context(), cluster_of(created), view, tally)
                assert tally.errors == [] and kube.annotations == []
            slurm_lab.run("scontrol", "delete", f"reservationname={name}", check=True)
            client.list_reservations = listing  # type: ignore[method-assign]
            tally = Tally()
            execute(looper.step_context(), cluster_of(created), view, tally)
            assert tally.errors == [] and kube.annotations == []  # a first not-found: confirmed later
            execute(looper.step_context(), cluster_of(created), view, tally)
            assert tally.errors == [] and [json.loads(a)["state"] for a in kube.annotations] == ["Absent"]
        finally:
            slurm_lab.run("scontrol", "delete", f"reservationname={name}")

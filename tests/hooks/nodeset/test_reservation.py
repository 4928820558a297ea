"""NodeSet updateStrategy ScheduledUpdate over HTTP: the reservation intent, slurm_sync's report,
condemning old pods in maintenance (still drained before deletion), and finalize waiting for the
reservation to be gone."""

from __future__ import annotations

import json

from slinky_common import names
from tests.hooks.nodeset.builders import children, condition, draining, nodeset, observed, post, reported, request, sync

START = "2030-01-01T02:00:00Z"
STRATEGY = {
    "type": "ScheduledUpdate",
    "scheduledUpdate": {"startTime": "2030-01-01T03:00:00+01:00", "duration": "1h30m", "flags": ["daily"]},
}
RESV = "SlurmOperatorMaint-gpu"


def scheduled(report: dict | None = None, template_env: str | None = None, **spec) -> dict:
    parent = nodeset(updateStrategy=STRATEGY, **spec)
    if report is not None:
        parent["metadata"]["annotations"] = {names.ANNOTATION_RESERVATION_OBSERVED: json.dumps(report)}
    if template_env is not None:
        parent["spec"]["template"] = {"metadata": {"annotations": {"example.com/rev": template_env}}}
    return parent


def report(state="Created", active=False, maintenance=(), error="") -> dict:
    return {"name": RESV, "state": state, "active": active, "maintenance": list(maintenance), "error": error}


def running(parent: dict, **state) -> list[dict]:
    return [observed(p, **state) for p in children(sync(client_app(), request(parent))).values()]


def client_app():
    from hooks.app import create_app

    return create_app().test_client()


def test_intent_is_published_once_slurm_counts_a_usable_node(client):
    parent = scheduled(replicas=2)
    pods = running(parent, slurm=("Down",))
    resp = sync(client, request(parent, pods=pods))
    assert names.STATUS_RESERVATION not in resp["status"]
    assert condition(resp, names.CONDITION_RESERVATION_CREATED)["reason"] == "NotNeeded"
    pods = running(parent, slurm=("Idle",))
    resp = sync(client, request(parent, pods=pods))
    assert resp["status"][names.STATUS_RESERVATION] == {
        "name": RESV,
        "startTime": START,
        "duration": 90,
        "flags": ["MAINT", "IGNORE_JOBS", "DAILY"],
        "nodes": ["gpu-0", "gpu-1"],
    }
    created = condition(resp, names.CONDITION_RESERVATION_CREATED)
    assert created["status"] == "False" and created["reason"] == "Pending"


def test_replicas_zero_or_other_strategies_publish_no_intent(client):
    resp = sync(client, request(scheduled(replicas=0)))
    assert names.STATUS_RESERVATION not in resp["status"]
    pods = running(nodeset(replicas=1))
    resp = sync(client, request(nodeset(replicas=1), pods=pods))
    assert names.STATUS_RESERVATION not in resp["status"]
    assert all(c["type"] != names.CONDITION_RESERVATION_CREATED for c in resp["status"]["conditions"])


def test_created_report_sets_the_condition_and_keeps_the_intent_when_nodes_go_down(client):
    parent = scheduled(report(), replicas=1)
    pods = running(parent, slurm=("Down",))
    resp = sync(client, request(parent, pods=pods))
    assert resp["status"][names.STATUS_RESERVATION]["nodes"] == ["gpu-0"]
    created = condition(resp, names.CONDITION_RESERVATION_CREATED)
    assert created["status"] == "True" and created["lastTransitionTime"] == START


def test_old_pods_are_condemned_only_when_in_maintenance_under_our_reservation_and_go_only_when_drained(client):
    old_parent = scheduled(replicas=2, template_env="1")
    old = [observed(p) for p in children(sync(client, request(old_parent))).values()]
    new_parent = scheduled(report(active=True, maintenance=["gpu-0"]), replicas=2, template_env="2")
    # gpu-1 is in MAINTENANCE too, but slurm_sync does not name it under our reservation (someone else's)
    state = [
        observed(children(sync(client, request(old_parent)))[p["metadata"]["name"]], slurm=("Idle", "Maintenance"))
        for p in old
    ]
    resp = sync(client, request(new_parent, pods=state))
    assert draining(resp) == {
        "gpu-0": f"scheduled update to revision {resp['status']['nodeSetHash']} in maintenance reservation"
    }
    assert sorted(children(resp)) == ["gpu-0", "gpu-1"]  # kept until drained
    # maintenance is not drained: a job started before the window (IGNORE_JOBS) may still run
    state[0] = observed(
        children(sync(client, request(old_parent)))["gpu-0"], slurm=("Mixed", "Maintenance", "Drain"), drained=True
    )
    assert "gpu-0" in children(sync(client, request(new_parent, pods=state)))
    state[0] = observed(
        children(sync(client, request(old_parent)))["gpu-0"], slurm=("Idle", "Maintenance", "Drain"), drained=True
    )
    assert sorted(children(sync(client, request(new_parent, pods=state)))) == ["gpu-1"]


def test_no_condemnation_without_the_pod_condition_or_before_the_window(client):
    old_parent = scheduled(replicas=1, template_env="1")
    pod = children(sync(client, request(old_parent)))["gpu-0"]
    new_parent = scheduled(report(active=True, maintenance=["gpu-0"]), replicas=1, template_env="2")
    assert draining(sync(client, request(new_parent, pods=[observed(pod, slurm=("Idle",))]))) == {}
    before = scheduled(report(active=False), replicas=1, template_env="2")
    assert draining(sync(client, request(before, pods=[observed(pod, slurm=("Idle", "Maintenance"))]))) == {}
    # a pod already on the new revision stays even in maintenance
    current = children(sync(client, request(new_parent)))["gpu-0"]
    assert draining(sync(client, request(new_parent, pods=[observed(current, slurm=("Idle", "Maintenance"))]))) == {}


def test_finalize_drops_the_intent_and_waits_until_slurm_sync_reports_the_reservation_gone(client):
    parent = reported(scheduled(report(), replicas=1))
    resp = post(client, "/nodeset/finalize", request(parent, finalizing=True))
    assert names.STATUS_RESERVATION not in resp["status"]
    assert resp["finalized"] is False and resp["resyncAfterSeconds"] == 10
    assert condition(resp, names.CONDITION_RESERVATION_CREATED)["reason"] == "Deleting"
    gone = reported(scheduled(report(state="Absent"), replicas=1))
    resp = post(client, "/nodeset/finalize", request(gone, finalizing=True))
    assert resp["finalized"] is True


def test_invalid_duration_is_reported_not_answered_400(client):
    parent = nodeset(
        replicas=1,
        updateStrategy={"type": "ScheduledUpdate", "scheduledUpdate": {"startTime": START, "duration": "30s"}},
    )
    resp = post(client, "/nodeset/sync", request(parent), status_parent=scheduled(replicas=1))  # the CRD refuses 30s
    invalid = condition(resp, names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and "scheduledUpdate.duration" in invalid["message"]


def test_same_request_gives_the_same_bytes(client):
    parent = scheduled(report(active=True, maintenance=["gpu-0"]), replicas=2)
    body = request(parent, pods=running(parent))
    first = client.post("/nodeset/sync", json=body).data
    assert client.post("/nodeset/sync", json=body).data == first


# --- review fixes ---------------------------------------------------------------------------


PUBLISHED = {
    "name": RESV,
    "startTime": START,
    "duration": 90,
    "flags": ["MAINT", "IGNORE_JOBS", "DAILY"],
    "nodes": ["gpu-0", "gpu-1"],
}


def test_created_intent_is_kept_while_every_pod_terminates(client):
    """No pod with a hostname (all terminating) must not drop a reservation slurm_sync reported created."""
    parent = scheduled(report(active=True), replicas=2)
    pods = running(parent, terminating=True)
    parent["status"] = {names.STATUS_RESERVATION: PUBLISHED}
    resp = sync(client, request(parent, pods=pods))
    assert resp["status"][names.STATUS_RESERVATION] == PUBLISHED
    # not created yet: nothing to keep, no intent
    pending = scheduled(report(state="Absent"), replicas=2)
    pending["status"] = {names.STATUS_RESERVATION: PUBLISHED}
    assert (
        names.STATUS_RESERVATION
        not in sync(client, request(pending, pods=running(pending, terminating=True)))["status"]
    )


def test_finalize_waits_unless_the_report_says_absent(client):
    # slurm_sync's deletion report is clear in every case: only the reservation can hold the deletion.
    published = reported(scheduled(replicas=1))  # an intent was published, slurm_sync has not reported yet
    published["status"] = {names.STATUS_RESERVATION: PUBLISHED}
    assert post(client, "/nodeset/finalize", request(published, finalizing=True))["finalized"] is False
    unreadable = reported(scheduled(replicas=1))
    unreadable["metadata"]["annotations"][names.ANNOTATION_RESERVATION_OBSERVED] = "{not json"
    assert post(client, "/nodeset/finalize", request(unreadable, finalizing=True))["finalized"] is False
    odd_state = reported(scheduled(report(state="Failed"), replicas=1))
    resp = post(client, "/nodeset/finalize", request(odd_state, finalizing=True))
    assert resp["finalized"] is False
    assert condition(resp, names.CONDITION_DELETION_BLOCKED)["reason"] == "ReservationLeft"
    never = reported(nodeset(replicas=1))  # no intent ever published, no report: nothing of ours can exist
    assert post(client, "/nodeset/finalize", request(never, finalizing=True))["finalized"] is True
    # no Controller: finished at once, whatever the report says
    assert post(client, "/nodeset/finalize", request(published, finalizing=True, controller=False))["finalized"] is True


def test_flags_that_do_not_round_trip_are_invalid_and_named(client):
    for flag in ("SKIP", "no_maint", "STATIC_ALLOC", "weekday", "WEEKEND", "TIME_FLOAT"):
        strategy = {
            "type": "ScheduledUpdate",
            "scheduledUpdate": {"startTime": START, "duration": "30m", "flags": ["daily", flag]},
        }
        resp = post(client, "/nodeset/sync", request(nodeset(replicas=1, updateStrategy=strategy)))
        invalid = condition(resp, names.CONDITION_INVALID_SPEC)
        assert (
            invalid["status"] == "True"
            and flag.upper() in invalid["message"]
            and "scheduledUpdate.flags" in invalid["message"]
        ), flag
    for flag in ("static", "FLEX", "MAGNETIC", "WEEKLY", "HOURLY", "OVERLAP", "PURGE_COMP"):
        strategy = {
            "type": "ScheduledUpdate",
            "scheduledUpdate": {"startTime": START, "duration": "30m", "flags": [flag]},
        }
        resp = post(client, "/nodeset/sync", request(nodeset(replicas=1, updateStrategy=strategy)))
        assert all(
            c["type"] != names.CONDITION_INVALID_SPEC or c["status"] == "False" for c in resp["status"]["conditions"]
        ), flag

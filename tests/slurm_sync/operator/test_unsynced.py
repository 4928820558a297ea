"""Objects Metacontroller never synced are told (slurm_sync/operator/unsynced.py): docs/operations.md,
"A custom resource keeps an empty status"."""

from __future__ import annotations

import logging

import pytest
from pytest_httpserver import HTTPServer

from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator import unsynced
from slurm_sync.operator.reservations import parse_time
from slurm_sync.service import Config, Service
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_cr

CREATED = "2026-11-27T09:00:00Z"
AT = parse_time(CREATED) or 0
SYNCED = {"conditions": [{"type": "Ready", "status": "False", "reason": "StatefulSetMissing"}]}


def cr(name: str, status: dict | None = None, created: str = CREATED, deleting: bool = False) -> dict:
    meta = {"name": name, "namespace": NS, "uid": f"uid-{name}", "creationTimestamp": created}
    if deleting:
        meta["deletionTimestamp"] = CREATED
    return {"metadata": meta, "spec": {}, **({"status": status} if status is not None else {})}


def test_an_object_without_status_conditions_after_the_grace_is_unsynced() -> None:
    objects = [cr("bare"), cr("empty", {}), cr("no-conditions", {"conditions": []}), cr("synced", SYNCED)]
    found = unsynced.unsynced("Controller", objects, AT + unsynced.GRACE)
    assert [(u.kind, u.name, u.uid, u.age) for u in found] == [
        ("Controller", "bare", "uid-bare", 120),
        ("Controller", "empty", "uid-empty", 120),
        ("Controller", "no-conditions", "uid-no-conditions", 120),
    ]


@pytest.mark.parametrize(
    "obj",
    [cr("young"), cr("deleting", deleting=True), cr("no-time", created=""), cr("bad-time", created="yesterday")],
)
def test_young_deleting_or_undated_objects_are_not_told(obj: dict) -> None:
    assert (
        unsynced.unsynced("NodeSet", [obj], AT + (unsynced.GRACE - 1 if obj["metadata"]["name"] == "young" else 10**6))
        == []
    )


def test_the_note_names_metacontroller_and_stays_the_same_while_it_lasts() -> None:
    (early,) = unsynced.unsynced("Controller", [cr("a")], AT + 200)
    (late,) = unsynced.unsynced("Controller", [cr("a")], AT + 9000)
    assert early.note == late.note  # Events posts a changed note at once: the age stays out of it
    assert "Metacontroller has not synced it" in early.note and "kubectl get compositecontrollers" in early.note


def test_the_service_warns_on_a_controller_and_a_nodeset_never_synced_once(
    httpserver: HTTPServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Metacontroller not running: CRs keep an empty status. The leader's pass posts a Warning Event on each
    (not again on the next pass) and logs the list once."""
    kube = FakeKube()
    kube.add("controllers", {**controller_cr("slurm"), "metadata": cr("slurm")["metadata"]})
    kube.add("nodesets", {**cr("workers"), "spec": {"controllerRef": {"name": "slurm"}}})
    kube.add("nodesets", {**cr("synced", SYNCED), "spec": {"controllerRef": {"name": "slurm"}}})
    kube.install(httpserver)
    service = Service(
        Config(namespaces=(NS,), slurm_url="http://127.0.0.1:9", slurm_timeout=1),
        Kube(api_client(httpserver.url_for("/"))),
        Metrics(),
    )
    try:
        with caplog.at_level(logging.WARNING, logger="slurm_sync.operator.unsynced"):
            service.run_pass()
            service.run_pass()
    finally:
        service.close()
    told = sorted(
        (body["regarding"]["kind"], body["regarding"]["name"])
        for *_, body in kube.writes
        if body.get("reason") == unsynced.REASON
    )
    assert told == [("Controller", "slurm"), ("NodeSet", "workers")]
    lines = [r.getMessage() for r in caplog.records if r.name == "slurm_sync.operator.unsynced"]
    assert len(lines) == 1 and lines[0].startswith(f"Controller {NS}/slurm, NodeSet {NS}/workers: no status"), lines

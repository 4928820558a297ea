from typing import Any

from hooks.status import condition
from tests.support.hooks import cr, related, request, secret

PARENT = {
    "metadata": {"name": "a", "generation": 3},
    "status": {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "R",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    },
}


def test_condition_keeps_transition_time_only_while_status_holds():
    kept = condition(PARENT, "Ready", True, "AllGood", "fine")
    assert kept == {
        "type": "Ready",
        "status": "True",
        "reason": "AllGood",
        "message": "fine",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    flipped = condition(PARENT, "Ready", False, "Missing", "gone")
    assert "lastTransitionTime" not in flipped and flipped["status"] == "False"


def test_condition_without_observed_status_or_generation():
    assert condition({"metadata": {}}, "X", True, "R", "m") == {
        "type": "X",
        "status": "True",
        "reason": "R",
        "message": "m",
    }


# --- the status of every kind against its CRD ---------------------------------------------------------


def _statuses() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(parent, status the hook returned) for each kind, with a missing reference so conditions say False."""
    from hooks.app import create_app

    client = create_app().test_client()
    ref = {"controllerRef": {"name": "slurm"}}
    parents = {
        "restapi": cr("RestApi", "r", ref),
        "loginset": cr("LoginSet", "l", {**ref, "sssdConfRef": {"name": "sssd", "key": "sssd.conf"}}),
        "token": cr("Token", "t", {"jwtKeyRef": {"name": "jwt", "key": "k"}, "username": "u"}),
        "accounting": cr(
            "Accounting",
            "a",
            {
                "slurmKeyRef": {"name": "s", "key": "k"},
                "jwtKeyRef": {"name": "j", "key": "k"},
                "storageConfig": {"host": "db", "passwordKeyRef": {"name": "p", "key": "k"}},
            },
        ),
    }
    rel = {"token": related(secret("jwt", {"k": b"k" * 32}))}
    result = []
    for segment, parent in parents.items():
        resp = client.post(f"/{segment}/sync", json=request(parent, rel=rel.get(segment)))
        assert resp.status_code == 200, resp.get_json()
        result.append((parent, resp.get_json()["status"]))
    return result


def test_every_status_is_accepted_by_its_crd():
    from tests.support.kube import validate_cr

    for parent, status in _statuses():
        assert validate_cr({**parent, "status": status}) == [], parent["kind"]

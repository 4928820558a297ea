"""RestApi sync requests and their Controller."""

from __future__ import annotations

from tests.support.hooks import cr, request

SLURM_KEY = {"name": "slurm-auth", "key": "slurm.key"}


def controller(**spec) -> dict:
    return cr("Controller", "slurm", {"slurmKeyRef": SLURM_KEY, "jwtKeyRef": {"name": "jwt", "key": "jwt.key"}, **spec})


def restapi_cr(**spec) -> dict:
    return cr("RestApi", "slurm", {"controllerRef": {"name": "slurm"}, **spec})


def sync(client, parent, children=None, rel=None) -> dict:
    resp = client.post("/restapi/sync", json=request(parent, children, rel))
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()

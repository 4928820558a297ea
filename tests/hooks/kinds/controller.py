"""Controller sync requests, their keys, and the slurmctld pod template of the answer."""

from __future__ import annotations

import json

from tests.support.hooks import by_kind, cr, secret

SLURM_KEY = {"name": "slurm-key", "key": "slurm.key"}
JWT_KEY = {"name": "jwt-key", "key": "jwt.key"}
STS = "StatefulSet/slurm-controller"


def controller(**spec) -> dict:
    parent = cr("Controller", "slurm", {"slurmKeyRef": SLURM_KEY, "jwtKeyRef": JWT_KEY, **spec})
    parent["metadata"]["labels"] = {"team": "hpc"}
    parent["metadata"]["annotations"] = {"note": "n"}
    return parent


def keys(slurm_key: bytes = b"s" * 32, jwt_key: bytes = b"j" * 32) -> list[dict]:
    return [secret("slurm-key", {"slurm.key": slurm_key}), secret("jwt-key", {"jwt.key": jwt_key})]


def sync(client, parent, children=None, rel=None, rules=None) -> dict:
    body = {
        "controller": {"spec": {"childResources": rules or []}},
        "parent": parent,
        "children": children or {},
        "related": rel or {},
        "finalizing": False,
    }
    resp = post(client, "/controller/sync", body)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def pod_template(resp: dict) -> dict:
    return by_kind(resp)[STS]["spec"]["template"]


def post(client, path: str, body: dict):
    return client.post(path, data=json.dumps(body), content_type="application/json")

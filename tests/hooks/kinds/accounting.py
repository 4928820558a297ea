"""Accounting sync requests and their keys."""

from __future__ import annotations

from tests.support.hooks import cr, related, request, secret

PASSWORD = b"s3cr3t-Pa55word"
SPEC = {
    "slurmKeyRef": {"name": "slurm-auth", "key": "slurm.key"},
    "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"},
    "storageConfig": {"host": "mariadb", "username": "slurm", "passwordKeyRef": {"name": "mariadb", "key": "password"}},
}


def accounting_cr(**spec) -> dict:
    return cr("Accounting", "slurm", {**SPEC, **spec})


def secrets(password: bytes | None = PASSWORD) -> dict:
    objects = [secret("slurm-auth", {"slurm.key": b"K" * 32}), secret("slurm-jwt", {"jwt.key": b"J" * 32})]
    if password is not None:
        objects.append(secret("mariadb", {"password": password}))
    return related(*objects)


def sync(client, parent, children=None, rel=None) -> dict:
    resp = post(client, parent, children, rel)
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def post(client, parent, children=None, rel=None):
    return client.post("/accounting/sync", json=request(parent, children, secrets() if rel is None else rel))

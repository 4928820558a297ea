"""LoginSet sync requests (the LoginSet, its Controller, its Secrets) and the pod of the answer."""

from __future__ import annotations

from tests.support.hooks import (
    by_kind,
    cr,
    related,
    request,
    secret,
)

SSSD = {"name": "sssd", "key": "sssd.conf"}


def controller() -> dict:
    return cr(
        "Controller",
        "slurm",
        {"slurmKeyRef": {"name": "slurm-auth", "key": "slurm.key"}, "jwtKeyRef": {"name": "j", "key": "k"}},
    )


def loginset_cr(**spec) -> dict:
    return cr("LoginSet", "login", {"controllerRef": {"name": "slurm"}, "sssdConfRef": SSSD, **spec})


def inputs(with_controller: bool = True, with_sssd: bool = True) -> dict:
    objects = ([controller()] if with_controller else []) + (
        [secret("sssd", {"sssd.conf": b"[sssd]\n"})] if with_sssd else []
    )
    return related(*objects)


def sync(client, parent, children=None, rel=None) -> dict:
    resp = client.post("/loginset/sync", json=request(parent, children, inputs() if rel is None else rel))
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()


def pod_of(response: dict) -> dict:
    return by_kind(response)["Deployment/login"]["spec"]["template"]

"""Token sync requests and the key Secret they sign with."""

from __future__ import annotations

from tests.support.hooks import cr, related, request, secret

KEY = b"0123456789abcdef0123456789abcdef"


def token_cr(**spec) -> dict:
    return cr(
        "Token", "ci", {"jwtKeyRef": {"name": "jwt", "key": "jwt.key"}, "username": "alice", "lifetime": "1h", **spec}
    )


def key_secret(key: bytes = KEY) -> dict:
    return secret("jwt", {"jwt.key": key})


def sync(client, parent, children=None, key: bytes | None = KEY) -> dict:
    rel = related(key_secret(key)) if key is not None else {}
    resp = client.post("/token/sync", json=request(parent, children, rel))
    assert resp.status_code == 200, resp.get_json()
    return resp.get_json()

"""The JWTs slurm_sync mints for slurmrestd (HS256, RFC 7519) and the claims it reads back from a refused
one, with the standard library.

Why not PyJWT, as the hooks use it: importing it imports the ``cryptography`` package's bindings for the
algorithms slurm_sync never uses, 9 MB of its memory (docs/architecture.md §7, issue 30). HS256 is an
HMAC-SHA256 over two base64url-encoded JSON objects; tests/slurm_sync/slurm/test_hs256.py holds it to
PyJWT's tokens, and slurmrestd accepts them (the Slurm lab tests).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

import orjson

HEADER = {"alg": "HS256", "typ": "JWT"}


def encode(claims: Mapping[str, Any], key: bytes) -> str:
    """``claims`` as a JWT signed with ``key``."""
    signed = f"{_b64(_json(HEADER))}.{_b64(_json(claims))}"
    signature = hmac.new(key, signed.encode("ascii"), hashlib.sha256).digest()
    return f"{signed}.{_b64(signature)}"


def unverified_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT, read without checking its signature (to say why a server refused it);
    ValueError when it is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        raise ValueError("not three dot-separated parts")
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, orjson.JSONDecodeError) as exc:
        raise ValueError(f"its payload is not base64url JSON ({exc})") from None
    if not isinstance(claims, dict):
        raise ValueError("its payload is not a JSON object")
    return claims


def _json(value: Mapping[str, Any]) -> bytes:
    """Compact, ASCII only (as PyJWT writes it)."""
    return json.dumps(dict(value), separators=(",", ":")).encode("ascii")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")

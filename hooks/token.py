"""Token → a Secret holding a Slurm JWT (HS256, signed with the cluster's jwt.key).

A token has to be re-issued before it expires, so this hook reads a clock (as the NodeSet hook
does for minReadySeconds, and nothing else), only through `now()` (tests pin it). Its output stays byte-stable between
refresh points:
while the observed token still verifies against the key and matches the spec, the same token is
returned, and only `resyncAfterSeconds` (which Metacontroller never writes anywhere) counts down
to the refresh instant `exp - lifetime/5`. At that instant a new token is minted.

With `refresh: false` the Secret is immutable: once it exists its token is returned unchanged,
forever, even after it expires (delete the Secret to get a new one).
"""

from __future__ import annotations

import base64
import datetime
import re
import time
from dataclasses import dataclass
from decimal import Decimal

import jwt

from hooks import contract, invalidspec, references
from hooks.applied import kept
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.objects import child_metadata
from hooks.references import Missing
from hooks.status import Problem, ready_condition, unmet
from slinky_common import fields
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef
from slinky_common.jsontypes import JSON

DEFAULT_LIFETIME = "15m"
DEFAULT_USERNAME = "nobody"
DEFAULT_SECRET_KEY = "SLURM_JWT"
# RFC 7518 §3.2: an HS256 key must be at least as long as the hash, 256 bits (PyJWT only warns).
MIN_KEY_BYTES = 32
# Slurm treats MaxInt32-1 seconds as "infinite"; longer lifetimes are clamped to it.
MAX_LIFETIME_SECONDS = 2**31 - 2
SECRET_TYPE = contract.TYPE_SECRET
_DURATION_UNITS = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"), "ms": Decimal("1e-3"),
                   "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}  # fmt: skip
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")


def now() -> int:
    """Whole seconds since the epoch: this hook's only clock read (tests replace it)."""
    return int(time.time())


@dataclass(frozen=True)
class TokenSpec:
    name: str
    namespace: str
    key: KeyRef
    username: str
    lifetime: int  # seconds
    refresh: bool
    secret_name: str
    secret_key: str


def parse_duration(text: str, field: str) -> Decimal:
    """A Go duration (`15m`, `1h30m`, `1.5h`, `90s`) in seconds."""
    if text == "0":
        return Decimal(0)
    pos, total = 0, Decimal(0)
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += Decimal(match.group(1)) * _DURATION_UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise InvalidSpec(f"{field} must be a Go duration such as 15m, 1h30m or 90s, got {text!r}")
    return total


def parse(parent: JSON) -> TokenSpec:
    spec = fields.spec_of(parent)
    name = parent["metadata"]["name"]
    key = _key_ref(spec)
    username = fields.opt_str(spec, "username") or DEFAULT_USERNAME
    lifetime = int(parse_duration(fields.opt_str(spec, "lifetime", DEFAULT_LIFETIME), "spec.lifetime"))
    if lifetime < 1:
        raise InvalidSpec("spec.lifetime must be at least 1s")
    secret_ref = fields.opt_obj(spec, "secretRef")
    return TokenSpec(
        name=name,
        namespace=fields.namespace_of(parent),
        key=key,
        username=username,
        lifetime=min(lifetime, MAX_LIFETIME_SECONDS),
        refresh=fields.opt_bool(spec, "refresh", True),
        secret_name=fields.opt_str(secret_ref, "name", where="spec.secretRef") or f"{name}-jwt-{username}",
        secret_key=fields.opt_str(secret_ref, "key", where="spec.secretRef") or DEFAULT_SECRET_KEY,
    )


def _key_ref(spec: JSON) -> KeyRef:
    key = fields.jwt_key_ref(spec)
    if key is None:
        raise InvalidSpec("spec.jwtKeyRef (or the deprecated spec.jwtHs256KeyRef) is required")
    return key


def customize(req: CustomizeRequest) -> JSON:
    ns = fields.namespace_of(req.parent)
    key = invalidspec.derivable(lambda: [_key_ref(fields.spec_of(req.parent)).name])
    return {"relatedResources": [references.secret_rule(ns, key)] if key else []}


def claims_for(spec: TokenSpec, issued_at: int) -> JSON:
    return {"iat": issued_at, "nbf": issued_at, "exp": issued_at + spec.lifetime, "sun": spec.username}


def refresh_at(claims: JSON) -> float:
    """When a token is re-minted: a fifth of its lifetime before it expires."""
    return claims["exp"] - (claims["exp"] - claims["iat"]) / 5


def reusable_claims(token: str, spec: TokenSpec, key: bytes) -> JSON | None:
    """The claims of an observed token that is signed with `key` and still matches the spec."""
    try:
        claims = jwt.decode(
            token, key, algorithms=["HS256"], options={"verify_exp": False, "verify_nbf": False, "verify_iat": False}
        )
    except jwt.InvalidTokenError:
        return None
    iat, exp = claims.get("iat"), claims.get("exp")
    if not isinstance(iat, int) or not isinstance(exp, int) or claims.get("sun") != spec.username:
        return None
    return claims if exp - iat == spec.lifetime else None


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse(req.parent)
    secret = references.observed(req, SECRET_TYPE, spec.secret_name)
    token = _token_in(secret, spec)
    key = references.secret_value(req, spec.namespace, spec.key)
    missing = [key] if isinstance(key, Missing) else []
    response: JSON = {"children": []}
    if secret is not None and not spec.refresh:
        # Immutable: whatever was issued stays, valid or not; only deleting the Secret re-mints.
        response["children"].append(build_secret(req.parent, spec, token) if token else kept(secret))
    elif isinstance(key, Missing):
        if secret is not None:
            response["children"].append(kept(secret))
        response["resyncAfterSeconds"] = float(references.MISSING_REFERENCE_RESYNC_SECONDS)
    else:
        _check_key(key, spec.key)
        current = now()
        claims = reusable_claims(token, spec, key) if token else None
        if not token or claims is None or current >= refresh_at(claims):
            claims = claims_for(spec, current)
            token = jwt.encode(claims, key, algorithm="HS256")
        response["children"].append(build_secret(req.parent, spec, token))
        if spec.refresh:
            response["resyncAfterSeconds"] = _resync_after(claims, current, spec.lifetime)
    response["status"] = _status(req.parent, spec, token, missing, stored=_token_in(secret, spec) is not None)
    return response


def _check_key(key: bytes, ref: KeyRef) -> None:
    """InvalidSpec for key material no token should be signed with (an empty key makes PyJWT raise)."""
    problem = _key_problem(key)
    if problem:
        raise InvalidSpec(f"the JWT key in Secret {ref.name!r} key {ref.key!r} {problem}; no token is issued")


def _key_problem(key: bytes) -> str | None:
    if not key:
        return "is empty"
    if not key.strip():
        return "holds only whitespace"
    if len(key) < MIN_KEY_BYTES:
        return f"holds {len(key)} bytes, fewer than the {MIN_KEY_BYTES} an HS256 key needs (RFC 7518 §3.2)"
    return None


def build_secret(parent: JSON, spec: TokenSpec, token: str) -> JSON:
    secret: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(parent, spec.secret_name, {}),
        "type": "Opaque",
        "data": {spec.secret_key: base64.b64encode(token.encode()).decode()},
    }
    if not spec.refresh:
        secret["immutable"] = True
    return secret


def _token_in(secret: JSON | None, spec: TokenSpec) -> str | None:
    encoded = ((secret or {}).get("data") or {}).get(spec.secret_key)
    if not isinstance(encoded, str):
        return None
    try:
        return base64.b64decode(encoded, validate=True).decode()
    except ValueError:
        return None


def _resync_after(claims: JSON, current: int, lifetime: int) -> float:
    """Seconds until the refresh instant, within [1 s, lifetime]."""
    return float(min(max(refresh_at(claims) - current, 1), lifetime))


def _status(parent: JSON, spec: TokenSpec, token: str | None, missing: list[Missing], stored: bool) -> JSON:
    """`issuedAt` is the iat claim of the token in the Secret (RFC 3339, UTC).

    Ready once the observed Secret holds a token (so a client reading it after `kubectl wait` finds one).
    """
    resolved = references.references_condition(parent, missing)
    problems = unmet(resolved)
    if not stored:
        message = f"Secret {spec.secret_name} holds no token yet (key {spec.secret_key})"
        problems.append(Problem("SecretNotCreated", message))
    message = f"Secret {spec.secret_name} holds a token under key {spec.secret_key}"
    ready = ready_condition(parent, problems, "TokenIssued", message)
    status: JSON = {"conditions": [ready, resolved]}
    try:
        iat = jwt.decode(token, options={"verify_signature": False}).get("iat") if token else None
    except jwt.InvalidTokenError:
        iat = None
    if isinstance(iat, int):
        status["issuedAt"] = datetime.datetime.fromtimestamp(iat, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return status

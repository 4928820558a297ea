"""Token → a Secret with a Slurm JWT (hooks/token.py): minting, reuse, refresh timing, immutability."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import jwt
import pytest

from hooks import token
from hooks.app import create_app
from hooks.contract import parse_composite
from slinky_common import names
from slinky_common.errors import InvalidSpec
from tests.hooks.kinds.token import KEY, key_secret, sync, token_cr
from tests.support.hooks import as_observed, assert_invalid_spec, condition_of, cr, related, request, secret
from tests.support.kube import validate_builtin

T0 = 1_700_000_000  # 2023-11-14T22:13:20Z
HOUR = 3600


@pytest.fixture()
def clock(monkeypatch):
    """Pins hooks.token.now(); set `clock.now` to move time."""

    class Clock:
        now = T0

    monkeypatch.setattr(token, "now", lambda: Clock.now)
    return Clock


@pytest.fixture()
def client(clock):
    return create_app().test_client()


def decode(tok: str, key: bytes = KEY) -> dict:
    """Verify the signature; expiry is judged by the pinned clock, not the test machine's."""
    return jwt.decode(
        tok, key, algorithms=["HS256"], options={"verify_exp": False, "verify_iat": False, "verify_nbf": False}
    )


def jwt_of(response: dict, name: str = "ci-jwt-alice", key: str = "SLURM_JWT") -> str:
    (child,) = response["children"]
    assert child["metadata"]["name"] == name
    return base64.b64decode(child["data"][key]).decode()


def test_minted_token_verifies_with_the_key_and_carries_the_claims(client):
    resp = sync(client, token_cr())
    (child,) = resp["children"]
    assert validate_builtin(child) == []
    assert (child["apiVersion"], child["kind"], child["type"]) == ("v1", "Secret", "Opaque")
    assert "immutable" not in child
    claims = decode(jwt_of(resp))
    assert claims == {"iat": T0, "nbf": T0, "exp": T0 + HOUR, "sun": "alice"}
    assert resp["status"]["issuedAt"] == "2023-11-14T22:13:20Z"
    with pytest.raises(jwt.InvalidSignatureError):
        decode(jwt_of(resp), b"another key of thirty-two bytes!")


def test_secret_ref_and_defaults():
    spec = token.parse(cr("Token", "ci", {"jwtKeyRef": {"name": "jwt", "key": "jwt.key"}}))
    assert (spec.username, spec.lifetime, spec.refresh, spec.secret_name, spec.secret_key) == (
        "nobody",
        900,
        True,
        "ci-jwt-nobody",
        "SLURM_JWT",
    )
    spec = token.parse(token_cr(secretRef={"name": "mine", "key": "TOKEN"}))
    assert (spec.secret_name, spec.secret_key) == ("mine", "TOKEN")


def test_token_is_reused_until_a_fifth_of_its_lifetime_before_expiry_then_reminted(client, clock):
    first = sync(client, token_cr())
    assert first["resyncAfterSeconds"] == 0.8 * HOUR  # points at the refresh instant
    observed = as_observed(first["children"])

    clock.now = T0 + 100
    later = sync(client, token_cr(), observed)
    assert later["children"] == first["children"] and later["status"]["issuedAt"] == first["status"]["issuedAt"]
    assert later["resyncAfterSeconds"] == 0.8 * HOUR - 100

    clock.now = T0 + int(0.8 * HOUR) - 1
    just_before = sync(client, token_cr(), observed)
    assert just_before["children"] == first["children"] and just_before["status"] == later["status"]

    clock.now = T0 + int(0.8 * HOUR)
    refreshed = sync(client, token_cr(), observed)
    claims = decode(jwt_of(refreshed))
    assert claims["iat"] == clock.now and claims["exp"] == clock.now + HOUR
    assert refreshed["resyncAfterSeconds"] == 0.8 * HOUR
    assert refreshed["status"]["issuedAt"] == "2023-11-14T23:01:20Z"


def test_same_request_gives_the_same_bytes_with_a_pinned_clock(client):
    body = request(token_cr(), rel=related(key_secret()))
    first, second = client.post("/token/sync", json=body), client.post("/token/sync", json=body)
    assert first.status_code == 200 and first.data == second.data
    body["children"] = as_observed(first.get_json()["children"])
    again = client.post("/token/sync", json=body).get_json()
    assert again["children"] == first.get_json()["children"]


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"lifetime": "2h"}},  # lifetime no longer matches
        {"key": b"rotated-key-rotated-key-rotated-k"},  # signature no longer verifies
    ],
)
def test_token_that_no_longer_matches_spec_or_key_is_reminted(client, clock, change):
    first = sync(client, token_cr())
    clock.now = T0 + 10
    resp = sync(client, token_cr(**change.get("spec", {})), as_observed(first["children"]), key=change.get("key", KEY))
    claims = decode(jwt_of(resp), change.get("key", KEY))
    assert claims["iat"] == T0 + 10


def test_changed_username_mints_into_a_new_secret(client):
    first = sync(client, token_cr())
    resp = sync(client, token_cr(username="bob"), as_observed(first["children"]))
    assert decode(jwt_of(resp, "ci-jwt-bob"))["sun"] == "bob"


def test_refresh_false_gives_an_immutable_secret_that_is_never_reminted(client, clock):
    first = sync(client, token_cr(refresh=False))
    (child,) = first["children"]
    assert child["immutable"] is True and validate_builtin(child) == []
    assert "resyncAfterSeconds" not in first
    clock.now = T0 + 10 * HOUR  # long expired
    later = sync(
        client, token_cr(refresh=False), as_observed(first["children"]), key=b"rotated-key-rotated-key-rotated-k"
    )
    assert later["children"] == first["children"]
    assert "resyncAfterSeconds" not in later


def test_missing_key_secret_keeps_the_existing_token_and_explains(client, clock):
    first = sync(client, token_cr())
    clock.now = T0 + HOUR  # past the refresh point, but nothing to sign with
    resp = sync(client, token_cr(), as_observed(first["children"]), key=None)
    assert resp["children"] == first["children"]
    refs = condition_of(resp, names.CONDITION_REFERENCES_RESOLVED)
    assert (refs["status"], refs["reason"]) == ("False", "SecretNotFound")
    assert resp["resyncAfterSeconds"] > 0
    assert resp["status"]["issuedAt"] == first["status"]["issuedAt"]

    nothing_yet = sync(client, token_cr(), key=None)
    assert nothing_yet["children"] == [] and "issuedAt" not in nothing_yet["status"]


def test_deprecated_key_ref_still_works(client):
    parent = cr("Token", "ci", {"jwtHs256KeyRef": {"name": "jwt", "key": "jwt.key"}, "username": "alice"})
    resp = sync(client, parent)
    assert decode(jwt_of(resp))["exp"] == T0 + 900


def test_customize_asks_for_the_key_secret(client):
    resp = client.post("/token/customize", json={"parent": token_cr()})
    assert resp.get_json() == {
        "relatedResources": [{"apiVersion": "v1", "resource": "secrets", "namespace": "slurm", "names": ["jwt"]}]
    }


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15m", 900),
        ("1h30m", 5400),
        ("90s", 90),
        ("1.5h", 5400),
        ("2h0m0.5s", Decimal("7200.5")),
        ("250ms", Decimal("0.25")),
    ],
)
def test_go_durations(text, seconds):
    assert token.parse_duration(text, "spec.lifetime") == seconds


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ({"lifetime": "ten minutes"}, "spec.lifetime must be a Go duration"),
        ({"lifetime": "15"}, "spec.lifetime must be a Go duration"),
        ({"lifetime": "1h 30m"}, "spec.lifetime must be a Go duration"),
        ({"lifetime": ""}, "spec.lifetime must be a Go duration"),
        ({"lifetime": "500ms"}, "spec.lifetime must be at least 1s"),
        ({"lifetime": 900}, "spec.lifetime must be a string"),
        ({"refresh": "no"}, "spec.refresh must be a boolean"),
        ({"secretRef": "x"}, "spec.secretRef must be an object"),
        ({"jwtKeyRef": None}, "spec.jwtKeyRef"),
    ],
)
def test_invalid_spec_is_a_condition_naming_the_field_and_changes_nothing(client, spec, needle):
    assert_invalid_spec(client, "token", token_cr(), token_cr(**spec), related(key_secret()), needle)


def test_parse_rejects_a_missing_key_ref():
    with pytest.raises(InvalidSpec, match=r"spec\.jwtKeyRef"):
        token.parse(cr("Token", "ci", {"username": "alice"}))


def test_pure_sync_matches_http(clock, client):
    body = request(token_cr(), rel=related(key_secret()))
    assert token.sync(parse_composite(body, "Token")) == client.post("/token/sync", json=body).get_json()


def test_still_valid_token_secret_is_byte_identical_across_repeated_syncs(client, clock):
    first = client.post("/token/sync", json=request(token_cr(), rel=related(key_secret())))
    (minted,) = first.get_json()["children"]
    body = request(token_cr(), as_observed([minted]), related(key_secret()))
    for now in (T0 + 1, T0 + 1, T0 + HOUR // 2, T0 + int(0.8 * HOUR) - 1):
        clock.now = now
        answers = [client.post("/token/sync", json=body) for _ in range(2)]
        assert answers[0].data == answers[1].data  # same observed state, same instant: same bytes
        (child,) = answers[0].get_json()["children"]
        assert json.dumps(child, sort_keys=True) == json.dumps(minted, sort_keys=True)


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        pytest.param(b"", "is empty", id="empty"),
        pytest.param(b" \n\t" * 12, "holds only whitespace", id="whitespace"),
        pytest.param(b"0123456789abcdef", "holds 16 bytes, fewer than the 32", id="too-short"),
    ],
)
def test_unusable_key_material_is_an_invalid_spec_naming_secret_and_key_and_no_token(client, key, problem):
    """An empty key made PyJWT raise (a 500 on every sync); a short one signs tokens RFC 7518 forbids."""
    message = assert_invalid_spec(
        client, "token", token_cr(), token_cr(), related(key_secret(key)), problem, good_rel=related(key_secret())
    )
    assert "Secret 'jwt' key 'jwt.key'" in message, message


def test_key_data_that_is_not_base64_is_a_malformed_request_naming_the_field(client):
    """The API server keeps Secret data as base64; anything else never came from it."""
    bad = secret("jwt", {})
    bad["data"]["jwt.key"] = "not base64!"
    resp = client.post("/token/sync", json=request(token_cr(), None, related(bad)))
    assert resp.status_code == 400 and "data" in resp.get_json()["error"], resp.get_json()

"""References between CRs (hooks/references.py): a referenced Secret's value, or why it is unavailable."""

from __future__ import annotations

from hooks import references
from hooks.contract import parse_composite
from slinky_common import fields
from tests.support.hooks import NS, cr, related, request, secret


def test_secret_value_explains_what_is_missing_without_values():
    req = parse_composite(request(cr("Token", "t", {}), rel=related(secret("s", {"a": b"hunter2"}))), "Token")
    assert references.secret_value(req, NS, fields.KeyRef("s", "a")) == b"hunter2"
    absent = references.secret_value(req, NS, fields.KeyRef("nope", "a"))
    no_key = references.secret_value(req, NS, fields.KeyRef("s", "b"))
    assert isinstance(absent, references.Missing) and absent.reason == "SecretNotFound"
    assert isinstance(no_key, references.Missing) and no_key.reason == "SecretKeyNotFound"
    assert "hunter2" not in absent.message + no_key.message

"""References between CRs: a spec's reference turned into a related-resource rule (for customize) and
into the object or value it names (for sync), and the condition that says what is missing.

RestApi, LoginSet and NodeSet pods find slurmctld, its config map and its keys through the Controller CR
(hooks/controller/model.py); Accounting and Token read key Secrets. All of these arrive as Metacontroller
`related` objects.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

from hooks import contract
from hooks.contract import CompositeRequest
from hooks.status import condition
from slinky_common import names
from slinky_common.fields import KeyRef
from slinky_common.jsontypes import JSON

SECRET_TYPE = contract.TYPE_SECRET
# While a reference is missing, ask Metacontroller to look again this soon (a related object's
# creation also wakes the parent; this covers a missed event).
MISSING_REFERENCE_RESYNC_SECONDS = 30


def secret_rule(namespace: str, secret_names: list[str]) -> JSON:
    """Related Secrets by name; `names` must never be empty (that would mean every Secret)."""
    return {"apiVersion": "v1", "resource": "secrets", "namespace": namespace, "names": sorted(set(secret_names))}


def find_related(req: CompositeRequest, type_key: str, namespace: str, name: str) -> JSON | None:
    for obj in req.related_of(type_key):
        meta = obj["metadata"]
        if meta.get("name") == name and meta.get("namespace", namespace) == namespace:
            return obj
    return None


@dataclass(frozen=True)
class Missing:
    """Why a referenced value is unavailable; messages name objects, never values."""

    reason: str
    message: str


def secret_value(req: CompositeRequest, namespace: str, ref: KeyRef) -> bytes | Missing:
    """The bytes one key of a related Secret holds, or why they are unavailable."""
    secret = find_related(req, SECRET_TYPE, namespace, ref.name)
    if secret is None:
        return Missing("SecretNotFound", f"Secret {ref.name!r} does not exist")
    encoded = (secret.get("data") or {}).get(ref.key)
    if not isinstance(encoded, str):
        return Missing("SecretKeyNotFound", f"Secret {ref.name!r} has no key {ref.key!r}")
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return Missing("SecretKeyInvalid", f"Secret {ref.name!r} key {ref.key!r} is not valid base64")


def observed(req: CompositeRequest, type_key: str, name: str) -> JSON | None:
    """The observed child of one type and name."""
    return next((c for c in req.children_of(type_key) if c["metadata"].get("name") == name), None)


def references_condition(parent: JSON, missing: list[Missing]) -> JSON:
    """Explains unresolved references; the children that depend on them are kept as they are."""
    if not missing:
        return condition(
            parent, names.CONDITION_REFERENCES_RESOLVED, True, "Resolved", "every referenced object exists"
        )
    message = "; ".join(m.message for m in missing) + "; children that need it are kept unchanged until it exists"
    return condition(parent, names.CONDITION_REFERENCES_RESOLVED, False, missing[0].reason, message)

"""A hook request's bytes as JSON data: strict JSON, and a composite request without what no hook reads.

Parsing is most of what a big hook request costs (docs/architecture.md §7), and in a NodeSet sync
half of the bytes are the `managedFields` of the observed pods: three field managers' `fieldsV1`
sets, thousands of small objects per pod that no hook reads (the kept-child fallback rebuilds
metadata from name, labels and annotations). A CompositeController sync or finalize request is
therefore decoded against its shape (msgspec), which skips those lists without building them and
halves both the parse and the freeing of a 1,000-pod request.

The decoded data is what strict JSON parsing (orjson, `contract.load_json_object`) gives, minus:
* `metadata.managedFields` of each observed child and related object;
* top-level keys of the request and of observed objects that no CompositeController request or
  object of ours has (`_Composite`, `_Observed`; a test checks them against the Kubernetes schemas
  of every kind our CompositeControllers watch), and ObjectMeta fields Kubernetes does not have.
A request the shape does not fit (a null metadata, a list where the children belong, anything not
JSON) is parsed again by `contract.load_json_object`, which has the last word and names what is
wrong; so is a body that is not ASCII, unless it is valid UTF-8 (the decoder does not look inside
the text it skips), and so is nesting deeper than the interpreter's recursion limit (1,000, as the
hook server runs), where the decoder stops. Three corners of JSON that no API server sends are
judged differently, and tests/hooks/test_requestjson.py pins each: an integer beyond 64 bits is
read exactly (orjson rounds it to a float); a number beyond the double range inside skipped text is
not refused; in a process that raised its recursion limit, nor is nesting deeper than orjson's
limit of 1,024 levels.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

import msgspec

from hooks.contract import JSON, load_json_object


class _Metadata(TypedDict, total=False):
    """Every ObjectMeta field but managedFields."""

    name: Any
    generateName: Any
    namespace: Any
    selfLink: Any
    uid: Any
    resourceVersion: Any
    generation: Any
    creationTimestamp: Any
    deletionTimestamp: Any
    deletionGracePeriodSeconds: Any
    labels: Any
    annotations: Any
    ownerReferences: Any
    finalizers: Any


class _Observed(TypedDict, total=False):
    """Every top-level field of the kinds our CompositeControllers watch (children and related)."""

    apiVersion: Any
    kind: Any
    metadata: _Metadata
    spec: Any
    status: Any
    data: Any
    binaryData: Any
    stringData: Any
    type: Any
    immutable: Any


_ObjectMap = dict[str, dict[str, _Observed] | None] | None


class _Composite(TypedDict, total=False):
    """A CompositeController sync or finalize request (Metacontroller's `SyncHookRequest`)."""

    controller: Any
    parent: Any
    children: _ObjectMap
    related: _ObjectMap
    finalizing: Any


OBSERVED_FIELDS = frozenset(_Observed.__annotations__)
METADATA_FIELDS = frozenset(_Metadata.__annotations__)
COMPOSITE_FIELDS = frozenset(_Composite.__annotations__)
_COMPOSITE = msgspec.json.Decoder(_Composite)


def load_composite_request(body: bytes) -> JSON:
    """A CompositeController request without observed objects' managedFields (see the module docstring)."""
    try:
        if not body.isascii():
            body.decode()  # strict UTF-8, surrogates refused, as orjson's
        return cast(JSON, _COMPOSITE.decode(body))  # a TypedDict is a plain dict
    except (msgspec.DecodeError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return load_json_object(body)

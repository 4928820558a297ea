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
wrong; so is a body that is not valid UTF-8 (the decoder does not look inside the text it skips),
and nesting deeper than the interpreter's recursion limit (1,000, as the hook server runs), where
the decoder stops. Corners judged differently, each pinned by tests/hooks/test_requestjson.py:
* An integer beyond 64 bits is read exactly; orjson, like Go, reads a float (or refuses one beyond
  the double range). An API server can send one: Go writes a float64 below 1e21 without exponent,
  and our CRDs keep unknown fields in places. So the shape checks count such an integer as "not an
  integer", as they do the float (slinky_common/shapes.py), and a request whose answer fails on the shaped
  decode, as orjson refuses to write such an integer, is answered from the strict parse
  (hooks/app.py). What is left: a hook that reads such a number where it judges a spec says so in
  its own words (e.g. an InvalidSpec condition, where orjson's float or refusal gives another).
* A number beyond the double range inside skipped text is not refused.
* In a process that raised its recursion limit, nesting deeper than orjson's 1,024 levels is not
  refused either.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

from hooks.contract import load_json_object
from slinky_common.decode import shaped
from slinky_common.jsontypes import JSON


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


_composite = shaped(_Composite, load_json_object)


def load_composite_request(body: bytes) -> JSON:
    """A CompositeController request without observed objects' managedFields (see the module docstring)."""
    return cast(JSON, _composite(body))  # a TypedDict is a plain dict

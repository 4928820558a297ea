"""Observed children kept as Metacontroller last applied them, passed through as JSON text (docs/architecture.md §3).

Metacontroller records what it applied in the `metacontroller.k8s.io/last-applied-configuration`
annotation; returning exactly that changes nothing. The annotation is believed only when it is
strict JSON (orjson: no NaN or Infinity to leak into a response) naming this very object: a copied
one would make Metacontroller create another object, and text spliced unchecked into a response
could end the children list early, which deletes every child after it. Without a believable
annotation (server-side apply writes none), the observed object minus server-owned fields is kept.

A NodeSet resync keeps every pod this way, and parsing each pod's annotation, then serialising it
again, cost as much as a tenth of the JSON floor (docs/architecture.md §7). The verdict on an
annotation is a pure function of its text, so each worker remembers it with that text (at most
`VERDICT_CACHE_BYTES` of them, oldest forgotten first): a resync, whose pods carry the annotations of
the last one, parses none of them and returns each as pre-serialised JSON (`orjson.Fragment`).
The bytes are those orjson writes for the parsed annotation, exactly as if it were parsed again.
"""

from __future__ import annotations

import threading
from typing import Any, Final, NamedTuple

import orjson

from slinky_common import names
from slinky_common.errors import BadHookRequest

JSON = dict[str, Any]

VERDICT_CACHE_BYTES: Final = 32 * 1024 * 1024  # about 10,000 worker pods' annotations per worker process
# orjson writes no deeper than this (its recursion limit), so no answer can carry a value nested deeper;
# the request parsers accept up to about 1,000 levels.
MAX_DEPTH: Final = 254


class Kept:
    """A child returned as JSON text, with what the response check and sorting read of it."""

    __slots__ = ("api_version", "kind", "name", "namespace", "text")

    def __init__(self, api_version: Any, kind: Any, name: Any, namespace: Any, text: orjson.Fragment):
        self.api_version = api_version
        self.kind = kind
        self.name = name
        self.namespace = namespace
        self.text = text

    def __repr__(self) -> str:
        return f"Kept({self.kind}/{self.name})"


Child = JSON | Kept  # a child of a hook response: built from scratch, or kept


class _Verdict(NamedTuple):
    text: str  # the annotation judged
    applied: Kept | None  # the child it describes; None when it cannot be believed, for any object
    size: int  # bytes remembering it takes


class _Verdicts:
    """Verdicts on annotation texts, bounded (oldest out first), each found through its object's uid.

    Finding a verdict by its text would hash the text (3 kB for a pod) on every sync, which cost as
    much as all else of keeping the pod; the uid only says where to look: a verdict is used only for
    the very text it judged, and another text for the same uid is judged and replaces it.
    """

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._size = 0
        self._by_locator: dict[str, _Verdict] = {}
        self._lock = threading.Lock()

    def judge(self, text: str, locator: str) -> Kept | None:
        found = self._by_locator.get(locator)
        if found is not None and found.text == text:
            return found.applied
        verdict = _judge(text)
        with self._lock:
            replaced = self._by_locator.pop(locator, None)
            self._size += verdict.size - (replaced.size if replaced else 0)
            self._by_locator[locator] = verdict
            while self._size > self._limit and self._by_locator:
                oldest = next(iter(self._by_locator))
                self._size -= self._by_locator.pop(oldest).size
        return verdict.applied

    def clear(self) -> None:
        with self._lock:
            self._by_locator.clear()
            self._size = 0


VERDICTS: Final = _Verdicts(VERDICT_CACHE_BYTES)


def kept(child: JSON) -> Kept:
    """`child` (an observed object) as we last returned it: its believable last-applied annotation, or
    the observed object minus server-owned fields."""
    meta = child["metadata"]
    annotations = meta.get("annotations") or {}
    text = annotations.get(names.ANNOTATION_LAST_APPLIED)
    if isinstance(text, str):
        uid = meta.get("uid")
        applied = VERDICTS.judge(text, uid if isinstance(uid, str) and uid else text)
        if applied is not None and applied.kind == child.get("kind") and applied.name == meta.get("name"):
            return applied
    clean_meta: JSON = {"name": meta["name"]}
    for field in ("labels", "annotations"):
        if meta.get(field):
            clean_meta[field] = {k: v for k, v in meta[field].items() if k != names.ANNOTATION_LAST_APPLIED}
    body = {k: v for k, v in child.items() if k not in ("metadata", "status")}
    clean = {**body, "metadata": clean_meta}
    where = f"observed {child.get('kind')} {meta.get('namespace', '')}/{meta['name']}"
    return Kept(clean.get("apiVersion"), clean.get("kind"), meta["name"], "", _fragment(clean, where))


def kind_and_name(child: Child) -> tuple[Any, Any]:
    """The sort key of a response's children."""
    if isinstance(child, Kept):
        return child.kind, child.name
    return child["kind"], child["metadata"]["name"]


def name_of(child: Child) -> Any:
    return child.name if isinstance(child, Kept) else child["metadata"]["name"]


def serialise(value: Any) -> bytes:
    """A hook response (or any part of one) as JSON, kept children as their text; BadHookRequest when
    it nests too deeply to be written, which only a request nesting as deeply can cause."""
    try:
        return orjson.dumps(value, default=_text_of)
    except orjson.JSONEncodeError:
        check_depth(value, "the answer (built from the request)")
        raise


def check_depth(value: Any, where: str) -> None:
    """BadHookRequest naming the path if `value` nests deeper than MAX_DEPTH: no answer could carry
    it, and walking it would exhaust the interpreter's recursion limit. Iterative, so it cannot."""
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]  # (item, its depth, (key, parent's path))
    while stack:
        item, depth, path = stack.pop()
        items = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else None
        if items is None:
            continue
        if depth > MAX_DEPTH:
            raise BadHookRequest(f"{where} nests deeper than {MAX_DEPTH} levels, at {_shown(path)}")
        stack.extend((inner, depth + 1, (key, path)) for key, inner in items)


def _shown(path: Any) -> str:
    steps: list[Any] = []
    while path is not None:
        key, path = path
        steps.append(key)
    steps.reverse()
    return ".".join(map(str, steps[:8])) + f"… ({len(steps)} levels)"


def _text_of(value: Any) -> orjson.Fragment:
    if isinstance(value, Kept):
        return value.text
    raise TypeError  # orjson names the type: "Type is not JSON serializable: set"


def _judge(text: str) -> _Verdict:
    """Parse one annotation into its verdict."""
    try:
        applied = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _Verdict(text, None, len(text))
    meta = applied.get("metadata") if isinstance(applied, dict) else None
    if not isinstance(meta, dict) or not applied.get("apiVersion"):
        return _Verdict(text, None, len(text))
    try:
        canonical = orjson.dumps(applied)
    except orjson.JSONEncodeError:  # nested deeper than an answer carries: the object itself is judged
        return _Verdict(text, None, len(text))
    same = canonical == text.encode()
    fragment = orjson.Fragment(text if same else canonical)
    namespace = meta.get("namespace", "")
    believed = Kept(applied["apiVersion"], applied.get("kind"), meta.get("name"), namespace, fragment)
    return _Verdict(text, believed, len(text) + (0 if same else len(canonical)))


def _fragment(obj: JSON, where: str) -> orjson.Fragment:
    try:
        return orjson.Fragment(orjson.dumps(obj))
    except orjson.JSONEncodeError:
        check_depth(obj, where)
        raise

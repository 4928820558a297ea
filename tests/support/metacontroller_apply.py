"""A model of how Metacontroller's default apply (`--apply-strategy=dynamic-apply`) updates a child.

Modelled on Metacontroller v4.17.2 (`pkg/dynamic/apply/apply.go` and `ApplyUpdate`/`DynamicApply.Apply` in
`pkg/controller/common/manage_children.go`), written here from reading that code, not copied. One sync of an
observed child goes like this:

1. The hook's child gets the parent's namespace when it has none, and with `generateSelector` the label
   `controller-uid=<parent uid>` (composite `hooks.go`, `controller.go`).
2. On create, the child is sent as it is, with the annotation `metacontroller.k8s.io/last-applied-configuration`
   holding its own JSON, plus a controller ownerReference added after that JSON was taken.
3. On update, a three-way merge: starting from the observed object, every field that the last-applied copy has
   and the new desired copy lacks is deleted, and every desired field is merged in recursively. Objects merge key
   by key. A list merges item by item only when every item of the observed, last-applied and desired lists is
   an object and all of them share one of the conventional keys `containerPort`, `port`, `mountPath`, `name`,
   `uid`, `ip`, `path` (first match wins); any other list is replaced by the desired list as a whole. So a list
   whose items have no such top-level key (a StatefulSet's `volumeClaimTemplates`, keyed by `metadata.name`)
   must be emitted exactly as the API server stores it, or it differs on every sync.
4. The read-only metadata fields and `status` are put back as observed, the annotation is set to the new
   desired JSON, and the result is compared with the observed object by Go's `reflect.DeepEqual`: any
   difference means a write (Update for InPlace, delete for Recreate; nothing for OnDelete).

Go quirks kept on purpose, because they decide what Metacontroller really does: a desired non-object where an
object is observed does not replace it (only keys are removed); `reflect.DeepEqual` tells an integer from a
float and a bool from an integer; the annotation is Go's `json.Marshal` (sorted keys, compact, `<>&` escaped).
"""

from __future__ import annotations

import copy
import json
from typing import Any

JSON = dict[str, Any]

LAST_APPLIED = "metacontroller.k8s.io/last-applied-configuration"
SELECTOR_LABEL = "controller-uid"  # generateSelector's label: <parent uid> on every child
KNOWN_MERGE_KEYS = ("containerPort", "port", "mountPath", "name", "uid", "ip", "path")
# Read-only, system-populated ObjectMeta fields that Metacontroller reverts to the observed values.
SYSTEM_METADATA = (
    "selfLink", "uid", "resourceVersion", "generation", "creationTimestamp",
    "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
)  # fmt: skip
_WRITES = {"InPlace": "update", "RollingInPlace": "update", "Recreate": "delete", "RollingRecreate": "delete"}


class MergeError(ValueError):
    """The merge Metacontroller would refuse (it then fails the sync and changes nothing)."""


def go_json(value: Any) -> str:
    """Go's json.Marshal of decoded JSON: keys sorted, no spaces, HTML-sensitive characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(char, escaped)
    return text


def go_equal(left: Any, right: Any) -> bool:
    """reflect.DeepEqual over decoded JSON: like ==, but int, float and bool are different types."""
    if type(left) is not type(right):
        return False
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(go_equal(v, right[k]) for k, v in left.items())
    if isinstance(left, list):
        return len(left) == len(right) and all(go_equal(a, b) for a, b in zip(left, right, strict=True))
    return bool(left == right)


def prepare_child(child: JSON, parent: JSON, generate_selector: bool) -> JSON:
    """The hook's child as Metacontroller applies it: parent namespace by default, controller-uid label."""
    out = copy.deepcopy(child)
    meta = out.setdefault("metadata", {})
    if not meta.get("namespace") and parent["metadata"].get("namespace"):
        meta["namespace"] = parent["metadata"]["namespace"]
    if generate_selector:
        labels = meta.get("labels") or {}
        labels.setdefault(SELECTOR_LABEL, parent["metadata"]["uid"])
        meta["labels"] = labels
    return out


def create_body(desired: JSON, parent: JSON) -> JSON:
    """What Metacontroller sends to create a child: the last-applied annotation, then its ownerReference."""
    out = copy.deepcopy(desired)
    _set_last_applied(out, desired)
    owner = {
        "apiVersion": parent["apiVersion"], "kind": parent["kind"], "name": parent["metadata"]["name"],
        "uid": parent["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
    }  # fmt: skip
    refs = out["metadata"].setdefault("ownerReferences", [])
    if all(ref.get("uid") != owner["uid"] for ref in refs):
        refs.append(owner)
    return out


def apply_update(observed: JSON, desired: JSON) -> JSON:
    """The object Metacontroller would write for `desired` over `observed` (equal to `observed`: no write)."""
    update = copy.deepcopy(desired)
    annotations = (update.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    merged = merge(observed, last_applied(observed), update)
    for field in SYSTEM_METADATA:
        _revert(merged, observed, ("metadata", field))
    _revert(merged, observed, ("status",))
    _set_last_applied(merged, update)
    return merged


def write_for(observed: JSON, desired: JSON, update_method: str) -> str | None:
    """The write one sync makes for an observed child under the child rule's `updateStrategy.method`."""
    if go_equal(apply_update(observed, desired), observed):
        return None
    if (observed.get("metadata") or {}).get("deletionTimestamp"):
        return None
    return _WRITES.get(update_method)


def last_applied(obj: JSON) -> JSON | None:
    text = ((obj.get("metadata") or {}).get("annotations") or {}).get(LAST_APPLIED) or ""
    return json.loads(text) if text else None


def merge(observed: JSON, last: JSON | None, desired: JSON) -> JSON:
    """The three-way merge of `desired` into a copy of `observed`, given the previous desired copy `last`."""
    destination = copy.deepcopy(observed)
    result = _merge(destination, last, desired)
    if not isinstance(result, dict):
        raise MergeError("observed object is not an object")
    return result


def _merge(destination: Any, last: Any, desired: Any) -> Any:
    if isinstance(destination, dict):
        # Go asserts the others to maps and treats anything else as nil: a desired scalar does not replace a map.
        return _merge_object(destination, _as(dict, last), _as(dict, desired))
    if isinstance(destination, list):
        return _merge_list(destination, _as(list, last), _as(list, desired))
    return desired


def _as(kind: type, value: Any) -> Any:
    return value if isinstance(value, kind) else None


def _merge_object(destination: JSON, last: JSON | None, desired: JSON | None) -> JSON:
    desired = desired or {}
    for key in last or {}:
        if key not in desired:
            destination.pop(key, None)
    for key, value in desired.items():
        destination[key] = _merge(destination.get(key), (last or {}).get(key), value)
    return destination


def _merge_list(destination: list, last: list | None, desired: list | None) -> Any:
    key = detect_merge_key(destination, last, desired)
    if not key:
        return desired
    return _merge_list_map(key, destination, last or [], desired or [])


def _merge_list_map(key: str, destination: list, last: list, desired: list) -> list:
    merged = _merge_object(_by_key(key, destination), _by_key(key, last), _by_key(key, desired))
    out: list = []
    added: set[str] = set()
    for item in destination:  # observed order first; Go appends a repeated observed key twice
        name = merge_key_string(item[key])
        if name in merged:
            out.append(merged[name])
            added.add(name)
    for item in desired:
        name = merge_key_string(item[key])
        if name not in added:
            out.append(merged[name])
            added.add(name)
    return out


def _by_key(key: str, items: list) -> JSON:
    return {merge_key_string(item[key]): item for item in items}


def merge_key_string(value: Any) -> str:
    """Go's fmt %v of a merge key value, the map key the items are matched by."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "<nil>"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def detect_merge_key(*lists: list | None) -> str:
    """The conventional key every item of every list has, or "" when the lists are not list-maps."""
    common: set[str] | None = None
    for items in lists:
        for item in items or []:
            if not isinstance(item, dict):
                return ""
            common = set(item) if common is None else common & set(item)
    return next((key for key in KNOWN_MERGE_KEYS if key in (common or set())), "")


def _revert(merged: JSON, observed: JSON, path: tuple[str, ...]) -> None:
    source: Any = observed
    for part in path:
        if not isinstance(source, dict) or part not in source:
            _remove(merged, path)
            return
        source = source[part]
    target = merged
    for part in path[:-1]:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    target[path[-1]] = copy.deepcopy(source)


def _remove(obj: JSON, path: tuple[str, ...]) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            return
        obj = child
    obj.pop(path[-1], None)


def _set_last_applied(obj: JSON, applied: JSON) -> None:
    meta = obj.setdefault("metadata", {})
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), dict) else {}
    annotations[LAST_APPLIED] = go_json(applied)
    meta["annotations"] = annotations


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Where two decoded JSON values differ (for assertion messages)."""
    if isinstance(left, dict) and isinstance(right, dict):
        out: list[str] = []
        for key in sorted(left.keys() | right.keys()):
            sub = f"{path}.{key}"
            if key not in left or key not in right:
                out.append(f"{sub}: {left.get(key, '<absent>')!r} != {right.get(key, '<absent>')!r}")
            else:
                out += differences(left[key], right[key], sub)
        return out
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [d for i, (a, b) in enumerate(zip(left, right, strict=True)) for d in differences(a, b, f"{path}[{i}]")]
    return [] if go_equal(left, right) else [f"{path}: {left!r} != {right!r}"]

"""The JSON shape of the Kubernetes objects a hook request carries, checked before any hook runs.

Observed objects come from the API server, so a value of the wrong type (an object where a name
belongs, a list for a label map) means the request is not a valid hook request: it gets a 400
naming the field, never a 500 from deep inside a hook. Only the fields the hooks read are
described; everything else passes untouched. A shape is a Python type (`str`, `int`, `bool`,
`dict`, `list`), `STR_MAP` (an object of strings), `QUANTITY_MAP` (an object of quantities), a
dict of field shapes (an object whose listed fields, when present and not null, have those
shapes) or a one-item list (a list of that shape).
Names that identify an object are required strings (`REQUIRED_STR`) and never null.
"""

from __future__ import annotations

import base64
import binascii
import itertools
from collections.abc import Callable, Iterator
from typing import Any, Final, cast

STR_MAP: Final = "string map"
QUANTITY_MAP: Final = "quantity map"  # resource name -> a quantity (string or number)
REQUIRED_STR: Final = "required string"
NON_NULL_STR: Final = "non-null string"

Shape = Any

# A JSON integer is one of 64 bits: beyond, the strict parser (orjson) reads a float, as Go does, and
# the shaped decoder of hooks/requestjson.py an exact integer; both are "not an integer" here.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object", list: "a list"}

OWNER_REFERENCE: Final = {
    "apiVersion": NON_NULL_STR, "kind": NON_NULL_STR, "name": NON_NULL_STR, "uid": str, "controller": bool,
}  # fmt: skip
METADATA: Final = {
    "name": REQUIRED_STR,
    "namespace": NON_NULL_STR,
    "uid": str,
    "generation": int,
    "resourceVersion": str,
    "labels": STR_MAP,
    "annotations": STR_MAP,
    "ownerReferences": [OWNER_REFERENCE],
    "finalizers": [str],
    "creationTimestamp": str,
    "deletionTimestamp": str,
}
_CONDITIONS: Final = [{"type": str, "status": str, "reason": str, "message": str, "lastTransitionTime": str}]
_RESOURCES: Final = {"requests": QUANTITY_MAP, "limits": QUANTITY_MAP}
CONTAINER: Final = {
    "name": str, "image": str, "resources": _RESOURCES, "env": [dict], "envFrom": [dict], "volumeMounts": [dict],
    "ports": [dict], "args": [str], "command": [str], "securityContext": dict, "lifecycle": dict,
}  # fmt: skip
POD_SPEC: Final = {
    "containers": [CONTAINER],
    "initContainers": [CONTAINER],
    "volumes": [dict],
    "tolerations": [dict],
    "nodeName": str,
    "hostname": str,
    "schedulerName": str,
    "nodeSelector": STR_MAP,
    "affinity": dict,
    "priorityClassName": str,
    "resources": _RESOURCES,
    "schedulingGroup": {"podGroupName": str},
}
_TEMPLATE: Final = {"metadata": {"labels": STR_MAP, "annotations": STR_MAP}, "spec": POD_SPEC}
_WORKLOAD_SPEC: Final = {
    "replicas": int,
    "selector": {"matchLabels": STR_MAP},
    "template": _TEMPLATE,
    "volumeClaimTemplates": [{"metadata": METADATA, "spec": dict}],
}
_WORKLOAD_STATUS: Final = {"replicas": int, "readyReplicas": int, "availableReplicas": int, "updatedReplicas": int}
_NODE_SPEC: Final = {"taints": [{"key": str, "value": str, "effect": str}], "unschedulable": bool}
# Custom resources of ours seen as related objects: the fields another kind's hook reads.
_REF: Final = {"name": str}
_CR_SPEC: Final = {
    "controllerRef": _REF,
    "accountingRef": _REF,
    "partition": {"enabled": bool, "config": str},
    "template": {"metadata": dict, "spec": {"hostname": str}},
    "slurmKeyRef": dict,
    "jwtKeyRef": dict,
    "external": bool,
    "externalConfig": dict,
    "service": dict,
}
# scheduler-plugins' PodGroup and the Workload API's PodGroup share the kind.
_POD_GROUP_SPEC: Final = {
    "minMember": int,
    "minResources": QUANTITY_MAP,
    "schedulingPolicy": {"gang": {"minCount": int}},
    "workloadRef": {"workloadName": str},
    "podGroupTemplateRef": {"workload": {"workloadName": str}},
}

# Extra shape of the objects of one kind (by `kind`), on top of every object's metadata.
KIND_SHAPES: Final[dict[str, dict[str, Shape]]] = {
    "Pod": {"spec": POD_SPEC, "status": {"phase": str, "conditions": _CONDITIONS}},
    "StatefulSet": {"spec": _WORKLOAD_SPEC, "status": _WORKLOAD_STATUS},
    "Deployment": {"spec": _WORKLOAD_SPEC, "status": _WORKLOAD_STATUS},
    "Node": {"spec": _NODE_SPEC, "status": {"conditions": _CONDITIONS}},
    "Secret": {"data": STR_MAP, "stringData": STR_MAP},
    "ConfigMap": {"data": STR_MAP},
    "Service": {"spec": {"selector": STR_MAP, "ports": [dict]}},
    "PersistentVolumeClaim": {"spec": dict, "status": dict},
    "Job": {"spec": {"template": _TEMPLATE, "parallelism": int, "completions": int, "activeDeadlineSeconds": int}},
    "JobSet": {"spec": dict},
    "LeaderWorkerSet": {"spec": {"leaderWorkerTemplate": {"size": int}}},
    "PodGroup": {"spec": _POD_GROUP_SPEC, "status": {"phase": str}},
    "Workload": {"spec": dict},
}
for _kind in ("Controller", "NodeSet", "LoginSet", "RestApi", "Accounting", "Token"):
    KIND_SHAPES[_kind] = {"spec": _CR_SPEC, "status": {"conditions": _CONDITIONS}}


class ShapeError(ValueError):
    """`where` names the field; the message says what it must be."""


OUR_KINDS: Final = frozenset({"Controller", "NodeSet", "LoginSet", "RestApi", "Accounting", "Token"})
_COMMON: Final = {"apiVersion": NON_NULL_STR, "kind": NON_NULL_STR, "metadata": METADATA, "spec": dict, "status": dict}
# Metacontroller's own CompositeController/DecoratorController object, sent as `controller`.
CONTROLLER: Final = {
    "metadata": {"name": str, "labels": STR_MAP, "annotations": STR_MAP},
    "spec": {"childResources": [dict]},
}


def conforms(obj: Any, parent: bool = False) -> bool:
    """True when `check_object(obj, where, parent)` surely passes; False when it may not, and
    `check_object` must decide (and name the field). See `_conforms`."""
    if type(obj) is not dict or type(obj.get("metadata")) is not dict:
        return False
    kind = obj.get("kind")
    if not isinstance(kind, str):
        return _CONFORMS_ANY(obj)
    if kind == "Secret":  # its values must be base64 too
        return False
    if parent and kind in OUR_KINDS:
        return _CONFORMS_OUR_PARENT(obj)
    return _CONFORMS.get(kind, _CONFORMS_ANY)(obj)


def check_object(obj: Any, where: str, parent: bool = False, metadata: dict[str, Shape] = METADATA) -> None:
    """Raise ShapeError naming the first field of `obj` whose JSON type is wrong.

    `parent`: the object the hook computes for; a spec of one of our kinds is the hook's to judge
    (a value it cannot use is an InvalidSpec condition, not a 400), so only its metadata is checked.
    """
    if metadata is METADATA and conforms(obj, parent):
        return
    if not isinstance(obj, dict):
        raise ShapeError(f"{where} must be an object, got {type_name(obj)}")
    if not isinstance(obj.get("metadata"), dict):
        raise ShapeError(f"{where}.metadata must be an object, got {type_name(obj.get('metadata'))}")
    kind = obj.get("kind")
    extra = KIND_SHAPES.get(kind, {}) if isinstance(kind, str) else {}
    if parent and isinstance(kind, str) and kind in OUR_KINDS:
        extra = _OUR_PARENT  # written by our hooks; the CRD keeps it a list
    check(obj, {**_COMMON, "metadata": metadata, **extra}, where)
    if kind == "Secret":
        _check_base64(obj.get("data") or {}, f"{where}.data")


def check(value: Any, shape: Shape, where: str) -> None:
    """Raise ShapeError naming the first field of `value` that does not have `shape`."""
    compiled = _CONFORMS_SHAPE.get(id(shape))
    if compiled is not None and compiled(value):
        return
    _check(value, shape, where)


def _check(value: Any, shape: Shape, where: str) -> None:
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise ShapeError(f"{where} must be an object, got {type_name(value)}")
        for field, inner in shape.items():
            item = value.get(field)
            if item is None:
                if inner == REQUIRED_STR or (inner == NON_NULL_STR and field in value):
                    raise ShapeError(f"{where}.{field} must be a non-empty string, got {type_name(item)}")
                continue
            _check(item, inner, f"{where}.{field}")
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ShapeError(f"{where} must be a list, got {type_name(value)}")
        for index, item in enumerate(value):
            _check(item, shape[0], f"{where}[{index}]")
    elif shape == QUANTITY_MAP:
        quantities = isinstance(value, dict) and all(_is_quantity(v) for v in value.values())
        if not quantities:
            raise ShapeError(f"{where} must map resource names to quantities (strings or numbers)")
    elif shape == STR_MAP:
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise ShapeError(f"{where} must map names to strings")
    elif shape in (REQUIRED_STR, NON_NULL_STR):
        if not isinstance(value, str) or (shape == REQUIRED_STR and not value):
            raise ShapeError(f"{where} must be a non-empty string, got {type_name(value)}")
    elif not isinstance(value, shape) or (
        shape is int and (isinstance(value, bool) or not _INT_MIN <= value <= _INT_MAX)
    ):
        raise ShapeError(f"{where} must be {_TYPE_NAMES[shape]}, got {type_name(value)}")


Conforms = Callable[[Any], bool]


def _conforms(shape: dict[str, Shape], name: str) -> Conforms:
    """`shape` compiled into one yes/no function, for the objects of every request (docs/architecture.md §7).

    A 1,000-pod NodeSet sync checks some 100,000 fields; `check` walks each with its path spelled
    out, which cost as much as parsing the request. The compiled form is straight-line code (one
    `if` per field, no calls, no paths; the way dataclasses builds its methods) testing exact types,
    as a JSON parser makes them. It may answer False for a value `check` accepts (a str subclass),
    never True for one `check` refuses, so `check` has the last word and names the field.
    """
    lines = [f"def {name}(value):"]
    _compile_lines(shape, "value", lines, indent=1, names=itertools.count())
    lines.append("    return True")
    namespace: dict[str, Any] = {"_QUANTITY_TYPES": _QUANTITY_TYPES}
    exec("\n".join(lines), namespace)  # the source is built above from our own shapes only
    return cast(Conforms, namespace[name])


def _compile_lines(shape: Shape, var: str, lines: list[str], indent: int, names: Iterator[int]) -> None:
    """Append the lines returning False unless `var` conforms to `shape`."""
    pad = "    " * indent
    if isinstance(shape, dict):
        lines.append(f"{pad}if type({var}) is not dict: return False")
        for field, inner in shape.items():
            item = f"v{next(names)}"
            lines.append(f"{pad}{item} = {var}.get({field!r})")
            if inner == REQUIRED_STR:
                lines.append(f"{pad}if type({item}) is not str or not {item}: return False")
            elif inner == NON_NULL_STR:
                lines.append(f"{pad}if type({item}) is not str and ({item} is not None or {field!r} in {var}):")
                lines.append(f"{pad}    return False")
            elif isinstance(inner, type):
                lines.append(f"{pad}if {item} is not None and ({_not_of_type(item, inner)}): return False")
            else:
                lines.append(f"{pad}if {item} is not None:")
                _compile_lines(inner, item, lines, indent + 1, names)
    elif isinstance(shape, list):
        (inner,) = shape
        item = f"v{next(names)}"
        lines.append(f"{pad}if type({var}) is not list: return False")
        lines.append(f"{pad}for {item} in {var}:")
        if isinstance(inner, type):
            lines.append(f"{pad}    if {_not_of_type(item, inner)}: return False")
        else:
            _compile_lines(inner, item, lines, indent + 1, names)
    elif shape in (STR_MAP, QUANTITY_MAP):
        item = f"v{next(names)}"
        allowed = "is not str" if shape == STR_MAP else "not in _QUANTITY_TYPES"
        lines.append(f"{pad}if type({var}) is not dict: return False")
        lines.append(f"{pad}for {item} in {var}.values():")
        lines.append(f"{pad}    if type({item}) {allowed}: return False")
    else:
        raise ValueError(f"no compiled form for the shape {shape!r}")


def _not_of_type(var: str, shape: type) -> str:
    """The condition that `var` is not a JSON value of type `shape` (an integer: of 64 bits)."""
    if shape is int:
        return f"type({var}) is not int or not {_INT_MIN} <= {var} <= {_INT_MAX}"
    return f"type({var}) is not {shape.__name__}"


_QUANTITY_TYPES: Final = frozenset({str, int, float})
# Every observed object is checked by kind; one of a kind we do not describe, by the fields all share.
_CONFORMS: Final = {kind: _conforms({**_COMMON, **extra}, f"conforms_{kind}") for kind, extra in KIND_SHAPES.items()}
_CONFORMS_ANY: Final = _conforms(_COMMON, "conforms_any_kind")
_OUR_PARENT: Final = {"status": {"conditions": [dict]}}
_CONFORMS_OUR_PARENT: Final = _conforms({**_COMMON, **_OUR_PARENT}, "conforms_our_parent")
# Shapes checked on their own (`check`) on every request, by identity: module constants only.
_CONFORMS_SHAPE: Final = {
    id(CONTAINER): _conforms(CONTAINER, "conforms_container"),
    id(CONTROLLER): _conforms(CONTROLLER, "conforms_controller"),
}


def _is_quantity(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def _check_base64(data: dict[str, str], where: str) -> None:
    for key, value in data.items():
        try:
            base64.b64decode(value, validate=True)
        except binascii.Error:
            raise ShapeError(f"{where}[{key!r}] must be base64") from None


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)

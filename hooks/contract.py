"""Metacontroller's hook wire contract: parse requests strictly, check responses before they leave.

A hook that answers 200 to something it could not compute can make Metacontroller delete every
child, so every request is checked here, field by field, before any hook logic runs, and every
response is checked before it is sent. Errors name the offending field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from hooks.applied import Kept, check_depth
from slinky_common import names, shapes
from slinky_common.errors import BadHookRequest

JSON = dict[str, Any]
ObjectMap = dict[str, dict[str, JSON]]  # {"Pod.v1": {"ns/name" or "name": object}}

# Metacontroller's type keys (`Kind.apiVersion`) of the objects our hooks observe.
TYPE_POD = "Pod.v1"
TYPE_NODE = "Node.v1"
TYPE_SECRET = "Secret.v1"
TYPE_CONFIGMAP = "ConfigMap.v1"
TYPE_SERVICE = "Service.v1"
TYPE_PVC = "PersistentVolumeClaim.v1"
TYPE_STATEFULSET = "StatefulSet.apps/v1"
TYPE_DEPLOYMENT = "Deployment.apps/v1"
TYPE_CONTROLLER = f"Controller.{names.API_VERSION}"
TYPE_NODESET = f"NodeSet.{names.API_VERSION}"
TYPE_ACCOUNTING = f"Accounting.{names.API_VERSION}"


class BadHookResponse(RuntimeError):
    """A hook produced a response Metacontroller would misread (answered with 500, never sent)."""


# What a hook reads of one observed child of a type, given the parent: run by the contract right
# after the child's check, while the child is still in the CPU's caches (see parse_composite).
ChildReader = Callable[[JSON, JSON], Any]


@dataclass(frozen=True)
class CompositeRequest:
    """A CompositeController sync or finalize request."""

    controller: JSON
    parent: JSON
    children: ObjectMap
    related: ObjectMap
    finalizing: bool
    readings: dict[str, list[Any]] = field(default_factory=dict)  # type key -> its reader's results, in order

    def children_of(self, type_key: str) -> list[JSON]:
        """Observed children of one `Kind.apiVersion` group, sorted by name (v1 and v2 keys alike)."""
        return _sorted_objects(self.children.get(type_key, {}))

    def related_of(self, type_key: str) -> list[JSON]:
        """Related objects of one `Kind.apiVersion` group, sorted by namespace and name."""
        return _sorted_objects(self.related.get(type_key, {}))


@dataclass(frozen=True)
class CustomizeRequest:
    """A customize request: which related objects does this parent need?"""

    controller: JSON
    parent: JSON


@dataclass(frozen=True)
class DecoratorRequest:
    """A DecoratorController sync or finalize request (the target is `object`, not `parent`)."""

    controller: JSON
    object: JSON
    attachments: ObjectMap
    related: ObjectMap
    finalizing: bool

    def related_of(self, type_key: str) -> list[JSON]:
        return _sorted_objects(self.related.get(type_key, {}))


@dataclass(frozen=True)
class AdmissionRequest:
    """The `request` of an AdmissionReview v1 for a pod."""

    uid: str
    operation: str
    object: JSON
    old_object: JSON | None
    namespace: str


def load_json_object(body: bytes) -> JSON:
    """Strict JSON (no NaN/Infinity), and the top level must be an object."""
    if not body:
        raise BadHookRequest("request body is empty; expected a JSON object")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as err:
        raise BadHookRequest(f"request body is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise BadHookRequest(f"request body must be a JSON object, got {_type_name(data)}")
    return data


def parse_composite(body: JSON, kind: str, readers: Mapping[str, ChildReader] | None = None) -> CompositeRequest:
    """Parse a sync/finalize request whose parent must be of `kind`.

    `readers` (by type key, from the route table) read each child of their type as soon as it
    passed its check, into `readings`: reading a 1,000-pod NodeSet's pods in a second pass, once
    every pod was checked and had left the caches, took a fifth longer (docs/architecture.md §7).
    """
    parent = _kube_object(body, "parent", kind=kind)
    readings: dict[str, list[Any]] = {}

    def read(type_key: str, obj: JSON) -> None:
        reader = readers.get(type_key) if readers else None
        if reader is not None:
            readings.setdefault(type_key, []).append(reader(obj, parent))

    return CompositeRequest(
        controller=_controller(body),
        parent=parent,
        children=_object_map(body, "children", read),
        related=_object_map(body, "related"),
        finalizing=_optional_bool(body, "finalizing"),
        readings=readings,
    )


def parse_customize(body: JSON, kind: str) -> CustomizeRequest:
    """Customize requests carry `parent` for composite and decorator controllers alike."""
    return CustomizeRequest(controller=_controller(body), parent=_kube_object(body, "parent", kind=kind))


def parse_decorator(body: JSON, kind: str) -> DecoratorRequest:
    return DecoratorRequest(
        controller=_controller(body),
        object=_kube_object(body, "object", kind=kind),
        attachments=_object_map(body, "attachments"),
        related=_object_map(body, "related"),
        finalizing=_optional_bool(body, "finalizing"),
    )


def parse_admission(body: JSON, kind: str) -> AdmissionRequest:
    """An AdmissionReview v1 whose request is about an object of `kind`."""
    if body.get("kind") != "AdmissionReview":
        raise BadHookRequest(f"kind must be 'AdmissionReview', got {body.get('kind')!r}")
    api_version = body.get("apiVersion")
    if api_version != "admission.k8s.io/v1":
        raise BadHookRequest(f"apiVersion must be 'admission.k8s.io/v1', got {api_version!r}")
    request = body.get("request")
    if not isinstance(request, dict):
        raise BadHookRequest(f"request must be an object, got {_type_name(request)}")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadHookRequest("request.uid must be a non-empty string")
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE", "DELETE", "CONNECT"):
        raise BadHookRequest(f"request.operation must be CREATE, UPDATE, DELETE or CONNECT, got {operation!r}")
    old = request.get("oldObject")
    if old is not None and not isinstance(old, dict):
        raise BadHookRequest(f"request.oldObject must be an object or null, got {_type_name(old)}")
    obj = request.get("object")
    if operation == "DELETE" and obj is None:
        obj = old or {}
    if not isinstance(obj, dict):
        raise BadHookRequest(f"request.object must be an object, got {_type_name(obj)}")
    if operation != "DELETE" and obj.get("kind", kind) != kind:
        raise BadHookRequest(f"request.object.kind must be {kind!r}, got {obj.get('kind')!r}")
    # A pod being created may have no name yet (generateName), and its kind may be left out.
    unnamed = {**shapes.METADATA, "name": str}
    for where, pod in (("request.object", request.get("object")), ("request.oldObject", old)):
        if pod is not None:  # a DELETE carries no object, a CREATE no old one
            _check_shape({"kind": kind, **pod}, where, metadata=unnamed)
            check_nesting(pod, where)
    namespace = request.get("namespace", (obj.get("metadata") or {}).get("namespace", ""))
    if not isinstance(namespace, str):
        raise BadHookRequest(f"request.namespace must be a string, got {_type_name(namespace)}")
    return AdmissionRequest(uid=uid, operation=operation, object=obj, old_object=old, namespace=namespace)


def check_composite_response(resp: JSON) -> JSON:
    """Reject a sync/finalize response Metacontroller would misapply (returns it unchanged)."""
    _check_keys(resp, {"status", "children", "resyncAfterSeconds", "finalized"})
    if not isinstance(resp.get("children"), list):
        raise BadHookResponse("children must be a list (an absent list would delete every child)")
    _check_objects(resp["children"], "children")
    if "status" in resp and not isinstance(resp["status"], dict):
        raise BadHookResponse("status must be an object")
    _check_common(resp)
    return resp


def check_decorator_response(resp: JSON) -> JSON:
    _check_keys(resp, {"labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"})
    for key in ("labels", "annotations"):
        values = resp.get(key, {})
        if not isinstance(values, dict) or any(v is not None and not isinstance(v, str) for v in values.values()):
            raise BadHookResponse(f"{key} must map names to strings or null")
    if "attachments" in resp:
        if not isinstance(resp["attachments"], list):
            raise BadHookResponse("attachments must be a list")
        _check_objects(resp["attachments"], "attachments")
    _check_common(resp)
    return resp


def check_customize_response(resp: JSON) -> JSON:
    _check_keys(resp, {"relatedResources"})
    rules = resp.get("relatedResources")
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise BadHookResponse("relatedResources must be a list of objects")
    allowed = {"apiVersion", "resource", "labelSelector", "namespaceSelector", "namespace", "names"}
    for i, rule in enumerate(rules):
        _check_keys(rule, allowed, where=f"relatedResources[{i}]")
        if "names" in rule and ({"labelSelector", "namespaceSelector"} & rule.keys()):
            raise BadHookResponse(f"relatedResources[{i}]: names cannot be combined with a selector")
    return resp


def check_admission_response(resp: JSON) -> JSON:
    if resp.get("apiVersion") != "admission.k8s.io/v1" or resp.get("kind") != "AdmissionReview":
        raise BadHookResponse("an admission response must be an AdmissionReview v1")
    response = resp.get("response")
    if not isinstance(response, dict) or not isinstance(response.get("allowed"), bool) or not response.get("uid"):
        raise BadHookResponse("response must carry uid and a boolean allowed")
    return resp


def _check_common(resp: JSON) -> None:
    resync = resp.get("resyncAfterSeconds")
    number = isinstance(resync, int | float) and not isinstance(resync, bool)
    if resync is not None and (not number or not math.isfinite(resync) or resync < 0):
        raise BadHookResponse(f"resyncAfterSeconds must be a finite non-negative number, got {resync!r}")
    if "finalized" in resp and not isinstance(resp["finalized"], bool):
        raise BadHookResponse("finalized must be a boolean")


def _check_objects(objects: list[Any], where: str) -> None:
    seen: set[tuple[Any, Any, Any, Any]] = set()
    for i, obj in enumerate(objects):
        identity = _identity(obj)
        if identity is None:
            raise BadHookResponse(f"{where}[{i}] must be an object")
        if not all(isinstance(part, str) for part in identity) or not all(identity[:2]) or not identity[3]:
            raise BadHookResponse(f"{where}[{i}] needs string apiVersion, kind, metadata.namespace and metadata.name")
        kind, name = identity[1], identity[3]
        if identity in seen:
            raise BadHookResponse(f"{where}[{i}] duplicates {kind} {name!r}")
        seen.add(identity)


def _identity(obj: Any) -> tuple[Any, Any, Any, Any] | None:
    """(apiVersion, kind, namespace, name) of a response object, built or kept; None when it is not an object."""
    if isinstance(obj, Kept):
        return obj.api_version, obj.kind, obj.namespace, obj.name
    if not isinstance(obj, dict):
        return None
    meta = found if isinstance(found := obj.get("metadata"), dict) else {}
    return obj.get("apiVersion"), obj.get("kind"), meta.get("namespace", ""), meta.get("name")


def _check_keys(obj: JSON, allowed: set[str], where: str = "response") -> None:
    unknown = sorted(obj.keys() - allowed)
    if unknown:
        raise BadHookResponse(f"{where} has unknown keys {unknown}")


def _kube_object(body: JSON, key: str, kind: str) -> JSON:
    obj = body.get(key)
    if obj is None:
        raise BadHookRequest(f"{key} is missing")
    if not isinstance(obj, dict):
        raise BadHookRequest(f"{key} must be an object, got {_type_name(obj)}")
    if obj.get("kind") != kind:
        raise BadHookRequest(f"{key}.kind must be {kind!r}, got {obj.get('kind')!r}")
    if not isinstance(obj.get("apiVersion"), str):
        raise BadHookRequest(f"{key}.apiVersion must be a string")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise BadHookRequest(f"{key}.metadata must be an object, got {_type_name(meta)}")
    if not isinstance(meta.get("name"), str) or not meta["name"]:
        raise BadHookRequest(f"{key}.metadata.name must be a non-empty string")
    for sub in ("namespace", "uid"):
        if sub in meta and not isinstance(meta[sub], str):
            raise BadHookRequest(f"{key}.metadata.{sub} must be a string")
    for sub in ("labels", "annotations"):
        values = meta.get(sub)
        if values is not None and (
            not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values())
        ):
            raise BadHookRequest(f"{key}.metadata.{sub} must map names to strings")
    for sub in ("spec", "status"):
        if obj.get(sub) is not None and not isinstance(obj[sub], dict):
            raise BadHookRequest(f"{key}.{sub} must be an object, got {_type_name(obj[sub])}")
    _check_shape(obj, key, parent=True)
    check_nesting(obj, key)
    return obj


def check_nesting(obj: JSON, where: str) -> None:
    """BadHookRequest if `obj` nests deeper than an answer can carry (applied.MAX_DEPTH): hooks hash,
    merge and copy parents and related objects, which such nesting would make fail. orjson writes a
    small object in microseconds or refuses it; only a refused one is walked to name the path."""
    try:
        orjson.dumps(obj)
    except orjson.JSONEncodeError:  # too deep, or an integer beyond 64 bits (which the hooks judge themselves)
        check_depth(obj, where)


def _check_shape(obj: Any, where: str, parent: bool = False, metadata: dict[str, Any] = shapes.METADATA) -> None:
    try:
        shapes.check_object(obj, where, parent=parent, metadata=metadata)
    except shapes.ShapeError as err:
        raise BadHookRequest(str(err)) from None


def _check_child_shape(obj: JSON, key: str, type_key: str, name: str) -> None:
    """An observed object of `key` (children, related, attachments); its path is spelled out only for the error."""
    if not shapes.conforms(obj):
        _check_shape(obj, f"{key}[{type_key!r}][{name!r}]")


def _object_map(body: JSON, key: str, read: Callable[[str, JSON], None] | None = None) -> ObjectMap:
    """`{type key: {object key: object}}`; absent or null means empty. `read(type key, object)` follows
    each object's check."""
    groups = body.get(key)
    if groups is None:
        return {}
    if not isinstance(groups, dict):
        raise BadHookRequest(f"{key} must be an object keyed by 'Kind.apiVersion', got {_type_name(groups)}")
    for type_key, objects in groups.items():
        if objects is None:
            continue
        if not isinstance(objects, dict):
            raise BadHookRequest(f"{key}[{type_key!r}] must be an object keyed by name, got {_type_name(objects)}")
        kind = type_key.split(".", 1)[0]
        for name, obj in objects.items():
            if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
                raise BadHookRequest(f"{key}[{type_key!r}][{name!r}] must be an object with metadata")
            if obj.get("kind") != kind:
                got = obj.get("kind")
                where = f"{key}[{type_key!r}][{name!r}]"
                raise BadHookRequest(f"{where}.kind must be {kind!r} (its type key is {type_key!r}), got {got!r}")
            _check_child_shape(obj, key, type_key, name)
            if key == "related":  # children are only read and kept (applied.kept judges their nesting)
                check_nesting(obj, f"{key}[{type_key!r}][{name!r}]")
            if read is not None:
                read(type_key, obj)
    return {type_key: objects or {} for type_key, objects in groups.items()}


def _controller(body: JSON) -> JSON:
    """Metacontroller's controller object (hooks read its annotations and child resources)."""
    controller = _optional_object(body, "controller")
    try:
        shapes.check(controller, shapes.CONTROLLER, "controller")
    except shapes.ShapeError as err:
        raise BadHookRequest(str(err)) from None
    return controller


def _optional_object(body: JSON, key: str) -> JSON:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadHookRequest(f"{key} must be an object, got {_type_name(value)}")
    return value


def _optional_bool(body: JSON, key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise BadHookRequest(f"{key} must be a boolean, got {_type_name(value)}")
    return value


def _sorted_objects(objects: dict[str, JSON]) -> list[JSON]:
    return sorted(objects.values(), key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"].get("name", "")))


def _type_name(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null" if value is None else type(value).__name__
    )

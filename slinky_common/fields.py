"""Readers of a custom resource's spec fields: each returns the value or its default, or raises InvalidSpec
naming the field, for what the CRD schema let through but no child can be built from. The hooks and
slurm_sync read specs with these alone, so one field gets one message wherever it is read."""

from __future__ import annotations

from dataclasses import dataclass

from slinky_common import shapes
from slinky_common.errors import BadHookRequest, InvalidSpec
from slinky_common.jsontypes import JSON


@dataclass(frozen=True)
class KeyRef:
    """A SecretKeySelector or ConfigMapKeySelector from a spec."""

    name: str
    key: str
    optional: bool = False


def spec_of(parent: JSON) -> JSON:
    return parent.get("spec") or {}


def namespace_of(parent: JSON) -> str:
    """Every Slinky kind is namespaced, and references resolve only inside that namespace."""
    namespace = parent["metadata"].get("namespace")
    if not namespace:
        raise BadHookRequest(f"parent.metadata.namespace must be set: {parent['kind']} is namespaced")
    return namespace


def opt_str(spec: JSON, field: str, default: str = "", where: str = "spec") -> str:
    value = spec.get(field)
    if value is None:
        return default
    if not isinstance(value, str):
        raise InvalidSpec(f"{where}.{field} must be a string")
    return value


INT32_MAX = 2**31 - 1  # the CRDs' int32 fields; Kubernetes objects refuse more


def opt_int(
    spec: JSON, field: str, default: int, where: str = "spec", minimum: int = 0, maximum: int = INT32_MAX
) -> int:
    value = spec.get(field)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not minimum <= value <= maximum:
        raise InvalidSpec(f"{where}.{field} must be an integer from {minimum} to {maximum}, got {value!r}")
    return value


def opt_bool(spec: JSON, field: str, default: bool, where: str = "spec") -> bool:
    value = spec.get(field)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidSpec(f"{where}.{field} must be a boolean")
    return value


def opt_enum(spec: JSON, field: str, default: str, allowed: tuple[str, ...], where: str = "spec") -> str:
    """One of ``allowed``; absent or "" is ``default`` (Kubernetes' zero value of an enum string)."""
    value = spec.get(field)
    if value is None or value == "":
        return default
    if value not in allowed:
        raise InvalidSpec(f"{where}.{field} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def opt_obj(spec: JSON, field: str, where: str = "spec") -> JSON:
    value = spec.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidSpec(f"{where}.{field} must be an object")
    return value


def container_override(spec: JSON, field: str, where: str = "spec") -> JSON:
    """A container override (Slinky's `slurmd`, `login`, `logfile` ...): an object whose container
    fields the hook merges have their Kubernetes JSON types."""
    override = opt_obj(spec, field, where)
    try:
        shapes.check(override, shapes.CONTAINER, f"{where}.{field}")
    except shapes.ShapeError as err:
        raise InvalidSpec(str(err)) from None
    return override


def service_override(spec: JSON, where: str = "spec") -> JSON:
    """Slinky's ServiceSpec override (`{metadata, spec, port, nodePort}`), each part of the right type."""
    override = opt_obj(spec, "service", where)
    path = f"{where}.service"
    meta = opt_obj(override, "metadata", path)
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
            raise InvalidSpec(f"{path}.metadata.{field} must map names to strings")
    opt_obj(override, "spec", path)
    opt_int(override, "port", 0, path)
    opt_int(override, "nodePort", 0, path)
    return override


def str_list(spec: JSON, field: str, where: str = "spec") -> list[str]:
    value = spec.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidSpec(f"{where}.{field} must be a list of strings")
    return value


def key_ref(spec: JSON, field: str, where: str = "spec") -> KeyRef | None:
    """A `{name, key, optional}` selector, or None when the field is absent."""
    value = spec.get(field)
    if value is None:
        return None
    path = f"{where}.{field}"
    if not isinstance(value, dict):
        raise InvalidSpec(f"{path} must be an object")
    name, key = value.get("name") or "", value.get("key")
    if not isinstance(name, str) or not name:
        raise InvalidSpec(f"{path}.name must be a non-empty string")
    if not isinstance(key, str) or not key:
        raise InvalidSpec(f"{path}.key must be a non-empty string")
    return KeyRef(name=name, key=key, optional=value.get("optional") is True)


def jwt_key_ref(spec: JSON, where: str = "spec") -> KeyRef | None:
    """The HS256 key: `jwtKeyRef`, else Slinky's deprecated alias `jwtHs256KeyRef`."""
    return key_ref(spec, "jwtKeyRef", where) or key_ref(spec, "jwtHs256KeyRef", where)


def local_ref_name(spec: JSON, field: str, where: str = "spec") -> str:
    """A LocalObjectReference's name ("" when absent)."""
    ref = opt_obj(spec, field, where)
    return opt_str(ref, "name", where=f"{where}.{field}")

"""Offline stand-ins for the kube-apiserver's admission checks, for tests.

No API server runs on our machines, so tests validate what we would send it:

* built-in kinds against kubernetes-validate's bundled OpenAPI schemas, strict (unknown fields fail);
* our custom resources against crds/: the openAPIV3Schema with the apiserver's structural behaviour
  (defaults applied first, unknown fields rejected, int-or-string, nullable, list-map keys unique)
  plus every `x-kubernetes-validations` CEL rule, transition rules included when `old` is given;
* CRD manifests against the CustomResourceDefinition schema and the structural-schema rules.

Every check returns all problems as "path: message" strings. A kind we have no schema for is a problem,
never a silent pass. Where we are stricter than the apiserver it is to catch bugs early: a null in a
non-nullable field is reported (the apiserver would silently drop it).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime
import functools
import importlib.resources
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import re2
import yaml
from referencing import Registry, Resource

Obj = dict[str, Any]

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_K8S_VERSION = "1.33"
SCHEMA_ROOT = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
DEFINITIONS_URI = "https://kubernetes.io/api/_definitions.json"
OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
QUANTITY_PATTERN = (
    r"^[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def load_yaml_docs(path: str | Path) -> list[Obj]:
    """The non-empty documents of a (multi-document) YAML file."""
    with open(path, encoding="utf-8") as stream:
        return [doc for doc in yaml.safe_load_all(stream) if doc is not None]


# --- jsonschema with Go-compatible regexes and the formats the apiserver checks ---------------------


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: Obj) -> Iterator[jsonschema.ValidationError]:
    """`pattern` with RE2, as Go evaluates it (Python's `$` would also match before a final newline)."""
    if validator.is_type(instance, "string") and not re2.search(pattern, instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _re2_pattern})
_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not RFC3339.fullmatch(value):
        return False
    datetime.datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    return True


@_FORMATS.checks("byte", raises=(binascii.Error, ValueError))
def _is_base64(value: object) -> bool:
    if isinstance(value, str):
        base64.b64decode(value, validate=True)
    return True


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _error_messages(errors: Iterable[jsonschema.ValidationError]) -> list[str]:
    """One message per problem; each unknown field is named on its own path."""
    messages = []
    for error in errors:
        path = ""
        for key in error.absolute_path:
            path = _join(path, key)
        if error.validator == "additionalProperties" and error.validator_value is False:
            unknown = set(error.instance) - set(error.schema.get("properties", {}))
            messages += [f"{_join(path, name)}: unknown field" for name in sorted(unknown)]
        else:
            messages.append(f"{path or '<root>'}: {error.message}")
    return sorted(messages)


# --- built-in kinds ---------------------------------------------------------------------------------


@functools.cache
def _schema_dir(k8s_version: str) -> Any:
    major_minor = ".".join(k8s_version.removeprefix("v").split(".")[:2])
    directory = SCHEMA_ROOT / f"v{major_minor}.0-local-strict"
    if not directory.is_dir():
        raise ValueError(f"kubernetes-validate bundles no schemas for Kubernetes {k8s_version}")
    return directory


@functools.cache
def _definitions(k8s_version: str) -> Registry:
    """The shared definitions, with Quantity tightened to the apiserver's syntax (the bundle accepts any string)."""
    contents = json.loads((_schema_dir(k8s_version) / "_definitions.json").read_text())
    contents["$defs"][QUANTITY] = {
        "anyOf": [{"type": "string", "pattern": QUANTITY_PATTERN}, {"type": "number"}, {"type": "null"}]
    }
    return Resource.from_contents(contents) @ Registry()


@functools.cache
def _builtin_validator(api_version: str, kind: str, k8s_version: str) -> Any | None:
    group, _, version = api_version.rpartition("/")
    stem = f"{kind.lower()}-{group.split('.')[0]}-{version}" if group else f"{kind.lower()}-{version}"
    path = _schema_dir(k8s_version) / f"{stem}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    if {"group": group, "version": version, "kind": kind} not in schema.get("x-kubernetes-group-version-kind", []):
        return None
    registry = Resource.from_contents(schema) @ _definitions(k8s_version)
    return _Validator(schema, registry=registry, format_checker=_FORMATS)


def _metadata_errors(obj: Obj) -> list[str]:
    """Name and label syntax, which the schemas leave to the apiserver's Go validation."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name")
    errors = []
    if not name and not metadata.get("generateName"):
        errors.append("metadata.name: Required value")
    elif name and obj.get("kind") == "Service" and obj.get("apiVersion") == "v1":
        if len(name) > 63 or not DNS1035_LABEL.fullmatch(name):
            errors.append(f"metadata.name: {name!r} is not a DNS-1035 label (Service names)")
    elif name and (len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name)):
        errors.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    for key, value in (metadata.get("labels") or {}).items():
        prefix, _, label = str(key).rpartition("/")
        if len(label) > 63 or not LABEL_NAME.fullmatch(label) or (prefix and not DNS1123_SUBDOMAIN.fullmatch(prefix)):
            errors.append(f"metadata.labels: invalid label key {key!r}")
        if not isinstance(value, str) or len(value) > 63 or (value and not LABEL_NAME.fullmatch(value)):
            errors.append(f"metadata.labels.{key}: invalid label value {value!r}")
    return errors


def validate_builtin(obj: Obj, k8s_version: str = DEFAULT_K8S_VERSION) -> list[str]:
    """Every problem of a built-in Kubernetes object, by kubernetes-validate's strict schemas."""
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["<root>: apiVersion and kind are required"]
    validator = _builtin_validator(api_version, kind, k8s_version)
    if validator is None:
        return [f"<root>: {kind} {api_version} is not a built-in kind of Kubernetes {k8s_version}"]
    return _error_messages(validator.iter_errors(obj)) + _metadata_errors(obj)


def _describe(obj: Obj) -> str:
    return f"{obj.get('kind')} {(obj.get('metadata') or {}).get('name')!r}"


def assert_valid_builtin(obj: Obj, k8s_version: str = DEFAULT_K8S_VERSION) -> None:
    errors = validate_builtin(obj, k8s_version)
    assert not errors, f"{_describe(obj)} is invalid:\n  " + "\n  ".join(errors)


# --- custom resources -------------------------------------------------------------------------------

# Keywords copied as they are; the others are turned into their JSON Schema meaning or ignored.
_PASSTHROUGH = {
    "type", "enum", "pattern", "format", "required", "uniqueItems", "multipleOf",
    "minimum", "maximum", "minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
}  # fmt: skip
_NOT_VALIDATING = {
    "description", "default", "example", "title", "externalDocs", "nullable",
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string", "x-kubernetes-embedded-resource",
    "x-kubernetes-validations", "x-kubernetes-list-type", "x-kubernetes-list-map-keys", "x-kubernetes-map-type",
}  # fmt: skip


def _to_json_schema(node: Obj) -> Obj:
    """An OpenAPI v3 CRD schema node as JSON Schema with the apiserver's strictness."""
    out: Obj = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _to_json_schema(child) for name, child in value.items()}
        elif key in ("items", "not") or (key == "additionalProperties" and isinstance(value, dict)):
            out[key] = _to_json_schema(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [_to_json_schema(child) for child in value]
        elif key in _PASSTHROUGH or key == "additionalProperties":
            out[key] = value
        elif key not in _NOT_VALIDATING:
            raise ValueError(f"tests/support/kube.py does not understand the schema keyword {key!r}")
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    open_object = "additionalProperties" in out or node.get("x-kubernetes-preserve-unknown-fields")
    if out.get("type") == "object" and not open_object:
        out["additionalProperties"] = False
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "anyOf" in out:
            out["anyOf"] = [*out["anyOf"], {"type": "null"}]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


def _resolve(crds_dir: str | Path) -> str:
    path = Path(crds_dir)
    return str(path if path.is_absolute() else REPO_ROOT / path)


@functools.cache
def _crd_schemas(crds_dir: str) -> dict[tuple[str, str], Obj]:
    """(apiVersion, kind) -> openAPIV3Schema of every served version of every CRD in crds_dir."""
    schemas = {}
    for path in sorted(Path(crds_dir).glob("*.yaml")):
        for crd in load_yaml_docs(path):
            if crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                key = (f"{spec['group']}/{version['name']}", spec["names"]["kind"])
                schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def _crd_schema(obj: Obj, crds_dir: str | Path) -> Obj | None:
    return _crd_schemas(_resolve(crds_dir)).get((str(obj.get("apiVersion")), str(obj.get("kind"))))


@functools.cache
def _cr_validator(crds_dir: str, api_version: str, kind: str) -> Any:
    schema = _to_json_schema(_crd_schemas(crds_dir)[(api_version, kind)])
    schema["properties"]["metadata"] = {"$ref": f"{DEFINITIONS_URI}#/$defs/{OBJECT_META}"}
    schema["required"] = sorted({"apiVersion", "kind", "metadata", *schema.get("required", [])})
    return _Validator(schema, registry=_definitions(DEFAULT_K8S_VERSION), format_checker=_FORMATS)


def _apply_defaults(schema: Obj, value: Any) -> None:
    """Fill absent fields from `default`, recursively, as the apiserver does before validating."""
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, child in properties.items():
            if name not in value and "default" in child:
                value[name] = copy.deepcopy(child["default"])
            if name in value:
                _apply_defaults(child, value[name])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, child_value in value.items():
                if name not in properties:
                    _apply_defaults(extra, child_value)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            _apply_defaults(schema["items"], item)


def _defaulted(schema: Obj, obj: Obj) -> Obj:
    result = copy.deepcopy(obj)
    _apply_defaults(schema, result)
    return result


def default_cr(obj: Obj, crds_dir: str | Path = "crds") -> Obj:
    """A copy of a custom resource with the CRD's defaults applied, as the apiserver would store it."""
    schema = _crd_schema(obj, crds_dir)
    if schema is None:
        raise KeyError(f"no CRD for {obj.get('kind')} {obj.get('apiVersion')} in {crds_dir}")
    return _defaulted(schema, obj)


def _map_list_key(schema: Obj, item: Any) -> tuple[Any, ...] | None:
    if schema.get("x-kubernetes-list-type") != "map" or not isinstance(item, dict):
        return None
    return tuple(item.get(key) for key in schema.get("x-kubernetes-list-map-keys", []))


def _correlated_item(schema: Obj, item: Any, old: Any) -> Any:
    """The old list item a new one corresponds to: only map-type lists correlate (by their keys)."""
    key = _map_list_key(schema, item)
    if key is None or not isinstance(old, list):
        return None
    return next((candidate for candidate in old if _map_list_key(schema, candidate) == key), None)


def _nodes(schema: Obj, value: Any, old: Any, path: str) -> Iterator[tuple[Obj, Any, Any, str]]:
    """(schema, value, old value, path) for every value present in the object, depth first."""
    yield schema, value, old, path
    if isinstance(value, dict):
        properties, extra = schema.get("properties", {}), schema.get("additionalProperties")
        for name, child in value.items():
            child_schema = properties.get(name, extra if isinstance(extra, dict) else None)
            if child_schema is not None:
                old_child = old.get(name) if isinstance(old, dict) else None
                yield from _nodes(child_schema, child, old_child, _join(path, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            yield from _nodes(schema["items"], item, _correlated_item(schema, item, old), _join(path, index))


def _list_errors(schema: Obj, value: Any, path: str) -> list[str]:
    """Duplicate keys in map-type lists and duplicate items in set-type lists."""
    if not isinstance(value, list):
        return []
    list_type = schema.get("x-kubernetes-list-type")
    seen: list[Any] = []
    errors = []
    for index, item in enumerate(value):
        key = _map_list_key(schema, item) if list_type == "map" else item if list_type == "set" else None
        if key is None:
            continue
        if key in seen:
            errors.append(f"{_join(path, index)}: Duplicate value: {key!r}")
        seen.append(key)
    return errors


_CEL = celpy.Environment()
_OLD_SELF = re.compile(r"\boldSelf\b")


@functools.cache
def _cel_program(expression: str) -> Any:
    return _CEL.program(_CEL.compile(expression))


def _without_nulls(value: Any) -> Any:
    """CEL sees null fields as absent."""
    if isinstance(value, dict):
        return {key: _without_nulls(child) for key, child in value.items() if child is not None}
    if isinstance(value, list):
        return [_without_nulls(item) for item in value]
    return value


def _evaluate(expression: str, value: Any, old: Any) -> Any:
    activation = {"self": celpy.json_to_cel(_without_nulls(value))}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(_without_nulls(old))
    try:
        return _cel_program(expression).evaluate(activation)
    except Exception as error:  # any failure to evaluate is a rejection, as in the apiserver
        return error


def _cel_errors(schema: Obj, value: Any, old: Any, path: str) -> list[str]:
    """Every x-kubernetes-validations rule at this node; transition rules only when there is an old value."""
    errors = []
    for validation in schema.get("x-kubernetes-validations", []) if value is not None else []:
        expression = validation["rule"]
        transition = bool(_OLD_SELF.search(expression))
        if transition and old is None:
            continue
        result = _evaluate(expression, value, old if transition else None)
        where = (path + validation.get("fieldPath", "")).lstrip(".") or "<root>"
        if isinstance(result, celpy.celtypes.BoolType) and result:
            continue
        if isinstance(result, celpy.celtypes.BoolType):
            errors.append(f"{where}: {validation.get('message') or 'failed rule: ' + expression}")
        else:
            errors.append(f"{where}: rule {expression!r} did not give true or false: {_cel_failure(result)}")
    return errors


def _cel_failure(result: Any) -> str:
    """A one-line reason from whatever cel-python returned or raised instead of a bool."""
    args = getattr(result, "args", ())
    text = args[0] if args and isinstance(args[0], str) else repr(result)
    return text.splitlines()[0][:160] if text else type(result).__name__


def validate_cr(obj: Obj, crds_dir: str | Path = "crds", old: Obj | None = None) -> list[str]:
    """Every problem of a custom resource (on create, or on update from `old`) by the CRDs in crds_dir."""
    schema = _crd_schema(obj, crds_dir)
    if schema is None:
        return [f"<root>: no CRD for {obj.get('kind')} {obj.get('apiVersion')} in {crds_dir}"]
    new = _defaulted(schema, obj)
    previous = _defaulted(schema, old) if old is not None else None
    errors = _error_messages(_cr_validator(_resolve(crds_dir), new["apiVersion"], new["kind"]).iter_errors(new))
    errors += _metadata_errors(new)
    for node_schema, value, old_value, path in _nodes(schema, new, previous, ""):
        errors += _list_errors(node_schema, value, path) + _cel_errors(node_schema, value, old_value, path)
    return errors


def assert_valid_cr(obj: Obj, crds_dir: str | Path = "crds", old: Obj | None = None) -> None:
    errors = validate_cr(obj, crds_dir, old)
    assert not errors, f"{_describe(obj)} is invalid:\n  " + "\n  ".join(errors)


# --- CRDs -------------------------------------------------------------------------------------------


def _schema_nodes(schema: Obj, path: str) -> Iterator[tuple[Obj, str]]:
    """Every typed node of a CRD schema (anyOf branches of int-or-string are not nodes)."""
    yield schema, path
    for name, child in schema.get("properties", {}).items():
        yield from _schema_nodes(child, _join(path, name))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _schema_nodes(schema["additionalProperties"], f"{path}[*]")
    if isinstance(schema.get("items"), dict):
        yield from _schema_nodes(schema["items"], f"{path}[]")


def _node_errors(node: Obj, path: str) -> list[str]:
    """The structural-schema rules the apiserver enforces on one node; defaults must validate, CEL must parse."""
    where = path or "<root>"
    errors = []
    untyped_allowed = node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields")
    if "type" not in node and not untyped_allowed:
        errors.append(f"{where}: type is required in a structural schema")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{where}: properties and additionalProperties are mutually exclusive")
    if "default" in node:
        default = _defaulted(node, node["default"]) if isinstance(node["default"], dict) else node["default"]
        validator = _Validator(_to_json_schema(node), format_checker=_FORMATS)
        messages = _error_messages(validator.iter_errors(default))
        errors += [f"{where}.default: {message.removeprefix('<root>: ')}" for message in messages]
        for sub_schema, value, _, sub_path in _nodes(node, default, None, f"{where}.default"):
            errors += _cel_errors(sub_schema, value, None, sub_path)
    rules = [validation["rule"] for validation in node.get("x-kubernetes-validations", [])]
    errors += [f"{where}: rule {rule!r} appears twice" for rule in sorted(set(rules)) if rules.count(rule) > 1]
    for validation in node.get("x-kubernetes-validations", []):
        if "\n" in validation.get("message", ""):
            errors.append(f"{where}: rule message must be one line")
        try:
            _cel_program(validation["rule"])
        except celpy.CELParseError as error:
            errors.append(f"{where}: rule {validation['rule']!r} does not parse: {str(error).splitlines()[0]}")
    return errors


def _schema_at(root: Obj, json_path: str) -> Obj | None:
    """The schema node a JSON path like .status.replicas names; a subscript or filter
    (`.status.conditions[?(@.type=="Ready")].reason`) steps into the array's items."""
    node: Obj | None = root
    for part in re.sub(r"\[[^\]]*\]", "[]", json_path).strip(".").split("."):
        name, subscripted = part.removesuffix("[]"), part.endswith("[]")
        node = (node or {}).get("properties", {}).get(name)
        if subscripted:
            node = (node or {}).get("items") if (node or {}).get("type") == "array" else None
    return node


def _path_errors(version: Obj) -> list[str]:
    """Printer columns and the scale subresource must name fields of the right type."""
    root = version.get("schema", {}).get("openAPIV3Schema", {})
    wanted = {"integer": "integer", "number": "number", "boolean": "boolean", "string": "string", "date": "string"}
    checks = [
        (column["jsonPath"], wanted.get(column["type"]), f"column {column['name']}")
        for column in version.get("additionalPrinterColumns", [])
        if not column["jsonPath"].startswith(".metadata.")
    ]
    scale = version.get("subresources", {}).get("scale")
    if scale:
        checks += [
            (scale["specReplicasPath"], "integer", "scale specReplicasPath"),
            (scale["statusReplicasPath"], "integer", "scale statusReplicasPath"),
        ]
        if "labelSelectorPath" in scale:
            checks.append((scale["labelSelectorPath"], "string", "scale labelSelectorPath"))
    errors = []
    for json_path, type_name, what in checks:
        node = _schema_at(root, json_path)
        if node is None or node.get("type") != type_name:
            errors.append(f"{version['name']}: {what} {json_path} is not a {type_name} field of the schema")
    return errors


def validate_crd(crd: Obj, k8s_version: str = DEFAULT_K8S_VERSION) -> list[str]:
    """Every problem of a CRD manifest: the CustomResourceDefinition schema, structural rules, paths."""
    errors = validate_builtin(crd, k8s_version)
    if errors or crd.get("kind") != "CustomResourceDefinition":
        return errors
    spec = crd["spec"]
    if (crd.get("metadata") or {}).get("name") != f"{spec['names']['plural']}.{spec['group']}":
        errors.append("metadata.name: must be <plural>.<group>")
    for version in spec["versions"]:
        root = version.get("schema", {}).get("openAPIV3Schema", {})
        for node, path in _schema_nodes(root, ""):
            errors += [f"{version['name']}: {error}" for error in _node_errors(node, path)]
        errors += _path_errors(version)
    return errors

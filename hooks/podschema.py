"""Pod fields the API server would refuse, found before any pod is condemned or replaced.

Slinky's CRD schemas keep the container and pod fields of every CR open (`template`, and the
container overrides `slurmd`, `slurmctld`, `logfile`, `login`, ...), so a value Kubernetes refuses
reaches the hooks: `slurmd.imagePullPolicy: Sometimes` once started a NodeSet rollout that drained
the old pods for a new pod the API server would never take. What a hook renders from those fields
(a NodeSet's worker pod template, a workload's `spec.template`) is therefore checked here, and a
problem becomes an `InvalidSpec` (hooks/invalidspec.py: every existing child kept as last applied).

Two checks, on the rendered PodTemplateSpec:

1. Kubernetes' own OpenAPI schema of PodTemplateSpec: the definitions it refers to, taken from
   kubernetes-validate's bundle for Kubernetes `KUBERNETES_VERSION` (the schemas tests/support/kube.py
   validates every child with), descriptions and `x-kubernetes-*` annotations left out, in
   hooks/podschema.json (tests/hooks/test_podschema.py checks that it is exactly that extract;
   `UPDATE_GOLDEN=1` rewrites it). The bundle's non-strict variant: the API server drops a field it
   does not know, with a warning (Metacontroller asks for no field validation), it does not refuse it,
   and a field of a newer Kubernetes must not be refused either.
2. What that schema leaves to the API server's Go validation (k8s.io/kubernetes/pkg/apis/core/validation)
   on fields users set, added to the schema at load: the values of the enum-like fields (`ENUMS`; the
   schema has none, so it takes `imagePullPolicy: Sometimes`), port ranges (`RANGES`), the quantity
   syntax of resources (the schema takes any string), int32/int64 bounds, and that a workload's pods
   restart `Always`. Each list holds every value some supported Kubernetes version accepts, and a
   field counts as required only where that validation requires it (`REQUIRED`, not the schema's own
   lists): a value refused here is refused by every version, so a working spec is never reported.

The schema is loaded once per process, at import (60 KB of JSON; with jsonschema about 3 MB of a
worker's memory); a template's problems are remembered by its bytes (at most `VERDICT_CACHE` of them),
so a resync of an unchanged spec costs a hash (a few microseconds), not a validation (about 1 ms).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Final

import jsonschema
import orjson

JSON = dict[str, Any]

SCHEMA_FILE: Final = Path(__file__).with_name("podschema.json")
KUBERNETES_VERSION: Final = "1.33"
TEMPLATE_DEFINITION: Final = "io.k8s.api.core.v1.PodTemplateSpec"
QUANTITY_DEFINITION: Final = "io.k8s.apimachinery.pkg.api.resource.Quantity"
# Workload kinds whose `spec.template` is a pod template the API server validates with the workload.
WORKLOAD_KINDS: Final = frozenset({"StatefulSet", "Deployment", "DaemonSet", "ReplicaSet"})
VERDICT_CACHE: Final = 256
MAX_REPORTED: Final = 5

_PULL = ("Always", "IfNotPresent", "Never", "")  # "" is defaulted by the API server, so accepted
# definition -> property -> the values the API server accepts (core/validation; null is always absent).
ENUMS: Final[dict[str, dict[str, tuple[str, ...]]]] = {
    "io.k8s.api.core.v1.Container": {
        "imagePullPolicy": _PULL,
        "terminationMessagePolicy": ("File", "FallbackToLogsOnError", ""),
    },
    "io.k8s.api.core.v1.EphemeralContainer": {
        "imagePullPolicy": _PULL,
        "terminationMessagePolicy": ("File", "FallbackToLogsOnError", ""),
    },
    "io.k8s.api.core.v1.ImageVolumeSource": {"pullPolicy": _PULL},
    "io.k8s.api.core.v1.ContainerPort": {"protocol": ("TCP", "UDP", "SCTP", "")},
    "io.k8s.api.core.v1.PodSpec": {
        "restartPolicy": ("Always", "OnFailure", "Never", ""),
        "dnsPolicy": ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None", ""),
        "preemptionPolicy": ("PreemptLowerPriority", "Never"),
    },
    "io.k8s.api.core.v1.PodSecurityContext": {"fsGroupChangePolicy": ("OnRootMismatch", "Always")},
    "io.k8s.api.core.v1.SecurityContext": {"procMount": ("Default", "Unmasked")},
    "io.k8s.api.core.v1.SeccompProfile": {"type": ("RuntimeDefault", "Unconfined", "Localhost")},
    "io.k8s.api.core.v1.AppArmorProfile": {"type": ("RuntimeDefault", "Unconfined", "Localhost")},
    # Gt and Lt: Kubernetes 1.35's TaintTolerationComparisonOperators.
    "io.k8s.api.core.v1.Toleration": {
        "operator": ("Equal", "Exists", "Gt", "Lt", ""),
        "effect": ("NoSchedule", "PreferNoSchedule", "NoExecute", ""),
    },
    "io.k8s.api.core.v1.NodeSelectorRequirement": {"operator": ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")},
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement": {
        "operator": ("In", "NotIn", "Exists", "DoesNotExist")
    },
    "io.k8s.api.core.v1.TopologySpreadConstraint": {
        "whenUnsatisfiable": ("DoNotSchedule", "ScheduleAnyway"),
        "nodeAffinityPolicy": ("Honor", "Ignore"),
        "nodeTaintsPolicy": ("Honor", "Ignore"),
    },
    "io.k8s.api.core.v1.VolumeMount": {"mountPropagation": ("None", "HostToContainer", "Bidirectional")},
    "io.k8s.api.core.v1.HTTPGetAction": {"scheme": ("HTTP", "HTTPS", "")},
    "io.k8s.api.core.v1.HostPathVolumeSource": {
        "type": ("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
    },
}
# definition -> property -> (lowest, highest) integer the API server accepts; hostPort 0 means none.
RANGES: Final[dict[str, dict[str, tuple[int, int]]]] = {
    "io.k8s.api.core.v1.ContainerPort": {"containerPort": (1, 65535), "hostPort": (0, 65535)},
    "io.k8s.api.core.v1.GRPCAction": {"port": (1, 65535)},
}
# definition -> the properties the API server requires (core/validation). Only these: the schema's own
# `required` lists come from Go struct tags, which the API server does not hold to (it takes an HTTP
# header without a value, and since 1.33 a sleep action without seconds), so they are dropped.
REQUIRED: Final[dict[str, tuple[str, ...]]] = {
    "io.k8s.api.core.v1.PodSpec": ("containers",),
    "io.k8s.api.core.v1.Container": ("name",),
    "io.k8s.api.core.v1.EphemeralContainer": ("name",),
    "io.k8s.api.core.v1.ContainerPort": ("containerPort",),
    "io.k8s.api.core.v1.EnvVar": ("name",),
    "io.k8s.api.core.v1.Volume": ("name",),
    "io.k8s.api.core.v1.VolumeMount": ("name", "mountPath"),
    "io.k8s.api.core.v1.KeyToPath": ("key", "path"),
    "io.k8s.api.core.v1.NodeSelectorRequirement": ("key", "operator"),
    "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement": ("key", "operator"),
    "io.k8s.api.core.v1.PodAffinityTerm": ("topologyKey",),
    "io.k8s.api.core.v1.TopologySpreadConstraint": ("maxSkew", "topologyKey", "whenUnsatisfiable"),
}
# The quantity syntax (k8s.io/apimachinery resource.ParseQuantity); a JSON number is a quantity too.
QUANTITY = re.compile(
    r"[+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)
_QUANTITY_RULE = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
_INT_BOUNDS = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")


def _formats() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker(formats=())

    @checker.checks("quantity")
    def _quantity(value: object) -> bool:
        return not isinstance(value, str) or QUANTITY.fullmatch(value) is not None

    for name, (low, high) in _INT_BOUNDS.items():
        checker.checks(name)(lambda value, low=low, high=high: not isinstance(value, int) or low <= value <= high)
    return checker


def load_definitions() -> JSON:
    """The PodTemplateSpec definitions of hooks/podschema.json with the API server's own checks added."""
    definitions: JSON = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))["$defs"]
    for schema in definitions.values():
        schema.pop("required", None)
    for definition, required in REQUIRED.items():
        definitions[definition]["required"] = list(required)
    for definition, fields in ENUMS.items():
        for field, values in fields.items():
            definitions[definition]["properties"][field]["enum"] = [*values, None]
    for definition, bounds in RANGES.items():
        for field, (low, high) in bounds.items():
            definitions[definition]["properties"][field].update(minimum=low, maximum=high)
    definitions[QUANTITY_DEFINITION]["format"] = "quantity"
    return definitions


def _validator() -> Any:
    schema = {"$defs": load_definitions(), "$ref": f"#/$defs/{TEMPLATE_DEFINITION}"}
    cls = jsonschema.validators.validator_for({"$schema": "https://json-schema.org/draft/2020-12/schema"})
    return cls(schema, format_checker=_formats())


_VALIDATOR: Final = _validator()  # once per process, before any request
_verdicts: dict[bytes, tuple[str, ...]] = {}
_lock = threading.Lock()


def template_problems(template: JSON, text: bytes | None = None, workload: bool = False) -> tuple[str, ...]:
    """Every problem of a rendered pod template (`{metadata, spec}`), each "path: complaint", paths from
    the template (`spec.containers[0] (container "slurmd").imagePullPolicy`); `text`: the template's JSON
    bytes when the caller has them. `workload`: the template of a StatefulSet, Deployment or DaemonSet."""
    digest = hashlib.blake2b(text if text is not None else orjson.dumps(template), digest_size=16).digest()
    key = digest + (b"w" if workload else b"p")
    found = _verdicts.get(key)
    if found is not None:
        return found
    found = _problems(template, workload)
    with _lock:
        if len(_verdicts) >= VERDICT_CACHE:
            del _verdicts[next(iter(_verdicts))]
        _verdicts[key] = found
    return found


def _problems(template: JSON, workload: bool) -> tuple[str, ...]:
    problems = {problem for error in _VALIDATOR.iter_errors(template) for problem in _describe(error, template)}
    spec = template.get("spec")
    restart = spec.get("restartPolicy") if isinstance(spec, dict) else None
    if workload and restart in ("OnFailure", "Never"):  # a value no pod takes is the enum's complaint already
        problems.add(f'spec.restartPolicy: Unsupported value: {_quote(restart)}: supported values: "Always"')
    return tuple(sorted(problems))


def workload_problems(child: JSON) -> tuple[str, ...]:
    """The problems of a built workload's `spec.template`, paths from the workload (`spec.template.spec...`);
    none for any other child."""
    template = (child.get("spec") or {}).get("template") if child.get("kind") in WORKLOAD_KINDS else None
    if not isinstance(template, dict):
        return ()
    return tuple(f"spec.template.{problem}" for problem in template_problems(template, workload=True))


def summary(problems: Iterable[str]) -> str:
    """At most MAX_REPORTED problems, then how many more."""
    listed = list(problems)
    shown = "; ".join(listed[:MAX_REPORTED])
    return shown if len(listed) <= MAX_REPORTED else f"{shown}; and {len(listed) - MAX_REPORTED} more"


def _describe(error: jsonschema.ValidationError, template: JSON) -> list[str]:
    path = _path(error.absolute_path, template)
    if error.validator == "required" and isinstance(error.instance, dict):  # one error per object: name each field
        missing = [field for field in error.validator_value if field not in error.instance]
        return [f"{path}.{field}: Required value" if path else f"{field}: Required value" for field in missing]
    return [f"{path or '<root>'}: {_complaint(error)}"]


def _path(keys: Iterable[Any], template: JSON) -> str:
    """`spec.containers[0] (container "slurmd").imagePullPolicy`: the API server's path, with the container's name."""
    parts: list[str] = []
    node: Any = template
    for key in keys:
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
        try:
            node = node[key]
        except (KeyError, IndexError, TypeError):
            node = None
        if len(parts) == 3 and parts[0] == ".spec" and parts[1][1:] in _CONTAINER_LISTS and isinstance(node, dict):
            name = node.get("name")
            if isinstance(name, str):
                parts[2] += f" (container {_quote(name)})"
    return "".join(parts).removeprefix(".")


def _complaint(error: jsonschema.ValidationError) -> str:
    """The complaint in the API server's words where it has them."""
    value = error.instance
    if error.validator == "enum":
        allowed = ", ".join(_quote(v) for v in error.validator_value if v not in ("", None))
        return f"Unsupported value: {_quote(value)}: supported values: {allowed}"
    if error.validator in ("minimum", "maximum"):
        low, high = error.schema.get("minimum"), error.schema.get("maximum")
        return f"Invalid value: {_quote(value)}: must be between {low} and {high}, inclusive"
    if error.validator == "format" and error.validator_value == "quantity":
        return f"Invalid value: {_quote(value)}: {_QUANTITY_RULE}"
    if error.validator == "format":
        return f"Invalid value: {_quote(value)}: out of range for {error.validator_value}"
    if error.validator == "type":
        return f"Invalid value: {_quote(value)}: must be of type {_types([error.validator_value])}"
    if error.validator in ("oneOf", "anyOf"):
        wanted = [branch.get("type") for branch in error.validator_value if isinstance(branch, dict)]
        return f"Invalid value: {_quote(value)}: must be of type {_types(wanted)}"
    return error.message


def _types(wanted: list[Any]) -> str:
    """`string or integer` from JSON Schema types (a name or a list of names each), null left out."""
    names: list[str] = []
    for item in wanted:
        for name in item if isinstance(item, list) else [item]:
            if isinstance(name, str) and name != "null" and name not in names:
                names.append(name)
    return " or ".join(names)


def _quote(value: Any) -> str:
    """A value as the API server quotes it: JSON, shortened."""
    try:
        text = orjson.dumps(value).decode()
    except TypeError:  # an integer beyond 64 bits
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."

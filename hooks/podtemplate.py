"""Kubernetes strategic-merge of a user's pod template over the pod we build.

Users customise every Slinky workload through `template` (a PodTemplate) and per-container
overrides (`slurmd`, `slurmctld`, `logfile`, ...). They expect `kubectl patch`-like behaviour:
maps merge, `null` deletes a key, and the lists Kubernetes gives a merge key (containers by
name, env by name, volumeMounts by mountPath, ...) merge item by item instead of being replaced.
No maintained Python library implements strategic merge for typed objects, so it lives here,
limited to the Pod types our children carry. Directives: `$patch: replace` on a map replaces it,
`$patch: delete` on a list item removes the matching base item.
"""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]
# What the API server stores for a projected service account token that names no expiry (SetDefaults).
TOKEN_EXPIRATION_SECONDS = 3600

# Lists that strategic merge treats as maps, per type: field -> (merge key, item type).
_MERGE_LISTS: dict[str, dict[str, tuple[str, str | None]]] = {
    "PodSpec": {
        "containers": ("name", "Container"),
        "initContainers": ("name", "Container"),
        "ephemeralContainers": ("name", "Container"),
        "volumes": ("name", None),
        "imagePullSecrets": ("name", None),
        "hostAliases": ("ip", None),
        "topologySpreadConstraints": ("topologyKey", None),
        "resourceClaims": ("name", None),
        "schedulingGates": ("name", None),
    },
    "ServiceSpec": {
        "ports": ("port", None),
    },
    "Container": {
        "ports": ("containerPort", None),
        "env": ("name", None),
        "volumeMounts": ("mountPath", None),
        "volumeDevices": ("devicePath", None),
    },
}
# A probe or lifecycle handler holds exactly one of these; a user's handler replaces ours.
_HANDLER_KEYS = frozenset({"exec", "httpGet", "tcpSocket", "grpc", "sleep"})
_HANDLER_FIELDS = {
    "Container": {"livenessProbe", "readinessProbe", "startupProbe"},
    "Lifecycle": {"postStart", "preStop"},
}
_NESTED_TYPES = {"Container": {"lifecycle": "Lifecycle"}}


def merge_pod_spec(base: JSON, user: JSON | None) -> JSON:
    """The user's PodSpec strategically merged over ours; neither input is modified."""
    return _merge_map(base, user or {}, "PodSpec")


def merge_container(base: JSON, override: JSON | None) -> JSON:
    """A container override (Slinky's `slurmd:`, `slurmctld:` ... fields) merged over our container.

    As in Slinky, `args` are appended to ours rather than replacing them, and the container
    keeps its name so that probes, mounts and `kubectl logs -c` keep working.
    """
    if not override:
        return copy.deepcopy(base)
    merged = _merge_map(base, {k: v for k, v in override.items() if k not in ("args", "name")}, "Container")
    extra_args = override.get("args") or []
    if extra_args:
        merged["args"] = [*base.get("args", []), *extra_args]
    return merged


def merge_service_spec(base: JSON, user: JSON | None) -> JSON:
    """A user's ServiceSpec override merged over ours (ports merge by port number)."""
    return _merge_map(base, user or {}, "ServiceSpec")


def apply_pod_template(base: JSON, user: JSON | None) -> JSON:
    """Merge a user's PodTemplate (`{metadata: {labels, annotations}, spec}`) over ours.

    Our labels and annotations win over the user's: selectors and hash annotations must hold.
    """
    user = user or {}
    user_meta = user.get("metadata") or {}
    base_meta = base.get("metadata") or {}
    metadata: JSON = {}
    for key in ("labels", "annotations"):
        values = {**(user_meta.get(key) or {}), **(base_meta.get(key) or {})}
        if values:
            metadata[key] = values
    spec = merge_pod_spec(base.get("spec") or {}, user.get("spec"))
    for volume in spec.get("volumes") or []:
        _fill_server_defaults(volume)
    return {"metadata": metadata, "spec": spec}


def _fill_server_defaults(volume: JSON) -> None:
    """The defaults the API server stores in a volume's keyless lists, filled in where the user left them out.

    A projected volume's `sources` has no merge key, so Metacontroller's dynamic apply compares it whole with
    the stored copy; without the server's `expirationSeconds: 3600` and `fieldRef.apiVersion: v1` the workload
    would be updated on every sync (README, "Both of Metacontroller's apply strategies").
    """
    if not isinstance(volume, dict):
        return
    sources = (volume.get("projected") or {}).get("sources") if isinstance(volume.get("projected"), dict) else None
    for source in sources if isinstance(sources, list) else []:
        if not isinstance(source, dict):
            continue
        if isinstance(source.get("serviceAccountToken"), dict):
            source["serviceAccountToken"].setdefault("expirationSeconds", TOKEN_EXPIRATION_SECONDS)
        _fill_field_ref_versions(source.get("downwardAPI"))
    _fill_field_ref_versions(volume.get("downwardAPI"))


def _fill_field_ref_versions(downward_api: Any) -> None:
    items = downward_api.get("items") if isinstance(downward_api, dict) else None
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict) and isinstance(item.get("fieldRef"), dict):
            item["fieldRef"].setdefault("apiVersion", "v1")


def _merge_map(base: JSON, patch: JSON, type_name: str | None) -> JSON:
    if patch.get("$patch") == "replace":
        return _strip_directives(patch)
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if key == "$patch":
            continue
        if value is None:
            result.pop(key, None)
        elif key in _MERGE_LISTS.get(type_name or "", {}) and isinstance(value, list):
            merge_key, item_type = _MERGE_LISTS[type_name or ""][key]
            result[key] = _merge_list(result.get(key) or [], value, merge_key, item_type)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            if key in _HANDLER_FIELDS.get(type_name or "", ()) and _HANDLER_KEYS & value.keys():
                result[key] = {k: v for k, v in result[key].items() if k not in _HANDLER_KEYS}
            result[key] = _merge_map(result[key], value, _NESTED_TYPES.get(type_name or "", {}).get(key))
        else:
            result[key] = _strip_directives(value)
    return result


def _merge_list(base: list[Any], patch: list[Any], merge_key: str, item_type: str | None) -> list[Any]:
    """Items with the same merge key merge; `$patch: delete` removes; new items are appended."""
    result = [copy.deepcopy(item) for item in base]
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            result.append(_strip_directives(item))
            continue
        index = next(
            (i for i, old in enumerate(result) if isinstance(old, dict) and old.get(merge_key) == item[merge_key]), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = _merge_map(result[index], item, item_type)
    return result


def _strip_directives(value: Any) -> Any:
    """A copy without `$patch` keys and without null map values (as the apiserver would store it)."""
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if k != "$patch" and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value

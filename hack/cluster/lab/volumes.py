"""Pod volumes as a kubelet materialises them, and the values env vars take from the API.

ConfigMap, Secret, projected and downwardAPI volumes use the kubelet's atomic layout (a timestamped
directory, the `..data` symlink to it, one top-level symlink per entry through `..data`), swapped in one
rename when the sources change, so a reader sees the old files or the new ones and the hooks' own
`..*`-skipping scripts work unchanged. fsGroup gives group ownership and group read, as the kubelet's
ownership manager does. emptyDir is a directory per pod; a PVC a directory per claim that outlives pods.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
# namespace/name -> object, kept fresh by the agent
Store = dict[str, Obj]


class MissingSource(LookupError):
    """A referenced ConfigMap, Secret or key that does not exist and is not optional."""


def _decoded(secret: Obj) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def _configmap_data(cm: Obj) -> dict[str, bytes]:
    out = {k: v.encode() for k, v in (cm.get("data") or {}).items()}
    out.update({k: base64.b64decode(v) for k, v in (cm.get("binaryData") or {}).items()})
    return out


def _source_files(
    kind: str, source: Obj, namespace: str, stores: dict[str, Store]
) -> dict[str, tuple[bytes, int | None]]:
    """path -> (content, mode or None) of one configMap or secret source."""
    name = source.get("name") if kind == "configMap" else source.get("secretName", source.get("name"))
    obj = stores["Secret" if kind == "secret" else "ConfigMap"].get(f"{namespace}/{name}")
    if obj is None:
        if source.get("optional"):
            return {}
        raise MissingSource(f"{kind} {namespace}/{name} not found")
    data = _decoded(obj) if kind == "secret" else _configmap_data(obj)
    items = source.get("items")
    if not items:
        return {key: (value, None) for key, value in data.items()}
    out = {}
    for item in items:
        if item["key"] not in data:
            if source.get("optional"):
                continue
            raise MissingSource(f"{kind} {namespace}/{name} has no key {item['key']!r}")
        out[item["path"]] = (data[item["key"]], item.get("mode"))
    return out


def field_value(pod: Obj, path: str) -> str:
    """A downward API fieldRef (metadata.name, metadata.labels['x'], status.podIP, ...)."""
    match = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
    if match:
        return str((pod["metadata"].get(match[1]) or {}).get(match[2], ""))
    simple = {
        "metadata.name": pod["metadata"]["name"],
        "metadata.namespace": pod["metadata"].get("namespace", ""),
        "metadata.uid": pod["metadata"].get("uid", ""),
        "spec.nodeName": pod["spec"].get("nodeName", ""),
        "spec.serviceAccountName": pod["spec"].get("serviceAccountName", "default"),
        "status.podIP": pod.get("status", {}).get("podIP", ""),
        "status.hostIP": pod.get("status", {}).get("hostIP", ""),
        "status.podIPs": ",".join(ip["ip"] for ip in pod.get("status", {}).get("podIPs", [])),
    }
    if path in ("metadata.labels", "metadata.annotations"):
        values = pod["metadata"].get(path.split(".")[1]) or {}
        return "\n".join(f'{k}="{v}"' for k, v in sorted(values.items()))
    if path not in simple:
        raise MissingSource(f"fieldRef {path!r} is not supported by the cluster lab")
    return str(simple[path])


_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30,
          "Ti": 2**40, "m": 0.001}  # fmt: skip


def quantity(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", str(text))
    if not match or match[2] not in _UNITS:
        raise ValueError(f"quantity {text!r}")
    return float(match[1]) * _UNITS[match[2]]


def resource_value(pod: Obj, ref: Obj, container_name: str | None) -> str:
    """A resourceFieldRef (limits.cpu, requests.memory, ...), rounded up by its divisor as the kubelet does."""
    name = ref.get("containerName") or container_name
    container = next(c for c in pod["spec"]["containers"] if c["name"] == name)
    kind, resource = ref["resource"].split(".", 1)
    value = (container.get("resources", {}).get(kind) or {}).get(resource)
    if value is None and kind == "limits":  # unset limits default to the node's allocatable
        value = {"cpu": "2", "memory": "8Gi"}.get(resource, "0")
    divisor = quantity(ref.get("divisor", "1"))
    return str(int(-(-quantity(value or "0") // divisor)))


def _projected_files(volume: Obj, pod: Obj, stores: dict[str, Store]) -> dict[str, tuple[bytes, int | None]]:
    namespace = pod["metadata"]["namespace"]
    files: dict[str, tuple[bytes, int | None]] = {}
    for source in volume.get("sources", []):
        for kind in ("configMap", "secret"):
            if kind in source:
                files.update(_source_files(kind, source[kind], namespace, stores))
        if "downwardAPI" in source:
            files.update(_downward_files(source["downwardAPI"], pod))
    return files


def _downward_files(volume: Obj, pod: Obj) -> dict[str, tuple[bytes, int | None]]:
    out = {}
    for item in volume.get("items", []):
        if "fieldRef" in item:
            text = field_value(pod, item["fieldRef"]["fieldPath"])
        else:
            text = resource_value(pod, item["resourceFieldRef"], None)
        out[item["path"]] = (text.encode(), item.get("mode"))
    return out


def desired_files(volume: Obj, pod: Obj, stores: dict[str, Store]) -> dict[str, tuple[bytes, int | None]] | None:
    """The files of an atomic-writer volume, or None for a volume of another type."""
    namespace = pod["metadata"]["namespace"]
    if "configMap" in volume:
        return _source_files("configMap", volume["configMap"], namespace, stores)
    if "secret" in volume:
        return _source_files("secret", volume["secret"], namespace, stores)
    if "projected" in volume:
        return _projected_files(volume["projected"], pod, stores)
    if "downwardAPI" in volume:
        return _downward_files(volume["downwardAPI"], pod)
    return None


def default_mode(volume: Obj) -> int:
    for kind in ("configMap", "secret", "projected", "downwardAPI"):
        if kind in volume:
            return int(volume[kind].get("defaultMode", 0o644))
    return 0o644


def write_atomic(target: Path, files: dict[str, tuple[bytes, int | None]], mode: int, fs_group: int | None) -> bool:
    """Make `target` hold exactly `files` (kubelet's atomic writer); True when something changed."""
    fingerprint = json.dumps({p: [base64.b64encode(c).decode(), m] for p, (c, m) in sorted(files.items())})
    fingerprint += f"|{mode}|{fs_group}"
    stamp = target / "..fingerprint"
    if stamp.exists() and stamp.read_text() == fingerprint:
        return False
    target.mkdir(parents=True, exist_ok=True)
    version = target / (time.strftime("..%Y_%m_%d_%H_%M_%S.") + str(time.monotonic_ns()))
    version.mkdir()
    for path, (content, item_mode) in files.items():
        dest = version / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(content)
        file_mode = item_mode if item_mode is not None else mode
        if fs_group is not None:
            os.chown(dest, 0, fs_group)
            file_mode |= 0o440  # the kubelet's ownership manager: group read for fsGroup
        os.chmod(dest, file_mode)
    os.chmod(version, 0o755)
    data_tmp = target / "..data_tmp"
    if data_tmp.is_symlink():
        data_tmp.unlink()
    data_tmp.symlink_to(version.name)
    old = os.readlink(target / "..data") if (target / "..data").is_symlink() else None
    os.rename(data_tmp, target / "..data")
    for top in {path.split("/", 1)[0] for path in files}:
        link = target / top
        if not link.is_symlink():
            link.symlink_to(f"..data/{top}")
    for entry in target.iterdir():
        if entry.is_symlink() and entry.name not in {"..data"} and not (target / "..data" / entry.name).exists():
            entry.unlink()
    if old and old != version.name:
        shutil.rmtree(target / old, ignore_errors=True)
    stamp.write_text(fingerprint)
    return True

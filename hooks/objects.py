"""Building blocks every component's hook shares: labels, child metadata, hashes, Services.

Children are always built from scratch (never echoed from observed state) and carry the
parent's labels and annotations, as Slinky's builders do.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from hooks.podtemplate import merge_service_spec

JSON = dict[str, Any]

# Parent annotations that describe the parent object itself and must not spread to children.
_NOT_PROPAGATED_PREFIXES = ("kubectl.kubernetes.io/", "metacontroller.k8s.io/")


def child_metadata(
    parent: JSON, name: str, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None
) -> JSON:
    """Metadata for a child: the parent's labels/annotations, then ours (ours win)."""
    meta = parent.get("metadata") or {}
    inherited = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(_NOT_PROPAGATED_PREFIXES)}
    result: JSON = {"name": name, "labels": {**(meta.get("labels") or {}), **labels}}
    merged_annotations = {**inherited, **(annotations or {})}
    if merged_annotations:
        result["annotations"] = merged_annotations
    return result


def content_hash(data: Mapping[str, str | bytes] | None) -> str:
    """sha256 over the values in key order; "" for no data (Slinky's hash annotation rule)."""
    if not data:
        return ""
    digest = hashlib.sha256()
    for key in sorted(data):
        value = data[key]
        digest.update(value.encode() if isinstance(value, str) else value)
    return digest.hexdigest()


def service(
    parent: JSON,
    name: str,
    labels: Mapping[str, str],
    selector: Mapping[str, str],
    port_name: str,
    default_port: int,
    override: JSON | None = None,
    headless: bool = False,
) -> JSON:
    """A Service from Slinky's ServiceSpec override (`{metadata, spec, port, nodePort}`).

    externalIPs are always removed (CVE-2020-8554); headless Services publish not-ready
    addresses so that peers resolve each other while starting.
    """
    override = override or {}
    port: JSON = {
        "name": port_name,
        "port": override.get("port") or default_port,
        "targetPort": port_name,
        "protocol": "TCP",
    }
    if override.get("nodePort"):
        port["nodePort"] = override["nodePort"]
    base_spec: JSON = {"selector": dict(selector), "ports": [port]}
    if headless:
        base_spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    spec = merge_service_spec(base_spec, override.get("spec"))
    spec.pop("externalIPs", None)
    user_meta = override.get("metadata") or {}
    metadata = child_metadata(parent, name, {**(user_meta.get("labels") or {}), **labels}, user_meta.get("annotations"))
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}

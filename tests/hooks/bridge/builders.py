"""Small builders for bridge hook requests: pods, owners, groups and the decorator request around them."""

from __future__ import annotations

import copy
import json
from typing import Any

from hooks.contract import DecoratorRequest
from slinky_common import names

JSON = dict[str, Any]
NS = "slurm-bridge"


def slurmjob(**values: str) -> dict[str, str]:
    """`slurmjob.slinky.slurm.net/<key>` annotations; underscores in keys become dashes."""
    return {names.SLURMJOB_PREFIX + k.replace("_", "-"): v for k, v in values.items()}


def resources(requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> JSON:
    out: JSON = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    return out


def pod(
    name: str = "p",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[JSON] | None = None,
    owner: JSON | None = None,
    phase: str = "Pending",
    spec: JSON | None = None,
    ns: str = NS,
) -> JSON:
    meta: JSON = {
        "name": name,
        "namespace": ns,
        "uid": f"uid-{name}",
        "labels": {names.LABEL_BRIDGE_MANAGED: "true", **(labels or {})},
    }
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "schedulerName": names.BRIDGE_SCHEDULER_NAME,
            "containers": containers if containers is not None else [{"name": "main", "image": "busybox"}],
            **(spec or {}),
        },
        "status": {"phase": phase},
    }


def container(name: str = "main", requests: dict[str, str] | None = None, limits: dict[str, str] | None = None) -> JSON:
    out: JSON = {"name": name, "image": "busybox"}
    if requests or limits:
        out["resources"] = resources(requests, limits)
    return out


def obj(
    api_version: str,
    kind: str,
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    spec: JSON | None = None,
    status: JSON | None = None,
    owner: JSON | None = None,
    ns: str = NS,
) -> JSON:
    meta: JSON = {"name": name, "namespace": ns, "uid": f"uid-{kind}-{name}"}
    if annotations:
        meta["annotations"] = annotations
    if owner:
        meta["ownerReferences"] = [{**owner, "controller": True}]
    out: JSON = {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec or {}}
    if status is not None:
        out["status"] = status
    return out


def owner_ref(target: JSON) -> JSON:
    return {
        "apiVersion": target["apiVersion"],
        "kind": target["kind"],
        "name": target["metadata"]["name"],
        "uid": target["metadata"]["uid"],
    }


def related(*objects: JSON) -> dict[str, dict[str, JSON]]:
    out: dict[str, dict[str, JSON]] = {}
    for o in objects:
        out.setdefault(f"{o['kind']}.{o['apiVersion']}", {})[
            f"{o['metadata']['namespace']}/{o['metadata']['name']}"
        ] = o
    return out


def request(target: JSON, *rel: JSON, controller: JSON | None = None, finalizing: bool = False) -> DecoratorRequest:
    return DecoratorRequest(
        controller=controller or {}, object=target, attachments={}, related=related(*rel), finalizing=finalizing
    )


def body(req: DecoratorRequest) -> JSON:
    """The HTTP body Metacontroller would send for `req`."""
    return {
        "controller": req.controller,
        "object": req.object,
        "attachments": {},
        "related": req.related,
        "finalizing": req.finalizing,
    }


def with_changes(o: JSON, **meta: Any) -> JSON:
    out = copy.deepcopy(o)
    for key, value in meta.items():
        out["metadata"][key] = value
    return out


def job_of(annotations: dict[str, str | None]) -> JSON:
    """The placeholder job published in a pod hook's annotations (fails if none was published)."""
    text = annotations[names.ANNOTATION_PLACEHOLDER_JOB]
    assert text is not None, annotations.get(names.ANNOTATION_JOB_ERROR)
    return json.loads(text)

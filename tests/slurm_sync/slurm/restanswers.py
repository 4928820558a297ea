"""slurmrestd's answers as the fake (pytest-httpserver) serves them: the OpenAPI spec of a version, node listings,
the token."""

from __future__ import annotations

from typing import Any

TOKEN = "eyJhbGciOiJIUzI1NiJ9.SECRET-PAYLOAD.SIGNATURE-do-not-leak"


V = "/slurm/v0.0.45"


def spec(*versions: str, update_fields: tuple[str, ...] = ("state", "reason", "comment", "topology_str")) -> dict:
    """A minimal OpenAPI document shaped like slurmrestd's."""
    schemas: dict[str, Any] = {}
    for v in versions:
        schemas[f"{v}_update_node_msg"] = {"properties": {f: {} for f in update_fields}}
        schemas[f"{v}_job_desc_msg"] = {
            "properties": {"flags": {"type": "array", "items": {"$ref": f"#/components/schemas/{v}_flags"}}}
        }
        schemas[f"{v}_flags"] = {"type": "string", "enum": ["SPREAD_JOB", "EXTERNAL_JOB"]}
    paths: dict[str, dict[str, Any]] = {f"/slurm/{v}/{p}": {"get": {}} for v in versions for p in ("ping/", "nodes/")}
    paths["/slurmdb/v0.0.45/jobs/"] = {"get": {}}
    return {"openapi": "3.0.3", "paths": paths, "components": {"schemas": schemas}}


def meta() -> dict:
    return {"slurm": {"version": {"major": "26", "minor": "05", "micro": "5"}, "release": "26.05.5"}}


def node(name: str, *state: str, **fields: Any) -> dict:
    return {"name": name, "state": list(state or ["IDLE"]), "reason": "", **fields}


def nodes_body(*nodes: dict, last_update: int = 1000) -> dict:
    return {
        "nodes": list(nodes),
        "last_update": {"set": True, "infinite": False, "number": last_update},
        "meta": meta(),
        "errors": [],
        "warnings": [],
    }

"""The placeholder job: slurm-bridge's `V0044JobDescMsg` for one group.

Values are layered as slurm-bridge layers them: the workload's (Group), then the pods' resources
(only where a pod asks for more than zero), then the user's annotations, which win. The result is
the exact `job` body slurm_sync POSTs to `/job/submit` (or to `/job/{id}` while it is pending).

Deliberately absent: `script` and `environment` (an external job has neither) and
`required_nodes`: without a kube-scheduler there are no "feasible nodes", and listing every node
is what made all bridge jobs NODE_FAIL after one node was deleted (slurm-bridge #42/#43). Slurm
picks nodes from the partition, which should hold only nodes that map to Kubernetes nodes.
"""

from __future__ import annotations

from typing import Any

import orjson

from hooks.bridge.annotations import JobAnnotations
from hooks.bridge.settings import BridgeSettings
from hooks.bridge.workload import Group
from slinky_common import resources

JSON = dict[str, Any]
# Annotation -> job field for the strings passed verbatim.
_STRING_FIELDS = {
    "account": "account",
    "qos": "qos",
    "reservation": "reservation",
    "licenses": "licenses",
    "constraints": "constraints",
    "wckey": "wckey",
    "user-id": "user_id",
    "group-id": "group_id",
}


def description(group: Group, pods: resources.GroupResources, ann: JobAnnotations, settings: BridgeSettings) -> JSON:
    """The job for `group`; unset fields are left to Slurm and the partition's defaults."""
    job: JSON = {
        "flags": ["EXTERNAL_JOB"],
        "current_working_directory": "/tmp",
        "admin_comment": admin_comment(group.pods),
        "partition": ann.strings.get("partition") or settings.partition,
        "nodes": str(len(group.pods)),
        "shared": ["none"] if ann.exclusive else [],
        "priority": _no_val(ann.ints.get("priority")),
        "time_limit": _no_val(ann.ints.get("timelimit", group.time_limit)),
        "memory_per_node": _no_val(ann.memory_mib if ann.memory_mib is not None else pods.memory_mib),
    }
    if settings.mcs_label:
        job["mcs_label"] = settings.mcs_label
    optional = {
        "name": ann.strings.get("job-name", group.job_name),
        "cpus_per_task": ann.cpus_per_task if ann.cpus_per_task is not None else pods.cpus_per_task,
        "tres_per_node": ann.strings.get("gres", pods.gres),
        "minimum_nodes": ann.ints.get("min-nodes", group.min_nodes),
        "maximum_nodes": ann.ints.get("max-nodes", group.max_nodes),
        "tasks_per_node": group.tasks_per_node,
        **{field: ann.strings.get(key) for key, field in _STRING_FIELDS.items()},
    }
    job |= {field: value for field, value in optional.items() if value is not None}
    return job


def admin_comment(pods: list[str]) -> str:
    """`{"pods":["ns/name",...]}`: the only link from a Slurm job back to its pods."""
    return orjson.dumps({"pods": pods}).decode()


def encode(job: JSON) -> str:
    """Compact JSON with sorted keys: the same job is always the same annotation bytes."""
    return orjson.dumps(job, option=orjson.OPT_SORT_KEYS).decode()


def _no_val(number: int | None) -> JSON:
    """Slurm's optional number: `{set, infinite, number}`, or `{set: false}` for the default."""
    return {"set": True, "infinite": False, "number": number} if number is not None else {"set": False}

"""Status conditions built deterministically.

Hooks must give the same bytes for the same request (Metacontroller re-syncs on every status
write, so a timestamp that changes would loop forever). Conditions therefore carry the parent's
`observedGeneration` instead of a fresh `lastTransitionTime`; an observed condition whose status
did not change keeps the time it already had, so tools that show it keep working.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slinky_common import names
from slinky_common.names import CONDITION_READY

JSON = dict[str, Any]


def condition(parent: JSON, type_: str, ok: bool, reason: str, message: str) -> JSON:
    """One condition for `parent`; keeps the observed lastTransitionTime while the status holds."""
    status = "True" if ok else "False"
    result: JSON = {"type": type_, "status": status, "reason": reason, "message": message}
    generation = (parent.get("metadata") or {}).get("generation")
    if isinstance(generation, int):
        result["observedGeneration"] = generation
    observed = _observed_condition(parent, type_)
    if observed and observed.get("status") == status and observed.get("lastTransitionTime"):
        result["lastTransitionTime"] = observed["lastTransitionTime"]
    return result


def _observed_condition(parent: JSON, type_: str) -> JSON | None:
    for item in (parent.get("status") or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") == type_:
            return item
    return None


# --- Ready ---------------------------------------------------------------------------------------
# Every kind carries a `Ready` condition (docs/architecture.md §3), so `kubectl wait --for=condition=Ready`
# works for each. It is False while anything stands between the CR and a working daemon; its reason
# is the first problem found and its message lists every problem, each with what to look at.


@dataclass(frozen=True)
class Problem:
    """Something that keeps a CR from being Ready: a CamelCase reason and a sentence a person can act on."""

    reason: str
    message: str


def unmet(*conditions: JSON) -> list[Problem]:
    """A Problem for each condition that must hold but does not; its message names the condition."""
    return [Problem(c["reason"], f"{c['type']}: {c['message']}") for c in conditions if c.get("status") != "True"]


def ready_condition(parent: JSON, problems: list[Problem], ready_reason: str, ready_message: str) -> JSON:
    """Ready True with `ready_reason` when there is no problem; else False with the first problem's reason."""
    if not problems:
        return condition(parent, CONDITION_READY, True, ready_reason, ready_message)
    return condition(parent, CONDITION_READY, False, problems[0].reason, "; ".join(p.message for p in problems))


def invalid_spec_ready(parent: JSON, message: str) -> JSON:
    """Ready while a spec value cannot be used: False, whatever the kept children do (the spec is not in force)."""
    return ready_condition(parent, [Problem("InvalidSpec", f"InvalidSpec: {message}")], "", "")


def workload_problems(workload: JSON | None, kind: str, name: str, desired: int, noun: str) -> list[Problem]:
    """Why an observed Deployment or StatefulSet does not run `desired` ready pods of its current template.

    `kind` and `name` name the object to inspect; `noun` ("slurmctld") the pods it runs.
    """
    kind_name = f"{kind} {name}"
    if workload is None:
        return [Problem(f"{kind}Missing", f"{kind_name} does not exist yet")]
    status = workload.get("status") or {}
    ready, updated = replica_count(status, "readyReplicas"), replica_count(status, "updatedReplicas")
    progress = f"{ready}/{desired} {noun} pods ready, {updated}/{desired} updated"
    progress += f" (kubectl describe {kind.lower()} {name})"
    generation = (workload.get("metadata") or {}).get("generation")
    if isinstance(generation, int) and replica_count(status, "observedGeneration") < generation:
        return [Problem("RolloutPending", f"{kind_name} change not observed yet; {progress}")]
    if ready < desired or updated < desired:
        return [Problem("PodsNotReady", progress)]
    return []


def workload_ready(
    parent: JSON, references: JSON, workload: JSON | None, kind: str, name: str, desired: int, noun: str
) -> JSON:
    """Ready of a kind that runs one workload: its references resolve and its pods run the current template."""
    problems = unmet(references) + workload_problems(workload, kind, name, desired, noun)
    ready = replica_count((workload or {}).get("status") or {}, "readyReplicas")
    message = f"{ready}/{desired} {noun} pods ready on the current template"
    return ready_condition(parent, problems, "PodsReady", message)


def replica_count(status: JSON, key: str) -> int:
    """A count from a workload's status; 0 when absent or not an integer (observed objects may be in any shape)."""
    value = status.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def available_condition(parent: JSON, workload: JSON | None, desired: int) -> JSON:
    """Whether the observed Deployment/StatefulSet has as many ready pods as desired."""
    if workload is None:
        return condition(parent, names.CONDITION_AVAILABLE, False, "NotCreated", "the workload does not exist yet")
    ready = (workload.get("status") or {}).get("readyReplicas") or 0
    ok = ready >= desired
    return condition(
        parent, names.CONDITION_AVAILABLE, ok, "Ready" if ok else "NotReady", f"{ready}/{desired} pods ready"
    )

"""Status conditions built deterministically.

Hooks must give the same bytes for the same request (Metacontroller re-syncs on every status
write, so a timestamp that changes would loop forever). Conditions therefore carry the parent's
`observedGeneration` instead of a fresh `lastTransitionTime`; an observed condition whose status
did not change keeps the time it already had, so tools that show it keep working.
"""

from __future__ import annotations

from typing import Any

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

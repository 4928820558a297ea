"""Would a worker pod run on this Node? The DaemonSet controller's predicates, on observed Nodes.

`should_run`: a new pod may be placed there (node selector, required node affinity, every
NoSchedule and NoExecute taint tolerated, the node schedulable). `should_continue`: an existing
pod may stay (selector and affinity still match, every NoExecute taint tolerated); a cordoned
node keeps its pod, because cordoning is Slurm's business (drain), not a reason to delete.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from slinky_common.jsontypes import dict_field

JSON = dict[str, Any]

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_INTEGER = re.compile(r"^-?[0-9]+$")


@dataclass(frozen=True)
class Fit:
    should_run: bool
    should_continue: bool


def node_fit(node: JSON, pod_spec: JSON) -> Fit:
    """Check the scheduling constraints of `pod_spec` (already merged) against one Node."""
    meta = dict_field(node, "metadata")
    spec = dict_field(node, "spec")
    labels = dict_field(meta, "labels")
    name = str(meta.get("name") or "")
    selected = _matches_node_selector(labels, pod_spec.get("nodeSelector") or {}) and _matches_required_affinity(
        name, labels, pod_spec.get("affinity") or {}
    )
    tolerations = [t for t in pod_spec.get("tolerations") or [] if isinstance(t, dict)]
    taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
    if spec.get("unschedulable") is True:
        taints = [*taints, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}]
    no_execute_ok = all(_tolerated(t, tolerations) for t in taints if t.get("effect") == "NoExecute")
    no_schedule_ok = all(_tolerated(t, tolerations) for t in taints if t.get("effect") == "NoSchedule")
    return Fit(should_run=selected and no_execute_ok and no_schedule_ok, should_continue=selected and no_execute_ok)


def _matches_node_selector(labels: JSON, selector: JSON) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _matches_required_affinity(name: str, labels: JSON, affinity: JSON) -> bool:
    """Required node affinity: the terms are ORed, the requirements inside a term ANDed."""
    required = ((affinity.get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or None
    if required is None:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(_matches_term(name, labels, term) for term in terms if isinstance(term, dict))


def _matches_term(name: str, labels: JSON, term: JSON) -> bool:
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False  # an empty term selects no node (Kubernetes semantics)
    return all(_requirement(labels.get(e.get("key")), e) for e in expressions) and all(
        _requirement(name if f.get("key") == "metadata.name" else None, f) for f in fields
    )


def _requirement(value: Any, requirement: JSON) -> bool:
    operator = requirement.get("operator")
    values = requirement.get("values") or []
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if (
        operator in ("Gt", "Lt")
        and isinstance(value, str)
        and _INTEGER.match(value)
        and len(values) == 1
        and _INTEGER.match(str(values[0]))
    ):
        return int(value) > int(values[0]) if operator == "Gt" else int(value) < int(values[0])
    return False


def _tolerated(taint: JSON, tolerations: list[JSON]) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: JSON, taint: JSON) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and (toleration.get("value") or "") == (taint.get("value") or "")

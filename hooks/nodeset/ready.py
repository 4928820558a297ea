"""The NodeSet's Ready condition: every desired worker exists, is ready, and Slurm can run jobs on it.

Kubernetes readiness alone says only that slurmd started; whether the node takes jobs is Slurm's
word, which slurm_sync mirrors onto each pod as SlurmNodeState* conditions (docs/architecture.md §4.3).
A node counts as usable when its base state is IDLE, MIXED or ALLOCATED and no flag stops it. A
drain is expected, and so not a problem, when we asked for it: the pod is condemned (it is not a
desired pod then), carries pod-cordon or pod-cordon-requested, or the drain reason is ours. Any other drain (an
administrator's, or Slurm's own after a failed job step) is named with Slurm's reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from hooks.nodeset.observe import JSON, ObservedPod
from hooks.status import Problem, ready_condition, unmet
from slinky_common import slurmstate

USABLE_BASE_STATES: Final = frozenset({"IDLE", "MIXED", "ALLOCATED"})
# Flags that keep Slurm from starting jobs on a node, apart from DRAIN (judged by its reason).
UNUSABLE_FLAGS: Final = frozenset({"FAIL", "INVALID", "INVALID_REG", "NOT_RESPONDING"})
LISTED_PODS: Final = 5  # names shown per problem; the rest are counted


def nodeset_ready(
    parent: JSON, desired: int, pods: list[ObservedPod], condemned: frozenset[str], controller: JSON, deleting: bool
) -> JSON:
    """`pods`: this NodeSet's own pods that are not terminating; `controller`: the ControllerResolved condition."""
    if deleting:
        return deleting_ready(parent)
    kept = [p for p in pods if p.name not in condemned]
    problems = unmet(controller) + _count_problems(desired, kept, condemned) + _slurm_problems(kept)
    return ready_condition(parent, problems, "NodesReady", f"{len(kept)}/{desired} pods ready and usable in Slurm")


def deleting_ready(parent: JSON) -> JSON:
    """A NodeSet being deleted is never Ready, whatever its pods do."""
    deleting = Problem("Deleting", "the NodeSet is being deleted; DeletionBlocked says what the deletion waits for")
    return ready_condition(parent, [deleting], "", "")


def _count_problems(desired: int, kept: list[ObservedPod], condemned: frozenset[str]) -> list[Problem]:
    problems = []
    if len(kept) < desired:
        message = f"{len(kept)}/{desired} desired pods exist"
        if condemned:
            message += f" ({len(condemned)} more wait to drain before deletion, see status.drainingPods)"
        problems.append(Problem("PodsMissing", message))
    not_ready = [p.name for p in kept if not p.healthy]
    if not_ready:
        ready = len(kept) - len(not_ready)
        message = f"{ready}/{desired} pods running and ready; not ready: {_listing(not_ready)}"
        problems.append(Problem("PodsNotReady", message))
    return problems


def _slurm_problems(pods: list[ObservedPod]) -> list[Problem]:
    """One problem per kind of Slurm trouble, each listing its pods (not-ready pods are named already)."""
    healthy = [p for p in pods if p.healthy]
    checks: list[tuple[str, str, Callable[[ObservedPod], str | None]]] = [
        ("SlurmNodeDown", "Slurm node DOWN", _down),
        ("SlurmNodeDrained", "drained outside the operator (undrain with scontrol once fixed)", _unexpected_drain),
        ("SlurmNodeNotUsable", "Slurm cannot start jobs", _unusable),
        ("SlurmStateUnknown", "no Slurm node state reported yet (slurm_sync running? slurmd registered?)", _unknown),
    ]
    problems = []
    for reason, what, check in checks:
        found = [f"{p.name} ({why})" if why else p.name for p in healthy if (why := check(p)) is not None]
        if found:
            problems.append(Problem(reason, f"{what}: {_listing(found)}"))
    return problems


def _down(pod: ObservedPod) -> str | None:
    if pod.slurm_base != "DOWN":
        return None
    return _state_message(pod, "DOWN")


def _unexpected_drain(pod: ObservedPod) -> str | None:
    if not pod.slurm_drain or pod.pod_cordon:
        return None
    reason = _state_message(pod, "DRAIN")
    return None if slurmstate.is_operator_reason(reason) else reason


def _unusable(pod: ObservedPod) -> str | None:
    """A base state other than usable or DOWN, or a flag that stops jobs (DOWN has its own check)."""
    base = pod.slurm_base
    if base == "DOWN":
        return None
    odd_base = [base] if base is not None and base not in USABLE_BASE_STATES else []
    words = odd_base + sorted(UNUSABLE_FLAGS & pod.slurm_states)
    return "+".join(words) or None


def _unknown(pod: ObservedPod) -> str | None:
    return "" if pod.slurm_base is None and not pod.slurm_states & UNUSABLE_FLAGS else None


def _state_message(pod: ObservedPod, state: str) -> str:
    """Slurm's reason for `state`, which slurm_sync writes as the condition's message."""
    wanted = slurmstate.condition_type(state)
    for item in (pod.obj.get("status") or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") == wanted and isinstance(item.get("message"), str):
            return item["message"]
    return ""


def _listing(items: list[str]) -> str:
    shown = ", ".join(items[:LISTED_PODS])
    return shown if len(items) <= LISTED_PODS else f"{shown} and {len(items) - LISTED_PODS} more"

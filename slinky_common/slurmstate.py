"""Slurm node-state semantics, in one place for the NodeSet hook and slurm_sync.

slurmrestd reports a node's state as a list of words: one base state (``IDLE``, ``MIXED`` ...)
plus flags (``DRAIN``, ``COMPLETING`` ...). Whether a node is busy, drained or still draining
decides when a pod may be deleted (docs/architecture.md §4), so both sides must read the words the same way.
Everything here is pure: state words in, booleans and condition dicts out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from slinky_common.names import CONDITION_SLURM_NODE_STATE_PREFIX, DRAIN_REASON_PREFIX

# A node whose state holds several base words takes the first in this order (Slinky's order).
BASE_STATES: Final = ("ALLOCATED", "DOWN", "ERROR", "FUTURE", "IDLE", "MIXED", "UNKNOWN")
# Flags mirrored as their own pod conditions, in condition order.
FLAG_STATES: Final = (
    "COMPLETING",
    "DRAIN",
    "FAIL",
    "INVALID",
    "INVALID_REG",
    "MAINTENANCE",
    "NOT_RESPONDING",
    "UNDRAIN",
)
# Running or finishing work: deleting the node's pod now would kill jobs.
BUSY_STATES: Final = frozenset({"ALLOCATED", "MIXED", "COMPLETING"})


# Power states of an elastic node (slurm_sync's report, names.ANNOTATION_POWER_OBSERVED).
POWER_UP: Final = "up"
POWER_DOWN: Final = "down"
RESUME_FAILED: Final = "resumeFailed"
POWER_PENDING: Final = "pending"  # given a job, the power-up not yet asked for: in no list of the report
# The reason Slurm gives a node it set DOWN because it was not up within ResumeTimeout.
RESUME_TIMEOUT_REASON: Final = "ResumeTimeout reached"


def power(states: Iterable[str]) -> str:
    """What Slurm's power saving wants of a node: up (powering up, or up and running), down (powering down or
    powered down), resumeFailed (powered down and DOWN: not up within ResumeTimeout, or set down by someone), or
    pending: given a job while still powered down, before Slurm asks for the power-up. A pod must start after that
    request: slurmctld takes the registration of a slurmd started before it as an unexpected reboot, sets the node
    DOWN and requeues the job (seen on the cluster lab), so a pending node gets no pod yet, and keeps any it has
    (busy evidence wins)."""
    words = normalize(states)
    if "POWERING_UP" in words:
        return POWER_UP
    if not BUSY_STATES.isdisjoint(words):
        return POWER_PENDING if "POWERED_DOWN" in words else POWER_UP
    if "POWERED_DOWN" in words and "DOWN" in words:
        return RESUME_FAILED
    if "POWERED_DOWN" in words or "POWERING_DOWN" in words:
        return POWER_DOWN
    return POWER_UP


def normalize(states: Iterable[str]) -> frozenset[str]:
    """The state words as an upper-case set (slurmrestd sends upper case; older tools do not)."""
    return frozenset(word.upper() for word in states)


def base_state(states: Iterable[str]) -> str | None:
    """The node's base state, or None when Slurm sent none we know (e.g. only ``EXTERNAL``)."""
    words = normalize(states)
    return next((state for state in BASE_STATES if state in words), None)


def is_busy(states: Iterable[str]) -> bool:
    return not BUSY_STATES.isdisjoint(normalize(states))


def is_drain(states: Iterable[str]) -> bool:
    """A drain is in force: DRAIN set and not already being lifted (UNDRAIN)."""
    words = normalize(states)
    return "DRAIN" in words and "UNDRAIN" not in words


def is_drained(states: Iterable[str]) -> bool:
    """Drain finished: no job left, so the pod may go."""
    return is_drain(states) and not is_busy(states)


def is_powered_down(states: Iterable[str]) -> bool:
    """Slurm's power saving powered the node down or is doing so, and no power-up is under way."""
    words = normalize(states)
    return not words.isdisjoint(("POWERED_DOWN", "POWERING_DOWN")) and "POWERING_UP" not in words


def is_released(states: Iterable[str]) -> bool:
    """Slurm runs no job on the node and will start none there: drained, DOWN, or powered down, nothing busy.

    A DOWN node is one whose slurmd Slurm gave up on; it has already ended or requeued that node's
    jobs, so its pod holds nothing. Without this a condemned pod on a dead node would wait forever
    for a drain that cannot finish (the DOWN reason is Slurm's, which we never override). A powered-down node
    runs nothing, and the slurmd of its pod can never run a job there again: when Slurm powers the node up, it
    waits for a slurmd started after that (docs/architecture.md §4.9).
    """
    return not is_busy(states) and (is_drain(states) or base_state(states) == "DOWN" or is_powered_down(states))


def is_draining(states: Iterable[str]) -> bool:
    """Drain requested but jobs still run: the pod must stay."""
    return is_drain(states) and is_busy(states)


def condition_type(state: str) -> str:
    """``NOT_RESPONDING`` -> ``SlurmNodeStateNotResponding``."""
    camel = "".join(part.capitalize() for part in state.upper().split("_") if part)
    return CONDITION_SLURM_NODE_STATE_PREFIX + camel


def is_state_condition(type_: str) -> bool:
    """True for condition types this module owns (so stale ones can be removed)."""
    return type_.startswith(CONDITION_SLURM_NODE_STATE_PREFIX)


def condition_types(states: Iterable[str]) -> tuple[str, ...]:
    """Condition types for a state: the base state first, then each known flag in order."""
    words = normalize(states)
    base = base_state(words)
    flags = [condition_type(flag) for flag in FLAG_STATES if flag in words]
    return ((condition_type(base),) if base else ()) + tuple(flags)


def node_conditions(states: Iterable[str], reason: str) -> list[dict[str, Any]]:
    """Pod conditions for a Slurm node: each True, message = the Slurm reason.

    No timestamps: the caller adds them when it writes, so equal input gives equal output.
    """
    return [{"type": type_, "status": "True", "message": reason} for type_ in condition_types(states)]


def is_operator_reason(reason: str) -> bool:
    """A reason we set (and so may lift); an administrator's drain is never ours."""
    return reason.startswith(DRAIN_REASON_PREFIX)

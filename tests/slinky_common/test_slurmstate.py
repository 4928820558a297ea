"""Slurm node-state semantics (slinky_common/slurmstate.py): pure functions, checked exhaustively."""

from __future__ import annotations

import itertools

import pytest

from slinky_common import slurmstate
from slinky_common.names import CONDITION_SLURM_NODE_STATE_PREFIX, DRAIN_REASON_PREFIX


@pytest.mark.parametrize(
    ("states", "busy", "drained", "draining"),
    [
        ({"IDLE"}, False, False, False),
        ({"IDLE", "DRAIN"}, False, True, False),
        ({"IDLE", "DRAIN", "UNDRAIN"}, False, False, False),
        ({"MIXED", "DRAIN"}, True, False, True),
        ({"ALLOCATED", "DRAIN"}, True, False, True),
        ({"IDLE", "COMPLETING", "DRAIN"}, True, False, True),
        ({"ALLOCATED", "DRAIN", "UNDRAIN"}, True, False, False),
        ({"DOWN", "DRAIN"}, False, True, False),
        ({"MIXED"}, True, False, False),
        ({"idle", "drain"}, False, True, False),
        (set(), False, False, False),
    ],
)
def test_drain_truth_table(states: set[str], busy: bool, drained: bool, draining: bool) -> None:
    assert slurmstate.is_busy(states) is busy
    assert slurmstate.is_drained(states) is drained
    assert slurmstate.is_draining(states) is draining


def test_drained_and_draining_partition_every_drain() -> None:
    words = ("ALLOCATED", "MIXED", "COMPLETING", "IDLE", "DOWN", "DRAIN", "UNDRAIN")
    for size in range(len(words) + 1):
        for combo in itertools.combinations(words, size):
            drain = "DRAIN" in combo and "UNDRAIN" not in combo
            # exactly one of drained/draining holds for a drain in force, neither otherwise
            assert slurmstate.is_drained(combo) + slurmstate.is_draining(combo) == int(drain), combo


@pytest.mark.parametrize(
    ("states", "base"),
    [
        ({"IDLE"}, "IDLE"),
        ({"MIXED", "ALLOCATED"}, "ALLOCATED"),
        ({"DOWN", "ALLOCATED"}, "ALLOCATED"),
        ({"IDLE", "DOWN"}, "DOWN"),
        ({"UNKNOWN", "MIXED"}, "MIXED"),
        ({"FUTURE", "IDLE"}, "FUTURE"),
        ({"EXTERNAL"}, None),
        ({"DRAIN"}, None),
    ],
)
def test_base_state_takes_first_in_order(states: set[str], base: str | None) -> None:
    assert slurmstate.base_state(states) == base


@pytest.mark.parametrize(
    ("state", "type_"),
    [
        ("IDLE", "SlurmNodeStateIdle"),
        ("NOT_RESPONDING", "SlurmNodeStateNotResponding"),
        ("INVALID_REG", "SlurmNodeStateInvalidReg"),
        ("drain", "SlurmNodeStateDrain"),
    ],
)
def test_condition_type_is_camel_case(state: str, type_: str) -> None:
    assert slurmstate.condition_type(state) == type_
    assert type_.startswith(CONDITION_SLURM_NODE_STATE_PREFIX)
    assert slurmstate.is_state_condition(type_)


def test_node_conditions_base_first_then_known_flags_in_order() -> None:
    states = {"NOT_RESPONDING", "DRAIN", "MIXED", "COMPLETING", "POWERED_DOWN"}
    conditions = slurmstate.node_conditions(states, "slurm-operator: scale-in")
    assert [c["type"] for c in conditions] == [
        "SlurmNodeStateMixed",
        "SlurmNodeStateCompleting",
        "SlurmNodeStateDrain",
        "SlurmNodeStateNotResponding",
    ]
    assert all(c["status"] == "True" and c["message"] == "slurm-operator: scale-in" for c in conditions)
    assert all(set(c) == {"type", "status", "message"} for c in conditions)  # no timestamps


def test_base_state_order_is_slinkys() -> None:
    assert slurmstate.BASE_STATES == ("ALLOCATED", "DOWN", "ERROR", "FUTURE", "IDLE", "MIXED", "UNKNOWN")


def test_every_base_state_and_flag_has_a_distinct_condition() -> None:
    types = [slurmstate.condition_type(s) for s in slurmstate.BASE_STATES + slurmstate.FLAG_STATES]
    assert len(set(types)) == len(types) == 15


def test_non_state_conditions_are_not_ours() -> None:
    assert not slurmstate.is_state_condition("Ready")
    assert not slurmstate.is_state_condition("PodScheduled")


def test_operator_reason_prefix() -> None:
    assert slurmstate.is_operator_reason(DRAIN_REASON_PREFIX + " Pod (ns/p) was cordoned")
    assert not slurmstate.is_operator_reason("maint")
    assert not slurmstate.is_operator_reason("")


@pytest.mark.parametrize(
    ("states", "released"),
    [
        (["IDLE", "DRAIN"], True),
        (["DOWN"], True),
        (["DOWN", "NOT_RESPONDING", "DRAIN"], True),
        (["DOWN", "COMPLETING"], False),
        (["ALLOCATED", "DRAIN"], False),
        (["MIXED"], False),
        (["IDLE"], False),
        (["IDLE", "DRAIN", "UNDRAIN"], False),
        # powered down: nothing runs, and the pod's slurmd can never run a job there again (§4.9)
        (["IDLE", "CLOUD", "POWERED_DOWN"], True),
        (["IDLE", "CLOUD", "POWERING_DOWN"], True),
        (["ALLOCATED", "CLOUD", "POWERED_DOWN"], False),  # given a job: busy wins
        (["IDLE", "CLOUD", "POWERING_UP"], False),
        (["IDLE", "CLOUD", "POWERED_DOWN", "POWERING_UP"], False),
    ],
)
def test_released_means_no_job_now_and_none_will_start(states, released):
    assert slurmstate.is_released(states) is released


@pytest.mark.parametrize(
    ("states", "power"),
    [
        (["IDLE"], slurmstate.POWER_UP),  # an always-on or registered node
        (["ALLOCATED", "CLOUD"], slurmstate.POWER_UP),
        (["MIXED", "CLOUD", "NOT_RESPONDING", "POWERING_UP"], slurmstate.POWER_UP),
        # given a job, the power-up not yet asked for: a slurmd started now would be an unexpected reboot
        (["ALLOCATED", "CLOUD", "POWERED_DOWN"], slurmstate.POWER_PENDING),
        (["IDLE", "CLOUD", "POWERED_DOWN"], slurmstate.POWER_DOWN),
        (["IDLE", "CLOUD", "POWERING_DOWN"], slurmstate.POWER_DOWN),
        (["DOWN", "CLOUD", "POWERED_DOWN"], slurmstate.RESUME_FAILED),
        (["down", "cloud", "powered_down"], slurmstate.RESUME_FAILED),
        (["ALLOCATED", "CLOUD", "POWERING_DOWN"], slurmstate.POWER_UP),  # busy evidence wins
        (["DOWN", "COMPLETING", "CLOUD", "POWERED_DOWN"], slurmstate.POWER_PENDING),
    ],
)
def test_power_is_what_slurms_power_saving_wants_of_the_nodes_pod(states: list[str], power: str) -> None:
    """Seen on the real Slurm 26.05 (tests/hooks/test_slurmconf_boots.py): alloc~, then alloc#, idle~, and
    DOWN+CLOUD+POWERED_DOWN after ResumeTimeout."""
    assert slurmstate.power(states) == power

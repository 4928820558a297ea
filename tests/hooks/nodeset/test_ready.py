"""The NodeSet's Ready condition (hooks/nodeset/ready.py): every desired pod exists, is ready, and Slurm can run jobs
on it (docs/architecture.md §4.3); each kind of trouble is one problem naming its pods, with Slurm's reason."""

from __future__ import annotations

from typing import Any

import pytest

from hooks.nodeset.observe import ObservedPod, observe_pod
from hooks.nodeset.ready import LISTED_PODS, deleting_ready, nodeset_ready
from slinky_common import names, slurmstate

PARENT: dict[str, Any] = {"metadata": {"name": "gpu", "namespace": "slurm", "generation": 3}}
RESOLVED = {"type": names.CONDITION_CONTROLLER_RESOLVED, "status": "True", "reason": "Found", "message": "ok"}
OPERATOR_REASON = f"{names.DRAIN_REASON_PREFIX} scale-in"


def pod(
    name: str,
    *slurm: str,
    reasons: dict[str, str] | None = None,
    phase: str = "Running",
    ready: bool = True,
    annotations: dict[str, str] | None = None,
) -> ObservedPod:
    """A worker pod with Slurm state words (IDLE, DRAIN ...); `reasons` gives a state's condition message."""
    conditions: list[dict[str, Any]] = [{"type": "Ready", "status": "True" if ready else "False"}]
    for state in slurm:
        condition = {"type": slurmstate.condition_type(state), "status": "True"}
        if state in (reasons or {}):
            condition["message"] = (reasons or {})[state]
        conditions.append(condition)
    obj = {
        "metadata": {"name": name, "namespace": "slurm", "annotations": dict(annotations or {})},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": phase, "conditions": conditions},
    }
    return observe_pod(obj, "gpu", "uid-gpu")


def ready(
    pods: list[ObservedPod],
    desired: int | None = None,
    condemned: frozenset[str] = frozenset(),
    controller: dict[str, Any] = RESOLVED,
) -> tuple[str, str, str]:
    cond = nodeset_ready(PARENT, len(pods) if desired is None else desired, pods, condemned, controller, False)
    assert cond["type"] == names.CONDITION_READY and cond["observedGeneration"] == 3
    return cond["status"], cond["reason"], cond["message"]


@pytest.mark.parametrize("states", [("IDLE",), ("MIXED",), ("ALLOCATED", "COMPLETING"), ("IDLE", "MAINTENANCE")])
def test_ready_when_every_desired_pod_is_ready_and_usable(states: tuple[str, ...]) -> None:
    observed = [pod("gpu-0", *states), pod("gpu-1", *states)]
    assert ready(observed) == ("True", "NodesReady", "2/2 pods ready and usable in Slurm")


def test_a_nodeset_being_deleted_is_never_ready() -> None:
    cond = nodeset_ready(PARENT, 1, [pod("gpu-0", "IDLE")], frozenset(), RESOLVED, True)
    assert cond == deleting_ready(PARENT)
    assert (cond["status"], cond["reason"]) == ("False", "Deleting")
    assert cond["message"] == "the NodeSet is being deleted; DeletionBlocked says what the deletion waits for"


def test_an_unresolved_controller_comes_first() -> None:
    missing = {"type": names.CONDITION_CONTROLLER_RESOLVED, "status": "False", "reason": "ControllerNotFound"}
    missing["message"] = "Controller slurm/slurm not found"
    status, reason, message = ready([], desired=1, controller=missing)
    assert (status, reason) == ("False", "ControllerNotFound")
    assert message == "ControllerResolved: Controller slurm/slurm not found; 0/1 desired pods exist"


def test_missing_pods_count_and_condemned_ones_are_named_as_waiting_to_drain() -> None:
    assert ready([pod("gpu-0", "IDLE")], desired=2) == ("False", "PodsMissing", "1/2 desired pods exist")
    observed = [pod("gpu-0", "IDLE"), pod("gpu-1", "ALLOCATED")]
    status, reason, message = ready(observed, desired=2, condemned=frozenset({"gpu-1"}))
    assert (status, reason) == ("False", "PodsMissing")
    assert message == "1/2 desired pods exist (1 more wait to drain before deletion, see status.drainingPods)"


def test_a_condemned_pod_is_neither_counted_nor_judged() -> None:
    observed = [pod("gpu-0", "IDLE"), pod("gpu-1", "DOWN", ready=False)]
    assert ready(observed, desired=1, condemned=frozenset({"gpu-1"})) == (
        "True",
        "NodesReady",
        "1/1 pods ready and usable in Slurm",
    )


@pytest.mark.parametrize("state", [{"ready": False}, {"phase": "Pending"}])
def test_a_pod_not_running_and_ready_is_named_once_not_again_for_its_slurm_state(state: dict[str, Any]) -> None:
    observed = [pod("gpu-0", "IDLE"), pod("gpu-1", "DOWN", **state)]
    assert ready(observed) == ("False", "PodsNotReady", "1/2 pods running and ready; not ready: gpu-1")


def test_a_down_node_is_named_with_slurms_reason() -> None:
    observed = [pod("gpu-0", "DOWN", "NOT_RESPONDING", reasons={"DOWN": "Not responding"}), pod("gpu-1", "DOWN")]
    assert ready(observed) == ("False", "SlurmNodeDown", "Slurm node DOWN: gpu-0 (Not responding), gpu-1")


@pytest.mark.parametrize(
    ("reason", "annotations"),
    [
        (OPERATOR_REASON, {}),
        ("admin: swapping a DIMM", {names.ANNOTATION_POD_CORDON: "true"}),
        ("nhc: GPU fell off the bus", {names.ANNOTATION_POD_CORDON_REQUESTED: "true"}),
    ],
)
def test_a_drain_we_asked_for_is_no_problem(reason: str, annotations: dict[str, str]) -> None:
    observed = [pod("gpu-0", "IDLE", "DRAIN", reasons={"DRAIN": reason}, annotations=annotations)]
    assert ready(observed)[0] == "True"


def test_any_other_drain_is_named_with_its_reason_and_one_without_a_reason_too() -> None:
    observed = [
        pod("gpu-0", "IDLE", "DRAIN", reasons={"DRAIN": "Kill task failed"}),
        pod("gpu-1", "MIXED", "DRAIN"),
        pod("gpu-2", "IDLE", "DRAIN", reasons={"DRAIN": OPERATOR_REASON}),
        pod("gpu-3", "IDLE", "DRAIN", "UNDRAIN", reasons={"DRAIN": "admin"}),
    ]
    status, reason, message = ready(observed)
    assert (status, reason) == ("False", "SlurmNodeDrained")
    assert message == "drained outside the operator (undrain with scontrol once fixed): gpu-0 (Kill task failed), gpu-1"


@pytest.mark.parametrize(
    ("states", "why"),
    [
        (("FUTURE",), "FUTURE"),
        (("ERROR",), "ERROR"),
        (("IDLE", "INVALID_REG"), "INVALID_REG"),
        (("UNKNOWN", "NOT_RESPONDING", "FAIL"), "UNKNOWN+FAIL+NOT_RESPONDING"),
        (("FAIL",), "FAIL"),
    ],
)
def test_a_state_slurm_cannot_start_jobs_in_is_named(states: tuple[str, ...], why: str) -> None:
    assert ready([pod("gpu-0", *states)]) == ("False", "SlurmNodeNotUsable", f"Slurm cannot start jobs: gpu-0 ({why})")


def test_a_down_node_with_a_failed_flag_is_named_once_as_down() -> None:
    assert ready([pod("gpu-0", "DOWN", "FAIL")]) == ("False", "SlurmNodeDown", "Slurm node DOWN: gpu-0")


@pytest.mark.parametrize("states", [(), ("MAINTENANCE",), ("DRAIN", "UNDRAIN")])
def test_no_base_state_reported_is_unknown_and_not_ready(states: tuple[str, ...]) -> None:
    assert ready([pod("gpu-0", *states)]) == (
        "False",
        "SlurmStateUnknown",
        "no Slurm node state reported yet (slurm_sync running? slurmd registered?): gpu-0",
    )


def test_every_problem_is_listed_the_first_gives_the_reason() -> None:
    observed = [
        pod("gpu-0", "IDLE", ready=False),
        pod("gpu-1", "DOWN"),
        pod("gpu-2", "IDLE", "DRAIN", reasons={"DRAIN": "admin"}),
        pod("gpu-3", "FUTURE"),
        pod("gpu-4"),
    ]
    status, reason, message = ready(observed, desired=6)
    assert (status, reason) == ("False", "PodsMissing")
    assert message.split("; ") == [
        "5/6 desired pods exist",
        "4/6 pods running and ready",
        "not ready: gpu-0",
        "Slurm node DOWN: gpu-1",
        "drained outside the operator (undrain with scontrol once fixed): gpu-2 (admin)",
        "Slurm cannot start jobs: gpu-3 (FUTURE)",
        "no Slurm node state reported yet (slurm_sync running? slurmd registered?): gpu-4",
    ]


def test_a_long_listing_names_the_first_pods_and_counts_the_rest() -> None:
    observed = [pod(f"gpu-{i}", "DOWN") for i in range(LISTED_PODS + 2)]
    shown = ", ".join(f"gpu-{i}" for i in range(LISTED_PODS))
    assert ready(observed)[2] == f"Slurm node DOWN: {shown} and 2 more"
    exactly = [pod(f"gpu-{i}", "DOWN") for i in range(LISTED_PODS)]
    assert ready(exactly)[2] == f"Slurm node DOWN: {shown}"

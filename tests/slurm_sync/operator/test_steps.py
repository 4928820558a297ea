"""What a pass hands its later steps (slurm_sync/operator/steps.py): the loop's own clients and evidence, so
that what a step learns on one pass is still there on the next, and the pass's clock."""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.steps import StepContext, Tally
from slurm_sync.slurm.errors import SlurmUnavailable
from tests.slurm_sync.kubefixtures import CLUSTER, NOW, NS, FakeSlurm, api_client


def make_loop() -> OperatorLoop:
    kube = Kube(api_client("http://127.0.0.1:9"))
    return OperatorLoop(CLUSTER, NS, CLUSTER, FakeSlurm({}), kube, Metrics(), now=lambda: NOW)  # type: ignore[arg-type]


def test_each_pass_gets_the_same_evidence_so_absence_can_be_confirmed_across_passes() -> None:
    loop = make_loop()
    first, second = loop.step_context(), loop.step_context()
    assert first.job_absence is second.job_absence is loop.job_absence
    assert first.reservation_absence is second.reservation_absence is loop.reservation_absence
    assert first.leftover_pods is second.leftover_pods is loop.leftover_pods
    assert (first.slurm, first.kube, first.events) == (loop.slurm, loop.kube, loop.events)
    assert (first.cluster, first.deletion_grace) == (CLUSTER, loop.deletion_grace)


def test_the_pass_clock_is_the_one_given_else_the_loops() -> None:
    loop = make_loop()
    assert loop.step_context().now == NOW
    assert loop.step_context("2030-01-01T00:00:00Z").now == "2030-01-01T00:00:00Z"


def test_a_steps_writes_and_failures_land_in_the_pass_tally() -> None:
    steps: StepContext = make_loop().step_context()
    tally = Tally()
    steps.kube_write(tally, "nodeset n", lambda: None)

    def refused() -> None:
        raise ApiException(status=409, reason="Conflict")

    steps.kube_write(tally, "nodeset m", refused)
    steps.slurm_error(tally, "get job 7", SlurmUnavailable("timed out"))
    assert tally.kube_writes == 1
    assert tally.errors == ["nodeset m: HTTP 409", "get job 7: timed out"] and tally.unready == ["get job 7: timed out"]

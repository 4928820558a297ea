"""A pass that reads the very objects of a pass that had nothing to do is not made (issue 28: an idle pass costs
nothing per pod), and any change on either side makes the next pass plan again (slurm_sync/operator/loop.py
``_unchanged``, ``_settled``).

The production reader (``CachedKube``: watches) on the slurm_sync bench's fake API server in a child process and
the real ``SlurmClient`` on its fake slurmrestd (bench/slurm_sync_fakes.py), a cluster of 40 nodes."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest

from bench.slurm_sync import Loop, caught_up, make_loop, settle
from bench.slurm_sync_fakes import FakeSlurmrestd, ServerProcess, layout, slurm_job, slurm_node
from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator import plan as planning
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import Tally
from slurm_sync.operator.view import ClusterView, read_nodeset
from tests.slurm_sync.kubefixtures import CLUSTER, NS, FakeSlurm, RecordedEvents, api_client, nodeset

SIZE = 40


@pytest.fixture
def rig(bench_api: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Loop, FakeSlurmrestd, list[str]]]:
    slots = layout(SIZE)
    slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in slots}, [slurm_job(s) for s in slots if s.busy])
    loop = make_loop(bench_api.url, "http://slurmrestd.slurm.svc:6820", slurmd, watched=True)
    planned: list[str] = []
    real = planning.plan_inputs

    def counted(pod: Any, *args: Any) -> Any:
        planned.append(pod.name)
        return real(pod, *args)

    monkeypatch.setattr(planning, "plan_inputs", counted)
    try:
        settle(loop)
        yield loop, slurmd, planned
    finally:
        loop.close()


def quiet_pass(loop: Loop, planned: list[str]) -> list[str]:
    """One more pass once the loop has settled: what it planned."""
    caught_up(loop)
    planned.clear()
    result = loop.run()
    assert result.ok and result.kube_writes == 0 and result.slurm_writes == 0, result
    return list(planned)


def test_a_settled_cluster_is_not_planned_again(rig: tuple[Loop, FakeSlurmrestd, list[str]]) -> None:
    loop, slurmd, planned = rig
    quiet_pass(loop, planned)  # the first pass with nothing to do establishes it
    assert quiet_pass(loop, planned) == []
    assert quiet_pass(loop, planned) == []
    assert slurmd.requests["GET /slurm/v0.0.45/nodes/"] > 0  # Slurm is still asked every pass


def test_a_slurm_change_is_planned_and_written(
    rig: tuple[Loop, FakeSlurmrestd, list[str]], bench_api: ServerProcess
) -> None:
    loop, slurmd, planned = rig
    quiet_pass(loop, planned)
    idle = next(s for s in layout(SIZE) if not s.busy)
    slurmd.admin_drain(idle.pod, "maint: a test")
    planned.clear()
    result = loop.run()
    assert idle.pod in planned and result.kube_writes >= 1
    for _ in range(3):  # its own writes come back through the watches first
        if quiet_pass(loop, planned) == []:
            break
    else:
        pytest.fail(f"not settled again after the drain: {planned}")
    pod = bench_api.get(f"/api/v1/namespaces/{NS}/pods/{idle.pod}")
    assert b"maint: a test" in pod


def test_a_kubernetes_change_is_planned_and_carried_out(
    rig: tuple[Loop, FakeSlurmrestd, list[str]], bench_api: ServerProcess
) -> None:
    loop, slurmd, planned = rig
    quiet_pass(loop, planned)
    quiet_pass(loop, planned)
    idle = [s for s in layout(SIZE) if not s.busy][1]
    body = {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}
    bench_api.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{idle.pod}", body)
    deadline = time.monotonic() + 30
    while idle.pod not in slurmd.drained_at and time.monotonic() < deadline:
        caught_up(loop)
        loop.run()
    assert idle.pod in slurmd.drained_at, "the cordon reached Slurm"


def test_what_waits_on_the_clock_or_did_something_is_never_settled() -> None:
    """A NodeSet being deleted (the grace before its pending jobs are cancelled) or elastic (Slurm's power
    decisions), a write, an error: such a pass leaves the next one to be made whatever it reads."""
    looper = OperatorLoop(
        CLUSTER, NS, CLUSTER, FakeSlurm({}), Kube(api_client("http://127.0.0.1:9")), Metrics(), events=RecordedEvents()
    )  # fmt: skip
    slurm = SlurmView(nodes={}, ping=None, jobs={}, deadlines={})
    quiet = ClusterView(namespace=NS, controller=CLUSTER, pods=(), nodesets={}, kube_nodes={}, controller_pods=())
    assert looper._settled(quiet, slurm, Tally())
    elastic = read_nodeset(nodeset())
    elastic = dataclasses.replace(elastic, on_demand_nodes={"gpu-0": 0})
    for view in (read_nodeset(nodeset(deleting=True)), elastic):
        assert not looper._settled(dataclasses.replace(quiet, nodesets={view.name: view}), slurm, Tally())
    assert not looper._settled(quiet, slurm, Tally(kube_writes=1))
    assert not looper._settled(quiet, slurm, Tally(errors=["list jobs: HTTP 500"]))

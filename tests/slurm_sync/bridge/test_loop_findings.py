"""Issue 10's bridge finding against the real Slurm 26.05 lab: a job is gone only on Slurm's own
not-found answer for it, twice; an empty answer or an empty listing is no answer. Wrong answers are
injected between the loop and the real slurmrestd (tests/slurm_sync/inject.py)."""

from __future__ import annotations

import pytest

from slinky_common import names
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.slurm.client import SlurmClient
from tests.slurm_sync.bridge.labrig import ON_N1_N2, Rig
from tests.slurm_sync.bridgekube import BNS, bridge_pod, job_body
from tests.slurm_sync.inject import Injector, answer, slurm_meta
from tests.slurm_sync.kubefixtures import api_client

pytestmark = pytest.mark.slurm


def loop_with(rig: Rig, injector: Injector, list_interval: float = 3600) -> BridgeLoop:
    client = SlurmClient(rig.lab.rest_url, lambda: rig.lab.token, timeout=5, transport=injector)
    return BridgeLoop(
        client,
        BridgeKube(Kube(api_client(rig.url))),
        Metrics(),
        [BNS],
        list_interval=list_interval,
        absence_confirm_seconds=0,
    )


def bound_running_pod(rig: Rig, loop: BridgeLoop, name: str) -> int:
    rig.kube.add("pods", bridge_pod(name, None, job_body([f"{BNS}/{name}"], **ON_N1_N2)))
    assert loop.run_pass().ok
    job_id = rig.job_id(name)
    rig.wait_running(job_id)
    assert loop.run_pass().ok and rig.kube.pod(name)["spec"]["nodeName"]
    return job_id


def deletes(rig: Rig, since: int) -> list[str]:
    return [w[1] for w in rig.kube.writes[since:] if w[0] == "DELETE"]


def not_found(job_id: int) -> dict:
    """slurmrestd's answer for a job it does not know (as measured: 404, error 2017)."""
    return {
        "errors": [
            {
                "description": f"Unable to query JobId={job_id}",
                "error_number": 2017,
                "error": "Invalid job id specified",
                "source": "_handle_job_get",
            }
        ],
        "warnings": [],
        "meta": slurm_meta("lab"),
    }


def test_an_empty_job_answer_deletes_no_running_pod(rig: Rig) -> None:
    """Finding 2: `GET job/<id>` answering `200 {"jobs": []}` read as "gone" deleted the bound pod."""
    injector = Injector()
    loop = loop_with(rig, injector)
    job_id = bound_running_pod(rig, loop, "f1")
    injector.rules.append(
        answer("GET", f"/job/{job_id}", 200, {"jobs": [], "errors": [], "warnings": [], "meta": slurm_meta("lab")})
    )
    before, slurm_before = len(rig.kube.writes), len(injector.writes())
    for _ in range(3):
        result = loop.run_pass()
        assert not result.ready and any("not proof that it is gone" in e for e in result.unready)
    assert rig.kube.writes[before:] == [] and injector.writes()[slurm_before:] == []
    assert "JobState=RUNNING" in rig.show(job_id)
    injector.rules.clear()
    assert loop.run_pass().ready and rig.kube.writes[before:] == []


def test_one_not_found_answer_is_not_enough_and_a_confirmed_one_is(rig: Rig) -> None:
    injector = Injector()
    loop = loop_with(rig, injector)
    job_id = bound_running_pod(rig, loop, "f2")
    once = answer("GET", f"/job/{job_id}", 404, not_found(job_id))
    injector.rules.append(once)
    before = len(rig.kube.writes)
    assert loop.run_pass().ready and deletes(rig, before) == []  # asked once: not yet gone
    injector.rules.clear()
    assert loop.run_pass().ready and deletes(rig, before) == []  # Slurm has it after all: evidence void
    injector.rules.append(once)
    assert loop.run_pass().ready and deletes(rig, before) == []  # a first answer again, not a second
    assert loop.run_pass().ready
    assert deletes(rig, before) == [f"/api/v1/namespaces/{BNS}/pods/f2"]  # confirmed on a later pass


def test_an_empty_job_listing_is_a_fault_not_the_end_of_every_job(rig: Rig) -> None:
    injector = Injector()
    loop = loop_with(rig, injector, list_interval=0)
    jobs = [bound_running_pod(rig, loop, name) for name in ("f3", "f4")]
    submits = injector.log.count(("POST", "/slurm/v0.0.45/job/submit"))
    empty = {
        "jobs": [],
        "last_update": {"set": True, "infinite": False, "number": 4_000_000_000},
        "errors": [],
        "warnings": [],
        "meta": slurm_meta("lab"),
    }
    injector.rules.append(answer("GET", "/jobs/", 200, empty))
    rig.kube.add("pods", bridge_pod("f5", None, job_body([f"{BNS}/f5"], **ON_N1_N2)))  # new work waits too
    before = len(rig.kube.writes)
    for _ in range(2):
        result = loop.run_pass()
        assert not result.ready and any(
            "the job listing lacks 2 of the 2 jobs it had, yet Slurm still has job" in e for e in result.unready
        )
    assert rig.kube.writes[before:] == [] and injector.log.count(("POST", "/slurm/v0.0.45/job/submit")) == submits
    assert all("JobState=RUNNING" in rig.show(j) for j in jobs)
    injector.rules.clear()
    assert loop.run_pass().ready and deletes(rig, before) == []


def test_an_orphan_job_is_cancelled_only_once_the_apiserver_says_its_pods_are_gone(rig: Rig) -> None:
    loop = loop_with(rig, Injector(), list_interval=0)
    rig.kube.add("pods", bridge_pod("o1", None, job_body([f"{BNS}/o1"], **ON_N1_N2, hold=True)))
    assert loop.run_pass().ok
    job_id = rig.job_id("o1")
    del rig.kube.pod("o1")["metadata"]["labels"][names.LABEL_BRIDGE_MANAGED]  # the pod listing lacks it; it exists
    for _ in range(2):
        loop.run_pass()
    assert "JobState=CANCELLED" not in rig.show(job_id)
    del rig.kube.objects[("pods", BNS, "o1")]  # now the apiserver answers NotFound
    assert loop.run_pass().ok
    assert "JobState=CANCELLED" in rig.show(job_id)

"""Deleting a NodeSet on the real Slurm 26.05 lab: its partition (created here as the Controller hook
would render it, State=DRAIN while deleting) holds a running job, a pending job and a job pending
there and in `debug`. slurm_sync reports the pending ones with a deadline, leaves everything alone
until it passes, then cancels the job pending only there (its comment says why), moves the other to
`debug` only, and never touches the running job. The lab is shared: the partition and the jobs
are removed in ``finally``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from tests.fixtures.slurm import SlurmLab, _load_lab, wait_for
from tests.slurm_sync.kubefixtures import NS
from tests.slurm_sync.servicerig import Rig, rig_of

pytestmark = pytest.mark.slurm


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    slurm_lab.run("scontrol", "create", "partitionname=gpu", "nodes=n4", "state=up", check=True)
    try:
        with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
            yield rig
    finally:
        lab = _load_lab()
        wait_for(
            lambda: lab.run("squeue", "-h", "-p", "gpu", "-o", "%i").stdout.strip(),
            lambda out: out == "",
            what="no job left in partition gpu",
        )
        lab.run("scontrol", "delete", "partitionname=gpu", check=True)


def sbatch(rig: Rig, *argv: str) -> str:
    out = rig.lab.run("sbatch", "-o", "/dev/null", *argv, check=True).stdout
    job = re.search(r"Submitted batch job (\d+)", out).group(1)  # type: ignore[union-attr]
    rig.jobs.append(job)
    return job


def show(rig: Rig, job: str) -> str:
    return rig.lab.run("scontrol", "show", "job", job, check=True).stdout


def report(rig: Rig) -> dict:
    return json.loads(
        rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED]
    )


def test_deleting_a_nodeset_ends_its_pending_jobs_only_after_the_grace_and_never_a_running_one(rig: Rig) -> None:
    running = sbatch(rig, "-p", "gpu", "-w", "n4", "--wrap", "sleep 300")
    only_here = sbatch(rig, "-p", "gpu", "--hold", "--wrap", "true")
    also_debug = sbatch(rig, "-p", "gpu,debug", "--hold", "--wrap", "true")
    wait_for(lambda: show(rig, running), lambda s: "JobState=RUNNING" in s, what="job running in gpu")
    rig.lab.run("scontrol", "update", "partitionname=gpu", f"state={names.PARTITION_STATE_DELETING}", check=True)
    nodeset = rig.kube.get("nodesets", NS, "gpu")
    nodeset["spec"]["partition"] = {"enabled": True}
    nodeset["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    rig.service.clusters.update([])  # the next pass rebuilds the loop with a grace of one hour
    rig.service.clusters.deletion_grace = 3600
    rig.service.run_pass()
    first = report(rig)
    assert first["pendingJobs"] == sorted([int(only_here), int(also_debug)]) and first["cancelAt"]
    assert "n4" in first["nodesLeft"] and "n3" in first["nodesLeft"]  # records stay while the pods exist
    rig.service.run_pass()
    assert report(rig) == first  # the deadline holds; nothing ended before it
    assert "JobState=PENDING" in show(rig, only_here) and "JobState=PENDING" in show(rig, also_debug)
    # the deadline passes (as time would): the report's cancelAt moves into the past
    annotations = rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"]
    annotations[names.ANNOTATION_DELETION_OBSERVED] = json.dumps({**first, "cancelAt": "2026-01-01T00:00:00Z"})
    rig.service.run_pass()
    cancelled = wait_for(
        lambda: show(rig, only_here), lambda s: "JobState=CANCELLED" in s, what="pending job cancelled"
    )
    assert "Comment=slurm-operator: partition gpu is being deleted with NodeSet" in cancelled
    # Slurm may answer EAGAIN (error 11) to the partition change while it schedules: the next pass retries
    moved = wait_for(
        lambda: (rig.service.run_pass(), show(rig, also_debug))[1],
        lambda s: re.search(r"\bPartition=debug\b", s) is not None,
        what="job left with debug only",
    )
    assert "JobState=PENDING" in moved
    assert "JobState=RUNNING" in show(rig, running)  # drain and finalize wait for it; never cancelled here
    rig.service.run_pass()
    assert report(rig)["pendingJobs"] == [] and report(rig)["cancelAt"] is None

"""A deleting NodeSet's Slurm node record on the real Slurm 26.05 lab (docs/architecture.md §4.4, step 4):
a dynamic slurmd registers (`slurmd -Z`, as a NodeSet pod's slurmd does), runs a real job, and its
record is deleted by slurm_sync only once the job has ended and the apiserver answers NotFound for its
pod: not while the pod is listed, not while only a lagging list lacks it, never while a job is
allocated there. The lab is shared: the slurmd (by its PID), the partition and the job are removed in
``finally``."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from tests.fixtures.slurm import EXEC, SlurmLab, _load_lab, wait_for
from tests.slurm_sync.kubefixtures import NS, pod
from tests.slurm_sync.servicerig import Rig, rig_of

pytestmark = pytest.mark.slurm
NODE = f"dz{os.getpid() % 100000}"
PARTITION = f"p{NODE}"
POD = ("pods", NS, "gpu-0")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    slurmd = subprocess.Popen(  # exec.sh execs: this PID is slurmd's
        [
            str(EXEC),
            "slurmd",
            "-D",
            "-Z",
            "-N",
            NODE,
            "--conf",
            f"NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} CPUs=1 RealMemory=500",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
            for name in ("gpu-n3", "gpu-n4"):  # the rig's pods on static nodes: this NodeSet has only the dynamic one
                del rig.kube.objects[("pods", NS, name)]
            rig.kube.add("pods", pod("gpu-0", NODE))
            wait_for(
                lambda: rig.lab.run("scontrol", "show", "node", NODE).stdout,
                lambda s: "State=IDLE" in s,
                what=f"dynamic node {NODE} registered idle",
            )
            rig.lab.run("scontrol", "create", f"partitionname={PARTITION}", f"nodes={NODE}", "state=up", check=True)
            yield rig
    finally:
        lab = _load_lab()
        lab.run("scontrol", "delete", f"partitionname={PARTITION}")
        slurmd.terminate()
        slurmd.wait(timeout=30)
        lab.run("scontrol", "delete", f"nodename={NODE}")


def exists(rig: Rig) -> bool:
    return f"NodeName={NODE} " in rig.lab.run("scontrol", "show", "node", NODE).stdout


def nodes_left(rig: Rig) -> list[str]:
    report = rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED]
    return json.loads(report)["nodesLeft"]


def test_a_dynamic_node_record_goes_only_after_its_job_ended_and_its_pod_is_proven_gone(rig: Rig) -> None:
    assert rig.service.run_pass()
    assert json.loads(rig.slurm_node(NODE).split("Comment=", 1)[1].splitlines()[0])["podName"] == "gpu-0"
    out = rig.lab.run(
        "sbatch", "-p", PARTITION, "-w", NODE, "-o", "/dev/null", "--wrap", "sleep 600", check=True
    ).stdout
    job = re.search(r"Submitted batch job (\d+)", out).group(1)  # type: ignore[union-attr]
    rig.jobs.append(job)
    wait_for(
        lambda: rig.lab.run("scontrol", "show", "job", job).stdout,
        lambda s: "JobState=RUNNING" in s,
        what="job running on the dynamic node",
    )
    nodeset = rig.kube.get("nodesets", NS, "gpu")
    nodeset["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"

    rig.service.run_pass()  # the pod is still listed: the record stays
    assert exists(rig) and nodes_left(rig) == [NODE]
    rig.kube.unlisted.add(POD)  # a list that lacks the pod while the apiserver still has it
    rig.service.run_pass()
    assert exists(rig) and nodes_left(rig) == [NODE]
    del rig.kube.objects[POD]  # the pod is gone (GET answers NotFound), but the job still runs there
    rig.service.run_pass()
    assert exists(rig) and nodes_left(rig) == [NODE]
    assert "JobState=RUNNING" in rig.lab.run("scontrol", "show", "job", job).stdout

    rig.lab.run("scancel", job, check=True)
    wait_for(lambda: rig.slurm_node(NODE), lambda s: "State=IDLE" in s and "COMPLETING" not in s, what=f"{NODE} idle")
    rig.service.run_pass()
    assert not exists(rig)
    rig.service.run_pass()  # nothing left: said once, confirmed by the next pass before it is reported
    rig.service.run_pass()
    assert nodes_left(rig) == []

"""A NodeSet pod replaced with new resources, on the real Slurm 26.05 lab (docs/architecture.md §4.1).

A dynamic slurmd (`slurmd -Z`, as a NodeSet pod's) registers with CPUs=4 RealMemory=500. Stopped and
started again under the same name with CPUs=2 RealMemory=800, Slurm keeps the old record (CPUTot=4
RealMemory=500, IDLE). With the drain intent the NodeSet hook publishes for such a pod
(names.DRAIN_DELETE_NODE), slurm_sync drains the node, deletes its record once drained and idle,
and marks the pod absent: the replacement slurmd then registers anew and a job sized for it runs.
The lab is shared: the slurmds (by PID), the partition and the record are removed in ``finally``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from tests.fixtures.slurm import SlurmLab, _load_lab, wait_for
from tests.slurm_sync.dynamicnode import NODE, registered_idle, start_slurmd, stop
from tests.slurm_sync.kubefixtures import NS, pod
from tests.slurm_sync.servicerig import Rig, rig_of

pytestmark = pytest.mark.slurm
PARTITION = f"p{NODE}"
REASON = "rolling update to revision abc"


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    slurmds = [start_slurmd(4, 500)]
    try:
        with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
            for name in ("gpu-n3", "gpu-n4"):  # the rig's pods on static nodes: this NodeSet has only the dynamic one
                del rig.kube.objects[("pods", NS, name)]
            rig.kube.add("pods", pod("gpu-0", NODE))
            registered_idle(rig.lab)
            rig.lab.run("scontrol", "create", f"partitionname={PARTITION}", f"nodes={NODE}", "state=up", check=True)
            rig.slurmds = slurmds  # type: ignore[attr-defined]
            yield rig
    finally:
        lab = _load_lab()
        lab.run("scontrol", "delete", f"partitionname={PARTITION}")
        for slurmd in slurmds:
            stop(slurmd)
        lab.run("scontrol", "delete", f"nodename={NODE}")


def flag_for_replacement(rig: Rig) -> None:
    """The NodeSet hook's drain intent for a pod whose replacement registers other resources."""
    item = {"name": "gpu-0", "reason": REASON, names.DRAIN_DELETE_NODE: True}
    rig.kube.get("nodesets", NS, "gpu")["status"][names.STATUS_DRAINING_PODS] = [item]


def test_a_replacement_with_new_resources_registers_them_and_runs_a_job_sized_for_them(rig: Rig) -> None:
    assert rig.service.run_pass()
    flag_for_replacement(rig)
    marked = wait_for(
        lambda: (rig.service.run_pass(), rig.annotations("gpu-0"))[1],
        lambda a: a.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true",
        timeout=60,
        interval=1,
        what=f"{NODE} drained, deleted and proven absent",
    )
    assert marked.get(names.ANNOTATION_DRAINED) != "true"
    assert f"NodeName={NODE} " not in rig.lab.run("scontrol", "show", "node", NODE).stdout

    # the hook now leaves the old pod out, it is deleted (its slurmd stops) and its replacement starts
    del rig.kube.objects[("pods", NS, "gpu-0")]
    stop(rig.slurmds[0])  # type: ignore[attr-defined]
    rig.slurmds.append(start_slurmd(2, 800))  # type: ignore[attr-defined]
    node = registered_idle(rig.lab)
    assert "CPUTot=2 " in node and "RealMemory=800 " in node, node
    assert "DRAIN" not in node, node

    rig.lab.run("scontrol", "update", f"partitionname={PARTITION}", f"nodes={NODE}", check=True)
    job = rig.lab.run(
        "srun", "-p", PARTITION, "-w", NODE, "-c", "2", "--mem=800", "-t", "1", "sh", "-c", "echo sized-ok", timeout=60
    )
    assert "sized-ok" in job.stdout, job.stdout + job.stderr


def test_without_the_delete_slurm_keeps_the_old_record(rig: Rig) -> None:
    """The premise: a slurmd started again with other resources takes over the old record."""
    stop(rig.slurmds[0])  # type: ignore[attr-defined]
    rig.slurmds.append(start_slurmd(2, 800))  # type: ignore[attr-defined]
    wait_for(
        lambda: rig.lab.run("scontrol", "show", "node", NODE).stdout,
        lambda s: "State=IDLE+DYNAMIC_NORM " in s and "NOT_RESPONDING" not in s,
        what=f"{NODE} back",
    )
    node = rig.lab.run("scontrol", "show", "node", NODE).stdout
    assert "CPUTot=4 " in node and "RealMemory=500 " in node, node


def test_a_pending_job_asking_for_the_node_by_name_keeps_its_record(rig: Rig) -> None:
    """Slurm would keep the job pending across the delete, and kill it at slurmctld's next start."""
    held = ["sbatch", "-H", "-p", PARTITION, "-w", NODE, "-o", "/dev/null", "--wrap", "true"]
    rig.jobs.append(rig.lab.run(*held, check=True).stdout.split()[-1])
    assert rig.service.run_pass()
    flag_for_replacement(rig)
    wait_for(
        lambda: (rig.service.run_pass(), rig.annotations("gpu-0"))[1],
        lambda a: a.get(names.ANNOTATION_DRAINED) == "true",
        timeout=60,
        interval=1,
        what=f"{NODE} drained",
    )
    rig.service.run_pass()
    assert f"NodeName={NODE} " in rig.lab.run("scontrol", "show", "node", NODE).stdout
    assert "JobState=PENDING" in rig.lab.run("scontrol", "show", "job", rig.jobs[-1]).stdout

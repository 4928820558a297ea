"""Scale-in keeps the pod whose job ends later (docs/architecture.md §4.3, §4.1), end to end on the
real Slurm 26.05 lab: the NodeSet hook creates two worker pods, each runs a real job with its own time
limit, slurm_sync passes against the real slurmrestd write each pod's `pod-deadline`, and the NodeSet
hook (called as the pure function it is) scaling in by one condemns the pod that frees up sooner,
although by ordinal alone it would condemn the other one.

The lab's slurmd are named n1..n4, so the two pods (`gpu-0`, `gpu-1`) get the hostnames n3 and n4,
as a NodeSet whose nodes are named so would; the lab is shared, so the jobs are cancelled in
``finally``."""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from hooks.contract import parse_composite
from hooks.nodeset import hook as nodeset_hook
from slinky_common import names
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.hooks.nodeset.builders import nodeset, observed, request
from tests.slurm_sync.kubefixtures import NS
from tests.slurm_sync.servicerig import Rig, rig_of

pytestmark = pytest.mark.slurm
DEADLINE = names.ANNOTATION_POD_DEADLINE
HOSTS = {"gpu-0": "n3", "gpu-1": "n4"}


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    with rig_of(slurm_lab, httpserver, *HOSTS.values()) as rig:
        for name in ("gpu-n3", "gpu-n4"):  # the rig's own pods: replaced by the hook's
            del rig.kube.objects[("pods", NS, name)]
        yield rig


def hook_sync(replicas: int, pods: list[dict], status: dict | None = None) -> dict:
    """hooks.nodeset.hook.sync on a NodeSet `gpu` (controller `slurm`) with these observed pods."""
    return nodeset_hook.sync(parse_composite(request(nodeset(status, replicas=replicas), pods=pods), "NodeSet"))


def hook_pods() -> list[dict]:
    """The pods the hook creates for two replicas, as Metacontroller and the kubelet show them (Running,
    Ready, on Node k1), on the lab's slurmd names."""
    created = [c for c in hook_sync(2, [])["children"] if c["kind"] == "Pod"]
    pods = []
    for child in created:
        pod = observed(child, node_name="k1", slurm=())
        host = HOSTS[pod["metadata"]["name"]]
        pod["metadata"]["labels"][names.LABEL_NODESET_POD_HOSTNAME] = host
        pod["spec"]["hostname"] = host
        pods.append(pod)
    return pods


def sbatch(rig: Rig, node: str, minutes: int) -> int:
    out = rig.lab.run(
        "sbatch", "-w", node, "-t", str(minutes), "-o", "/dev/null", "--wrap", "sleep 600", check=True
    ).stdout
    job = re.search(r"Submitted batch job (\d+)", out).group(1)  # type: ignore[union-attr]
    rig.jobs.append(job)
    return int(job)


def slurm_end(rig: Rig, job_id: int) -> str:
    """The job's end time as slurmrestd reports it, in the annotation's form."""
    with SlurmClient(rig.lab.rest_url, lambda: rig.lab.token) as client:
        end = client.get_job(job_id).end_time
    assert end
    return datetime.datetime.fromtimestamp(end, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condemned(replicas: int, pods: list[dict]) -> set[str]:
    return {d["name"] for d in hook_sync(replicas, pods)["status"][names.STATUS_DRAINING_PODS]}


def test_scale_in_condemns_the_pod_whose_job_ends_sooner(rig: Rig) -> None:
    for pod in hook_pods():
        rig.kube.add("pods", pod)
    sooner = sbatch(rig, "n3", 10)  # gpu-0
    later = sbatch(rig, "n4", 30)  # gpu-1
    for node in HOSTS.values():
        wait_for(
            lambda n=node: rig.slurm_node(n),
            lambda s: "State=ALLOCATED" in s or "State=MIXED" in s,
            what=f"job on {node}",
        )
    assert rig.service.run_pass()
    assert rig.annotations("gpu-0")[DEADLINE] == slurm_end(rig, sooner)
    assert rig.annotations("gpu-1")[DEADLINE] == slurm_end(rig, later)
    assert rig.annotations("gpu-0")[DEADLINE] < rig.annotations("gpu-1")[DEADLINE]
    # written only on change: the next pass writes nothing
    before = len(rig.kube.writes)
    assert rig.service.run_pass()
    assert rig.kube.writes[before:] == []

    pods = [copy.deepcopy(rig.pod(name)) for name in HOSTS]
    states = [set(rig.conditions(name)) for name in HOSTS]
    assert states[0] == states[1] and states[0] & {"SlurmNodeStateAllocated", "SlurmNodeStateMixed"}  # both busy alike
    assert condemned(1, pods) == {"gpu-0"}  # the deadline decides: gpu-1's job runs 20 minutes longer
    for pod in pods:  # the same pods without deadlines: the higher ordinal goes, as Slinky orders them
        del pod["metadata"]["annotations"][DEADLINE]
    assert condemned(1, pods) == {"gpu-1"}

    # the jobs end: Slurm says the nodes run nothing, the deadlines go
    rig.lab.run("scancel", str(sooner), str(later), check=True)
    for node in HOSTS.values():
        wait_for(
            lambda n=node: rig.slurm_node(n), lambda s: "State=IDLE" in s and "COMPLETING" not in s, what=f"{node} idle"
        )
    assert rig.service.run_pass()
    assert DEADLINE not in rig.annotations("gpu-0") and DEADLINE not in rig.annotations("gpu-1")

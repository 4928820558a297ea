"""The bridge loop on the real Slurm lab with a fake API server: the rig, its events, and cancelling the jobs it
submitted."""

from __future__ import annotations

from dataclasses import dataclass

from slinky_common import names
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.slurm_sync.bridgekube import BNS, BridgeFake
from tests.slurm_sync.kubefixtures import api_client

ON_N1_N2 = {"constraints": "n1|n2"}


@dataclass
class Rig:
    lab: SlurmLab
    kube: BridgeFake
    url: str
    requests: list[str]

    def loop(self, slurm_url: str | None = None, token: str | None = None) -> BridgeLoop:
        client = SlurmClient(slurm_url or self.lab.rest_url, lambda: token or self.lab.token, timeout=5)
        client._http.event_hooks["request"].append(lambda r: self.requests.append(f"{r.method} {r.url.path}"))
        kube = BridgeKube(Kube(api_client(self.url)))
        return BridgeLoop(client, kube, Metrics(), [BNS], list_interval=3600)

    def job_id(self, pod: str) -> int:
        return int(self.kube.pod(pod)["metadata"]["labels"][names.LABEL_SLURM_JOB_ID])

    def show(self, job_id: int) -> str:
        return self.lab.run("scontrol", "show", "job", str(job_id), check=True).stdout

    def wait_running(self, job_id: int) -> str:
        return wait_for(lambda: self.show(job_id), lambda s: "JobState=RUNNING" in s, what=f"job {job_id} running")


def cancel_ours(lab: SlurmLab) -> None:
    """scancel every job whose admin_comment names a pod of the test namespace."""
    for job_id in lab.run("squeue", "-h", "-o", "%i", check=True).stdout.split():
        if f'"{BNS}/' in lab.run("scontrol", "show", "job", job_id).stdout:
            lab.run("scancel", job_id)


def events(rig: Rig, since: int = 0) -> list[tuple[str, str, str, str]]:
    """(type, reason, pod, note) of the Events posted."""
    return [
        (w[3]["type"], w[3]["reason"], w[3]["regarding"]["name"], w[3]["note"])
        for w in rig.kube.writes[since:]
        if w[1].startswith("/apis/events.k8s.io/")
    ]


def add(rig: Rig, *pods: dict) -> None:
    for pod in pods:
        rig.kube.add("pods", pod)

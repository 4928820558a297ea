"""The whole slurm_sync service on the real Slurm lab with a small stateful Kubernetes fake (pytest-httpserver): the
rig, and putting the lab's nodes back as they were."""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from pytest_httpserver import HTTPServer

from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, _load_lab, wait_for
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_pod, kube_node, nodeset, pod

OUR_REASON = "slurm-operator: scale-in to 1 replicas"


@dataclass
class Rig:
    lab: SlurmLab
    kube: FakeKube
    service: Service
    metrics: Metrics
    jobs: list[str] = field(default_factory=list)  # submitted by the test: cancelled at the end (rig_of)

    def pod(self, name: str) -> dict:
        return self.kube.get("pods", NS, name)

    def annotations(self, name: str) -> dict[str, str]:
        return self.pod(name)["metadata"].get("annotations") or {}

    def conditions(self, name: str) -> dict[str, str]:
        return {
            c["type"]: c.get("message", "")
            for c in self.pod(name)["status"]["conditions"]
            if c["type"].startswith("SlurmNodeState")
        }

    def set_intents(self, intents: dict[str, str]) -> None:
        self.kube.get("nodesets", NS, "gpu")["status"] = nodeset(intents)["status"]

    def object_writes(self, since: int = 0) -> list[tuple[str, str, str, dict]]:
        """The writes to objects (events aside: they are checked on their own)."""
        return [w for w in self.kube.writes[since:] if not is_event(w)]

    def events(self, since: int = 0) -> list[tuple[str, str, str, str, str]]:
        """(type, reason, regarding kind, regarding name, note) of each event posted."""
        return [
            (b["type"], b["reason"], b["regarding"]["kind"], b["regarding"]["name"], b["note"])
            for w in self.kube.writes[since:]
            if is_event(w)
            for b in [w[3]]
        ]

    def slurm_node(self, name: str) -> str:
        return self.lab.run("scontrol", "show", "node", name, check=True).stdout

    def set_key(self, key: bytes, version: str) -> None:
        secret = self.kube.get("secrets", NS, "slurm-jwt")
        secret["data"]["jwt.key"] = base64.b64encode(key).decode()
        secret["metadata"]["resourceVersion"] = version


def is_event(write: tuple[str, str, str, dict]) -> bool:
    return write[0] == "POST" and write[1].startswith("/apis/events.k8s.io/")


def restore(lab: SlurmLab, *nodes: str) -> None:
    """Resume and uncomment ``nodes``, and wait out the NOT_RESPONDING Slurm briefly shows after a
    resume, so the next test starts from settled nodes."""
    for node in nodes:
        lab.run("scontrol", "update", f"nodename={node}", "state=resume")
        lab.run("scontrol", "update", f"nodename={node}", "comment=")
    for node in nodes:

        def show(n: str = node) -> str:
            return lab.run("scontrol", "show", "node", n).stdout

        wait_for(
            show,
            lambda s: "NOT_RESPONDING" not in s,
            what=f"{node} responding after resume",
        )


def build_rig(lab: SlurmLab, server: HTTPServer) -> Rig:
    with SlurmClient(lab.rest_url, lambda: lab.token) as client:
        ctld_host = client.ping().controllers[0].hostname
        cluster_name = client.cluster
    kube = FakeKube()
    kube.add(
        "controllers",
        {
            "metadata": {"name": "slurm", "namespace": NS, "uid": "uid-controller-slurm"},
            "spec": {"clusterName": cluster_name, "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"}},
        },
    )
    kube.add(
        "restapis",
        {
            "metadata": {"name": "slurm", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"controllerRef": {"name": "slurm"}},
        },
    )
    kube.add("secrets", {"metadata": {"name": "slurm-jwt", "namespace": NS}, "data": {"jwt.key": ""}})
    kube.add("nodesets", nodeset())
    kube.add("nodes", kube_node())
    kube.add("pods", pod("gpu-n3", "n3"))
    kube.add("pods", pod("gpu-n4", "n4"))
    kube.add("pods", controller_pod(ctld_host))
    kube.install(server)
    metrics = Metrics()
    config = Config(
        namespaces=(NS,),
        slurm_url=lab.rest_url,
        token_user="slurm",
        slurm_timeout=5,
        poll_interval=0.5,
        absence_confirm_seconds=0,
    )
    rig = Rig(
        lab, kube, Service(config, Kube(api_client(server.url_for("/")), metrics.count_kube_write), metrics), metrics
    )
    rig.set_key(lab.jwt_key_file.read_bytes(), "1")
    return rig


@contextlib.contextmanager
def rig_of(lab: SlurmLab, server: HTTPServer, *nodes: str) -> Iterator[Rig]:
    """A rig whose jobs (``rig.jobs``) are cancelled and whose ``nodes`` are restored at the end."""
    rig = build_rig(lab, server)
    try:
        yield rig
    finally:
        rig.service.close()
        lab = _load_lab()
        if rig.jobs:
            lab.run("scancel", *rig.jobs)
        restore(lab, *nodes)


def sbatch(lab: SlurmLab, node: str) -> int:
    done = lab.run("sbatch", "-w", node, "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300", check=True)
    return int(re.search(r"Submitted batch job (\d+)", done.stdout).group(1))  # type: ignore[union-attr]

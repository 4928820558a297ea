"""Two slurm_sync replicas (real processes, `python -m slurm_sync`) against the real API server and the
real Slurm lab (docs/architecture.md §8): exactly one writes; killing the leader with SIGKILL hands
over within the lease duration, and a drain asked for during the handover is carried out exactly once,
by the new leader; a graceful stop releases the Lease.

Who wrote what is counted per replica from its own /metrics and its own log, and from the Events'
reportingInstance (each process runs under its own HOSTNAME). The Slurm nodes n3 and n4 are drained
and restored at the end, as tests/slurm_sync/test_service_operator.py does.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from slinky_common import names
from slurm_sync.leader import LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD
from slurm_sync.slurm.client import SlurmClient
from tests.crds.cases import example
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.kube.kubeapi import create_cr
from tests.kube.plugin import KubeLab
from tests.slurm_sync.servicerig import restore

pytestmark = [pytest.mark.kube, pytest.mark.slurm]
REPO = Path(__file__).resolve().parents[2]
LEASE = "slurm-sync-ha"
# The protocol's own bound for a takeover after the leader's last renew: the lease duration, plus one
# retry period before the standby notices the last renew and one before its next try, plus one Lease
# request (leader.py: at most half the renew deadline).
HANDOVER_BOUND = LEASE_DURATION + 2 * RETRY_PERIOD + RENEW_DEADLINE / 2
Obj = dict[str, Any]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class SyncProcess:
    """One `python -m slurm_sync` with its own HOSTNAME, port and log file."""

    name: str
    port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10)

    def readyz(self) -> tuple[int, str]:
        try:
            response = self.get("/readyz")
        except httpx.HTTPError as exc:
            return 0, f"unreachable: {exc}"
        return response.status_code, response.text.strip()

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels`` (0 when none)."""
        total = 0.0
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name == name and labels.items() <= sample.labels.items():
                    total += sample.value
        return total

    def writes(self) -> float:
        return self.metric("slurm_sync_kube_writes_total") + self.metric("slurm_sync_slurm_writes_total")

    def messages(self) -> list[str]:
        lines = [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]
        return [str(line.get("message", "")) for line in lines]

    def drains_of(self, node: str) -> list[str]:
        """The drain updates this replica sent to Slurm for ``node`` (operator/loop.py logs each)."""
        return [m for m in self.messages() if f": node {node}: DRAIN " in m]


@dataclass
class Scene:
    lab: SlurmLab
    api: client.ApiClient
    namespace: str
    kubeconfig: Path
    tmp: Path
    replicas: list[SyncProcess] = field(default_factory=list)

    def start(self, name: str) -> SyncProcess:
        replica = SyncProcess(name, free_port(), self.tmp / f"{name}.log")
        args = [
            *(sys.executable, "-m", "slurm_sync", "--kubeconfig", str(self.kubeconfig)),
            *("--namespace", self.namespace, "--slurm-url", self.lab.rest_url, "--poll-interval", "0.5"),
            *("--absence-confirm-seconds", "0", "--bind", f"127.0.0.1:{replica.port}"),
            *("--lease-namespace", self.namespace, "--lease-name", LEASE),
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.tmp), "HOSTNAME": name}
        with replica.log.open("wb") as out:
            replica.process = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        self.replicas.append(replica)
        return replica

    def lease_holder(self) -> str:
        response = client.CoordinationV1Api(self.api).read_namespaced_lease(
            LEASE, self.namespace, _preload_content=False
        )
        return str(json.loads(response.data)["spec"].get("holderIdentity") or "")

    def cordon(self, pod: str) -> None:
        body = {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}
        client.CoreV1Api(self.api).patch_namespaced_pod(pod, self.namespace, body)

    def slurm_node(self, node: str) -> str:
        return self.lab.run("scontrol", "show", "node", node, check=True).stdout

    def draining_events(self, pod: str) -> list[str]:
        """The reportingInstance of each SlurmNodeDraining Event about ``pod``."""
        events = client.EventsV1Api(self.api).list_namespaced_event(self.namespace)
        return [
            e.reporting_instance
            for e in events.items
            if e.reason == "SlurmNodeDraining" and e.regarding is not None and e.regarding.name == pod
        ]


def worker_pod(name: str, node: str, kube_node: str) -> Obj:
    """A worker pod of the cluster `slurm` for Slurm node ``node``. No NodeSet owns it: the lab's
    garbage collector may not know a just-installed CRD's kind yet and would collect the pod."""
    labels = {names.LABEL_CLUSTER: "slurm", names.LABEL_NODESET_POD_HOSTNAME: node}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"hostname": node, "nodeName": kube_node, "containers": [{"name": "slurmd", "image": "slurmd:1"}]},
    }


def make_cluster(api: client.ApiClient, namespace: str, lab: SlurmLab) -> str:
    """A Controller whose Slurm is the lab, its RestApi, running worker pods for the lab's n3 and n4
    on one Kubernetes Node, and the slurmctld pod; the Node's name."""
    with SlurmClient(lab.rest_url, lambda: lab.token) as slurm:
        ctld_host = slurm.ping().controllers[0].hostname
        cluster_name = slurm.cluster
    core = client.CoreV1Api(api)
    key = base64.b64encode(lab.jwt_key_file.read_bytes()).decode()
    core.create_namespaced_secret(namespace, {"metadata": {"name": "slurm-jwt"}, "data": {"jwt.key": key}})
    controller = example("Controller")
    controller["metadata"] = {"name": "slurm", "namespace": namespace}
    controller["spec"].update(clusterName=cluster_name, jwtKeyRef={"name": "slurm-jwt", "key": "jwt.key"})
    create_cr(api, controller, namespace)
    restapi = example("RestApi")
    restapi["metadata"] = {"name": "slurm", "namespace": namespace}
    create_cr(api, restapi, namespace)
    kube_node = f"k-{namespace}"
    core.create_node({"metadata": {"name": kube_node}})
    ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    for node in ("n3", "n4"):
        core.create_namespaced_pod(namespace, worker_pod(f"gpu-{node}", node, kube_node))
        core.patch_namespaced_pod_status(f"gpu-{node}", namespace, ready)
    ctld_labels = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: "slurm"}
    ctld = {
        "metadata": {"name": ctld_host, "labels": ctld_labels},
        "spec": {"hostname": ctld_host, "containers": [{"name": "slurmctld", "image": "slurmctld:1"}]},
    }
    core.create_namespaced_pod(namespace, ctld)
    return kube_node


@pytest.fixture
def scene(
    kube_lab: KubeLab, kube_api: client.ApiClient, installed_crds: list[str], kube_namespace: str, slurm_lab: SlurmLab,
    tmp_path: Path,
) -> Iterator[Scene]:  # fmt: skip
    kube_node = make_cluster(kube_api, kube_namespace, slurm_lab)
    scene = Scene(slurm_lab, kube_api, kube_namespace, kube_lab.kubeconfig, tmp_path)
    try:
        yield scene
    finally:
        for replica in scene.replicas:
            if replica.process is not None and replica.process.poll() is None:
                replica.process.kill()
                replica.process.wait()
        client.CoreV1Api(kube_api).delete_node(kube_node)
        restore(slurm_lab, "n3", "n4")


def roles(replicas: list[SyncProcess]) -> list[tuple[int, str]]:
    return [replica.readyz() for replica in replicas]


def test_two_replicas_one_writes_and_a_killed_leader_hands_over_without_losing_a_drain(scene: Scene) -> None:
    pair = [scene.start("ha-a"), scene.start("ha-b")]
    settled = wait_for(
        lambda: roles(pair),
        lambda r: (
            sorted(text.split(" ")[0] for code, text in r if code == 200) == ["leader", "standby"]
            and any(text.endswith(": ok") for _, text in r)
        ),
        what="one leader (ready, its pass ok) and one standby",
    )
    leader, standby = (pair[0], pair[1]) if settled[0][1].startswith("leader") else (pair[1], pair[0])
    leader_identity = scene.lease_holder()
    assert leader_identity.startswith(leader.name + "_")
    assert f"{leader_identity} leads (lease {scene.namespace}/{LEASE})" in standby.readyz()[1]
    assert (leader.metric("slurm_sync_leader"), standby.metric("slurm_sync_leader")) == (1, 0)

    scene.cordon("gpu-n3")
    wait_for(lambda: scene.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 drained by the leader")
    assert f"Reason=slurm-operator: Pod ({scene.namespace}/gpu-n3) was cordoned" in scene.slurm_node("n3")
    passes = leader.metric("slurm_sync_poll_seconds_count")
    wait_for(lambda: leader.metric("slurm_sync_poll_seconds_count"), lambda n: n >= passes + 3, what="3 more passes")
    assert leader.writes() > 0 and standby.writes() == 0, "exactly one replica writes"
    assert standby.metric("slurm_sync_poll_seconds_count") == 0, "a standby runs no pass"
    assert len(leader.drains_of("n3")) == 1

    assert leader.process is not None
    leader.process.send_signal(signal.SIGKILL)  # no release: the standby must wait the lease out
    killed_at = time.monotonic()
    leader.process.wait()
    scene.cordon("gpu-n4")  # asked for while nobody leads
    wait_for(
        lambda: standby.readyz(),
        lambda r: r[1].startswith("leader "),
        timeout=HANDOVER_BOUND,
        interval=0.1,
        what=f"the standby to lead within the lease duration ({HANDOVER_BOUND:g} s bound)",
    )
    handover = time.monotonic() - killed_at
    assert scene.lease_holder().startswith(standby.name + "_")
    wait_for(lambda: scene.slurm_node("n4"), lambda s: "DRAIN" in s, what="n4 drained by the new leader")
    assert f"Reason=slurm-operator: Pod ({scene.namespace}/gpu-n4) was cordoned" in scene.slurm_node("n4")
    passes = standby.metric("slurm_sync_poll_seconds_count")
    wait_for(lambda: standby.metric("slurm_sync_poll_seconds_count"), lambda n: n >= passes + 3, what="3 more passes")

    assert (leader.drains_of("n4"), len(standby.drains_of("n4"))) == ([], 1), "n4 drained once, by the new leader"
    assert standby.drains_of("n3") == [], "the new leader does not drain again what Slurm shows drained"
    assert standby.metric("slurm_sync_slurm_writes_total", action="DRAIN") == 1
    assert scene.draining_events("gpu-n3") == [leader.name]
    assert scene.draining_events("gpu-n4") == [standby.name]
    assert standby.readyz() == (200, f"leader {scene.lease_holder()}: ok")
    assert standby.metric("slurm_sync_leader") == 1
    print(f"handover after SIGKILL: {handover:.1f} s (lease duration {LEASE_DURATION:g} s)")

    assert standby.process is not None
    standby.process.send_signal(signal.SIGTERM)
    assert standby.process.wait(timeout=60) == 0
    assert scene.lease_holder() == "", "a graceful stop releases the Lease"
    assert any("released by" in m for m in standby.messages())

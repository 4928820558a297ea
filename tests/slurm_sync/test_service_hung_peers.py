"""A hung peer against the real API server and the real Slurm (docs/architecture.md §4.2, issue 22).

The service runs as in production (``run_forever``, the default 10 s poll interval, its Kubernetes reads
served by watches), through tests/kube/apiproxy.py in front of the lab's API server.

* Two clusters, each with a slurmrestd of its own: the lab's, and a second one started beside it on a
  free port (the shared lab's daemons are never stopped). With the second one stopped (SIGSTOP),
  ``/readyz`` turns 503 within 15 s naming that cluster and the call it waits on, and a pod-cordon of the
  healthy cluster still reaches Slurm as a DRAIN within 2 s. When it answers again, ``/readyz`` is 200.
* The API server stops answering (the proxy holds every request and watch event, as SIGSTOP does):
  ``/readyz`` turns 503 within 15 s naming the Kubernetes call that hangs, and a pod-cordon made
  meanwhile is carried out exactly once when it answers again (one DRAIN, one drained mark).
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from slinky_common import names
from slurm_sync.cache import CachedKube, KubeCache
from slurm_sync.metrics import Metrics
from slurm_sync.operator import discovery
from slurm_sync.service import Config, Service, health_server
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.types import NodeUpdate
from slurm_sync.wake import Wakeup
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.fixtures.slurmrestd import lab_slurmrestd, spawn_slurmrestd
from tests.kube.apiproxy import ApiProxy
from tests.kube.kubeapi import create_cr
from tests.slurm_sync.apiserverrig import cluster_objects, restore, worker_pod

READY_BOUND = 15.0  # seconds from a peer's stop to a 503 (the done-when)
DRAIN_BOUND = 2.0  # seconds from a healthy cluster's pod-cordon to its DRAIN while another cluster hangs
HUNG, HEALTHY = "alpha", "beta"  # the hung cluster sorts first: one pass after another would wait on it
PODS = {HUNG: ("alpha-n4", "n4"), HEALTHY: ("beta-n3", "n3")}


@dataclass
class Rig:
    lab: SlurmLab
    core: client.CoreV1Api  # the administrator's, straight to the API server
    namespace: str
    proxy: ApiProxy
    service: Service
    readyz: str
    updates: list[tuple[str, NodeUpdate]] = field(default_factory=list)  # Slurm node updates slurm_sync sent

    def ready(self) -> tuple[int, str]:
        answer = httpx.get(self.readyz, timeout=5)
        return answer.status_code, answer.text

    def cordon(self, pod: str) -> None:
        body = {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}
        self.core.patch_namespaced_pod(pod, self.namespace, body)

    def drained(self, node: str) -> bool:
        return "DRAIN" in self.lab.run("scontrol", "show", "node", node, check=True).stdout.split("State=", 1)[1]

    def reason(self, pod: str) -> str:
        return f"{names.DRAIN_REASON_PREFIX} Pod ({self.namespace}/{pod}) was cordoned"

    def until(self, want: int, what: str, timeout: float) -> tuple[float, str]:
        """Seconds until /readyz answers ``want``, and its text."""
        started = time.monotonic()
        _, text = wait_for(self.ready, lambda r: r[0] == want, timeout=timeout, interval=0.1, what=what)
        return time.monotonic() - started, text


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def second_slurmrestd(slurm_lab: SlurmLab, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A slurmrestd of our own beside the lab's (same chroot, user, key, slurmctld): its URL and PID."""
    _, daemon = lab_slurmrestd(slurm_lab)
    url = f"http://127.0.0.1:{free_port()}"
    daemon.argv[-1] = url.removeprefix("http://")  # slurmrestd's last argument: where it listens
    with open(tmp_path / "slurmrestd.out", "wb") as out:
        child = spawn_slurmrestd(slurm_lab, daemon, out)
    try:
        wait_for(lambda: _answers(url, slurm_lab), bool, timeout=60, what="the second slurmrestd serving")
        yield url, child.pid
    finally:
        os.kill(child.pid, signal.SIGCONT)
        os.kill(child.pid, signal.SIGKILL)
        child.wait(30)


def _answers(url: str, lab: SlurmLab) -> bool:
    try:
        return httpx.get(url + lab.path("ping"), headers=lab.headers, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.fixture
def rig(
    slurm_lab: SlurmLab, kube_api: client.ApiClient, kube_namespace: str, installed_crds: list[str],
    second_slurmrestd: tuple[str, int], monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Rig]:  # fmt: skip
    """Two clusters in one namespace: ``alpha`` served by the second slurmrestd, ``beta`` by the lab's."""
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token) as slurm:
        slurm.ping()
        cluster_name = str(slurm.cluster)
    core = client.CoreV1Api(kube_api)
    key = base64.b64encode(slurm_lab.jwt_key_file.read_bytes()).decode()
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "slurm-jwt"}, "data": {"jwt.key": key}})
    for controller, (pod, node) in PODS.items():
        for obj in cluster_objects(kube_namespace, controller, cluster_name):
            create_cr(kube_api, obj, kube_namespace)
        core.create_namespaced_pod(kube_namespace, worker_pod(pod, node, controller))
    urls = {HUNG: second_slurmrestd[0], HEALTHY: slurm_lab.rest_url}
    monkeypatch.setattr(discovery, "restapi_url", lambda restapi, namespace: urls[restapi])
    updates: list[tuple[str, NodeUpdate]] = []
    update_node = SlurmClient.update_node

    def recorded(self: SlurmClient, name: str, update: NodeUpdate) -> None:
        update_node(self, name, update)
        updates.append((name, update))

    monkeypatch.setattr(SlurmClient, "update_node", recorded)
    proxy = ApiProxy(kube_api.configuration)
    metrics, wakeup, stop = Metrics(), Wakeup(), threading.Event()
    kube = CachedKube(proxy.api_client(), metrics.count_kube_write, cache=KubeCache(wakeup.set))
    service = Service(Config(namespaces=(kube_namespace,), token_user="slurm"), kube, metrics, wakeup=wakeup)
    server = health_server("127.0.0.1:0", service.health, metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    readyz = f"http://127.0.0.1:{server.server_address[1]}/readyz"
    rig = Rig(slurm_lab, core, kube_namespace, proxy, service, readyz, updates)
    thread = threading.Thread(target=service.run_forever, args=(stop,), name="slurm-sync")
    thread.start()
    try:
        rig.until(200, "slurm_sync ready", timeout=60)
        yield rig
    finally:
        stop.set()
        os.kill(second_slurmrestd[1], signal.SIGCONT)  # the hung cluster's pass ends, and so the service
        thread.join(120)
        server.shutdown()
        server.server_close()
        service.close()
        kube.cache.close()
        proxy.close()
        restore(slurm_lab, *(node for _, node in PODS.values()))


def test_a_stopped_slurmrestd_is_named_within_15_s_and_delays_no_other_cluster(
    rig: Rig, second_slurmrestd: tuple[str, int]
) -> None:
    os.kill(second_slurmrestd[1], signal.SIGSTOP)
    stopped = time.monotonic()
    pod, node = PODS[HEALTHY]
    rig.cordon(pod)  # the change wakes every cluster's pass: the hung one's first call hangs at once
    wait_for(lambda: rig.drained(node), bool, timeout=30, interval=0.05, what=f"{node} drained")
    drained = time.monotonic() - stopped
    _, why = rig.until(503, "unready naming the hung cluster", timeout=60)
    unready = time.monotonic() - stopped
    print(f"healthy cluster's DRAIN {drained:.2f} s after the cordon; /readyz 503 {unready:.1f} s after SIGSTOP")
    assert drained <= DRAIN_BOUND, f"the healthy cluster's drain took {drained:.1f} s"
    assert unready <= READY_BOUND, f"/readyz turned 503 only {unready:.1f} s after slurmrestd stopped"
    assert f"{rig.namespace}/{HUNG}: GET /slurm/" in why and "in flight for" in why, why
    assert f"{rig.namespace}/{HEALTHY}" not in why, why
    assert rig.updates == [(node, NodeUpdate(state=("DRAIN",), reason=rig.reason(pod)))]  # and nothing on n4
    os.kill(second_slurmrestd[1], signal.SIGCONT)
    rig.until(200, "ready again once the slurmrestd answers", timeout=120)
    assert not rig.drained(PODS[HUNG][1])


def test_a_stopped_api_server_is_named_within_15_s_and_the_change_missed_is_carried_out_once(rig: Rig) -> None:
    pod, node = PODS[HEALTHY]
    seen = len(rig.proxy.seen)
    with rig.proxy.stalled():
        stopped = time.monotonic()
        rig.cordon(pod)  # straight to the API server: slurm_sync learns of it only once its server answers
        _, why = rig.until(503, "unready naming the Kubernetes call", timeout=60)
        unready = time.monotonic() - stopped
        print(f"/readyz 503 {unready:.1f} s after the API server stopped answering: {why.strip()}")
        assert unready <= READY_BOUND, f"/readyz turned 503 only {unready:.1f} s after the API server stopped"
        assert "kubernetes: GET /api" in why and "in flight for" in why, why
        assert rig.updates == [] and not rig.drained(node)
    wait_for(lambda: rig.drained(node), bool, timeout=120, what=f"{node} drained once the API server answers")
    wait_for(
        lambda: rig.core.read_namespaced_pod(pod, rig.namespace).metadata.annotations or {},
        lambda annotations: annotations.get(names.ANNOTATION_DRAINED) == "true",
        timeout=60,
        what=f"{pod} marked drained",
    )
    rig.until(200, "ready again", timeout=120)
    marks = [s for s in rig.proxy.seen[seen:] if s.method == "PATCH" and s.path.endswith(f"/pods/{pod}")]
    assert rig.updates == [(node, NodeUpdate(state=("DRAIN",), reason=rig.reason(pod)))]  # one DRAIN
    assert len(marks) == 1, f"the drained mark was written {len(marks)} times"

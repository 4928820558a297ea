"""slurm_sync watching the real API server and driving the real Slurm (docs/architecture.md §4.8).

The service runs as in production (``run_forever``, a 10 s poll interval) with its Kubernetes reads
served by watches through tests/kube/apiproxy.py, which forwards everything to the lab's API server
and injects the watch failures a test asks for. Slurm is the lab's slurmrestd.

* A pod annotated ``pod-cordon=true`` has its Slurm node drained by a pass the change itself started,
  before the poll interval could start one (the wakeup records why each pass ran; no duration is
  asserted: the reaction time is a budget of `make bench`).
* A watch cut mid-stream and a 410 Gone, each losing the very event that matters: the cache re-lists,
  the change is carried out once, nothing is written while the cache cannot vouch for what it holds,
  and readiness names the cache meanwhile.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from kubernetes import client

from slinky_common import names
from slurm_sync.cache import CachedKube, KubeCache
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.types import NodeUpdate
from slurm_sync.wake import Wakeup
from tests.crds.cases import example
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.kube.apiproxy import ApiProxy
from tests.kube.kubeapi import create_cr
from tests.kube.plugin import KubeLab
from tests.slurm_sync.apiserverrig import CONTROLLER, restore, worker_pod

POLL_INTERVAL = 10.0
PODS = {"gpu-n3": "n3", "gpu-n4": "n4"}


class RecordingWakeup(Wakeup):
    """Records why each pass ran: "woken" by a change, or "timer" (the poll interval ran out)."""

    def __init__(self) -> None:
        super().__init__()
        self.outcomes: list[str] = []
        self.idle = threading.Event()  # the loop waits for the next pass with nothing pending

    def wait(self, timeout: float, stop: threading.Event) -> bool:
        if timeout <= 0:  # the loop only clearing the latch
            return super().wait(timeout, stop)
        with self._cond:
            if not self._pending:
                self.idle.set()
        woken = super().wait(timeout, stop)
        self.idle.clear()
        self.outcomes.append("woken" if woken else "timer")
        return woken


@dataclass
class Rig:
    lab: SlurmLab
    core: client.CoreV1Api  # the administrator's, straight to the API server
    namespace: str
    proxy: ApiProxy
    kube: CachedKube
    service: Service
    wakeup: RecordingWakeup
    updates: list[tuple[str, NodeUpdate, int]]  # (node, update, how many passes had started)
    stop: threading.Event = field(default_factory=threading.Event)

    def cordon(self, pod: str) -> str:
        """Annotate the pod pod-cordon=true as an administrator would; its new resourceVersion."""
        body = {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}
        return str(self.core.patch_namespaced_pod(pod, self.namespace, body).metadata.resource_version)

    def annotate(self, pod: str, key: str, value: str | None) -> None:
        """Set (None: remove) one annotation of the pod, as a health checker would."""
        self.core.patch_namespaced_pod(pod, self.namespace, {"metadata": {"annotations": {key: value}}})

    def pod_conditions(self, pod: str) -> dict[str, str]:
        """The pod's Slurm state conditions: type -> message."""
        conditions = self.core.read_namespaced_pod(pod, self.namespace).status.conditions or []
        return {c.type: c.message or "" for c in conditions if c.type.startswith("SlurmNodeState")}

    def slurm_node(self, name: str) -> str:
        return self.lab.run("scontrol", "show", "node", name, check=True).stdout

    def drained(self, node: str) -> bool:
        return "DRAIN" in self.slurm_node(node).split("State=", 1)[1].split()[0]

    def reason(self, pod: str) -> str:
        return f"{names.DRAIN_REASON_PREFIX} Pod ({self.namespace}/{pod}) was cordoned"

    def fresh_wait(self) -> None:
        """Start a pass now; return once the loop waits again with nothing pending: the next poll is a
        whole interval away."""
        self.wakeup.idle.clear()
        started = len(self.wakeup.outcomes)
        self.wakeup.set()
        wait_for(lambda: len(self.wakeup.outcomes), lambda n: n > started, what="a pass")
        assert self.wakeup.idle.wait(60), "the loop did not come to rest"

    def slurm_writes(self) -> list[tuple[str, NodeUpdate]]:
        return [(node, update) for node, update, _ in self.updates]

    def settled(self) -> None:
        """Ready, each pod showing its Slurm node's state, the drained marks as Slurm says."""
        wait_for(self.service.health.ready, lambda r: r[0], what="slurm_sync ready", timeout=60)
        for pod in PODS:
            wait_for(
                lambda p=pod: self.core.read_namespaced_pod(p, self.namespace).status.conditions or [],
                lambda conditions: any(c.type.startswith("SlurmNodeState") for c in conditions),
                what=f"{pod} showing Slurm's state",
            )

    def informer_relists(self) -> dict[str, int]:
        return {str(i.collection): i.relists for i in self.kube.cache.informers()}

    def pods_written_since(self, index: int) -> set[str]:
        """The pods slurm_sync patched (metadata or status) through the proxy since request ``index``."""
        return {s.path.split("/pods/")[1].split("/")[0] for s in self.proxy.seen[index:] if s.method == "PATCH"}

    def marked_drained(self, pod: str) -> None:
        wait_for(
            lambda: self.core.read_namespaced_pod(pod, self.namespace).metadata.annotations or {},
            lambda annotations: annotations.get(names.ANNOTATION_DRAINED) == "true",
            what=f"{pod} marked drained",
        )


def controller(namespace: str, cluster_name: str) -> dict[str, Any]:
    obj = example("Controller")
    obj["metadata"] = {"name": CONTROLLER, "namespace": namespace}
    obj["spec"]["clusterName"] = cluster_name
    obj["spec"]["jwtKeyRef"] = {"name": "slurm-jwt", "key": "jwt.key"}
    return obj


@pytest.fixture
def rig(
    slurm_lab: SlurmLab, kube_lab: KubeLab, kube_api: client.ApiClient, kube_namespace: str, installed_crds: list[str],
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Rig]:  # fmt: skip
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token) as slurm:
        slurm.ping()  # the answer names the cluster
        cluster_name = slurm.cluster
    core = client.CoreV1Api(kube_api)
    key = base64.b64encode(slurm_lab.jwt_key_file.read_bytes()).decode()
    core.create_namespaced_secret(kube_namespace, {"metadata": {"name": "slurm-jwt"}, "data": {"jwt.key": key}})
    create_cr(kube_api, controller(kube_namespace, cluster_name), kube_namespace)
    for pod, node in PODS.items():
        core.create_namespaced_pod(kube_namespace, worker_pod(pod, node))

    updates: list[tuple[str, NodeUpdate, int]] = []
    update_node = SlurmClient.update_node
    wakeup = RecordingWakeup()

    def recorded(self: SlurmClient, name: str, update: NodeUpdate) -> None:
        update_node(self, name, update)
        updates.append((name, update, len(wakeup.outcomes)))

    monkeypatch.setattr(SlurmClient, "update_node", recorded)
    proxy = ApiProxy(kube_api.configuration)
    metrics = Metrics()
    kube = CachedKube(proxy.api_client(), metrics.count_kube_write, cache=KubeCache(wakeup.set))
    config = Config(
        namespaces=(kube_namespace,),
        poll_interval=POLL_INTERVAL,
        slurm_url=slurm_lab.rest_url,
        token_user="slurm",
        slurm_timeout=5,
    )
    service = Service(config, kube, metrics, wakeup=wakeup)
    rig = Rig(slurm_lab, core, kube_namespace, proxy, kube, service, wakeup, updates)
    thread = threading.Thread(target=service.run_forever, args=(rig.stop,), name="slurm-sync")
    thread.start()
    try:
        rig.settled()
        yield rig
    finally:
        rig.stop.set()
        thread.join(30)
        service.close()
        kube.cache.close()
        proxy.close()
        restore(slurm_lab, *PODS.values())


def test_a_cordoned_pod_is_drained_by_the_pass_its_change_started_not_by_the_poll(rig: Rig) -> None:
    rig.fresh_wait()
    before = len(rig.wakeup.outcomes)
    rig.cordon("gpu-n3")
    wait_for(lambda: rig.drained("n3"), bool, what="n3 drained", timeout=60)
    assert rig.slurm_writes() == [("n3", NodeUpdate(state=("DRAIN",), reason=rig.reason("gpu-n3")))]
    draining_pass = rig.updates[0][2]  # the passes started until the one that sent the drain
    passes = rig.wakeup.outcomes[before:draining_pass]
    assert passes and set(passes) == {"woken"}, f"the drain waited for the poll: passes since the change {passes}"
    assert f"Reason={rig.reason('gpu-n3')}" in rig.slurm_node("n3")
    assert not rig.drained("n4")


def test_a_requested_cordon_is_drained_shown_on_the_pod_and_lifted_when_the_annotation_goes(rig: Rig) -> None:
    """Slinky 1.3.0's pod-cordon-requested, as a health checker sets and clears it."""
    reason = (
        f"{names.DRAIN_REASON_PREFIX} Pod ({rig.namespace}/gpu-n3) cordon requested "
        f"({names.ANNOTATION_POD_CORDON_REQUESTED})"
    )
    rig.annotate("gpu-n3", names.ANNOTATION_POD_CORDON_REQUESTED, "true")
    wait_for(lambda: rig.drained("n3"), bool, what="n3 drained", timeout=60)
    assert f"Reason={reason}" in rig.slurm_node("n3")
    rig.marked_drained("gpu-n3")
    wait_for(lambda: rig.pod_conditions("gpu-n3").get("SlurmNodeStateDrain"), lambda m: m == reason,
             what="the requested drain shown on gpu-n3")  # fmt: skip

    rig.annotate("gpu-n3", names.ANNOTATION_POD_CORDON_REQUESTED, None)
    wait_for(lambda: rig.drained("n3"), lambda d: not d, what="n3 undrained", timeout=60)
    wait_for(lambda: rig.pod_conditions("gpu-n3"), lambda c: "SlurmNodeStateDrain" not in c,
             what="the drain gone from gpu-n3")  # fmt: skip
    annotations = rig.core.read_namespaced_pod("gpu-n3", rig.namespace).metadata.annotations or {}
    assert names.ANNOTATION_DRAINED not in annotations
    assert rig.slurm_writes() == [
        ("n3", NodeUpdate(state=("DRAIN",), reason=reason)),
        ("n3", NodeUpdate(state=("UNDRAIN",))),
    ]
    assert not rig.drained("n4")


def test_a_watch_cut_mid_stream_is_relisted_and_the_change_it_lost_is_carried_out_once(rig: Rig) -> None:
    seen = len(rig.proxy.seen)
    rig.proxy.lists_refused = True
    with rig.proxy.swallowing_events():
        rig.cordon("gpu-n3")  # the one event that matters never arrives
        assert rig.proxy.sever() >= 1
    wait_for(rig.service.health.ready, lambda r: not r[0] and "not synced" in r[1], what="unready naming the cache")
    why = rig.service.health.ready()[1]
    assert "watch broken" in why or "list failed" in why, why
    rig.fresh_wait()  # a pass while the cache cannot vouch for anything
    assert rig.pods_written_since(seen) == set() and rig.updates == [], "a write while the cache was not synced"
    assert not rig.drained("n3")

    rig.proxy.lists_refused = False
    wait_for(lambda: rig.drained("n3"), bool, what="n3 drained after the re-list", timeout=60)
    wait_for(rig.service.health.ready, lambda r: r[0], what="ready again")
    rig.marked_drained("gpu-n3")
    assert rig.slurm_writes() == [("n3", NodeUpdate(state=("DRAIN",), reason=rig.reason("gpu-n3")))]
    assert rig.pods_written_since(seen) == {"gpu-n3"}
    assert any(s.listing for s in rig.proxy.seen[seen:]), "the cache re-listed"
    assert max(rig.informer_relists().values()) >= 1


def test_a_410_gone_is_relisted_and_the_change_the_server_no_longer_has_is_carried_out_once(rig: Rig) -> None:
    seen = len(rig.proxy.seen)
    with rig.proxy.swallowing_events():
        version = rig.cordon("gpu-n3")
        rig.proxy.expire_below(int(version))  # as after a compaction: the watches' events are gone
        assert rig.proxy.end_watches() >= 1  # they resume from where they were, and get 410
    wait_for(lambda: rig.drained("n3"), bool, what="n3 drained after the 410 and re-list", timeout=60)
    gone = [s for s in rig.proxy.seen[seen:] if s.watch and int(s.query.get("resourceVersion") or 0) < int(version)]
    assert gone, "no watch resumed from before the change"
    pods = next(c for c in rig.informer_relists() if c.startswith("pods") and names.LABEL_CLUSTER in c)
    assert rig.informer_relists()[pods] >= 1
    rig.marked_drained("gpu-n3")
    assert rig.slurm_writes() == [("n3", NodeUpdate(state=("DRAIN",), reason=rig.reason("gpu-n3")))]
    assert rig.pods_written_since(seen) == {"gpu-n3"}
    wait_for(rig.service.health.ready, lambda r: r[0], what="ready again")

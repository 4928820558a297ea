"""slurm_sync's writes go over one kept-alive connection to the API server (slurm_sync/kube.py `released`).

Writes ask the client for the undecoded answer and do not read it; an unread answer keeps its
connection out of the client's pool, so every write used to open a new connection (a TCP and TLS
handshake with the API server each). The fault proxy in front of the real API server records the
connection each request came on.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

import pytest
from kubernetes import client

from slurm_sync import events
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.view import BridgeNode
from slurm_sync.kube import Kube
from tests.kube.apiproxy import ApiProxy


@pytest.fixture
def proxy(kube_api: client.ApiClient) -> Iterator[ApiProxy]:
    proxied = ApiProxy(kube_api.configuration)
    yield proxied
    proxied.close()


def test_writes_reuse_one_connection(kube_api: client.ApiClient, kube_namespace: str, proxy: ApiProxy) -> None:
    core = client.CoreV1Api(kube_api)
    pod = {"metadata": {"name": "w"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    core.create_namespaced_pod(kube_namespace, pod)
    core.create_node({"metadata": {"name": f"{kube_namespace}-node"}})
    kube = Kube(proxy.api_client())
    bridge = BridgeKube(kube)
    now = datetime.datetime.now(datetime.UTC)
    try:
        for i in range(3):
            kube.patch_pod(kube_namespace, "w", {"metadata": {"annotations": {"round": str(i)}}})
            condition = {"type": "SlurmNodeStateIdle", "status": "True", "reason": f"r{i}"}
            kube.patch_pod_status(kube_namespace, "w", {"status": {"conditions": [condition]}})
            ref = events.pod_ref(kube_namespace, "w")
            kube.create_event(kube_namespace, events.event_body(ref, "Normal", "Test", "n", "Test", "t", now))
            now += datetime.timedelta(microseconds=1)
            node = BridgeNode(f"{kube_namespace}-node", "n1", "", (), None, None, None, None)
            bridge.patch_node(node, {"metadata": {"labels": {"round": str(i)}}})
    finally:
        core.delete_node(f"{kube_namespace}-node")
    writes = [seen for seen in proxy.seen if seen.method in ("PATCH", "POST")]
    assert len(writes) == 12
    assert len({seen.peer for seen in writes}) == 1, "each write opened a connection of its own"
    assert core.read_namespaced_pod("w", kube_namespace).metadata.annotations["round"] == "2"

"""Node-derived steps through the loop and the official client against pytest-httpserver: the exact
pod annotation patch for topology, the Slurm updates for topology and features, cordon reasons from
Node conditions (and the flag that selects them), and defunct-node pruning that deletes only after a
NotFound for the pod -- every request pinned, and nothing written once settled."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from hooks import names
from slurm_sync import __main__ as cli
from slurm_sync.metrics import Metrics
from slurm_sync.operator import OperatorLoop
from slurm_sync.kube import Kube
from slurm_sync.slurm_errors import SlurmRejected
from slurm_sync.slurm_types import Node, NodeUpdate, parse_node
from tests.slurm_sync.kubefixtures import CLUSTER, NODESET_UID, NOW, NS, FakeSlurm, api_client, controller_pod, nodeset, pod
from tests.slurm_sync.test_operator_kube import COMMENT, IDLE_STATE, SMP, expect_patch, expect_reads, run, settled_hash

TOPO = "topo-switch:s2,topo-block:b2"
PRUNE_COMMENT = f'{{"namespace":"{NS}","podName":"gpu-k9","node":"k9","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'


@dataclass
class DeletingSlurm(FakeSlurm):
    deleted: list[str] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)

    def update_node(self, name: str, update: NodeUpdate) -> None:
        if update.topology_str is not None and "topology" in self.refuse:
            raise SlurmRejected("Requested topology configuration is not available", status=422)
        super().update_node(name, update)

    def delete_node(self, name: str) -> None:
        self.deleted.append(name)


def snode(name: str, *state: str, comment: str = COMMENT, features: tuple[str, ...] = ("gpu",), topology: str = "", reason: str = "") -> Node:
    return parse_node({"name": name, "state": list(state), "comment": comment, "features": list(features),
                       "active_features": list(features), "topology": topology, "reason": reason})


def knode(name: str = "k1", annotations: dict[str, str] | None = None, unschedulable: bool = False,
          conditions: list[dict[str, str]] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations or {}}, "spec": {"unschedulable": unschedulable},
            "status": {"conditions": conditions or []}}


def looper(server: HTTPServer, slurm: FakeSlurm, propagated: tuple[str, ...] = ()) -> OperatorLoop:
    metrics = Metrics()
    kube = Kube(api_client(server.url_for("/")), metrics.count_kube_write)
    return OperatorLoop(CLUSTER, NS, CLUSTER, slurm, kube, metrics, now=lambda: NOW, propagated_conditions=propagated)  # type: ignore[arg-type]


def test_topology_is_one_annotation_patch_and_one_slurm_update_then_nothing(httpserver: HTTPServer) -> None:
    annotated = knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO, names.ANNOTATION_FEATURES_SPEC: "a100,nvlink"})
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=("gpu", "k8s/stale", "admin"))})
    settled = nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))
    expect_reads(httpserver, [pod("gpu-0", states=("IDLE",))], [settled], [annotated], [controller_pod("slurm-controller-0", active=True)])
    expect_patch(httpserver, f"/api/v1/namespaces/{NS}/pods/gpu-0", SMP, {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}})
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.kube_writes == 1 and result.slurm_writes == 2
    assert slurm.updates == [
        ("gpu-0", NodeUpdate(features=("gpu", "admin", "k8s/a100", "k8s/nvlink"), features_act=("gpu", "admin", "k8s/a100", "k8s/nvlink"))),
        ("gpu-0", NodeUpdate(topology_str=TOPO)),
    ]
    # settled on both sides: reads only
    httpserver.clear()
    slurm.nodes["gpu-0"] = snode("gpu-0", "IDLE", features=("gpu", "admin", "k8s/a100", "k8s/nvlink"), topology=TOPO)
    slurm.updates.clear()
    expect_reads(httpserver, [pod("gpu-0", states=("IDLE",), annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})], [settled], [annotated],
                 [controller_pod("slurm-controller-0", active=True)])
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.kube_writes == 0 and result.slurm_writes == 0 and slurm.updates == []


def test_a_refused_topology_update_is_an_error_and_the_rest_still_happens(httpserver: HTTPServer) -> None:
    """Slurm without a topology plugin that takes updates (topology/flat) refuses topology_str."""
    annotated = knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=("gpu", "k8s/stale"))}, refuse={"topology"})
    expect_reads(httpserver, [pod("gpu-0", states=("IDLE",))], [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))], [annotated], [])
    expect_patch(httpserver, f"/api/v1/namespaces/{NS}/pods/gpu-0", SMP, {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}})
    result = run(httpserver, looper(httpserver, slurm))
    assert result.slurm_ok and not result.ok and result.slurm_writes == 1
    assert slurm.updates == [("gpu-0", NodeUpdate(features=("gpu",), features_act=("gpu",)))]
    assert any("topology" in e for e in result.errors)


def test_propagated_conditions_become_the_drain_reason(httpserver: HTTPServer) -> None:
    cordoned = knode(unschedulable=True, conditions=[
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"},
        {"type": "GpuHealthy", "status": "True", "reason": "XidError", "message": "xid 79"},
    ])
    slurm = DeletingSlurm({"gpu-0": snode("gpu-0", "IDLE", features=())})
    expect_reads(httpserver, [pod("gpu-0", states=("IDLE",))], [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))], [cordoned], [])
    run(httpserver, looper(httpserver, slurm, propagated=("GpuHealthy",)))
    assert slurm.updates == [("gpu-0", NodeUpdate(state=("DRAIN",), reason="slurm-operator: (XidError: xid 79)"))]


def test_the_flag_and_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.parse_args([]).propagated_node_conditions == ""
    monkeypatch.setenv("SLURM_SYNC_PROPAGATED_NODE_CONDITIONS", "GpuHealthy, MemoryPressure")
    args = cli.parse_args([])
    assert args.propagated_node_conditions == "GpuHealthy, MemoryPressure"
    captured = {}
    monkeypatch.setattr(cli, "Service", lambda cfg, *a: captured.setdefault("cfg", cfg) and (_ for _ in ()).throw(SystemExit(0)))
    monkeypatch.setattr(cli, "kube_client", lambda _: None)
    monkeypatch.setattr(cli, "Kube", lambda *a: None)
    with pytest.raises(SystemExit):
        cli.main(["--once"])
    assert captured["cfg"].propagated_node_conditions == ("GpuHealthy", "MemoryPressure")


# --- defunct nodes ----------------------------------------------------------------------------


def ds_nodeset() -> dict[str, Any]:
    obj = nodeset(observed=settled_hash())
    obj["spec"].update(scalingMode="DaemonSet", pruneSlurmNodeRecords="NodeNotFound")
    return obj


def expect_pod_get(server: HTTPServer, status: int, body: dict[str, Any] | None = None) -> None:
    if body is None:
        body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404} if status == 404 else pod("gpu-k9")
    server.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods/gpu-k9", "GET").respond_with_json(body, status=status)


def test_defunct_node_is_deleted_after_its_pod_answers_not_found(httpserver: HTTPServer) -> None:
    """No pod of the NodeSet is left, yet the Nodes are listed (the gate asks for them)."""
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    expect_pod_get(httpserver, 404)
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and result.slurm_writes == 1 and result.kube_writes == 0
    assert slurm.deleted == ["k9"]


@pytest.mark.parametrize(
    ("status", "body"),
    [(200, None), (404, {"message": "no route"}), (500, {"kind": "Status", "code": 500}), (403, {"kind": "Status", "code": 403})],
    ids=["pod-exists", "bare-404", "server-error", "forbidden"],
)
def test_defunct_node_is_kept_unless_the_pod_is_surely_gone(httpserver: HTTPServer, status: int, body: dict[str, Any] | None) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    expect_pod_get(httpserver, status, body)
    result = run(httpserver, looper(httpserver, slurm))
    assert slurm.deleted == [] and result.slurm_writes == 0
    assert result.ok == (status == 200)


def test_a_failed_node_listing_deletes_nothing(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    httpserver.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods", "GET").respond_with_json({"items": []})
    httpserver.expect_ordered_request(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets", "GET").respond_with_json(
        {"items": [ds_nodeset()]})
    httpserver.expect_ordered_request("/api/v1/nodes", "GET").respond_with_json({"kind": "Status", "code": 500}, status=500)
    result = run(httpserver, looper(httpserver, slurm))
    assert not result.kube_ok and slurm.deleted == []


def test_a_failed_slurm_listing_deletes_nothing(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)}, fail=SlurmRejected("HTTP 200 with errors", status=200))
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1")], [])
    result = run(httpserver, looper(httpserver, slurm))
    assert not result.slurm_ok and slurm.deleted == []


def test_a_node_that_still_maps_is_not_even_checked(httpserver: HTTPServer) -> None:
    slurm = DeletingSlurm({"k9": snode("k9", "DOWN", "NOT_RESPONDING", comment=PRUNE_COMMENT)})
    expect_reads(httpserver, [], [ds_nodeset()], [knode("k1"), knode("k9")], [])
    result = run(httpserver, looper(httpserver, slurm))
    assert result.ok and slurm.deleted == [] and len(httpserver.log) == 4

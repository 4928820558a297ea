"""The operator loop against a faked API server (pytest-httpserver) and a fake Slurm: the reads a pass makes, the
patches it must send, one pass run to the end."""

from __future__ import annotations

from typing import Any

from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import PodState, observed_hash
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    RecordedEvents,
    api_client,
    pod,
)

IDLE_STATE = PodState(drained=None, absent=False, states=("SlurmNodeStateIdle",))

SMP = "application/strategic-merge-patch+json"


MERGE = "application/merge-patch+json"


JSON_PATCH = "application/json-patch+json"


POD_SELECTOR = {"labelSelector": f"{names.LABEL_CLUSTER}={CLUSTER}"}


CTL_SELECTOR = {"labelSelector": f"{names.LABEL_INSTANCE}={CLUSTER},{names.LABEL_NAME}=slurmctld"}


COMMENT = f'{{"namespace":"{NS}","podName":"gpu-0","node":"k1","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'


def items(*objs: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "List", "apiVersion": "v1", "items": list(objs)}


def expect_reads(
    server: HTTPServer, pods: list[dict], nodesets: list[dict], nodes: list[dict] | None, controllers: list[dict]
) -> None:
    server.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods", "GET", query_string=POD_SELECTOR).respond_with_json(
        items(*pods)
    )
    server.expect_ordered_request(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets", "GET").respond_with_json(
        items(*nodesets)
    )
    if nodes is not None:
        server.expect_ordered_request("/api/v1/nodes", "GET").respond_with_json(items(*nodes))
    server.expect_ordered_request(f"/api/v1/namespaces/{NS}/pods", "GET", query_string=CTL_SELECTOR).respond_with_json(
        items(*controllers)
    )


def expect_patch(server: HTTPServer, path: str, content_type: str, body: dict[str, Any], status: int = 200) -> None:
    server.expect_ordered_request(path, "PATCH", headers={"Content-Type": content_type}, json=body).respond_with_json(
        {} if status == 200 else {"kind": "Status", "code": status}, status=status
    )


def loop(server: HTTPServer, slurm: FakeSlurm, metrics: Metrics | None = None) -> OperatorLoop:
    metrics = metrics or Metrics()
    kube = Kube(api_client(server.url_for("/")), metrics.count_kube_write)
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,  # type: ignore[arg-type]  # FakeSlurm stands in for SlurmClient (duck-typed, no Protocol to name)
        kube,
        metrics,
        events=RecordedEvents(),
        now=lambda: NOW,
    )


def settled_hash(*pods: tuple[str, PodState]) -> str:
    return observed_hash(pods)


def steady_pod() -> dict[str, Any]:
    return pod("gpu-0", states=("IDLE",))


def run(server: HTTPServer, looper: OperatorLoop):
    result = looper.run_pass()
    server.check_assertions()
    assert not server.ordered_handlers, "expected requests were not made"
    return result

"""The client calls the bridge added (POST new/node, GET partitions), the token file and the
--mode flags, against a faked slurmrestd and without a Kubernetes API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from pytest_httpserver import HTTPServer

from slurm_sync import __main__ as cli
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop, token_file
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmMalformed, SlurmRejected
from tests.slurm_sync.bridgekube import BridgeFake
from tests.slurm_sync.kubefixtures import api_client
from tests.slurm_sync.slurm.restanswers import TOKEN, V, spec

CONF = "NodeName=ext1 CPUs=2 RealMemory=512 State=External Feature=debug"


@pytest.fixture
def client(httpserver: HTTPServer) -> Iterator[SlurmClient]:
    httpserver.expect_request("/openapi/v3").respond_with_json(spec("v0.0.44", "v0.0.45"))
    with SlurmClient(httpserver.url_for("/"), lambda: TOKEN, timeout=2.0) as c:
        yield c


def test_create_node_posts_the_node_conf_once(httpserver: HTTPServer, client: SlurmClient) -> None:
    httpserver.expect_request(f"{V}/new/node/", method="POST").respond_with_json({"errors": []})
    client.create_node(CONF)
    ((request, _),) = [e for e in httpserver.log if e[0].path == f"{V}/new/node/"]
    assert orjson.loads(request.get_data()) == {"node_conf": CONF}
    assert request.headers["Content-Type"] == "application/json"


def test_create_node_refused_is_rejected_and_not_retried(httpserver: HTTPServer, client: SlurmClient) -> None:
    refusal = {"errors": [{"description": "Unable to add node, node table is full", "error_number": 2169}]}
    httpserver.expect_request(f"{V}/new/node/", method="POST").respond_with_json(refusal, status=422)
    with pytest.raises(SlurmRejected, match="node table is full"):
        client.create_node(CONF)
    assert len([e for e in httpserver.log if e[0].path == f"{V}/new/node/"]) == 1


def test_partition_names(httpserver: HTTPServer, client: SlurmClient) -> None:
    httpserver.expect_request(f"{V}/partitions/").respond_with_json(
        {"partitions": [{"name": "debug"}, {"name": "gpu"}]}
    )
    assert client.partition_names() == frozenset({"debug", "gpu"})


def test_a_nameless_partition_is_malformed_not_absent(httpserver: HTTPServer, client: SlurmClient) -> None:
    httpserver.expect_request(f"{V}/partitions/").respond_with_json({"partitions": [{"nodes": {}}]})
    with pytest.raises(SlurmMalformed):
        client.partition_names()


def test_token_file_is_read_on_every_call_and_trimmed(tmp_path: Path) -> None:
    path = tmp_path / "auth-token"
    path.write_text("SLURM_JWT=first\n")
    read = token_file(str(path))
    assert read() == "first"
    path.write_text("second")
    assert read() == "second"


def test_mode_flags_default_to_the_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    args = cli.parse_args([])
    assert (args.mode, args.managed_namespaces, args.scheduler_name, args.job_list_interval) == (
        "operator",
        "slurm-bridge",
        "slurm-bridge-scheduler",
        30.0,
    )
    monkeypatch.setenv("SLURM_SYNC_MODE", "bridge")
    monkeypatch.setenv("SLURM_SYNC_MANAGED_NAMESPACES", "a,b")
    args = cli.parse_args(["--slurm-url", "http://x:6820", "--token-file", "/t"])
    assert (args.mode, args.managed_namespaces, args.token_file) == ("bridge", "a,b", "/t")


def test_bridge_mode_needs_a_url_and_a_token() -> None:
    with pytest.raises(SystemExit, match="--slurm-url"):
        cli.bridge_loop(cli.parse_args(["--mode", "bridge"]), None, None)  # type: ignore[arg-type]
    with pytest.raises(SystemExit, match="--token-file or --jwt-key-file"):
        cli.bridge_loop(cli.parse_args(["--mode", "bridge", "--slurm-url", "http://x"]), None, None)  # type: ignore[arg-type]


def test_bridge_mode_service_runs_only_the_bridge_and_reports_it(httpserver: HTTPServer) -> None:
    BridgeFake().install(httpserver)
    kube, metrics = Kube(api_client(httpserver.url_for("/"))), Metrics()
    dead = SlurmClient("http://127.0.0.1:9", lambda: TOKEN, timeout=1.0)
    service = Service(Config(mode="bridge"), kube, metrics, BridgeLoop(dead, BridgeKube(kube), metrics, ["ns"]))
    try:
        assert not service.run_pass()
        ready, why = service.health.ready()
        assert (
            not ready
            and why.startswith("no successful pass yet; failing: bridge: list jobs: ")
            and "Connection refused" in why
        )
        assert not any("controllers" in e[0].path for e in httpserver.log)  # no operator discovery
    finally:
        service.close()

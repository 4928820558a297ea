"""The service's heartbeat (docs/operations.md): every Kubernetes read is a watch's, so without leader
election each pass asks the API server ``GET /api/`` and readiness names one that does not answer; under
leader election the Lease renewals are that check and a pass sends nothing (issue 30)."""

from __future__ import annotations

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from slurm_sync import __main__ as cli
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, refused_url


def served(httpserver: HTTPServer) -> list[str]:
    """An API server with nothing in it; the paths it was asked for."""
    kube, asked = FakeKube(), []

    def handle(request: Request) -> Response:
        asked.append(request.path)
        if request.path == "/api/":
            return Response('{"kind":"APIVersions","versions":["v1"]}', content_type="application/json")
        return kube.handle(request)

    httpserver.expect_request("/api/").respond_with_handler(handle)
    kube.install(httpserver)
    return asked


def passes(config: Config, url: str, count: int) -> Service:
    service = Service(config, Kube(api_client(url)), Metrics())
    try:
        for _ in range(count):
            service.run_pass()
    finally:
        service.close()
    return service


def test_each_pass_reads_the_api_server_once_without_leader_election(httpserver: HTTPServer) -> None:
    asked = served(httpserver)
    service = passes(Config(namespaces=(NS,)), httpserver.url_for("/"), 3)
    assert asked.count("/api/") == 3
    assert service.health.ready() == (True, "ok")


def test_under_leader_election_a_pass_sends_no_heartbeat(httpserver: HTTPServer) -> None:
    asked = served(httpserver)
    passes(Config(namespaces=(NS,), kube_heartbeat=False), httpserver.url_for("/"), 3)
    assert "/api/" not in asked


def test_the_heartbeat_is_on_only_without_leader_election() -> None:
    assert not cli.service_config(cli.parse_args([])).kube_heartbeat
    assert cli.service_config(cli.parse_args(["--no-leader-elect"])).kube_heartbeat


def test_an_api_server_that_does_not_answer_is_named() -> None:
    service = passes(Config(namespaces=(NS,)), refused_url(), 1)
    ready, why = service.health.ready()
    assert not ready and "kubernetes: MaxRetryError" in why, why

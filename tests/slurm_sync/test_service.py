"""The service: its pass isolation, health endpoints, --once and logs (discovery: operator/test_discovery.py)."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading

import httpx
import pytest
from pytest_httpserver import HTTPServer

from slinky_common import logs
from slurm_sync import __main__ as cli
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.discovery import TokenSource
from slurm_sync.operator.loop import OperatorLoop, PassResult
from slurm_sync.service import Config, Health, Service, health_server
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_cr, refused_url, restapi_cr

KEY = b"k" * 32


def test_logs_are_json_lines_without_tokens() -> None:
    stream = io.StringIO()
    logs.configure("DEBUG", stream)
    try:
        tokens = TokenSource("slurm", 300)
        tokens.set_key(KEY, "1")
        token = tokens()
        log = logging.getLogger("slurm_sync.test")
        log.info("minted %s for %s", token, "slurm")
        log.warning("header X-SLURM-USER-TOKEN: %s", "eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJ4In0.c2ln")
        try:
            raise ValueError(token)
        except ValueError:
            log.exception("boom")
    finally:
        logging.getLogger().handlers.clear()
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [line["level"] for line in lines] == ["info", "warning", "error"]
    assert lines[0]["message"] == "minted <redacted> for slurm"
    assert "eyJ" not in stream.getvalue() and token not in stream.getvalue()


def test_health_reports_readiness_and_metrics() -> None:
    health, metrics = Health(), Metrics()
    server = health_server("127.0.0.1:0", health, metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert httpx.get(base + "/healthz").status_code == 200
        assert httpx.get(base + "/readyz").status_code == 503
        health.record({})
        assert httpx.get(base + "/readyz").status_code == 200
        health.record({"ns/a": "Slurm cluster a: update node n3 (DRAIN): HTTP 503"})
        ready = httpx.get(base + "/readyz")
        assert ready.status_code == 503
        assert ready.text == "failing: ns/a: Slurm cluster a: update node n3 (DRAIN): HTTP 503\n"
        metrics.count_kube_write("pod", "patch")
        assert 'slurm_sync_kube_writes_total{kind="pod",verb="patch"} 1.0' in httpx.get(base + "/metrics").text
    finally:
        server.shutdown()
        server.server_close()


def _kube_with_two_clusters(server: HTTPServer) -> FakeKube:
    kube = FakeKube()
    for name in ("good", "bad"):
        kube.add("controllers", controller_cr(name))
        kube.add("restapis", restapi_cr(name, name, "2026-01-01T00:00:00Z"))
    kube.add(
        "secrets",
        {"metadata": {"name": "good-jwt", "namespace": NS}, "data": {"jwt.key": base64.b64encode(KEY).decode()}},
    )
    # no "bad-jwt" Secret: that cluster fails, the other still runs
    kube.install(server)
    return kube


def test_a_failing_cluster_does_not_stop_the_others(httpserver: HTTPServer) -> None:
    kube = _kube_with_two_clusters(httpserver)
    metrics = Metrics()
    # the "good" cluster's slurmrestd is unreachable too, but its pass is attempted and recorded
    service = Service(
        Config(namespaces=(NS,), slurm_url="http://127.0.0.1:9", slurm_timeout=1),
        Kube(api_client(httpserver.url_for("/"))),
        metrics,
    )
    try:
        assert not service.run_pass()
        assert set(service.clusters.handles) == {f"{NS}/good", f"{NS}/bad"}
    finally:
        service.close()
    assert (
        metrics.registry.get_sample_value(
            "slurm_sync_slurm_errors_total", {"cluster": f"{NS}/good", "kind": "unavailable"}
        )
        == 2
    )
    assert service.health.ready()[0] is False
    (event,) = [body for *_, body in kube.writes]  # nothing but a Warning on the Controller that could not be read
    assert (event["type"], event["reason"], event["regarding"]["name"]) == ("Warning", "SlurmUnreadable", "good")


def test_a_pass_that_expects_work_wakes_the_next_one(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's pass that asks for a follow-up (it wrote to Slurm) sets the service's wake-up for then,
    so the next pass does not wait for the poll interval."""
    _kube_with_two_clusters(httpserver)
    monkeypatch.setattr(
        OperatorLoop, "run_pass", lambda self: PassResult(True, (), 0, 1, cluster=self.name, follow_up=0.1)
    )
    service = Service(Config(namespaces=(NS,)), Kube(api_client(httpserver.url_for("/"))), Metrics())
    try:
        service.run_pass()
        assert service.wakeup.wait(60, threading.Event()), "no follow-up: the wait lasted the whole minute"
    finally:
        service.close()


def test_once_exit_code(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    kube = FakeKube()
    kube.install(httpserver)
    monkeypatch.setattr(cli, "kube_client", lambda _: api_client(httpserver.url_for("/")))
    monkeypatch.setattr(logs, "configure", lambda level, **_: None)
    assert cli.main(["--once", "--no-leader-elect", "--namespace", NS]) == 0  # no cluster: nothing failed
    kube.add("controllers", controller_cr("good"))
    kube.add("restapis", restapi_cr("good", "good", "2026-01-01T00:00:00Z"))
    failing = ["--namespace", NS, "--slurm-url", "http://127.0.0.1:9", "--slurm-timeout", "1"]
    assert cli.main(["--once", "--no-leader-elect", *failing]) == 1


def test_flags_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_SYNC_NAMESPACE", "hpc")
    monkeypatch.setenv("SLURM_SYNC_POLL_INTERVAL", "3")
    monkeypatch.setenv("SLURM_SYNC_BIND", "0.0.0.0:9000")
    args = cli.parse_args([])
    assert (args.namespace, args.poll_interval, args.bind, args.token_user) == ("hpc", 3.0, "0.0.0.0:9000", "slurm")
    assert cli.parse_args(["--namespace", "x"]).namespace == "x"


def test_retained_claims_of_a_nodeset_whose_controller_is_gone_are_released(httpserver: HTTPServer) -> None:
    """`helm uninstall` deletes the Controller too: no cluster pass runs for it, yet the NodeSet's
    deletion must not wait forever on PVCs nobody releases."""
    from tests.slurm_sync.kubefixtures import NODESET_OWNER, nodeset, pvc

    kube = FakeKube()
    kube.add("nodesets", nodeset(deleting=True))
    kube.add("persistentvolumeclaims", pvc("data-gpu-0", NODESET_OWNER))
    kube.install(httpserver)
    service = Service(Config(namespaces=(NS,)), Kube(api_client(httpserver.url_for("/"))), Metrics())
    try:
        assert service.run_pass()  # no cluster at all, and the claim released
        assert "ownerReferences" not in kube.get("persistentvolumeclaims", NS, "data-gpu-0")["metadata"]
        writes = len(kube.writes)
        assert service.run_pass() and len(kube.writes) == writes  # nothing left to do
    finally:
        service.close()


def test_an_unreachable_apiserver_is_unready_and_the_loop_goes_on() -> None:
    """Connection refused raises urllib3's MaxRetryError (not an ApiException): it must not escape
    the pass (killing the service) nor lead to any write; the service is unready and keeps polling."""
    for mode in ("operator", "both"):
        metrics = Metrics()
        kube = Kube(api_client(refused_url()), metrics.count_kube_write)
        bridge = None
        if mode == "both":
            from slurm_sync.bridge.kube import BridgeKube
            from slurm_sync.bridge.loop import BridgeLoop
            from slurm_sync.slurm.client import SlurmClient

            bridge = BridgeLoop(
                SlurmClient("http://127.0.0.1:9", lambda: "t", timeout=1), BridgeKube(kube), metrics, [NS]
            )
        config = Config(namespaces=(NS,), poll_interval=0.01, mode=mode)
        service = Service(config, kube, metrics, bridge)
        server = health_server("127.0.0.1:0", service.health, metrics)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert service.run_pass() is False
            ready = httpx.get(f"http://127.0.0.1:{server.server_address[1]}/readyz")
            assert ready.status_code == 503 and "discovery" in ready.text
            passes: list[bool] = []
            stop = threading.Event()

            def counted(
                wait: bool = True, passes: list[bool] = passes, service: Service = service, stop: threading.Event = stop
            ) -> bool:
                passes.append(Service.run_pass(service, wait))
                if len(passes) >= 3:
                    stop.set()
                return passes[-1]

            service.run_pass = counted  # type: ignore[method-assign]
            runner = threading.Thread(target=service.run_forever, args=(stop,), daemon=True)
            runner.start()
            runner.join(timeout=30)
            assert not runner.is_alive() and passes == [False, False, False]
        finally:
            server.shutdown()
            server.server_close()
            service.close()
        assert (
            metrics.registry.get_sample_value("slurm_sync_kube_writes_total", {"kind": "pod", "verb": "patch"}) is None
        )


def test_a_list_of_namespaces_is_watched_namespace_by_namespace(httpserver: HTTPServer) -> None:
    """`--namespace a,b`: one list per namespace (what a Role per namespace allows), none cluster-wide."""
    kube = FakeKube()
    for ns in ("hpc-a", "hpc-b", "elsewhere"):
        kube.add("controllers", controller_cr(f"c-{ns}", ns))
        kube.add("restapis", restapi_cr(f"c-{ns}", f"c-{ns}", "2026-01-01T00:00:00Z", ns))
    kube.install(httpserver)
    service = Service(
        Config(namespaces=("hpc-a", "hpc-b"), slurm_url="http://127.0.0.1:9", slurm_timeout=1),
        Kube(api_client(httpserver.url_for("/"))),
        Metrics(),
    )
    try:
        service.run_pass()
        assert set(service.clusters.handles) == {"hpc-a/c-hpc-a", "hpc-b/c-hpc-b"}
    finally:
        service.close()
    listed = {
        request.path
        for request, _ in httpserver.log
        if request.path.endswith(("/controllers", "/restapis", "/nodesets"))
    }
    assert all(path.startswith("/apis/slinky.slurm.net/v1beta1/namespaces/hpc-") for path in listed), listed
    assert cli.parse_args(["--namespace", " hpc-a,hpc-b "]).namespace == " hpc-a,hpc-b "

"""The write fence of leader election with a fake clock (docs/architecture.md §8): a leader that missed
its renew deadline sends no write, to Kubernetes (whichever wrapper makes it) or to Slurm, while reads
go on; each write that is sent ends by the fence; and the settings and identity rules. The elector
against the real API server is tests/slurm_sync/test_leader_lease.py."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import orjson
import pytest
from kubernetes.client.exceptions import ApiException
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from slurm_sync import __main__ as cli
from slurm_sync.events import Events, pod_ref
from slurm_sync.kube import Kube
from slurm_sync.leader import (
    Fence,
    LeaseElector,
    LeaseSettings,
    NotLeader,
    clamp_timeout,
    fence_writes,
    new_identity,
    own_namespace,
    read_record,
)
from slurm_sync.metrics import Metrics
from slurm_sync.replica import Replica
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmNotLeader
from slurm_sync.slurm.types import NodeUpdate
from tests.fixtures.slurm import wait_for
from tests.slurm_sync.kubefixtures import api_client
from tests.slurm_sync.slurm.restanswers import V, meta, node, nodes_body, spec
from tests.support.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


# --- settings, identity, namespace ------------------------------------------------------------


def test_kubernetes_default_timings_can_fence() -> None:
    assert LeaseSettings("ns", "l", "me").problem() is None
    assert (LeaseSettings("ns", "l", "me").lease_duration, LeaseSettings("ns", "l", "me").renew_deadline) == (15, 10)


@pytest.mark.parametrize(
    ("lease", "renew", "retry", "named"),
    [
        (10, 10, 2, "--lease-duration (10) must exceed --renew-deadline (10)"),
        (15, 2.4, 2, "--renew-deadline (2.4) must exceed 1.2 x --retry-period (2)"),
        (15, 10, 0, "must be positive"),
    ],
)
def test_timings_that_cannot_fence_are_refused_in_one_line(
    lease: float, renew: float, retry: float, named: str
) -> None:
    assert named in (LeaseSettings("ns", "l", "me", lease, renew, retry).problem() or "")
    args = ["--lease-namespace", "ns", "--lease-duration", str(lease), "--renew-deadline", str(renew)]
    with pytest.raises(SystemExit, match=r"^slurm-sync: ") as stopped:
        cli.lease_settings(cli.parse_args([*args, "--retry-period", str(retry)]))
    assert named in str(stopped.value) and "\n" not in str(stopped.value)


def test_identity_is_the_pod_name_and_a_random_suffix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOSTNAME", "slurm-operator-slurm-sync-7d9f-x2x")
    first, second = new_identity(), new_identity()
    assert first.startswith("slurm-operator-slurm-sync-7d9f-x2x_") and second.startswith("slurm-operator")
    assert first != second, "a restarted container must not pass for its previous life"


def test_the_namespace_comes_from_the_flag_else_the_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace_file = tmp_path / "namespace"
    assert own_namespace(namespace_file) is None
    namespace_file.write_text("slinky\n")
    assert own_namespace(namespace_file) == "slinky"
    monkeypatch.setattr(cli, "own_namespace", lambda: own_namespace(namespace_file))
    assert cli.lease_settings(cli.parse_args([])).where == "slinky/slurm-sync-operator"
    assert cli.lease_settings(cli.parse_args(["--mode", "bridge"])).where == "slinky/slurm-sync-bridge"
    assert cli.lease_settings(cli.parse_args(["--lease-namespace", "x", "--lease-name", "y"])).where == "x/y"


def test_an_unknown_namespace_is_one_line_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "own_namespace", lambda: None)
    with pytest.raises(SystemExit) as stopped:
        cli.lease_settings(cli.parse_args([]))
    text = str(stopped.value)
    assert "\n" not in text and "--lease-namespace" in text and "--no-leader-elect" in text


def test_leader_election_is_on_unless_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.parse_args([]).leader_elect is True
    assert cli.parse_args(["--no-leader-elect"]).leader_elect is False
    monkeypatch.setenv("SLURM_SYNC_LEADER_ELECT", "false")
    assert cli.parse_args([]).leader_elect is False
    monkeypatch.setenv("SLURM_SYNC_LEADER_ELECT", "maybe")
    with pytest.raises(SystemExit, match="expected true or false"):
        cli.parse_args([])


# --- the fence ----------------------------------------------------------------------------------


def test_the_fence_closes_at_the_renew_deadline_counted_from_the_start_of_the_renew(clock: FakeClock) -> None:
    fence = Fence(10, clock)
    assert not fence.open, "no write before the first renew"
    started = clock.now
    clock.now += 3  # the renew took 3 s: its answer comes late, the fence counts from the request
    fence.extend(started)
    assert fence.remaining() == pytest.approx(7)
    clock.now = started + 9.999
    assert fence.open
    clock.now = started + 10
    assert not fence.open, "a leader that missed its renew deadline may not write"
    fence.extend(started - 5)  # an older renew answered late cannot reopen it
    assert not fence.open
    fence.extend(clock.now)
    fence.close()
    assert not fence.open


def test_timeouts_end_when_the_fence_closes() -> None:
    assert clamp_timeout(None, 4.0) == 4.0
    assert clamp_timeout(30, 4.0) == 4.0
    assert clamp_timeout(2, 4.0) == 2.0
    assert clamp_timeout((1, 60), 4.0) == (1.0, 4.0)


class Apiserver:
    """Answers every request with an empty object, and remembers method and path."""

    def __init__(self, server: HTTPServer) -> None:
        self.seen: list[tuple[str, str]] = []
        server.expect_request(re.compile(".*")).respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        self.seen.append((request.method, request.path))
        body = {"items": []} if request.method == "GET" else {"kind": "Pod"}
        return Response(orjson.dumps(body), status=200, content_type="application/json")


@pytest.fixture
def apiserver(httpserver: HTTPServer) -> Apiserver:
    return Apiserver(httpserver)


def test_a_leader_past_its_renew_deadline_sends_no_kubernetes_write(
    apiserver: Apiserver, httpserver: HTTPServer, clock: FakeClock
) -> None:
    api = api_client(httpserver.url_for("/"))
    fence = Fence(10, clock)
    fence_writes(api, fence)
    kube = Kube(api)
    fence.extend(clock.now)
    kube.patch_pod("ns", "gpu-0", {"metadata": {"annotations": {"a": "1"}}})
    clock.now += 10  # renews failed for the whole renew deadline
    assert kube.list_pods("ns", {"app": "slurmd"}) == []  # reads go on (a standby may observe)
    with pytest.raises(NotLeader) as refused:
        kube.patch_pod("ns", "gpu-0", {"metadata": {"annotations": {"a": "2"}}})
    with pytest.raises(ApiException):  # what the loops catch for a failed write
        kube.annotate_nodeset("ns", "gpu", "k", "v")
    assert "does not hold the lease" in str(refused.value) and refused.value.status is None
    assert not Events(kube, clock=clock).normal(pod_ref("ns", "gpu-0"), "SlurmNodeDrained", "note", "Mark")
    assert apiserver.seen == [
        ("PATCH", "/api/v1/namespaces/ns/pods/gpu-0"),
        ("GET", "/api/v1/namespaces/ns/pods"),
    ], "nothing but the read reached the API server after the deadline"


def test_a_kubernetes_write_is_sent_with_a_timeout_ending_at_the_fence(clock: FakeClock) -> None:
    sent: list[Any] = []

    class Inner:
        def request(self, method: str, url: str, **kwargs: Any) -> None:
            sent.append((method, kwargs["_request_timeout"]))

    api = api_client("http://127.0.0.1:9")
    api.rest_client = Inner()  # type: ignore[assignment]
    fence = Fence(10, clock)
    fence_writes(api, fence)
    fence.extend(clock.now - 6)
    api.rest_client.request("PATCH", "http://x/api/v1/pods", _request_timeout=30)
    api.rest_client.request("GET", "http://x/api/v1/pods", _request_timeout=30)
    assert sent == [("PATCH", pytest.approx(4)), ("GET", 30)]


def slurm_server(server: HTTPServer) -> list[tuple[str, str]]:
    """A slurmrestd enough for negotiation, a node listing and node updates; the requests it got."""
    seen: list[tuple[str, str]] = []

    def handle(request: Request) -> Response:
        seen.append((request.method, request.path))
        if request.path == "/openapi/v3":
            return Response(orjson.dumps(spec("v0.0.45")), content_type="application/json")
        if request.method == "GET":
            return Response(orjson.dumps(nodes_body(node("n1"))), content_type="application/json")
        return Response(orjson.dumps({"meta": meta(), "errors": [], "warnings": []}), content_type="application/json")

    server.expect_request(re.compile(".*")).respond_with_handler(handle)
    return seen


def test_a_leader_past_its_renew_deadline_sends_no_slurm_write(httpserver: HTTPServer, clock: FakeClock) -> None:
    seen = slurm_server(httpserver)
    fence = Fence(10, clock)
    fence.extend(clock.now)
    drain = NodeUpdate(state=("DRAIN",), reason="slurm-operator: test")
    with SlurmClient(httpserver.url_for("/"), lambda: "t", write_budget=fence.remaining) as slurm:
        slurm.update_node("n1", drain)
        clock.now += 10
        assert slurm.list_nodes().items  # reads go on
        with pytest.raises(SlurmNotLeader, match="not sent: this replica does not hold the lease"):
            slurm.update_node("n2", drain)
        with pytest.raises(SlurmNotLeader):
            slurm.delete_node("n2")
    assert [(m, p) for m, p in seen if m != "GET"] == [("POST", f"{V}/node/n1")]


def test_a_slurm_write_is_sent_with_a_timeout_ending_at_the_fence(clock: FakeClock) -> None:
    timeouts: list[dict[str, Any]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json=spec("v0.0.45"))
        timeouts.append(dict(request.extensions["timeout"]))
        return httpx.Response(200, json={"meta": meta(), "errors": [], "warnings": []})

    fence = Fence(10, clock)
    fence.extend(clock.now - 7)
    client = SlurmClient(
        "http://slurm", lambda: "t", timeout=10, transport=httpx.MockTransport(handle), write_budget=fence.remaining
    )
    with client:
        client.update_node("n1", NodeUpdate(state=("DRAIN",), reason="x"))
    (timeout,) = timeouts
    assert max(timeout.values()) == pytest.approx(3)


# --- the Lease record, and a renew that conflicts ----------------------------------------------------


def test_an_unreadable_record_counts_as_no_holder() -> None:
    record = read_record({"spec": {"holderIdentity": 7, "leaseDurationSeconds": "15"}, "metadata": None})
    assert (record.holder, record.duration, record.resource_version) == ("", 0.0, "")


def test_a_renew_the_api_server_refuses_leaves_the_fence_as_it_was(clock: FakeClock) -> None:
    settings = LeaseSettings("ns", "l", "me_1")
    elector = LeaseElector(api_client("http://127.0.0.1:9"), settings, Fence(10, clock), clock)
    held = {"metadata": {"resourceVersion": "5"}, "spec": {"holderIdentity": "me_1", "leaseDurationSeconds": 15}}

    def conflict(*_: Any) -> Any:
        raise ApiException(status=409, reason="Conflict")

    elector._get = lambda: held  # type: ignore[method-assign]
    elector._replace = conflict  # type: ignore[method-assign]
    assert not elector.attempt()
    assert not elector.leading and elector.error == "", "a conflict is someone else's write, not a fault"
    elector._get = lambda: (_ for _ in ()).throw(OSError("connection refused"))  # type: ignore[method-assign]
    assert not elector.attempt()
    assert "connection refused" in elector.error


# --- terms of leadership --------------------------------------------------------------------------


class FakeService:
    """Counts passes; run_forever runs until its halt event, as Service.run_forever does."""

    built: ClassVar[list[FakeService]] = []

    def __init__(self) -> None:
        self.passes = 0
        self.closed = False
        self.running = threading.Event()
        self.health = self
        FakeService.built.append(self)

    def ready(self) -> tuple[bool, str]:
        return True, "ok"

    def run_forever(self, halt: threading.Event) -> None:
        while not halt.is_set():
            self.passes += 1
            self.running.set()
            halt.wait(0.01)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def replica(clock: FakeClock) -> Iterator[tuple[Replica, LeaseElector]]:
    FakeService.built = []
    elector = LeaseElector(api_client("http://127.0.0.1:9"), LeaseSettings("ns", "l", "me_1"), Fence(10, clock), clock)
    replica = Replica(elector, FakeService, Metrics())  # type: ignore[arg-type]
    runner = threading.Thread(target=replica.run)
    runner.start()
    yield replica, elector
    replica.stop()
    runner.join(timeout=30)
    assert not runner.is_alive()


def _lead(elector: LeaseElector, clock: FakeClock) -> None:
    elector.fence.extend(clock.now)
    elector._report("")


def _lose(elector: LeaseElector, clock: FakeClock) -> None:
    clock.now += elector.fence.renew_deadline
    elector._report("not renewed")


def test_each_term_starts_from_nothing_and_a_lost_lease_ends_it(
    replica: tuple[Replica, LeaseElector], clock: FakeClock
) -> None:
    replica_, elector = replica
    assert replica_.metrics.leader._value.get() == 0  # type: ignore[attr-defined]
    _lead(elector, clock)
    wait_for(lambda: FakeService.built, lambda b: len(b) == 1 and b[0].running.is_set(), what="a term")
    assert replica_.metrics.leader._value.get() == 1  # type: ignore[attr-defined]
    assert replica_.ready() == (True, "leader me_1: ok")
    _lose(elector, clock)
    first = FakeService.built[0]
    wait_for(lambda: first.closed, bool, what="losing the lease to end the term and drop its state")
    assert replica_.metrics.leader._value.get() == 0  # type: ignore[attr-defined]
    _lead(elector, clock)
    wait_for(lambda: FakeService.built, lambda b: len(b) == 2 and b[1].running.is_set(), what="a second term")
    assert FakeService.built[1] is not first and not FakeService.built[1].closed


def test_a_standby_is_ready_only_while_it_can_read_the_lease(
    replica: tuple[Replica, LeaseElector], clock: FakeClock
) -> None:
    replica_, elector = replica
    assert replica_.ready() == (False, "standby me_1: lease ns/l not read yet")
    elector._get = lambda: {  # type: ignore[method-assign]
        "metadata": {"resourceVersion": "3"},
        "spec": {"holderIdentity": "other_2", "leaseDurationSeconds": 15},
    }
    assert not elector.attempt()
    assert replica_.ready() == (True, "standby me_1: other_2 leads (lease ns/l)")
    elector._get = lambda: (_ for _ in ()).throw(OSError("no route"))  # type: ignore[method-assign]
    elector.attempt()
    ready, text = replica_.ready()
    assert not ready and text.startswith("standby me_1: cannot read lease ns/l: OSError: no route")
    assert FakeService.built == [], "a standby runs no pass"

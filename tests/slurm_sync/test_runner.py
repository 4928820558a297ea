"""Passes on workers (slurm_sync/runner.py) and what they share: a cluster rebuilt or removed mid-pass,
the end of a term, readiness while the loop hangs, calls in flight across retries, the Kubernetes
deadline in wall time, the cache's first listing, the collector's pause (docs/architecture.md §4.2).

Interleavings are forced with events; a wait with a timeout only bounds how long a test looks for
something that must not happen."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pytest_httpserver import HTTPServer

from slurm_sync import service as service_module
from slurm_sync.cache import KubeCache
from slurm_sync.informer import Collection
from slurm_sync.kube import Kube, Page, timed_requests
from slurm_sync.metrics import Metrics
from slurm_sync.operator.discovery import ClusterHandle
from slurm_sync.runner import Outcome, Runner
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import RetryPolicy, SlurmClient
from slurm_sync.slurm.errors import SlurmUnavailable
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_cr, restapi_cr

LOOK = 0.5  # seconds a test looks for what must not happen (it would happen at once)


class Gate:
    """A pass that, for the handles it is told to hold, signals its start and waits to be let go."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.go = threading.Event()
        self.hold: set[str] = set()  # URLs whose pass is held
        self.running: dict[str, int] = {}  # cluster name -> passes running now
        self.overlapped = False  # two passes of one cluster ran side by side
        self.closed_under: list[str] = []  # a pass found its client closed
        self.ran: list[str] = []  # URL of each pass
        self._lock = threading.Lock()

    def __call__(self, handle: ClusterHandle) -> Outcome:
        name = handle.ref.name
        with self._lock:
            self.running[name] = self.running.get(name, 0) + 1
            self.overlapped = self.overlapped or self.running[name] > 1
            self.ran.append(handle.ref.url)
        try:
            if handle.ref.url in self.hold:
                self.entered.set()
                assert self.go.wait(30)
            if handle.client._http.is_closed:
                self.closed_under.append(handle.ref.url)
            return True, True, ""
        finally:
            with self._lock:
                self.running[name] -= 1


@pytest.fixture
def gated(httpserver: HTTPServer) -> Iterator[tuple[FakeKube, Service, Gate]]:
    kube = FakeKube()
    kube.add("controllers", controller_cr("a"))
    kube.add("restapis", restapi_cr("a", "a", "2026-01-01T00:00:00Z"))
    kube.install(httpserver)
    service = Service(Config(namespaces=(NS,)), Kube(api_client(httpserver.url_for("/"))), Metrics())
    gate = Gate()
    service._sync_one = gate  # type: ignore[method-assign]
    try:
        yield kube, service, gate
    finally:
        gate.go.set()
        service.close()


OLD_URL = f"http://a-restapi.{NS}:6820"


def test_a_cluster_rebuilt_mid_pass_runs_one_loop_at_a_time_and_its_client_stays_open(
    gated: tuple[FakeKube, Service, Gate],
) -> None:
    """Discovery builds a cluster's handle anew (its RestApi changed) while its pass runs: the old pass
    keeps its client until it ends (no "pass crashed"), and the new loop starts only then (two loops of
    one cluster would make two writes for one change)."""
    kube, service, gate = gated
    gate.hold.add(OLD_URL)
    service.run_pass(wait=False)
    assert gate.entered.wait(10)
    old = service.clusters.handles[f"{NS}/a"]
    del kube.objects[("restapis", NS, "a")]
    kube.add("restapis", restapi_cr("a2", "a", "2026-01-02T00:00:00Z"))
    service.run_pass(wait=False)
    new = service.clusters.handles[f"{NS}/a"]
    assert new is not old and new.ref.url != OLD_URL
    assert not old.client._http.is_closed  # was closed under the running pass
    (_, runner), *_ = service._clusters.values()
    assert not gate.go.wait(LOOK) and gate.ran == [OLD_URL]  # the new loop waits for the old pass
    gate.go.set()
    runner.join()
    assert gate.ran == [OLD_URL, new.ref.url] and not gate.overlapped
    assert gate.closed_under == [] and old.client._http.is_closed  # closed once its pass ended


def test_a_term_ends_after_the_pass_of_a_cluster_removed_mid_pass(gated: tuple[FakeKube, Service, Gate]) -> None:
    """A term's writes end before its Lease is released: closing the service waits for the pass of a
    cluster discovery dropped meanwhile, as for every other."""
    kube, service, gate = gated
    gate.hold.add(OLD_URL)
    service.run_pass(wait=False)
    assert gate.entered.wait(10)
    handle = service.clusters.handles[f"{NS}/a"]
    del kube.objects[("controllers", NS, "a")]
    service.run_pass(wait=False)
    assert service.clusters.handles == {} and not handle.client._http.is_closed
    closing = threading.Thread(target=service.close)
    closing.start()
    closing.join(LOOK)
    assert closing.is_alive()  # the removed cluster's pass still runs: the term is not over
    gate.go.set()
    closing.join(10)
    assert not closing.is_alive() and handle.client._http.is_closed and gate.closed_under == []


def test_a_closed_runner_starts_no_pass_after_the_running_one() -> None:
    """A pass asked for while one runs follows it, but not once the runner is closed (the end of a term
    would wait for a whole further pass, writes included)."""
    entered, go, passes = threading.Event(), threading.Event(), []

    def run() -> Outcome:
        passes.append(1)
        entered.set()
        go.wait(10)
        return True, True, ""

    runner = Runner("a", run, SlurmClient("http://127.0.0.1:9", lambda: "t").calls)
    first = runner.request()
    assert entered.wait(10)
    assert runner.request() is first  # a second pass to follow
    runner.close(wait=False)
    go.set()
    assert first.result(10) == (True, True, "") and passes == [1]
    assert runner.request().result(0)[2] == "stopped" and not runner.busy


def test_readiness_names_the_loop_hung_outside_any_call(
    gated: tuple[FakeKube, Service, Gate], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's own part of a pass (discovery) is watched like a worker's: hung past its time (here on
    something that is no call to a peer), readiness names it."""
    _, service, _ = gated
    monkeypatch.setattr(service_module, "overdue_after", lambda interval: 0.0)
    entered, go = threading.Event(), threading.Event()

    def hung(plural: str) -> list[dict]:
        entered.set()
        go.wait(10)
        return []

    service._list_custom = hung  # type: ignore[method-assign]
    loop = threading.Thread(target=service.run_pass, kwargs={"wait": False})
    loop.start()
    try:
        assert entered.wait(10)
        ready, why = service.health.ready()
        assert not ready and "discovery: running for" in why, why
    finally:
        go.set()
        loop.join(10)
    assert "discovery: running" not in service.health.ready()[1]


def test_a_slurm_call_stays_in_flight_between_its_tries() -> None:
    """A hung slurmrestd is named all along a call's tries, not only within each try (readiness went
    back to 200 for the first seconds of every retry)."""
    seen: list[str] = []

    def fail(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("hung", request=request)

    client = SlurmClient(
        "http://slurm",
        lambda: "t",
        retry=RetryPolicy(attempts=2),
        sleep=lambda delay: seen.append(client.calls.hung(after=-1)),
        transport=httpx.MockTransport(fail),
    )
    with pytest.raises(SlurmUnavailable):
        client.ping()
    assert len(seen) >= 1 and all(s.startswith("GET /") for s in seen), seen
    assert client.calls.hung(after=-1) == ""


@pytest.fixture
def silent_server() -> Iterator[tuple[str, list[socket.socket]]]:
    """An API server that accepts connections and never answers; the connections it accepted."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", accepted
    finally:
        listener.close()
        for conn in accepted:
            conn.close()


def test_a_kubernetes_read_to_a_hung_api_server_takes_one_deadline(
    silent_server: tuple[str, list[socket.socket]],
) -> None:
    """Every call has a deadline in wall time: urllib3 no longer tries a timed-out GET three more times
    (40 s for the 10 s deadline)."""
    url, accepted = silent_server
    api = api_client(url)
    timed_requests(api, timeout=0.3)
    kube = Kube(api)
    with pytest.raises(Exception) as raised:
        kube.read_pod(NS, "p")
    assert "timed out" in str(raised.value).lower() or "timeout" in type(raised.value).__name__.lower()
    assert len(accepted) == 1  # one try


def test_concurrent_first_reads_of_a_collection_wait_for_its_first_listing() -> None:
    """Clusters' passes read the Nodes side by side: a reader that comes while the first listing runs
    waits for it too, instead of failing its pass with NotSynced."""
    listing, go = threading.Event(), threading.Event()

    def lister(token: str) -> Page:
        listing.set()
        go.wait(10)
        return Page([{"metadata": {"name": "n1", "resourceVersion": "1"}}], "1", "")

    def watcher(stream: Any, version: str, timeout: int) -> Iterator[dict]:
        go.wait(10)
        return iter(())

    cache = KubeCache(lambda: None, sync_timeout=10)
    results: dict[str, object] = {}

    def read(who: str) -> None:
        try:
            results[who] = [o["metadata"]["name"] for o in cache.items(Collection("nodes"), lister, watcher)]
        except Exception as exc:
            results[who] = exc

    first = threading.Thread(target=read, args=("first",))
    first.start()
    assert listing.wait(10)
    second = threading.Thread(target=read, args=("second",))
    second.start()
    second.join(LOOK)
    go.set()
    first.join(10)
    second.join(10)
    cache.close()
    assert results == {"first": ["n1"], "second": ["n1"]}


def test_nodesets_of_a_cluster_removed_mid_pass_are_not_orphaned_until_its_pass_ends(
    gated: tuple[FakeKube, Service, Gate],
) -> None:
    """Retained claims of a NodeSet whose Controller is gone are the loop's to release, but not while the
    dropped cluster's last pass still runs (it releases them too: two writes for one change)."""
    from tests.slurm_sync.kubefixtures import CLUSTER, NODESET_OWNER, nodeset, pvc

    kube, service, gate = gated
    kube.add("controllers", controller_cr(CLUSTER))
    kube.add("restapis", restapi_cr(CLUSTER, CLUSTER, "2026-01-01T00:00:00Z"))
    kube.add("nodesets", nodeset(deleting=True))
    kube.add("persistentvolumeclaims", pvc("data-gpu-0", NODESET_OWNER))
    gate.hold.add(f"http://{CLUSTER}-restapi.{NS}:6820")
    service.run_pass(wait=False)
    assert gate.entered.wait(10)
    del kube.objects[("controllers", NS, CLUSTER)]
    service.run_pass(wait=False)
    assert "ownerReferences" in kube.get("persistentvolumeclaims", NS, "data-gpu-0")["metadata"]
    gate.go.set()
    for _, runner in service._retiring:
        runner.join()
    service.run_pass(wait=False)  # now no pass covers them: released
    assert "ownerReferences" not in kube.get("persistentvolumeclaims", NS, "data-gpu-0")["metadata"]

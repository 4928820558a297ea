"""A storm of changes (issue 28): a pass writes its pods on several workers at once, busiest first (the busiest
while it still plans the others), paced by the client's rate limit, and the leader's write fence still stops
every write, queued ones included, at its deadline (slurm_sync/operator/writes.py, slurm_sync/throttle.py,
slurm_sync/leader.py).

The API server is the client's own REST layer replaced by a recorder (every request the real ``Kube`` makes
reaches it, with the fence and the rate limit in front as in production); Slurm is the loop's fake."""

from __future__ import annotations

import threading
import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest
from kubernetes import client

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.leader import Fence, fence_writes
from slurm_sync.metrics import Metrics
from slurm_sync.operator import plan as planning
from slurm_sync.operator import topology as topology_copy
from slurm_sync.operator.loop import WRITERS, OperatorLoop
from slurm_sync.operator.plan import PodPatch, PodPlan, SlurmAction
from slurm_sync.operator.view import PodView, read_pod
from slurm_sync.slurm.types import NodeUpdate
from slurm_sync.throttle import TokenBucket
from tests.slurm_sync.kubefixtures import (
    CLUSTER,
    NODESET_UID,
    NOW,
    NS,
    FakeSlurm,
    RecordedEvents,
    api_client,
    kube_node,
    node,
    nodeset,
    pod,
)

JSON = dict[str, Any]
BUSY, DRAINED = 12, 12  # pods whose node took a job, pods whose node an administrator drained


def comment(name: str) -> str:
    return f'{{"namespace":"{NS}","podName":"{name}","node":"k1","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'


def storm() -> tuple[list[JSON], FakeSlurm]:
    """Every pod was idle; now the first BUSY nodes run a job and the next DRAINED are drained."""
    pods = [pod(f"gpu-{i}", states=("IDLE",)) for i in range(BUSY + DRAINED)]
    nodes = {f"gpu-{i}": node(f"gpu-{i}", "ALLOCATED", comment=comment(f"gpu-{i}")) for i in range(BUSY)}
    nodes |= {
        f"gpu-{i}": node(f"gpu-{i}", "IDLE", "DRAIN", reason="maint", comment=comment(f"gpu-{i}"))
        for i in range(BUSY, BUSY + DRAINED)
    }
    return pods, FakeSlurm(nodes)


class Answer:
    """What urllib3 answers, as far as the client reads it."""

    def __init__(self, data: bytes) -> None:
        self.status, self.reason, self.data, self.headers = 200, "OK", data, {}

    def drain_conn(self) -> None:
        """Nothing to drain: the answer is read."""

    def release_conn(self) -> None:
        """No connection to give back."""


class Recorder:
    """The client's REST layer: answers the pass's listings, records each write (method, path, body, when it was
    sent) and how many were in flight at once. ``overlap``: the first write is held until a second one arrives
    (so a loop that writes one at a time fails the test instead of passing it by luck), for at most 10 s."""

    def __init__(self, pods: list[JSON], overlap: bool = False) -> None:
        self.pods = pods
        self.writes: list[tuple[str, str, JSON, float]] = []
        self.in_flight = self.most_in_flight = 0
        self._lock = threading.Lock()
        self._second = threading.Event()
        self._overlap = overlap
        self.hold: threading.Event | None = None  # when set up, every write is answered only once it is set

    def request(self, method: str, url: str, headers: Any = None, body: Any = None, **_: Any) -> Any:
        parts = urlsplit(url)
        if method == "GET":
            return client.rest.RESTResponse(Answer(orjson.dumps({"items": self._listing(parts.path, parts.query)})))
        with self._lock:
            self.writes.append((method, parts.path, body, time.monotonic()))
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            first = len(self.writes) == 1
            if len(self.writes) == 2:
                self._second.set()
        if first and self._overlap:
            self._second.wait(10)
        if self.hold is not None:
            self.hold.wait(10)
        with self._lock:
            self.in_flight -= 1
        return client.rest.RESTResponse(Answer(b"{}"))

    def _listing(self, path: str, query: str) -> list[JSON]:
        if path.endswith("/nodesets"):
            return [nodeset()]
        if path == "/api/v1/nodes":
            return [kube_node()]
        selector = parse_qs(query).get("labelSelector", [""])[0]
        return self.pods if selector == f"{names.LABEL_CLUSTER}={CLUSTER}" else []


def operator_loop(api: client.ApiClient, slurm: FakeSlurm, writers: int, throttle: TokenBucket | None = None) -> Any:
    kube = Kube(api, Metrics().count_kube_write, throttle)
    return OperatorLoop(
        CLUSTER,
        NS,
        CLUSTER,
        slurm,  # type: ignore[arg-type]  # FakeSlurm stands in for SlurmClient
        kube,
        Metrics(),
        events=RecordedEvents(),
        now=lambda: NOW,
        writers=writers,
    )


def with_recorder(recorder: Recorder) -> client.ApiClient:
    api = api_client("http://127.0.0.1:9")
    api.rest_client = recorder  # type: ignore[assignment]
    return api


def pod_writes(recorder: Recorder) -> list[tuple[str, str]]:
    """(pod, "meta" or "status") of each pod write, in the order they were sent."""
    found = []
    for _, path, _, _ in recorder.writes:
        if "/pods/" in path:
            name = path.split("/pods/")[1].split("/")[0]
            found.append((name, "status" if path.endswith("/status") else "meta"))
    return found


def pod_view(name: str) -> PodView:
    view = read_pod(pod(name))
    assert view is not None
    return view


def protects(body: JSON) -> bool:
    return body.get("metadata", {}).get("labels", {}).get(names.LABEL_POD_PROTECT) == "true"


def test_a_storm_is_written_on_several_workers_at_once_each_pod_in_its_order() -> None:
    pods, slurm = storm()
    recorder = Recorder(pods, overlap=True)
    looper = operator_loop(with_recorder(recorder), slurm, writers=WRITERS)
    try:
        result = looper.run_pass()
    finally:
        looper.close()
    writes = pod_writes(recorder)
    assert result.ok, result.errors
    assert 1 < recorder.most_in_flight <= WRITERS
    assert sorted(writes) == sorted((p["metadata"]["name"], kind) for p in pods for kind in ("meta", "status"))
    for name in {n for n, _ in writes}:
        assert [k for n, k in writes if n == name] == ["meta", "status"], f"{name}: its label before its conditions"
    assert result.kube_writes == len(writes) + 1  # and the NodeSet's hook-input touch
    assert {n for n, _ in slurm.updates} == set(), "nothing to ask of Slurm: an administrator's drain is kept"


def test_one_writer_writes_busiest_first() -> None:
    pods, slurm = storm()
    recorder = Recorder(pods)
    result = operator_loop(with_recorder(recorder), slurm, writers=1).run_pass()
    protecting = [protects(body) for _, path, body, _ in recorder.writes if "/pods/" in path and "status" not in path]
    assert result.ok and recorder.most_in_flight == 1
    assert protecting == [True] * BUSY + [False] * DRAINED, "every busy pod's label before any other pod's writes"


def test_the_write_order_puts_a_newly_busy_pod_first_then_slurm_work_then_the_rest() -> None:
    label = PodPatch(NS, "b", "", {"metadata": {"labels": {names.LABEL_POD_PROTECT: "true"}}})
    unlabel = PodPatch(NS, "c", "", {"metadata": {"labels": {names.LABEL_POD_PROTECT: None}}})
    drain = SlurmAction("d", NodeUpdate(state=("DRAIN",), reason="x"), lifts_drain=False)
    state = planning.PodState(drained=False, absent=False, states=())
    plans = [
        PodPlan(pod_view("z-rest"), (unlabel,), (), state),
        PodPlan(pod_view("y-slurm"), (), (drain,), state),
        PodPlan(pod_view("x-busy"), (label,), (), state),
        PodPlan(pod_view("a-rest"), (unlabel,), (), state),
    ]
    assert [p.pod.name for p in sorted(plans, key=planning.write_order)] == ["x-busy", "y-slurm", "a-rest", "z-rest"]


def test_no_write_leaves_after_the_fence_closes_not_even_one_queued_behind_the_rate_limit() -> None:
    """A leader whose fence closes half a second into a pass whose writes need more than that at the rate
    limit (24 pods, two writes each, 40 a second after a burst of 4): each write sent went before the
    fence closed, every later one was refused, and none of those pods' Slurm drains was lifted."""
    pods, slurm = storm()
    recorder = Recorder(pods)
    api = with_recorder(recorder)
    fence = Fence(0.5)
    fence_writes(api, fence)
    looper = operator_loop(api, slurm, writers=WRITERS, throttle=TokenBucket(40, 4))
    fence.extend(time.monotonic())
    closes = time.monotonic() + fence.remaining()
    try:
        result = looper.run_pass()
    finally:
        looper.close()
    refused = [e for e in result.errors if e.startswith("patch pod")]
    assert recorder.writes and refused, (len(recorder.writes), result.errors)
    assert all(sent < closes for _, _, _, sent in recorder.writes), "a write left after the fence closed"
    assert len(pod_writes(recorder)) + len(refused) <= 2 * len(pods)
    assert not result.ok


def test_a_busy_pods_label_goes_out_while_the_pass_still_plans_the_others(monkeypatch: Any) -> None:
    """The last pod's planning waits (up to 10 s) for the first write to reach the API server: a pass that
    wrote only once planning had ended would make it wait in vain."""
    pods, slurm = storm()
    recorder = Recorder(pods)
    first_write = threading.Event()
    real_request = recorder.request

    def request(method: str, url: str, **kwargs: Any) -> Any:
        answer = real_request(method, url, **kwargs)
        if method != "GET":
            first_write.set()
        return answer

    recorder.request = request  # type: ignore[method-assign]
    real_plan = topology_copy.plan_pod_with_topology
    seen_while_planning: list[bool] = []

    def plan(pod: Any, *args: Any) -> Any:
        if pod.name == pods[-1]["metadata"]["name"]:
            seen_while_planning.append(first_write.wait(10))
        return real_plan(pod, *args)

    monkeypatch.setattr(topology_copy, "plan_pod_with_topology", plan)
    looper = operator_loop(with_recorder(recorder), slurm, writers=WRITERS)
    try:
        result = looper.run_pass()
    finally:
        looper.close()
    assert result.ok and seen_while_planning == [True]
    assert protects(recorder.writes[0][2]), "the first write is a busy pod's label"


def test_a_pass_that_fails_while_planning_ends_only_after_the_writes_it_started(monkeypatch: Any) -> None:
    """Fail closed: a busy pod's label already on its way when planning fails is answered before the pass
    ends, so no write of the failed pass goes on beside the next one."""
    pods, slurm = storm()
    recorder = Recorder(pods)
    recorder.hold = threading.Event()  # the API server answers the writes half a second after planning fails
    real_plan = topology_copy.plan_pod_with_topology

    def plan(pod: Any, *args: Any) -> Any:
        if pod.name == pods[-1]["metadata"]["name"]:
            assert recorder.hold is not None
            threading.Timer(0.5, recorder.hold.set).start()
            raise RuntimeError("a bug while planning")
        return real_plan(pod, *args)

    monkeypatch.setattr(topology_copy, "plan_pod_with_topology", plan)
    looper = operator_loop(with_recorder(recorder), slurm, writers=WRITERS)
    try:
        with pytest.raises(RuntimeError, match="a bug while planning"):
            looper.run_pass()
        assert recorder.writes and recorder.in_flight == 0, "a started write was still in flight"
    finally:
        looper.close()

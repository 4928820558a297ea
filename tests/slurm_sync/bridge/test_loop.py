"""The bridge loop end to end against the fake apiserver and a stand-in Slurm: the exact requests
of vector 17 (the pods say why nothing is submitted) and vector 18 (PodGroupScheduled), and
readiness that follows only whether Slurm and Kubernetes could be read."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import httpx
import orjson
import pytest
from pytest_httpserver import HTTPServer

from hooks.bridge import workload
from slinky_common import names
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.inflight import InFlight
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service, health_server
from slurm_sync.slurm.client import Snapshot
from slurm_sync.slurm.errors import SlurmError, SlurmNotFound, SlurmRejected, SlurmUnavailable
from slurm_sync.slurm.types import Job, Node, SubmitResult, parse_job, parse_node
from tests.slurm_sync.bridgekube import BNS, BridgeFake, bridge_pod, job_body, kube_node, pod_group, single
from tests.slurm_sync.kubefixtures import api_client

NOW = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
GROUP_PATH = f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{BNS}/podgroups/pg"


@dataclass
class _Watch:
    source: Any

    def poll(self, guard: Any = None) -> Snapshot[Any, Any]:
        items = self.source()
        return Snapshot(MappingProxyType(dict(items)), 1, frozenset(), frozenset())


@dataclass
class StubSlurm:
    """What the bridge loop calls; ``down`` makes every call fail as an unreachable slurmrestd."""

    calls: InFlight = field(default_factory=InFlight)  # none ever in flight: the stub answers at once
    jobs: dict[int, Job] = field(default_factory=dict)
    nodes: dict[str, Node] = field(
        default_factory=lambda: {n: parse_node({"name": n, "state": ["IDLE"]}) for n in ("n1", "n2")}
    )
    refuse: SlurmError | None = None
    down: bool = False
    submitted: list[dict[str, Any]] = field(default_factory=list)
    known_nodes: dict[str, Node] = field(default_factory=dict)  # nodes Slurm has though its listing lacks them
    unlisted: set[int] = field(default_factory=set)  # jobs Slurm has though its listing lacks them
    job_listings: int = 0
    job_reads: list[int] = field(default_factory=list)

    def _check(self) -> None:
        if self.down:
            raise SlurmUnavailable("connection refused")

    def job_watch(self) -> _Watch:
        return _Watch(self._job_listing)

    def _job_listing(self) -> dict[int, Job]:
        self._check()
        self.job_listings += 1
        return {i: j for i, j in self.jobs.items() if i not in self.unlisted}

    def node_watch(self) -> _Watch:
        return _Watch(lambda: (self._check(), self.nodes)[1])

    def get_job(self, job_id: int) -> Job:
        self._check()
        self.job_reads.append(job_id)
        if job_id not in self.jobs:
            raise SlurmNotFound(f"job {job_id}", status=404)
        return self.jobs[job_id]

    def submit_external_job(self, body: dict[str, Any]) -> SubmitResult:
        self._check()
        if self.refuse:
            raise self.refuse
        self.submitted.append(body)
        job_id = 100 + len(self.submitted)
        self.jobs[job_id] = parse_job({"job_id": job_id, "job_state": ["PENDING"], "flags": ["EXTERNAL_JOB"],
                                       "admin_comment": body["admin_comment"]})  # fmt: skip
        return SubmitResult(job_id, "")

    def update_job(self, job_id: int, changes: dict[str, Any]) -> None:
        self._check()

    def get_node(self, name: str) -> Node:
        self._check()
        if name not in self.known_nodes:
            raise SlurmNotFound(f"node {name}", status=404)
        return self.known_nodes[name]

    def partition_names(self) -> frozenset[str]:
        self._check()
        return frozenset({"debug"})

    def close(self) -> None:
        pass


@dataclass
class Rig:
    kube: BridgeFake
    slurm: StubSlurm
    url: str
    metrics: Metrics = field(default_factory=Metrics)

    def loop(self, clock: list[float] | None = None) -> BridgeLoop:
        moments = clock if clock is not None else [0.0]
        return BridgeLoop(
            self.slurm,
            BridgeKube(Kube(api_client(self.url))),
            self.metrics,
            [BNS],  # type: ignore[arg-type]
            now=lambda: NOW,
            clock=lambda: moments[0],
        )

    def user_errors(self, kind: str) -> float:
        return self.metrics.registry.get_sample_value("slurm_sync_bridge_user_errors_total", {"kind": kind}) or 0.0


@pytest.fixture
def rig(httpserver: HTTPServer) -> Iterator[Rig]:
    kube = BridgeFake()
    for n in (1, 2):
        kube.add("nodes", kube_node(f"kn{n}", slurm_name=f"n{n}"))
    kube.install(httpserver)
    yield Rig(kube, StubSlurm(), httpserver.url_for("/"))


def running(job_id: int, nodes: str, pods: list[str]) -> Job:
    return parse_job({"job_id": job_id, "job_state": ["RUNNING"], "nodes": nodes, "flags": ["EXTERNAL_JOB"],
                      "admin_comment": orjson.dumps({"pods": pods}).decode()})  # fmt: skip


def test_pod_group_api_is_the_one_the_pod_hook_reads() -> None:
    assert (workload.POD_GROUP.api_version, workload.POD_GROUP.resource) == ("scheduling.k8s.io/v1alpha2", "podgroups")


def test_vector_18_pod_group_gets_scheduled_once_every_pod_is_bound(rig: Rig) -> None:
    other = {
        "type": "Other",
        "status": "True",
        "reason": "R",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    rig.kube.add("podgroups", pod_group("pg", conditions=[other]))
    pods = [f"{BNS}/a", f"{BNS}/b"]
    body = job_body(pods)
    for name in ("a", "b"):
        rig.kube.add("pods", bridge_pod(name, f"PodGroup.scheduling.k8s.io/{BNS}/pg", body, job_id=7, pod_group="pg",
                                        finalizers=[names.FINALIZER_SCHEDULER]))  # fmt: skip
    rig.slurm.jobs[7] = running(7, "n[1-2]", pods)
    loop = rig.loop()
    assert loop.run_pass().ok  # binds both pods; the PodGroup is read and patched in the same pass
    group_requests = [e[0] for e in rig.kube.writes if "podgroups" in e[1]]
    assert group_requests == ["PATCH"]
    (patch,) = rig.kube.writes_to("/podgroups/")
    assert patch[:3] == ("PATCH", f"{GROUP_PATH}/status", "application/merge-patch+json")
    assert patch[3] == {
        "metadata": {"resourceVersion": "11"},
        "status": {
            "conditions": [
                other,
                {
                    "type": "PodGroupScheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "message": "every pod of the group is bound to a node Slurm allocated",
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                },
            ]
        },
    }
    assert rig.kube.get("podgroups", BNS, "pg")["status"]["conditions"][1]["reason"] == "Scheduled"
    before = len(rig.kube.writes)
    assert loop.run_pass().ok and rig.kube.writes[before:] == []  # remembered: no request at all
    restarted = rig.loop()
    assert restarted.run_pass().ok and rig.kube.writes[before:] == []  # read once, already so: no patch


def test_vector_18_partly_bound_group_is_not_marked_and_a_missing_pod_group_is_no_error(rig: Rig) -> None:
    body = job_body([f"{BNS}/a", f"{BNS}/b"])
    rig.kube.add("pods", bridge_pod("a", "G", body, job_id=7, pod_group="pg", node_name="kn1", phase="Running"))
    rig.kube.add("pods", bridge_pod("b", "G", body, job_id=8, pod_group="pg"))
    rig.slurm.jobs[7] = running(7, "n1", [f"{BNS}/a"])
    rig.slurm.jobs[8] = parse_job({"job_id": 8, "job_state": ["PENDING"], "flags": ["EXTERNAL_JOB"]})
    rig.kube.add("podgroups", pod_group("pg"))
    assert rig.loop().run_pass().ready and rig.kube.writes_to("/podgroups/") == []
    del rig.kube.objects[("podgroups", BNS, "pg")]
    rig.kube.objects[("pods", BNS, "b")]["spec"]["nodeName"] = "kn2"
    assert rig.loop().run_pass().ok  # the PodGroup is gone: nothing to mark, nothing wrong


def test_vector_17_pods_say_why_once_and_the_service_stays_ready(rig: Rig) -> None:
    pods = [f"{BNS}/g{i}" for i in range(3)]
    for name in ("g0", "g1", "g2"):
        rig.kube.add("pods", bridge_pod(name, "G", job_body(pods)))
    service = Service(Config(mode="bridge"), Kube(api_client(rig.url)), rig.metrics, rig.loop())
    assert not service.run_pass()  # a group could not be submitted: `--once` says so ...
    assert service.health.ready() == (True, "ok")  # ... but nothing failed to read: still ready
    assert rig.slurm.submitted == []
    why = (
        "the group needs 3 distinct nodes but only 2 Kubernetes node(s) are bridge nodes mapped to a Slurm node "
        "(kn1, kn2); its job is not submitted"
    )
    for name in ("g0", "g1", "g2"):
        assert rig.kube.pod(name)["metadata"]["annotations"][names.ANNOTATION_SUBMIT_ERROR] == why
    writes = len(rig.kube.writes)
    assert not service.run_pass() and len(rig.kube.writes) == writes  # said once
    assert rig.user_errors("too_few_nodes") == 2
    assert service.health.ready() == (True, "ok")
    # a third bridge node mapped to Slurm: submitted, and the label patch takes the reason away
    rig.slurm.nodes["n3"] = parse_node({"name": "n3", "state": ["IDLE"]})
    rig.kube.add("nodes", kube_node("kn3", slurm_name="n3"))
    assert service.run_pass()
    assert len(rig.slurm.submitted) == 1
    assert names.ANNOTATION_SUBMIT_ERROR not in rig.kube.pod("g0")["metadata"]["annotations"]


def test_readiness_ignores_user_mistakes_and_counts_them(rig: Rig) -> None:
    """An unknown partition (Slurm refuses the job) and a job on a Slurm node no Kubernetes node
    maps to: errors in the pass, counted and logged, the pods told; /readyz stays 200."""
    rig.slurm.refuse = SlurmRejected("Invalid partition name specified", status=500)
    rig.kube.add("pods", single("p1"))
    rig.kube.add("pods", single("p2", job_id=9))
    rig.slurm.jobs[9] = running(9, "n9", [f"{BNS}/p2"])
    service = Service(Config(mode="bridge"), Kube(api_client(rig.url)), rig.metrics, rig.loop())
    server = health_server("127.0.0.1:0", service.health, rig.metrics)
    import threading

    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        assert not service.run_pass()  # problems in the pass (the `--once` exit code) ...
        assert httpx.get(base + "/readyz").status_code == 200  # ... yet ready
        assert (
            rig.kube.pod("p1")["metadata"]["annotations"][names.ANNOTATION_SUBMIT_ERROR]
            == "Slurm refused the job: Invalid partition name specified"
        )
        assert (rig.user_errors("job_refused"), rig.user_errors("unmapped_slurm_node")) == (1, 1)
        metrics = httpx.get(base + "/metrics").text
        assert 'slurm_sync_bridge_user_errors_total{kind="job_refused"} 1.0' in metrics
        rig.slurm.down = True  # now Slurm cannot be read: unready
        assert not service.run_pass()
        assert httpx.get(base + "/readyz").status_code == 503
        rig.slurm.down = False
        rig.kube.failing.add(f"GET /api/v1/namespaces/{BNS}/pods")  # nor can Kubernetes
        result = rig.loop().run_pass()
        assert (result.ready, result.read_ok) == (False, False)
    finally:
        server.shutdown()
        server.server_close()


def test_unknown_partition_of_an_external_node_does_not_make_the_bridge_unready(rig: Rig) -> None:
    conf = "NodeName=ext1 CPUs=2 RealMemory=512 State=External Feature=nope"
    intent = {"name": "ext1", "cpus": 2, "real_memory": 512, "features": ["nope"], "topology": "", "node_conf": conf}
    rig.kube.add("nodes", kube_node("ext1", taint=True, registration=intent))
    result = rig.loop().run_pass()
    assert result.ready and not result.ok and result.user_errors == 1
    assert rig.user_errors("unknown_partition") == 1


def test_an_unreachable_apiserver_fails_the_pass_without_a_write() -> None:
    """Not an ApiException (urllib3's MaxRetryError) while reading Kubernetes: unready, no Slurm write."""
    from tests.slurm_sync.kubefixtures import refused_url

    slurm = StubSlurm(jobs={7: running(7, "n1", [f"{BNS}/p1"])})
    loop = BridgeLoop(slurm, BridgeKube(Kube(api_client(refused_url()))), Metrics(), [BNS], now=lambda: NOW)  # type: ignore[arg-type]
    result = loop.run_pass()
    assert (result.ready, result.read_ok) == (False, False)
    assert result.kube_writes == result.slurm_writes == 0 and slurm.submitted == []
    assert any("reading Kubernetes objects" in e for e in result.errors)


def test_a_registered_node_the_listing_lacks_keeps_its_mark_until_slurm_says_twice_it_has_none(rig: Rig) -> None:
    """An omission is not evidence (docs/architecture.md §4.2): the node is asked for by name, and its mark goes
    only after two not-found answers 5 s apart; a node Slurm still has keeps it."""
    rig.kube.add("nodes", kube_node("ext9", taint=True, registered="ext9"))
    rig.kube.add("nodes", kube_node("ext8", taint=True, registered="ext8"))
    rig.slurm.known_nodes["ext8"] = parse_node({"name": "ext8", "state": ["IDLE"]})  # listed nowhere, yet there
    clock = [100.0]
    loop = rig.loop(clock)
    loop.run_pass()
    assert rig.kube.writes_to("/nodes/") == []
    clock[0] += 6
    loop.run_pass()
    marks = [
        (path.rsplit("/", 1)[-1], body["metadata"]["annotations"]) for _, path, _, body in rig.kube.writes_to("/nodes/")
    ]
    assert marks == [("ext9", {names.ANNOTATION_EXTERNAL_NODE_REGISTERED: None})]


def pending(job_id: int, pods: list[str]) -> Job:
    return parse_job({"job_id": job_id, "job_state": ["PENDING"], "state_reason": "Resources",
                      "flags": ["EXTERNAL_JOB"], "admin_comment": orjson.dumps({"pods": pods}).decode()})  # fmt: skip


def pending_pods(rig: Rig, count: int) -> None:
    for i in range(count):
        rig.kube.add("pods", single(f"p{i}", job_id=200 + i, finalizers=[names.FINALIZER_SCHEDULER]))
        rig.slurm.jobs[200 + i] = pending(200 + i, [f"{BNS}/p{i}"])


def test_many_pending_pods_read_their_jobs_with_one_listing_per_pass(rig: Rig) -> None:
    """200 pending pods cost one job listing per pass (an unchanged listing is one small answer), not 200 GETs:
    the first pass lists (the index), the next ones list again within list_interval instead of asking each job."""
    pending_pods(rig, 200)
    clock = [100.0]
    loop = rig.loop(clock)
    for _ in range(3):
        assert loop.run_pass().ok
        clock[0] += 1  # well within list_interval (30 s)
    assert rig.slurm.job_reads == [] and rig.slurm.job_listings == 3


def test_a_few_pods_beside_a_long_queue_keep_one_get_each(rig: Rig) -> None:
    """Where one listing weighs more than the GETs (9 of our jobs among 100 of other users), each job is asked by id
    (also in a pass that listed for the index) and the listing waits for list_interval."""
    pending_pods(rig, 9)
    for other in range(1000, 1091):
        rig.slurm.jobs[other] = parse_job({"job_id": other, "job_state": ["PENDING"]})
    clock = [100.0]
    loop = rig.loop(clock)
    for _ in range(2):
        assert loop.run_pass().ok
        clock[0] += 1
    assert sorted(rig.slurm.job_reads) == sorted(list(range(200, 209)) * 2) and rig.slurm.job_listings == 1


def test_a_job_the_listing_lacks_is_asked_by_id_and_its_pod_kept(rig: Rig) -> None:
    """An omission is not evidence: a labelled job the listing lacks is read by id; Slurm still has it, so its
    bound, running pod is neither deleted nor released."""
    pending_pods(rig, 9)
    rig.kube.add(
        "pods", single("r", job_id=300, node_name="kn1", phase="Running", finalizers=[names.FINALIZER_SCHEDULER])
    )
    rig.slurm.jobs[300] = running(300, "n1", [f"{BNS}/r"])
    rig.slurm.unlisted.add(300)
    clock = [100.0]
    loop = rig.loop(clock)
    for _ in range(2):
        assert loop.run_pass().ok
        clock[0] += 6  # past the absence proof's 5 s: a not-found answer twice would count as gone
    assert rig.slurm.job_reads == [300, 300] and rig.slurm.job_listings == 2
    assert rig.kube.writes_to("/pods/r") == []

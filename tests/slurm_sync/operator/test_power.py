"""Elastic NodeSets, slurm_sync's side (slurm_sync/operator/power.py): the power report each elastic NodeSet gets
from Slurm's node listing, the nodes resumed after a failed resume, and the step that writes and counts them."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from pytest_httpserver import HTTPServer

from slinky_common import names, slurmstate
from slinky_common.powerreport import PowerReport
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator import power
from slurm_sync.operator.loop import OperatorLoop
from slurm_sync.operator.plan import SlurmView
from slurm_sync.operator.steps import Tally
from slurm_sync.operator.view import ClusterView, PodView, read_nodeset, read_pod
from slurm_sync.slurm.errors import SlurmUnavailable
from slurm_sync.slurm.types import Node, NodeUpdate
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import CLUSTER, NOW, NS, FakeSlurm, api_client, node, nodeset, pod

TIMED_OUT = f"{slurmstate.RESUME_TIMEOUT_REASON} [slurm@2026-01-02T03:04:05]"


def elastic(minimum: int = 1, maximum: int = 5, deleting: bool = False, **annotations: str) -> Any:
    obj = nodeset(deleting=deleting)
    obj["spec"]["elastic"] = {"minReplicas": minimum, "maxReplicas": maximum}
    obj["spec"]["partition"] = {"enabled": True}
    obj["metadata"].setdefault("annotations", {}).update(annotations)
    return read_nodeset(obj)


def listing(*nodes: Node) -> dict[str, Node]:
    return {n.name: n for n in nodes}


T = 1_795_771_000.25  # a pass's wall clock, a quarter second into its second


def test_only_an_elastic_nodesets_on_demand_nodes_are_reported() -> None:
    assert elastic(1, 4).on_demand_nodes == {"gpu-1": 1, "gpu-2": 2, "gpu-3": 3}
    assert read_nodeset(nodeset()).on_demand_nodes == {}


def test_each_listed_node_is_reported_by_what_its_power_state_asks_of_its_pod() -> None:
    nodes = listing(
        node("gpu-0", "IDLE"),  # always on: not reported
        node("gpu-1", "MIXED", "CLOUD", "NOT_RESPONDING", "POWERING_UP"),
        node("gpu-2", "ALLOCATED", "CLOUD"),  # up and running a job
        node("gpu-3", "IDLE", "CLOUD", "POWERED_DOWN"),
        node("gpu-4", "IDLE", "CLOUD", "POWERING_DOWN"),
        node("other-9", "IDLE", "CLOUD", "POWERING_UP"),
    )
    since = (("gpu-1", 1_795_770_990), ("gpu-2", 1_795_770_990))
    previous = PowerReport(up=("gpu-1", "gpu-2"), up_since=since)
    assert power.plan_report(elastic(), nodes, T, previous) == PowerReport(
        ("gpu-1", "gpu-2"), ("gpu-3", "gpu-4"), (), since
    )
    # given a job before Slurm asks for the power-up: in no list (a pod started now would never serve it)
    pending = listing(node("gpu-3", "ALLOCATED", "CLOUD", "POWERED_DOWN"))
    assert power.plan_report(elastic(), pending, T) == PowerReport()


def test_a_node_slurm_powers_up_is_listed_up_from_the_second_after_it_was_first_seen() -> None:
    """Its pod reports that second as its boot time: after Slurm's resume request, and a second or more before its
    registration, which slurmctld would otherwise take for a reboot (slinky_common/powerreport.py)."""
    nodes = listing(node("gpu-1", "IDLE", "CLOUD", "NOT_RESPONDING", "POWERING_UP"))
    first = power.plan_report(elastic(), nodes, T)
    assert first == PowerReport(up_since=(("gpu-1", 1_795_771_000),)), "in no list for now: no pod yet"
    assert power.plan_report(elastic(), nodes, T + 0.7, first) == first  # the same second
    second = power.plan_report(elastic(), nodes, T + 0.75, first)
    assert second == PowerReport(up=("gpu-1",), up_since=(("gpu-1", 1_795_771_000),))
    assert power.plan_report(elastic(), nodes, T + 500, second) == second, "its second is kept while it is up"
    down = listing(node("gpu-1", "IDLE", "CLOUD", "POWERED_DOWN"))
    assert power.plan_report(elastic(), down, T + 600, second) == PowerReport(down=("gpu-1",)), "and dropped after"


def test_a_node_reported_up_before_up_since_existed_stays_up() -> None:
    nodes = listing(node("gpu-1", "ALLOCATED", "CLOUD"))
    assert power.plan_report(elastic(), nodes, T, PowerReport(up=("gpu-1",))) == PowerReport(
        up=("gpu-1",), up_since=(("gpu-1", 1_795_770_999),)
    )


def test_a_node_the_listing_lacks_is_in_no_list() -> None:
    assert power.plan_report(elastic(), listing(node("gpu-2", "IDLE", "CLOUD", "POWERED_DOWN")), T) == PowerReport(
        (), ("gpu-2",), ()
    )


def test_a_failed_resume_is_told_once_the_report_first_lists_it() -> None:
    nodes = listing(
        node("gpu-1", "DOWN", "CLOUD", "POWERED_DOWN", reason=TIMED_OUT),
        node("gpu-2", "DOWN", "CLOUD", "POWERED_DOWN", reason="bad DIMM"),
    )
    report = power.plan_report(elastic(), nodes, T)
    assert report.resume_failed == ("gpu-1", "gpu-2")
    assert power.newly_failed(report, nodes, None) == ("gpu-1",), "an administrator's DOWN is no failed resume"
    assert power.newly_failed(report, nodes, report.value()) == ()


@dataclass
class Recorder:
    annotations: list[tuple[str, str, str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def annotate_nodeset(self, namespace: str, name: str, key: str, value: str) -> None:
        self.annotations.append((namespace, name, key, value))

    def warn(self, ref: Any, reason: str, note: str, action: str = "Sync") -> bool:
        self.warnings.append((reason, note))
        return True


def run_step(
    slurm: FakeSlurm, *nodesets: Any, pods: tuple[PodView, ...] = (), clock: float = T
) -> tuple[Recorder, Tally, Metrics]:
    metrics = Metrics()
    loop = OperatorLoop(CLUSTER, NS, CLUSTER, slurm, Kube(api_client("http://127.0.0.1:9")), metrics, now=lambda: NOW)  # type: ignore[arg-type]
    recorder = Recorder()
    ctx = replace(loop.step_context(), kube=recorder, events=recorder, wall_clock=lambda: clock)  # type: ignore[arg-type]
    cluster = ClusterView(NS, CLUSTER, pods, {n.name: n for n in nodesets}, {}, ())
    tally = Tally()
    power.execute(ctx, cluster, SlurmView(nodes=slurm.nodes, ping=None), tally)
    return recorder, tally, metrics


def test_the_step_writes_a_changed_report_and_counts_the_nodes() -> None:
    slurm = FakeSlurm(
        listing(node("gpu-1", "IDLE", "CLOUD", "POWERING_UP"), node("gpu-2", "IDLE", "CLOUD", "POWERED_DOWN"))
    )
    recorder, tally, metrics = run_step(slurm, elastic(1, 3))
    rising = '{"up":[],"down":["gpu-2"],"resumeFailed":[],"upSince":{"gpu-1":1795771000}}'
    assert recorder.annotations == [(NS, "gpu", names.ANNOTATION_POWER_OBSERVED, rising)]
    assert (tally.kube_writes, tally.errors, tally.watch_power) == (1, [], True)
    assert tally.power_due == 0.75, "the next pass when the next second begins, not a whole POWER_POLL later"
    recorder, tally, metrics = run_step(slurm, elastic(1, 3, **{names.ANNOTATION_POWER_OBSERVED: rising}), clock=T + 1)
    value = '{"up":["gpu-1"],"down":["gpu-2"],"resumeFailed":[],"upSince":{"gpu-1":1795771000}}'
    assert recorder.annotations == [(NS, "gpu", names.ANNOTATION_POWER_OBSERVED, value)]
    gauge = {"cluster": CLUSTER, "namespace": NS, "nodeset": "gpu"}
    assert metrics.registry.get_sample_value("slurm_sync_elastic_nodes", {**gauge, "power": "up"}) == 1.0
    assert metrics.registry.get_sample_value("slurm_sync_elastic_nodes", {**gauge, "power": "down"}) == 1.0
    unchanged, tally, _ = run_step(slurm, elastic(1, 3, **{names.ANNOTATION_POWER_OBSERVED: value}), clock=T + 9)
    assert (unchanged.annotations, tally.kube_writes) == ([], 0)


def test_a_failed_resume_is_told_at_once_and_resumed_once_its_pod_is_gone() -> None:
    """Resumed while the pod that failed it is still there, the node could be given the next job at once, and
    that pod's slurmd can never register it: the resume waits for the pod to go (the hook removes it)."""
    slurm = FakeSlurm(listing(node("gpu-1", "DOWN", "CLOUD", "POWERED_DOWN", reason=TIMED_OUT)))
    stale = read_pod(pod("gpu-1", "gpu-1"))
    assert stale is not None
    recorder, tally, metrics = run_step(slurm, elastic(1, 2), pods=(stale,))
    assert slurm.updates == [] and [reason for reason, _ in recorder.warnings] == ["ResumeFailed"]
    failures = {"cluster": CLUSTER, "namespace": NS, "nodeset": "gpu"}
    assert metrics.registry.get_sample_value("slurm_sync_elastic_resume_failures_total", failures) == 1.0
    reported = elastic(1, 2, **{names.ANNOTATION_POWER_OBSERVED: recorder.annotations[0][3]})
    recorder, tally, metrics = run_step(slurm, reported)
    assert slurm.updates == [("gpu-1", NodeUpdate(state=("RESUME",)))]
    assert tally.slurm_writes == 1 and recorder.warnings == [], "told once"
    assert metrics.registry.get_sample_value("slurm_sync_elastic_resume_failures_total", failures) is None


def test_a_resume_slurm_refuses_is_an_error_of_the_pass_and_the_report_is_still_written() -> None:
    class Refusing(FakeSlurm):
        def update_node(self, name: str, update: NodeUpdate) -> None:
            raise SlurmUnavailable("connection refused")

    slurm = Refusing(listing(node("gpu-1", "DOWN", "CLOUD", "POWERED_DOWN", reason=TIMED_OUT)))
    recorder, tally, _ = run_step(slurm, elastic(1, 2))
    assert tally.errors == ["resume powered-down node gpu-1: connection refused"]
    assert [key for _, _, key, _ in recorder.annotations] == [names.ANNOTATION_POWER_OBSERVED]


def test_no_listing_no_report_and_a_deleting_or_plain_nodeset_gets_none() -> None:
    slurm = FakeSlurm(listing(node("gpu-1", "IDLE", "CLOUD", "POWERING_UP")))
    metrics = Metrics()
    loop = OperatorLoop(CLUSTER, NS, CLUSTER, slurm, Kube(api_client("http://127.0.0.1:9")), metrics, now=lambda: NOW)  # type: ignore[arg-type]
    recorder = Recorder()
    ctx = replace(loop.step_context(), kube=recorder, events=recorder)  # type: ignore[arg-type]
    cluster = ClusterView(NS, CLUSTER, (), {"gpu": elastic(1, 3)}, {}, ())
    power.execute(ctx, cluster, SlurmView(nodes=None, ping=None), Tally())
    assert recorder.annotations == []
    plain, _, _ = run_step(slurm, read_nodeset(nodeset()))
    assert plain.annotations == []
    going, _, _ = run_step(slurm, elastic(1, 3, deleting=True))
    assert going.annotations == []


def test_an_elastic_spec_slurm_sync_cannot_read_gives_no_nodes_to_report() -> None:
    for broken in ({"maxReplicas": "four"}, [], {"maxReplicas": 2, "minReplicas": 3}):
        obj = nodeset()
        obj["spec"]["elastic"] = broken
        assert read_nodeset(obj).on_demand_nodes == {}
    odd = nodeset()
    odd["spec"] = ["not", "an", "object"]
    assert read_nodeset(odd).on_demand_nodes == {}


OURS = f"{names.DRAIN_REASON_PREFIX} Pod is terminating"


def test_a_powered_down_node_left_down_or_drained_by_us_or_a_failed_resume_is_resumed_and_nothing_else() -> None:
    """The preStop of the pod that left (or a drain under way when Slurm powered the node down) would keep Slurm
    from ever powering the node up again; a busy, powering-up, served or always-on node, or an administrator's
    reason, stays."""
    nodes = listing(
        node("gpu-0", "DOWN", "POWERED_DOWN", reason=OURS),  # always on: not ours to power
        node("gpu-1", "DOWN", "CLOUD", "POWERED_DOWN", reason=OURS),
        node("gpu-2", "IDLE", "DRAIN", "CLOUD", "POWERED_DOWN", reason=f"{names.DRAIN_REASON_PREFIX} scale-in"),
        node("gpu-3", "DOWN", "CLOUD", "POWERED_DOWN", reason="bad DIMM"),
        node("gpu-4", "IDLE", "DRAIN", "CLOUD", "POWERING_DOWN", reason=OURS),  # not yet down
        node("gpu-5", "ALLOCATED", "DRAIN", "CLOUD", "POWERED_DOWN", reason=OURS),  # given a job meanwhile
        node("gpu-6", "IDLE", "DRAIN", "CLOUD", "POWERING_UP", "POWERED_DOWN", reason=OURS),
        node("gpu-7", "IDLE", "CLOUD", "POWERED_DOWN"),
        node("gpu-8", "DOWN", "CLOUD", "POWERED_DOWN", reason=TIMED_OUT),
        node("gpu-9", "DOWN", "CLOUD", "POWERED_DOWN", reason=TIMED_OUT),  # its pod is still there
    )
    assert power.to_resume(elastic(1, 10), nodes, {"gpu-9"}) == ("gpu-1", "gpu-2", "gpu-8")


def test_the_step_lifts_our_reason_quietly() -> None:
    slurm = FakeSlurm(listing(node("gpu-1", "DOWN", "CLOUD", "POWERED_DOWN", reason=OURS)))
    recorder, tally, metrics = run_step(slurm, elastic(1, 2))
    assert slurm.updates == [("gpu-1", NodeUpdate(state=("RESUME",)))]
    assert (tally.slurm_writes, recorder.warnings) == (1, [])
    failures = {"cluster": CLUSTER, "namespace": NS, "nodeset": "gpu"}
    assert metrics.registry.get_sample_value("slurm_sync_elastic_resume_failures_total", failures) is None


def test_a_cluster_with_an_elastic_nodeset_is_passed_over_every_power_poll(httpserver: HTTPServer) -> None:
    """Slurm says nothing when it powers a node up and its job waits for the pod: the pass asks for the next one
    POWER_POLL later rather than at the poll interval; once the NodeSet is not elastic, a quiet pass asks none."""
    obj = nodeset()
    obj["spec"]["elastic"] = {"minReplicas": 0, "maxReplicas": 2}
    obj["spec"]["partition"] = {"enabled": True}
    kube = FakeKube()
    kube.add("nodesets", obj)
    kube.install(httpserver)
    slurm = FakeSlurm(
        listing(node("gpu-0", "IDLE", "CLOUD", "POWERED_DOWN"), node("gpu-1", "IDLE", "CLOUD", "POWERED_DOWN"))
    )
    loop = OperatorLoop(
        CLUSTER, NS, CLUSTER, slurm, Kube(api_client(httpserver.url_for("/"))), Metrics(), now=lambda: NOW
    )  # type: ignore[arg-type]
    assert loop.run_pass().follow_up == power.POWER_POLL
    # a node Slurm powers up, not listed up before the next second: the next pass just past that second's start
    rising = Tally(watch_power=True, power_due=0.3)
    assert loop._follow_up(rising) == 0.3 + power.RISING_MARGIN
    del kube.get("nodesets", NS, "gpu")["spec"]["elastic"]
    assert loop.run_pass().follow_up is None

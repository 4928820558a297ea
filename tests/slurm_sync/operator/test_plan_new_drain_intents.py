"""``plan.new_drain_intents``: the pods a pass drains before reading Slurm's listing (issue 28), found from the
objects changed since the last pass only."""

from __future__ import annotations

from slinky_common import names
from slurm_sync.operator import plan
from slurm_sync.operator.view import read_kube_node, read_nodeset, read_pod
from tests.slurm_sync.kubefixtures import kube_node, nodeset, pod
from tests.slurm_sync.operator.planviews import cluster, snode

CORDON = {names.ANNOTATION_POD_CORDON: "true"}
LISTED = {"gpu-0": snode("gpu-0"), "gpu-1": snode("gpu-1")}


def view(obj: dict) -> plan.PodView:
    found = read_pod(obj)
    assert found is not None
    return found


def test_a_changed_pod_now_cordoned_is_found() -> None:
    before = cluster(pod("gpu-0"), pod("gpu-1"))
    found = plan.new_drain_intents(before, [view(pod("gpu-0", annotations=CORDON))], [], [], LISTED)
    assert [(p.name, reason) for p, reason in found] == [("gpu-0", "slurm-operator: Pod (slurm/gpu-0) was cordoned")]


def test_nothing_changed_or_a_change_without_an_intent_finds_nothing() -> None:
    before = cluster(pod("gpu-0"), pod("gpu-1"))
    assert plan.new_drain_intents(before, [], [], [], LISTED) == []
    assert plan.new_drain_intents(before, [view(pod("gpu-1", reason="relabelled"))], [], [], LISTED) == []
    going = view(pod("gpu-0", annotations=CORDON, terminating=True))
    assert plan.new_drain_intents(before, [going], [], [], LISTED) == []


def test_a_nodeset_naming_a_pod_in_its_drain_intents_finds_that_pod() -> None:
    before = cluster(pod("gpu-0"), pod("gpu-1"))
    rolling = read_nodeset(nodeset({"gpu-1": "rolling update to revision abc"}))
    found = plan.new_drain_intents(before, [], [rolling], [], LISTED)
    assert [(p.name, reason) for p, reason in found] == [("gpu-1", "slurm-operator: rolling update to revision abc")]
    unchanged = cluster(pod("gpu-0"), pod("gpu-1"), intents={"gpu-1": "rolling update to revision abc"})
    assert plan.new_drain_intents(unchanged, [], [rolling], [], LISTED) == [], "its intents are the ones read"


def test_a_cordoned_node_finds_the_pods_on_it() -> None:
    before = cluster(pod("gpu-0"), pod("gpu-1", node_name="k2"))
    cordoned = read_kube_node(kube_node("k1", unschedulable=True))
    found = plan.new_drain_intents(before, [], [], [cordoned], LISTED)
    assert [p.name for p, _ in found] == ["gpu-0"]


def test_a_node_drained_for_the_intent_someone_elses_or_unlisted_is_left_to_the_pass() -> None:
    before = cluster(pod("gpu-0"))
    now = view(pod("gpu-0", annotations=CORDON))
    ours = plan.drain_intent(now, cluster(pod("gpu-0", annotations=CORDON)))
    assert ours is not None
    for listed in ({"gpu-0": snode("gpu-0", "IDLE", "DRAIN", reason=ours)},
                   {"gpu-0": snode("gpu-0", "IDLE", "DRAIN", reason="maint: DIMM")}, {}):  # fmt: skip
        assert plan.new_drain_intents(before, [now], [], [], listed) == []
    assert len(plan.new_drain_intents(before, [now], [], [], {"gpu-0": snode("gpu-0")})) == 1

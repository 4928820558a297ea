"""The Node's topology reaches a bound worker pod before Slurm knows its node (docs/architecture.md §4.7)."""

from __future__ import annotations

from slinky_common import names
from slurm_sync.operator import topology as topology_copy
from slurm_sync.operator.plan import PodPlan, SlurmView
from slurm_sync.operator.view import ClusterView
from slurm_sync.slurm.types import Node
from tests.slurm_sync.kubefixtures import NOW, ping, pod
from tests.slurm_sync.operator.planviews import IDLE_POD, TOPO, knode, meta_patches, snode, topology_cluster

COPY = {"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}}
LABELLED = [knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})]


def plan(c: ClusterView, *slurm_nodes: Node, listing: bool = True) -> PodPlan:
    nodes = {n.name: n for n in slurm_nodes} if listing else None
    return topology_copy.plan_pod_with_topology(c.pods[0], c, SlurmView(nodes, ping(("c0", True, True))), NOW)


def test_a_bound_pod_whose_slurmd_has_not_registered_gets_its_nodes_topology():
    """The listing lacks the node (slurmd waits for this very annotation): the main plan writes nothing."""
    p = plan(topology_cluster(pod("gpu-0"), nodes=LABELLED))
    assert meta_patches(p) == [COPY] and p.slurm == ()


def test_without_any_slurm_listing_the_copy_still_happens():
    p = plan(topology_cluster(pod("gpu-0"), nodes=LABELLED), listing=False)
    assert meta_patches(p) == [COPY]


def test_a_registered_pod_gets_one_copy_and_the_slurm_push_from_the_main_plan():
    p = plan(topology_cluster(pod("gpu-0", **IDLE_POD), nodes=LABELLED), snode())
    assert meta_patches(p) == [COPY]
    assert [a.update.topology_str for a in p.slurm] == [TOPO]


def test_nothing_to_copy():
    cases = {
        "already there": topology_cluster(
            pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}), nodes=LABELLED
        ),
        "not bound": topology_cluster(pod("gpu-0", node_name=None, phase="Pending"), nodes=LABELLED),
        "node unlabelled": topology_cluster(pod("gpu-0"), nodes=[knode()]),
        "unsafe spec": topology_cluster(
            pod("gpu-0"), nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: "a b"})]
        ),
        "terminating": topology_cluster(pod("gpu-0", terminating=True), nodes=LABELLED),
    }
    assert {name: meta_patches(plan(c)) for name, c in cases.items()} == {name: [] for name in cases}


def test_the_copy_never_removes_an_annotation():
    c = topology_cluster(pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: "topo-switch:old"}), nodes=[knode()])
    assert topology_copy.topology_patch(c.pods[0], c) is None

"""The pure plan for Slinky's Node-derived steps: topology (pod annotation + topology_str),
`k8s/` features, cordon reasons from Node conditions, the second update after a pod moved, and
pruning of defunct Slurm nodes (DaemonSet mode, NodeNotFound) -- each failing closed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slinky_common import names
from slurm_sync.operator import plan
from slurm_sync.operator.plan import PruneCandidate, SlurmView
from slurm_sync.operator.view import ClusterView
from slurm_sync.slurm.types import Node, NodeUpdate
from tests.slurm_sync.kubefixtures import NODESET_UID, NOW, NS, nodeset, ping, pod
from tests.slurm_sync.operator.planviews import COMMENT, IDLE_POD, TOPO, knode, meta_patches, snode, topology_cluster


def plan_one(c: ClusterView, *slurm_nodes: Node) -> plan.PodPlan:
    return plan.plan_pod(c.pods[0], c, SlurmView({n.name: n for n in slurm_nodes}, ping(("c0", True, True))), NOW)


def updates(p: plan.PodPlan) -> list[NodeUpdate]:
    return [a.update for a in p.slurm]


# --- topology ------------------------------------------------------------------------------


def test_node_topology_is_copied_to_the_pod_and_pushed_to_slurm() -> None:
    c = topology_cluster(pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})])
    p = plan_one(c, snode())
    assert meta_patches(p) == [{"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: TOPO}}}]
    assert updates(p) == [NodeUpdate(topology_str=TOPO)]


def test_topology_already_in_place_writes_nothing() -> None:
    c = topology_cluster(
        pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})],
    )
    # Slurm's order of the items does not matter
    p = plan_one(c, snode(topology="topo-block:b2,topo-switch:s2"))
    assert p.patches == () and p.slurm == ()


def test_topology_is_compared_with_what_was_last_applied_not_slurms_normalised_form() -> None:
    """A topology plugin may report the spec differently from how it was sent: what the loop last
    applied successfully decides; Slurm's value only when nothing was applied (after a restart)."""
    c = topology_cluster(
        pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})],
    )
    normalised = snode(topology="block:b2/switch:s2")
    view = SlurmView({"gpu-0": normalised}, ping(("c0", True, True)))
    assert plan.plan_pod(c.pods[0], c, view, NOW, {"gpu-0": TOPO}).slurm == ()
    assert [a.update for a in plan.plan_pod(c.pods[0], c, view, NOW).slurm] == [NodeUpdate(topology_str=TOPO)]
    # a changed annotation differs from what was applied: sent
    other = "topo-switch:s9,topo-block:b9"
    c2 = topology_cluster(
        pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: other}, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: other})],
    )
    assert [a.update for a in plan.plan_pod(c2.pods[0], c2, view, NOW, {"gpu-0": TOPO}).slurm] == [
        NodeUpdate(topology_str=other)
    ]


def test_k8s_feature_prefix_is_a_shared_name() -> None:
    assert names.K8S_FEATURE_PREFIX == "k8s/"
    assert not hasattr(plan, "K8S_FEATURE_PREFIX")  # one definition, in slinky_common/names.py
    c = topology_cluster(pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: "a100"})])
    assert updates(plan_one(c, snode(features=("gpu",)))) == [
        NodeUpdate(
            features=("gpu", names.K8S_FEATURE_PREFIX + "a100"), features_act=("gpu", names.K8S_FEATURE_PREFIX + "a100")
        )
    ]


def test_topology_differing_in_slurm_only_is_pushed_without_a_pod_patch() -> None:
    c = topology_cluster(
        pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO})],
    )
    p = plan_one(c, snode(topology="topo-switch:s1,topo-block:b1"))
    assert p.patches == () and updates(p) == [NodeUpdate(topology_str=TOPO)]


def test_node_without_topology_removes_the_pod_annotation_and_never_clears_slurm() -> None:
    c = topology_cluster(pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD))
    p = plan_one(c, snode(topology="topo-switch:s1"))
    assert meta_patches(p) == [{"metadata": {"annotations": {names.ANNOTATION_TOPOLOGY_SPEC: None}}}]
    assert p.slurm == ()


@pytest.mark.parametrize("value", ['topo-switch:"s1" State=Down', "a b", "x;y"])
def test_an_unsafe_topology_is_neither_copied_nor_pushed(value: str) -> None:
    """It would end the Topology= item of slurmd's --conf through POD_TOPOLOGY."""
    c = topology_cluster(
        pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: value})],
    )
    p = plan_one(c, snode(topology=TOPO))
    assert p.patches == () and p.slurm == ()


def test_unknown_kubernetes_node_changes_no_topology_or_features() -> None:
    """The pod's Node is not in the listing: unknown, not "no annotation"."""
    c = topology_cluster(pod("gpu-0", annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO}, **IDLE_POD), nodes=[])
    p = plan_one(c, snode(features=("gpu", "k8s/old")))
    assert p.patches == () and p.slurm == ()


def test_terminating_pod_gets_no_topology_or_features() -> None:
    c = topology_cluster(
        pod("gpu-0", terminating=True, **IDLE_POD),
        nodes=[knode(annotations={names.ANNOTATION_TOPOLOGY_SPEC: TOPO, names.ANNOTATION_FEATURES_SPEC: "a"})],
    )
    p = plan_one(c, snode())
    assert all(u.topology_str is None and u.features is None for u in updates(p))
    assert all(names.ANNOTATION_TOPOLOGY_SPEC not in json.dumps(b) for b in meta_patches(p))


# --- features ------------------------------------------------------------------------------


def test_features_become_k8s_features_and_others_are_preserved() -> None:
    c = topology_cluster(
        pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: " a100 , nvlink,a100,,"})]
    )
    p = plan_one(c, snode(features=("gpu", "k8s/old", "fast"), active=("gpu", "k8s/old")))
    assert updates(p) == [
        NodeUpdate(features=("gpu", "fast", "k8s/a100", "k8s/nvlink"), features_act=("gpu", "k8s/a100", "k8s/nvlink"))
    ]


def test_features_equal_as_sets_write_nothing() -> None:
    c = topology_cluster(pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: "b,a"})])
    assert plan_one(c, snode(features=("k8s/a", "gpu", "k8s/b"))).slurm == ()


def test_an_active_feature_missing_is_written() -> None:
    c = topology_cluster(pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: "a"})])
    p = plan_one(c, snode(features=("gpu", "k8s/a"), active=("gpu",)))
    assert updates(p) == [NodeUpdate(features=("gpu", "k8s/a"), features_act=("gpu", "k8s/a"))]


def test_absent_annotation_clears_only_the_k8s_features() -> None:
    c = topology_cluster(pod("gpu-0", **IDLE_POD))
    p = plan_one(c, snode(features=("gpu", "k8s/a", "admin"), active=("k8s/a", "gpu")))
    assert updates(p) == [NodeUpdate(features=("gpu", "admin"), features_act=("gpu",))]


def test_no_k8s_features_and_no_annotation_writes_nothing() -> None:
    assert plan_one(topology_cluster(pod("gpu-0", **IDLE_POD)), snode(features=("gpu", "admin"))).slurm == ()


def test_equals_bearing_feature_is_kept_as_is() -> None:
    c = topology_cluster(
        pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: "gpu=a100"})]
    )
    assert updates(plan_one(c, snode())) == [
        NodeUpdate(features=("gpu", "k8s/gpu=a100"), features_act=("gpu", "k8s/gpu=a100"))
    ]


def test_an_unusable_feature_value_leaves_the_features_alone() -> None:
    c = topology_cluster(
        pod("gpu-0", **IDLE_POD), nodes=[knode(annotations={names.ANNOTATION_FEATURES_SPEC: "ok,bad value"})]
    )
    assert plan_one(c, snode(features=("gpu", "k8s/old"))).slurm == ()


# --- cordon reasons from Node conditions -----------------------------------------------------

PRESSURE = {"type": "MemoryPressure", "status": "True", "reason": "KubeletHasMemoryPressure", "message": "low memory"}
GPU = {"type": "GpuHealthy", "status": "True", "reason": "XidError", "message": "xid\n79"}
READY = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ready"}


def drain_reason(node_obj: dict[str, Any], propagated: tuple[str, ...]) -> str | None:
    c = topology_cluster(pod("gpu-0", **IDLE_POD), nodes=[node_obj], propagated=propagated)
    drains = [u.reason for u in updates(plan_one(c, snode())) if u.state == ("DRAIN",)]
    return drains[0] if drains else None


def test_propagated_condition_is_the_reason() -> None:
    reason = drain_reason(knode(unschedulable=True, conditions=[READY, PRESSURE]), ("MemoryPressure",))
    assert reason == "slurm-operator: (KubeletHasMemoryPressure: low memory)"


def test_multiple_conditions_are_joined_in_the_propagated_lists_order_and_sanitized() -> None:
    """The order of --propagated-node-conditions, as Slinky's nodeset_sync.go (a name listed twice counts once)."""
    reason = drain_reason(
        knode(unschedulable=True, conditions=[PRESSURE, READY, GPU]), ("GpuHealthy", "MemoryPressure", "GpuHealthy")
    )
    assert reason == "slurm-operator: (XidError: xid 79); (KubeletHasMemoryPressure: low memory)"


def test_a_condition_that_is_not_true_gives_the_default_reason() -> None:
    reason = drain_reason(knode(unschedulable=True, conditions=[dict(PRESSURE, status="False")]), ("MemoryPressure",))
    assert reason == f"slurm-operator: Node (k1) was cordoned, Pod ({NS}/gpu-0) must be cordoned"


def test_unlisted_conditions_are_not_propagated() -> None:
    reason = drain_reason(knode(unschedulable=True, conditions=[PRESSURE]), ())
    assert reason == f"slurm-operator: Node (k1) was cordoned, Pod ({NS}/gpu-0) must be cordoned"


def test_the_annotation_overrides_conditions() -> None:
    node_obj = knode(
        unschedulable=True, conditions=[PRESSURE], annotations={names.ANNOTATION_NODE_CORDON_REASON: "rack 7"}
    )
    assert drain_reason(node_obj, ("MemoryPressure",)) == "slurm-operator: rack 7"


def test_conditions_do_not_drain_a_schedulable_node() -> None:
    assert drain_reason(knode(conditions=[PRESSURE]), ("MemoryPressure",)) is None


def test_a_long_condition_reason_is_cut_to_256() -> None:
    long = dict(PRESSURE, message="x" * 400)
    reason = drain_reason(knode(unschedulable=True, conditions=[long]), ("MemoryPressure",))
    assert reason is not None and len(reason) == len("slurm-operator: ") + 256


# --- pod moved to another Kubernetes node ----------------------------------------------------


def moved_comment(node_name: str) -> str:
    return COMMENT.replace('"node":"k1"', f'"node":"{node_name}"')


@pytest.mark.parametrize("state", [("IDLE",), ("UNKNOWN",), ("FUTURE",)])
def test_moved_pod_gets_the_comment_then_idle(state: tuple[str, ...]) -> None:
    p = plan_one(
        topology_cluster(pod("gpu-0", **IDLE_POD)), snode("gpu-0", *state, comment=moved_comment("k0"), features=())
    )
    assert updates(p) == [NodeUpdate(comment=COMMENT), NodeUpdate(state=("IDLE",))]
    assert not p.slurm[1].lifts_drain
    # the IDLE follows the comment: the loop sends it only when the comment update succeeded
    assert p.slurm[1].after_comment and not p.slurm[0].after_comment


@pytest.mark.parametrize(
    ("state", "reason", "intents"),
    [
        (("IDLE", "DRAIN"), "maint", None),  # an administrator's drain
        (("DOWN",), "Node unexpectedly rebooted", None),  # Slurm's own reason
        (("DOWN", "NOT_RESPONDING"), "", None),  # slurmd not back yet
        (("ALLOCATED",), "", None),  # busy
        (("IDLE",), "", {"gpu-0": "scale-in"}),  # we are draining it
        (("IDLE", "FAIL"), "", None),
        (("DOWN",), "", None),  # IDLE would bring a DOWN node up
        (("IDLE", "UNDRAIN"), "", None),
        (("IDLE", "REBOOT_REQUESTED"), "", None),
        (("DOWN", "REBOOT_ISSUED"), "", None),
        (("IDLE", "REBOOT_CANCELED"), "", None),
        (("IDLE", "POWER_DOWN"), "", None),
        (("IDLE", "POWERED_DOWN"), "", None),
        (("IDLE", "POWERING_UP"), "", None),
        (("IDLE", "POWER_UP"), "", None),
    ],
    ids=[
        "admin-drain",
        "slurm-reason",
        "not-responding",
        "busy",
        "drain-intent",
        "fail",
        "down",
        "undrain",
        "reboot-requested",
        "reboot-issued",
        "reboot-canceled",
        "power-down",
        "powered-down",
        "powering-up",
        "power-up",
    ],
)
def test_moved_pod_never_idles_a_node_that_would_lose_something(
    state: tuple[str, ...], reason: str, intents: dict[str, str] | None
) -> None:
    p = plan_one(
        topology_cluster(pod("gpu-0", **IDLE_POD), intents=intents),
        snode("gpu-0", *state, reason=reason, comment=moved_comment("k0"), features=()),
    )
    assert NodeUpdate(state=("IDLE",)) not in updates(p)
    assert NodeUpdate(comment=COMMENT) in updates(p)


@pytest.mark.parametrize(
    "old",
    ["", "not json", moved_comment(""), COMMENT.replace("gpu-0", "gpu-9")],
    ids=["no-comment", "foreign-comment", "no-old-node", "same-node"],
)
def test_first_or_same_node_comment_sends_no_idle(old: str) -> None:
    p = plan_one(topology_cluster(pod("gpu-0", **IDLE_POD)), snode("gpu-0", "DOWN", comment=old, features=()))
    assert updates(p) == [NodeUpdate(comment=COMMENT)]


# --- defunct Slurm node pruning ---------------------------------------------------------------


def ds_nodeset(mode: str = "DaemonSet", prune: str = "NodeNotFound", uid: str = NODESET_UID) -> dict[str, Any]:
    obj = nodeset()
    obj["metadata"]["uid"] = uid
    obj["spec"].update(scalingMode=mode, pruneSlurmNodeRecords=prune)
    return obj


def info(
    pod_name: str = "gpu-old",
    node_name: str = "k9",
    uid: str = NODESET_UID,
    namespace: str = NS,
    nodeset_name: str = "gpu",
) -> str:
    return json.dumps(
        {
            "namespace": namespace,
            "podName": pod_name,
            "node": node_name,
            "nodeSetName": nodeset_name,
            "nodeSetUID": uid,
        },
        separators=(",", ":"),
    )


DEFUNCT = ("DOWN", "NOT_RESPONDING")


def candidates(
    *slurm_nodes: Node,
    nodes: list[dict[str, Any]] | None = None,
    pods: tuple[dict[str, Any], ...] = (),
    nodeset_obj: dict[str, Any] | None = None,
    all_nodes: bool = True,
    listing: bool = True,
) -> tuple[PruneCandidate, ...]:
    c = topology_cluster(
        *pods,
        nodes=nodes if nodes is not None else [knode("k1")],
        nodeset_obj=nodeset_obj or ds_nodeset(),
        all_nodes=all_nodes,
    )
    view = SlurmView({n.name: n for n in slurm_nodes} if listing else None, ping(("c0", True, True)))
    return plan.prune_candidates(c, view)


def test_defunct_node_is_a_prune_candidate() -> None:
    assert candidates(snode("k9", *DEFUNCT, comment=info())) == (
        PruneCandidate("k9", NS, "gpu-old", "gpu", NODESET_UID),
    )


def test_override_that_no_longer_maps_is_pruned() -> None:
    k9 = knode("k9", annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "renamed"})
    assert candidates(snode("old-name", *DEFUNCT, comment=info(node_name="k9")), nodes=[k9]) == (
        PruneCandidate("old-name", NS, "gpu-old", "gpu", NODESET_UID),
    )


@pytest.mark.parametrize(
    "case",
    [
        "node-maps",
        "override-maps",
        "other-node-maps",
        "pod-listed",
        "name-in-use",
        "no-node",
        "idle",
        "down-responding",
        "other-uid",
        "other-nodeset",
        "other-namespace",
        "foreign-comment",
        "busy",
    ],
)
def test_prune_skips(case: str) -> None:
    slurm_name, comment, state = "k9", info(), DEFUNCT
    nodes = [knode("k1")]
    pods: tuple[dict[str, Any], ...] = ()
    if case == "node-maps":
        nodes.append(knode("k9.example.com"))
    elif case == "override-maps":
        nodes.append(knode("k9", annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "k9"}))
        nodes.append(knode("elsewhere"))
    elif case == "other-node-maps":
        nodes.append(knode("k5", annotations={names.ANNOTATION_HOSTNAME_OVERRIDE: "k9"}))
    elif case == "pod-listed":
        pods = (pod("gpu-old", "other"),)
    elif case == "name-in-use":
        pods = (pod("gpu-new", "k9"),)
    elif case == "no-node":
        comment = info(node_name="")
    elif case == "idle":
        state = ("IDLE",)
    elif case == "down-responding":
        state = ("DOWN",)
    elif case == "other-uid":
        comment = info(uid="uid-of-an-older-nodeset")
    elif case == "other-nodeset":
        comment = info(nodeset_name="cpu")
    elif case == "other-namespace":
        comment = info(namespace="elsewhere")
    elif case == "foreign-comment":
        comment = "rack 7"
    elif case == "busy":
        state = ("DOWN", "NOT_RESPONDING", "COMPLETING")
    assert candidates(snode(slurm_name, *state, comment=comment), nodes=nodes, pods=pods) == ()


@pytest.mark.parametrize(
    "gate",
    [{"mode": "StatefulSet"}, {"prune": "Never"}, {"uid": ""}],
    ids=["statefulset-mode", "gate-off", "no-uid"],
)
def test_prune_needs_daemonset_mode_and_node_not_found(gate: dict[str, str]) -> None:
    assert (
        candidates(
            snode("k9", *DEFUNCT, comment=info(uid=gate.get("uid", NODESET_UID))), nodeset_obj=ds_nodeset(**gate)
        )
        == ()
    )


def test_prune_fails_closed_without_either_listing() -> None:
    defunct = snode("k9", *DEFUNCT, comment=info())
    assert candidates(defunct, listing=False) == ()
    assert candidates(defunct, all_nodes=False) == ()

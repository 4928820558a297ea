"""The bridge's node path as a pure function (slurm_sync/bridge/nodes.py): our taint only where Slurm knows
the node, drains only ours lifted, and external registration that never deletes what is not EXTERNAL and
registers nothing it cannot check (unknown partitions, an unreadable intent)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

from slinky_common import names
from slurm_sync.bridge.nodes import (
    CreateNode,
    DeleteNode,
    MarkRegistered,
    NodeActions,
    SlurmNodeChange,
    TaintPatch,
    is_ours,
    needs_partitions,
    parse_taint,
    plan_nodes,
)
from slurm_sync.bridge.view import BridgeNode, read_node
from slurm_sync.slurm.types import Node, NodeUpdate, parse_node
from tests.slurm_sync.bridgekube import OUR_TAINT, SCHED, kube_node

PREFIX = names.BRIDGE_DRAIN_REASON_PREFIX
KEY = names.TAINT_MANAGED_NODE
INTENT: dict[str, Any] = {
    "name": "ext1",
    "cpus": 2,
    "real_memory": 512,
    "features": ["p2", "p1"],
    "topology": "topo-switch:s1",
    "node_conf": "NodeName=ext1 CPUs=2 RealMemory=512 State=External Feature=p1,p2",
}


def snode(name: str, *state: str, reason: str = "", **fields: Any) -> Node:
    return parse_node({"name": name, "state": list(state), "reason": reason, **fields})


def external(*state: str, **fields: Any) -> Node:
    """ext1 as Slurm lists it once registered as INTENT says (``fields`` change it)."""
    base: dict[str, Any] = {"cpus": 2, "real_memory": 512, "features": ["p1", "p2"], "topology": "topo-switch:s1"}
    return snode("ext1", *(state or ("IDLE",)), "EXTERNAL", **(base | fields))


def registering(intent: Any = INTENT, **kw: Any) -> BridgeNode:
    node = read_node(kube_node("ext1", **kw))
    text = intent if isinstance(intent, str) else orjson.dumps(intent).decode()
    return replace(node, registration=text)


def nothing_but(actions: NodeActions, **wanted: list[Any]) -> None:
    """Every list of ``actions`` is empty but the ones named (which equal what is given)."""
    lists = {k: getattr(actions, k) for k in ("taints", "slurm", "creates", "deletes", "marks", "errors")}
    assert lists == {k: wanted.get(k, []) for k in lists}


# --- our drains and our taint -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "ours"), [(f"{PREFIX} x", True), (PREFIX, True), ("", False), ("admin", False), (f"x {PREFIX}", False)]
)
def test_a_drain_is_ours_only_by_its_reason_prefix(reason: str, ours: bool) -> None:
    assert is_ours(reason) is ours


@pytest.mark.parametrize(
    ("text", "taint"),
    [
        (f"{KEY}={SCHED}:NoExecute", OUR_TAINT),
        (f"{KEY}=:NoSchedule", {"key": KEY, "value": "", "effect": "NoSchedule"}),
        (f"{KEY}=a:b:NoExecute", {"key": KEY, "value": "a:b", "effect": "NoExecute"}),
        (f"{KEY}={SCHED}:", None),  # no effect
        (f"{KEY}={SCHED}", None),  # no effect at all: the value is not an effect
        (f"{KEY}={SCHED}:NoWhere", None),  # an effect the API server refuses
        (f"{KEY}:NoExecute", None),  # no value: not read as our key
        ("", None),
    ],
)
def test_a_taint_is_read_as_key_value_effect_for_our_key(text: str, taint: dict[str, str] | None) -> None:
    assert parse_taint(text) == taint


def test_the_taint_goes_when_slurm_does_not_know_the_node_and_other_taints_stay() -> None:
    other = {"key": "x", "value": "y", "effect": "NoSchedule"}
    node = read_node(kube_node("kn1", slurm_name="n1", taint=True, taints=[other, OUR_TAINT]))
    nothing_but(plan_nodes([node], {}, None), taints=[TaintPatch(node, (other,))])
    nothing_but(plan_nodes([node], {"n1": snode("n1", "IDLE")}, None))  # already as wanted: no write


def test_a_changed_effect_or_a_duplicate_of_our_taint_is_rewritten_to_the_one_wanted() -> None:
    stale = dict(OUR_TAINT, effect="NoSchedule")
    for taints in ([stale], [OUR_TAINT, OUR_TAINT]):
        node = read_node(kube_node("kn1", slurm_name="n1", taint=True, taints=taints))
        assert plan_nodes([node], {"n1": snode("n1", "IDLE")}, None).taints == [TaintPatch(node, (OUR_TAINT,))]


def test_an_unreadable_taint_intent_is_no_taint_of_ours() -> None:
    node = read_node(kube_node("kn1", slurm_name="n1", taints=[OUR_TAINT]))
    node = replace(node, desired_taint="someone.else/key=v:NoExecute")
    assert plan_nodes([node], {"n1": snode("n1", "IDLE")}, None).taints == [TaintPatch(node, ())]


def test_a_drain_already_in_force_is_not_sent_again_and_one_being_lifted_is() -> None:
    cordoned = read_node(kube_node("kn1", slurm_name="n1", taint=True, taints=[OUR_TAINT], drain=f"{PREFIX} c"))
    nothing_but(plan_nodes([cordoned], {"n1": snode("n1", "IDLE", "DRAIN", reason="admin")}, None))
    lifting = {"n1": snode("n1", "IDLE", "DRAIN", "UNDRAIN", reason=f"{PREFIX} c")}
    change = SlurmNodeChange("n1", NodeUpdate(state=("DRAIN",), reason=f"{PREFIX} c"))
    nothing_but(plan_nodes([cordoned], lifting, None), slurm=[change])


def test_no_drain_or_undrain_without_the_managed_intent_or_a_slurm_node() -> None:
    unmanaged = read_node(kube_node("kn1", slurm_name="n1", drain=f"{PREFIX} c"))  # no desired taint
    ours_drained = {"n1": snode("n1", "IDLE", "DRAIN", reason=f"{PREFIX} c")}
    nothing_but(plan_nodes([unmanaged], {"n1": snode("n1", "IDLE")}, None))
    nothing_but(plan_nodes([read_node(kube_node("kn1", slurm_name="n1"))], ours_drained, None))
    absent = read_node(kube_node("kn1", slurm_name="n1", taint=True, drain=f"{PREFIX} c"))
    nothing_but(plan_nodes([absent], {}, None))  # Slurm does not know it: nothing to drain, no taint


# --- external registration ---------------------------------------------------------------------------


@pytest.mark.parametrize("intent", ["{not json", "null", "[]", '"ext1"', '{"name": "ext1"}', '{"node_conf": "x"}'])
def test_an_unreadable_registration_intent_registers_nothing_and_says_so(intent: str) -> None:
    node = registering(intent)
    actions = plan_nodes([node], {}, frozenset({"p1", "p2"}))
    assert (actions.creates, actions.slurm, actions.deletes, actions.marks) == ([], [], [], [])
    assert [e.kind for e in actions.errors] == ["bad_registration"]
    assert actions.errors[0].startswith("node ext1: unreadable registration intent: ")


def test_a_new_external_node_is_created_only_when_every_partition_is_known_to_exist() -> None:
    node = registering()
    nothing_but(
        plan_nodes([node], {}, frozenset({"p1", "p2", "debug"})), creates=[CreateNode("ext1", INTENT["node_conf"])]
    )
    unknown = plan_nodes([node], {}, None)
    assert (unknown.creates, [(e.kind, str(e)) for e in unknown.errors]) == (
        [],
        [("partitions_unknown", "node ext1: Slurm partitions unknown; not registering")],
    )
    missing = plan_nodes([node], {}, frozenset({"debug"}))
    assert [(e.kind, str(e)) for e in missing.errors] == [
        ("unknown_partition", "node ext1: could not validate partition(s) p1, p2: not found in Slurm")
    ]
    assert missing.creates == []


def test_a_slurm_node_of_the_same_name_that_is_not_external_is_never_touched() -> None:
    node = registering(registered="ext1")
    actions = plan_nodes([node], {"ext1": snode("ext1", "IDLE", cpus=8, real_memory=64)}, frozenset({"p1", "p2"}))
    assert (actions.slurm, actions.creates, actions.deletes, actions.marks) == ([], [], [], [])
    assert [(e.kind, str(e)) for e in actions.errors] == [
        ("slurm_node_not_external", "node ext1: Slurm node ext1 exists and is not EXTERNAL; not registering it")
    ]


def test_the_topology_is_updated_in_place_and_the_node_marked_registered() -> None:
    node = registering()
    moved = external(topology="topo-switch:s9")
    nothing_but(
        plan_nodes([node], {"ext1": moved}, frozenset({"p1", "p2"})),
        slurm=[SlurmNodeChange("ext1", NodeUpdate(topology_str="topo-switch:s1"))],
        marks=[MarkRegistered(node, "ext1")],
    )
    # no partition is needed for that
    topology_only = plan_nodes([registering(registered="ext1")], {"ext1": external(topology="")}, None)
    nothing_but(topology_only, slurm=[SlurmNodeChange("ext1", NodeUpdate(topology_str="topo-switch:s1"))])


def test_changed_partitions_re_create_the_node_as_slurm_joins_nodesets_only_at_creation() -> None:
    """Slurm 26.05.5 puts a node in a NodeSet's partition (Feature=) only when it creates it: new features, once
    every partition exists, drain the node with our reason, wait for its jobs, then delete it (re-added next)."""
    node = registering(registered="ext1")
    reason = f"{PREFIX} re-creating external node ext1 (its partitions changed)"
    drain = SlurmNodeChange("ext1", NodeUpdate(state=("DRAIN",), reason=reason))
    known = frozenset({"p1", "p2"})
    nothing_but(plan_nodes([node], {"ext1": external(features=["p1"])}, known), slurm=[drain])
    nothing_but(plan_nodes([node], {"ext1": external("MIXED", "DRAIN", features=["p1"])}, known))  # jobs run: wait
    idle = plan_nodes([node], {"ext1": external("IDLE", "DRAIN", features=["p1"])}, known)
    nothing_but(idle, deletes=[DeleteNode("ext1")])


def test_changed_features_with_unknown_partitions_are_not_sent_but_the_registration_is_marked() -> None:
    node = registering()
    actions = plan_nodes([node], {"ext1": external(features=["p1"])}, None)
    assert (actions.slurm, actions.deletes, actions.marks) == ([], [], [MarkRegistered(node, "ext1")])
    assert [e.kind for e in actions.errors] == ["partitions_unknown"]


def test_different_cpus_or_memory_drain_with_our_reason_then_wait_then_delete() -> None:
    node = registering(registered="ext1", drain=f"{PREFIX} cordoned", taint=True, taints=[OUR_TAINT])
    reason = f"{PREFIX} re-creating external node ext1 (cpus or memory changed)"
    drain = SlurmNodeChange("ext1", NodeUpdate(state=("DRAIN",), reason=reason))
    nothing_but(plan_nodes([node], {"ext1": external(real_memory=1024)}, None), slurm=[drain])
    nothing_but(plan_nodes([node], {"ext1": external("MIXED", "DRAIN", cpus=4)}, None))  # jobs still run: wait
    nothing_but(plan_nodes([node], {"ext1": external("IDLE", "DRAIN", cpus=4)}, None), deletes=[DeleteNode("ext1")])


def test_a_node_whose_intent_went_is_drained_with_our_reason_and_a_registration_not_ours_is_forgotten() -> None:
    gone = read_node(kube_node("ext1", registered="ext1"))
    drain = SlurmNodeChange("ext1", NodeUpdate(state=("DRAIN",), reason=f"{PREFIX} removing external node ext1"))
    nothing_but(plan_nodes([gone], {"ext1": external()}, None), slurm=[drain])
    nothing_but(plan_nodes([gone], {"ext1": snode("ext1", "IDLE")}, None), marks=[MarkRegistered(gone, None)])
    nothing_but(plan_nodes([read_node(kube_node("ext1"))], {"ext1": external()}, None))  # never registered by us


def test_nodes_are_planned_in_name_order_and_partitions_are_needed_only_for_a_registration() -> None:
    a, b = registering(), replace(registering(), name="a-first")
    assert [e.split(":")[0] for e in plan_nodes([a, b], {}, None).errors] == ["node a-first", "node ext1"]
    plain = read_node(kube_node("kn1", taint=True))
    assert needs_partitions([plain, a]) and not needs_partitions([plain]) and not needs_partitions([])

"""The bridge's node path as a pure function: (Kubernetes nodes, Slurm nodes, partitions) -> actions.

It executes what the node decorator published (hooks/bridge/node.py):

* the managed-node taint, only on nodes Slurm knows (vector 22), removed when the intent goes;
* DRAIN for a cordoned node; UNDRAIN only a drain that is ours (its reason starts with
  names.BRIDGE_DRAIN_REASON_PREFIX), never an administrator's (vector 23);
* external registration (vector 24): `new/node` once every partition exists, topology updated in
  place, drain-wait-delete-re-add when cpus, memory or features (its partitions) differ, drain then
  delete when the intent goes; a node that is not EXTERNAL in Slurm is never deleted.

The caller plans nothing when the Slurm node listing failed (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from slinky_common import names, slurmstate
from slurm_sync.bridge.plan import Problem
from slurm_sync.bridge.view import BridgeNode
from slurm_sync.slurm.types import Node, NodeUpdate

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class TaintPatch:
    node: BridgeNode
    taints: tuple[JSON, ...]  # the node's complete new taint list


@dataclass(frozen=True)
class SlurmNodeChange:
    name: str
    update: NodeUpdate


@dataclass(frozen=True)
class CreateNode:
    name: str
    node_conf: str


@dataclass(frozen=True)
class DeleteNode:
    name: str


@dataclass(frozen=True)
class MarkRegistered:
    node: BridgeNode
    value: str | None  # the Slurm name, or None to remove the annotation


@dataclass
class NodeActions:
    taints: list[TaintPatch] = field(default_factory=list)
    slurm: list[SlurmNodeChange] = field(default_factory=list)
    creates: list[CreateNode] = field(default_factory=list)
    deletes: list[DeleteNode] = field(default_factory=list)
    marks: list[MarkRegistered] = field(default_factory=list)
    errors: list[Problem] = field(default_factory=list)


def is_ours(reason: str) -> bool:
    """A drain the bridge may lift: its reason carries our prefix (names.BRIDGE_DRAIN_REASON_PREFIX).

    Stricter than slurm-bridge on purpose (Slinky's slurm-bridge also undrains an empty reason). A
    drain with no reason proves nothing about who set it (an administrator's bare
    ``scontrol update state=drain``, or a reason Slurm cleared), and lifting someone else's
    drain puts a node back into service that was taken out for a reason, so it stays.
    """
    return reason.startswith(names.BRIDGE_DRAIN_REASON_PREFIX)


TAINT_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})


def parse_taint(text: str) -> JSON | None:
    """``<key>=<value>:<effect>`` for our key only (we never manage anyone else's taint), with an effect the API
    server accepts: anything else would be refused on every pass, so it is no taint at all."""
    key, _, rest = text.partition("=")
    value, colon, effect = rest.rpartition(":")
    if key != names.TAINT_MANAGED_NODE or not colon or effect not in TAINT_EFFECTS:
        return None
    return {"key": key, "value": value, "effect": effect}


def plan_nodes(
    nodes: Iterable[BridgeNode],
    slurm: Mapping[str, Node],
    partitions: frozenset[str] | None,
    gone: frozenset[str] = frozenset(),
) -> NodeActions:
    """``partitions``: None when not read (then no registration that needs them is attempted). ``gone``: the
    registered nodes Slurm said, asked by name, it no longer has (slurm_sync/proof.py); one the listing merely
    lacks keeps its mark until then."""
    out = NodeActions()
    for node in sorted(nodes, key=lambda n: n.name):
        _taint(node, slurm.get(node.slurm_name), out)
        registering = _registration(node, slurm, partitions, gone, out)
        if not registering and node.desired_taint and node.slurm_name in slurm:
            _drain(node, slurm[node.slurm_name], out)
    return out


def _taint(node: BridgeNode, slurm_node: Node | None, out: NodeActions) -> None:
    want = parse_taint(node.desired_taint) if node.desired_taint and slurm_node is not None else None
    others = tuple(t for t in node.taints if t.get("key") != names.TAINT_MANAGED_NODE)
    ours = [dict(t) for t in node.taints if t.get("key") == names.TAINT_MANAGED_NODE]
    if ours != ([want] if want else []):
        out.taints.append(TaintPatch(node, others + ((want,) if want else ())))


def _drain(node: BridgeNode, slurm_node: Node, out: NodeActions) -> None:
    drain = slurmstate.is_drain(slurm_node.state)
    if node.drain_reason and not drain:
        out.slurm.append(SlurmNodeChange(slurm_node.name, NodeUpdate(state=("DRAIN",), reason=node.drain_reason)))
    elif not node.drain_reason and drain and is_ours(slurm_node.reason):
        out.slurm.append(SlurmNodeChange(slurm_node.name, NodeUpdate(state=("UNDRAIN",))))


def _registration(
    node: BridgeNode,
    slurm: Mapping[str, Node],
    partitions: frozenset[str] | None,
    gone: frozenset[str],
    out: NodeActions,
) -> bool:
    """External registration; True while it drains or removes the node (drain rules then wait)."""
    if node.registration is None:
        return _unregister(node, slurm, gone, out)
    try:
        intent = orjson.loads(node.registration)
        name, conf = str(intent["name"]), str(intent["node_conf"])
        features = tuple(sorted(intent.get("features") or ()))
    except (orjson.JSONDecodeError, KeyError, TypeError) as err:
        out.errors.append(Problem(f"node {node.name}: unreadable registration intent: {err}", "bad_registration"))
        return False
    existing = slurm.get(name)
    if existing is None:
        if _partitions_ok(node, features, partitions, out):
            out.creates.append(CreateNode(name, conf))
        return False
    if "EXTERNAL" not in existing.state:
        out.errors.append(
            Problem(
                f"node {node.name}: Slurm node {name} exists and is not EXTERNAL; not registering it",
                "slurm_node_not_external",
            )
        )
        return False
    if (existing.cpus, existing.real_memory) != (intent.get("cpus"), intent.get("real_memory")):
        _remove(existing, f"re-creating external node {name} (cpus or memory changed)", out)
        return True
    if tuple(sorted(existing.features)) != features and _partitions_ok(node, features, partitions, out):
        # Slurm 26.05.5 puts a node in a NodeSet's partition (Feature=) only when it creates the node, not when
        # its features change (seen on the cluster lab; SchedMD's fix of 2026-05-21 is not in that release)
        _remove(existing, f"re-creating external node {name} (its partitions changed)", out)
        return True
    topology = intent.get("topology") or ""
    if existing.topology != topology:
        out.slurm.append(SlurmNodeChange(name, NodeUpdate(topology_str=topology)))
    if node.registered != name:
        out.marks.append(MarkRegistered(node, name))
    return False


def _unregister(node: BridgeNode, slurm: Mapping[str, Node], gone: frozenset[str], out: NodeActions) -> bool:
    if node.registered is None:
        return False
    existing = slurm.get(node.registered)
    if existing is not None and "EXTERNAL" in existing.state:
        _remove(existing, f"removing external node {existing.name}", out)
        return True
    if existing is not None or node.registered in gone:
        out.marks.append(MarkRegistered(node, None))  # not ours to delete, or proven gone
    return False


def unproven_registered(nodes: Iterable[BridgeNode], slurm: Mapping[str, Node]) -> frozenset[str]:
    """Registered nodes no longer wanted that the listing lacks: Slurm is asked about each by name."""
    return frozenset(
        n.registered for n in nodes if n.registration is None and n.registered and n.registered not in slurm
    )


def _remove(existing: Node, why: str, out: NodeActions) -> None:
    """Drain, wait until nothing runs, then delete."""
    if not slurmstate.is_drain(existing.state):
        reason = f"{names.BRIDGE_DRAIN_REASON_PREFIX} {why}"
        out.slurm.append(SlurmNodeChange(existing.name, NodeUpdate(state=("DRAIN",), reason=reason)))
    elif not slurmstate.is_busy(existing.state):
        out.deletes.append(DeleteNode(existing.name))


def _partitions_ok(
    node: BridgeNode, wanted: tuple[str, ...], partitions: frozenset[str] | None, out: NodeActions
) -> bool:
    if partitions is None:
        out.errors.append(Problem(f"node {node.name}: Slurm partitions unknown; not registering", "partitions_unknown"))
        return False
    missing = sorted(set(wanted) - partitions)
    if missing:
        out.errors.append(
            Problem(
                f"node {node.name}: could not validate partition(s) {', '.join(missing)}: not found in Slurm",
                "unknown_partition",
            )
        )
        return False
    return True


def needs_partitions(nodes: Iterable[BridgeNode]) -> bool:
    return any(n.registration for n in nodes)

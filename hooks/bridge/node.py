"""The bridge node decorator: publish what slurm_sync must make true for a bridge node.

Two DecoratorControllers (bridge workers, external nodes) call these routes; the answer depends
only on the node's own labels, so both agree on a node that has both. A decorator cannot change a
node's spec, so every intent is an annotation that slurm_sync executes (`names.*` spell the keys):

* ANNOTATION_DESIRED_TAINT `<key>=<scheduler>:NoExecute` on every bridge node (either label).
  slurm_sync adds that taint to `spec.taints` once the node's Slurm node exists (Slinky taints
  only nodes Slurm knows), and removes it when the annotation is gone.
* ANNOTATION_DRAIN_INTENT, the drain reason (prefix `slurm-bridge:`), while the node is cordoned.
  slurm_sync drains the Slurm node (unless already DRAIN); without the annotation it undrains only
  a drain whose reason starts with `slurm-bridge:` or is empty, never an administrator's.
* ANNOTATION_EXTERNAL_NODE_INTENT (JSON, sorted keys) on nodes labelled LABEL_EXTERNAL_NODE:
  `name` (Slurm node name: LABEL_SLURM_NODE_NAME, else the node name), `cpus` and `real_memory`
  (MiB) from the node's capacity (and its first InternalIP as NodeAddr), `features` (the partitions from
  ANNOTATION_EXTERNAL_NODE_PARTITIONS; slurm_sync checks each exists in Slurm), `topology`, and
  `node_conf`, the line for `POST /new/node`. slurm_sync registers the node, re-creates it (drain,
  wait, delete, add) when cpus, memory or features differ, updates the topology in place, sets
  ANNOTATION_EXTERNAL_NODE_REGISTERED to the Slurm name while it exists as EXTERNAL, and drains then
  deletes it when the intent is gone. A malformed partition list or topology publishes
  ANNOTATION_NODE_ERROR and no registration intent. A node whose capacity (cpu and memory) is not
  known leaves both keys as they are: missing input must neither re-create nor delete the node; one
  whose capacity is no quantity or more than Slurm holds (quantity.MAX_CPUS) leaves the intent too,
  and publishes ANNOTATION_NODE_ERROR.
* slurm_sync's own keys (ANNOTATION_EXTERNAL_NODE_REGISTERED, taints) never appear in answers.
* Finalize (deletion, or a label removed) publishes the intents the node still warrants (none if
  it is being deleted) and holds the node until slurm_sync confirmed what was withdrawn: no
  ANNOTATION_EXTERNAL_NODE_REGISTERED without a registration intent, and, for a node that stays,
  no managed-node taint without a taint intent.
"""

from __future__ import annotations

import ipaddress
import re

import orjson

from hooks.bridge import settings
from hooks.contract import DecoratorRequest
from slinky_common import names, quantity
from slinky_common.jsontypes import JSON

# Slurm reads node_conf as space-separated Key=Value words: no blanks, quotes, '=' or '#' inside.
_PARTITION = re.compile(r"[A-Za-z0-9._-]+")
_TOPOLOGY = re.compile(r"[A-Za-z0-9._:,-]+")


class BadNodeAnnotation(ValueError):
    """A partition list or topology spec that cannot go into a node_conf line."""


class UnreadableCapacity(BadNodeAnnotation):
    """A capacity that is not a quantity or more than Slurm holds: reported, and like an unknown
    capacity, it neither re-creates nor deletes the Slurm node."""


def sync(req: DecoratorRequest) -> JSON:
    return {"annotations": intents(req)}


def finalize(req: DecoratorRequest) -> JSON:
    node = req.object
    desired = intents(req)
    meta = node["metadata"]
    registered = names.ANNOTATION_EXTERNAL_NODE_REGISTERED in (meta.get("annotations") or {})
    tainted = any(t.get("key") == names.TAINT_MANAGED_NODE for t in (node.get("spec") or {}).get("taints") or [])
    done = not (registered and desired.get(names.ANNOTATION_EXTERNAL_NODE_INTENT) is None)
    if not _deleting(node):  # a departing Node object needs no untainting
        done = done and not (tainted and desired[names.ANNOTATION_DESIRED_TAINT] is None)
    return {"annotations": desired, "finalized": done}


def intents(req: DecoratorRequest) -> dict[str, str | None]:
    """Every intent key, set or null, from the node's labels, annotations and spec; the registration
    and error keys are left out (unchanged) while the node's capacity cannot be read."""
    node = req.object
    labels = node["metadata"].get("labels") or {}
    worker, external = names.LABEL_BRIDGE_WORKER in labels, names.LABEL_EXTERNAL_NODE in labels
    if _deleting(node):
        worker = external = False
    scheduler = settings.from_controller(req.controller).scheduler_name
    out: dict[str, str | None] = {
        names.ANNOTATION_DESIRED_TAINT: f"{names.TAINT_MANAGED_NODE}={scheduler}:NoExecute"
        if worker or external
        else None,
        names.ANNOTATION_DRAIN_INTENT: drain_reason(node) if (worker or external) and _cordoned(node) else None,
        names.ANNOTATION_EXTERNAL_NODE_INTENT: None,
        names.ANNOTATION_NODE_ERROR: None,
    }
    if external and not _capacity_known(node):
        # Missing input: a zero-sized intent would re-create the Slurm node, a null one delete it.
        del out[names.ANNOTATION_EXTERNAL_NODE_INTENT], out[names.ANNOTATION_NODE_ERROR]
    elif external:
        try:
            out[names.ANNOTATION_EXTERNAL_NODE_INTENT] = orjson.dumps(
                registration(node), option=orjson.OPT_SORT_KEYS
            ).decode()
        except UnreadableCapacity as err:
            del out[names.ANNOTATION_EXTERNAL_NODE_INTENT]
            out[names.ANNOTATION_NODE_ERROR] = str(err)
        except BadNodeAnnotation as err:
            out[names.ANNOTATION_NODE_ERROR] = str(err)
    return out


def slurm_node_name(node: JSON) -> str:
    meta = node["metadata"]
    return (meta.get("labels") or {}).get(names.LABEL_SLURM_NODE_NAME) or meta["name"]


def drain_reason(node: JSON) -> str:
    return (
        f"{names.BRIDGE_DRAIN_REASON_PREFIX} Corresponding Kubernetes node ({node['metadata']['name']}) is "
        "unschedulable"
    )


def registration(node: JSON) -> JSON:
    """How the node is registered in Slurm as State=External (slurm-bridge's node_conf)."""
    annotations = node["metadata"].get("annotations") or {}
    partitions = _partitions(annotations.get(names.ANNOTATION_EXTERNAL_NODE_PARTITIONS, ""))
    topology = annotations.get(names.ANNOTATION_TOPOLOGY_SPEC, "").strip()
    if topology and not _TOPOLOGY.fullmatch(topology):
        raise BadNodeAnnotation(
            f"annotation {names.ANNOTATION_TOPOLOGY_SPEC}={topology!r}: not a Slurm topology "
            "spec like 'topo-switch:s1,topo-block:b1'"
        )
    capacity = (node.get("status") or {}).get("capacity") or (node.get("status") or {}).get("allocatable") or {}
    try:
        cpus = quantity.cpus(quantity.parse(capacity.get("cpu", 0)))
        memory = quantity.mebibytes(quantity.parse(capacity.get("memory", 0)))
    except quantity.BadQuantity as err:
        raise UnreadableCapacity(f"status.capacity: {err}") from None
    name = slurm_node_name(node)
    address = internal_address(node)
    words = [
        f"NodeName={name}",
        *([f"NodeAddr={address}"] if address else []),
        "Sockets=1",
        f"CoresPerSocket={cpus}",
        "ThreadsPerCore=1",
        f"CPUs={cpus}",
        f"RealMemory={memory}",
        "State=External",
    ]
    if partitions:
        words.append("Feature=" + ",".join(partitions))
    if topology:
        words.append(f"Topology={topology}")
    return {
        "name": name,
        "cpus": cpus,
        "real_memory": memory,
        "features": partitions,
        "topology": topology,
        "node_conf": " ".join(words),
    }


def internal_address(node: JSON) -> str | None:
    """The Node's first InternalIP, for Slurm's NodeAddr: slurmctld then never looks the node's name up. A
    Kubernetes Node's name is seldom in the DNS a pod asks, and each allocation on a node whose name does not
    resolve costs slurmctld a failed lookup (on Slurm 25.x, ten one-second retries with its locks held)."""
    for entry in (node.get("status") or {}).get("addresses") or []:
        if isinstance(entry, dict) and entry.get("type") == "InternalIP":
            try:
                return str(ipaddress.ip_address(str(entry.get("address", ""))))
            except ValueError:
                return None
    return None


def _partitions(text: str) -> list[str]:
    """The comma-separated partition names, checked for syntax only (Slurm checks they exist)."""
    if not text.strip():
        return []
    parts = [p.strip() for p in text.split(",")]
    bad = [p for p in parts if not _PARTITION.fullmatch(p)]
    if bad:
        raise BadNodeAnnotation(
            f"annotation {names.ANNOTATION_EXTERNAL_NODE_PARTITIONS}={text!r}: "
            f"{', '.join(map(repr, bad))} is not a partition name"
        )
    return sorted(set(parts))


def _capacity_known(node: JSON) -> bool:
    status = node.get("status") or {}
    capacity = status.get("capacity") or status.get("allocatable") or {}
    return "cpu" in capacity and "memory" in capacity


def _cordoned(node: JSON) -> bool:
    return bool((node.get("spec") or {}).get("unschedulable"))


def _deleting(node: JSON) -> bool:
    return bool(node["metadata"].get("deletionTimestamp"))

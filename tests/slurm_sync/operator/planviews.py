"""Cluster views for the operator's planning functions, built from plain objects as the API server would answer."""

from __future__ import annotations

from typing import Any

from slurm_sync.operator import plan
from slurm_sync.operator.view import ClusterView, read_kube_node, read_nodeset, read_pod
from slurm_sync.slurm.types import Node, parse_node
from tests.slurm_sync.kubefixtures import NODESET_UID, NS, kube_node, nodeset

IDLE_POD = {"states": ("IDLE",)}
COMMENT = f'{{"namespace":"{NS}","podName":"gpu-0","node":"k1","nodeSetName":"gpu","nodeSetUID":"{NODESET_UID}"}}'

TOPO = "topo-switch:s2,topo-block:b2"


def knode(
    name: str = "k1",
    *,
    unschedulable: bool = False,
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "annotations": dict(annotations or {})}
    return {
        "metadata": meta,
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {"conditions": conditions or []},
    }


def snode(
    name: str = "gpu-0",
    *state: str,
    reason: str = "",
    comment: str = COMMENT,
    features: tuple[str, ...] = ("gpu",),
    active: tuple[str, ...] | None = None,
    topology: str = "",
) -> Node:
    return parse_node(
        {
            "name": name,
            "state": list(state or ("IDLE",)),
            "reason": reason,
            "comment": comment,
            "features": list(features),
            "active_features": list(features if active is None else active),
            "topology": topology,
        }
    )


def meta_patches(p: plan.PodPlan) -> list[Any]:
    return [x.body for x in p.patches if x.subresource == ""]


def topology_cluster(
    *pods: dict[str, Any],
    nodes: list[dict[str, Any]] | None = None,
    intents: dict[str, str] | None = None,
    propagated: tuple[str, ...] = (),
    nodeset_obj: dict[str, Any] | None = None,
    all_nodes: bool = False,
) -> ClusterView:
    ns = read_nodeset(nodeset_obj or nodeset(intents))
    kube_nodes = [read_kube_node(n) for n in (nodes if nodes is not None else [knode()])]
    return ClusterView(
        NS,
        "slurm",
        tuple(v for p in pods if (v := read_pod(p))),
        {ns.name: ns},
        {n.name: n for n in kube_nodes},
        (),
        propagated_conditions=propagated,
        all_kube_nodes=all_nodes,
    )


def cluster(
    *pods: dict[str, Any],
    intents: dict[str, str] | None = None,
    nodes: list[dict] | None = None,
    protect: bool | None = None,
) -> ClusterView:
    ns = read_nodeset(nodeset(intents, protect))
    kube_nodes = [read_kube_node(n) for n in (nodes or [kube_node()])]
    return ClusterView(
        NS, "slurm", tuple(v for p in pods if (v := read_pod(p))), {ns.name: ns}, {n.name: n for n in kube_nodes}, ()
    )

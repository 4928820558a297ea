"""Node-derived steps of the whole service against the real Slurm 26.05 lab (REST v0.0.45): `k8s/`
features replace only their own kind, topology_str reaches slurmctld (the lab's topology/flat
refuses it: reported once and not re-sent until the annotation changes), and defunct dynamic nodes are deleted only
under Slinky's
conditions. The lab is shared: only n3/n4 (features, comment) and nodes this test creates are
touched, and all are restored in ``finally``."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, _load_lab
from tests.slurm_sync.kubefixtures import NODESET_UID, NS
from tests.slurm_sync.servicerig import Rig, build_rig, restore

pytestmark = pytest.mark.slurm


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    rig = build_rig(slurm_lab, httpserver)
    try:
        yield rig
    finally:
        rig.service.close()
        lab = _load_lab()
        restore(lab, "n3", "n4")
        for node in ("n3", "n4"):  # the lab's own features (slurm.conf Features=<name>)
            lab.run("scontrol", "update", f"nodename={node}", f"availablefeatures={node}", f"activefeatures={node}")


def features(rig: Rig, node: str) -> tuple[set[str], set[str]]:
    with SlurmClient(rig.lab.rest_url, lambda: rig.lab.token) as client:
        found = client.list_nodes().items
    item = next(n for n in found if n.name == node)
    return set(item.features), set(item.active_features)


def annotate_node(rig: Rig, **annotations: str | None) -> None:
    meta = rig.kube.get("nodes", "", "k1")["metadata"]
    current = meta.setdefault("annotations", {})
    for key, value in annotations.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value


FEATURES = names.ANNOTATION_FEATURES_SPEC
TOPOLOGY = names.ANNOTATION_TOPOLOGY_SPEC


def test_k8s_features_are_applied_and_others_survive(rig: Rig) -> None:
    rig.lab.run(
        "scontrol", "update", "nodename=n3", "availablefeatures=n3,admin", "activefeatures=n3,admin", check=True
    )
    annotate_node(rig, **{FEATURES: "a100,nvlink"})
    assert rig.service.run_pass()
    assert features(rig, "n3") == ({"n3", "admin", "k8s/a100", "k8s/nvlink"},) * 2
    assert features(rig, "n4") == ({"n4", "k8s/a100", "k8s/nvlink"},) * 2
    # settled: nothing more is written anywhere
    before = len(rig.kube.writes)
    labels = {"cluster": cluster_name(rig), "action": "features,features_act"}
    slurm_writes = rig.metrics.registry.get_sample_value("slurm_sync_slurm_writes_total", labels)
    assert slurm_writes == 2  # n3 and n4, once each
    assert rig.service.run_pass()
    assert rig.kube.writes[before:] == []
    assert rig.metrics.registry.get_sample_value("slurm_sync_slurm_writes_total", labels) == slurm_writes
    # a changed annotation replaces the k8s/ ones; an absent one clears them; others stay
    annotate_node(rig, **{FEATURES: "h100"})
    assert rig.service.run_pass()
    assert features(rig, "n3") == ({"n3", "admin", "k8s/h100"},) * 2
    annotate_node(rig, **{FEATURES: None})
    assert rig.service.run_pass()
    assert features(rig, "n3") == ({"n3", "admin"},) * 2
    assert features(rig, "n4") == ({"n4"},) * 2


def cluster_name(rig: Rig) -> str:
    (handle,) = rig.service.clusters.handles.values()
    return handle.loop.name


def topology_refusals(rig: Rig) -> tuple[float, float]:
    """(refusals reported, refused calls made) of topology_str updates so far."""
    reg = rig.metrics.registry
    reported = (
        reg.get_sample_value(
            "slurm_sync_slurm_refused_updates_total",
            {"cluster": cluster_name(rig), "action": "topology_str", "reason": "2178"},
        )
        or 0
    )
    calls = (
        reg.get_sample_value("slurm_sync_slurm_errors_total", {"cluster": cluster_name(rig), "kind": "rejected"}) or 0
    )
    return reported, calls


def test_topology_reaches_the_pod_and_slurm_refuses_it_without_a_topology_plugin(rig: Rig) -> None:
    """REST v0.0.45 takes topology_str (the client checks the schema); slurmctld with topology/flat
    answers 'Requested topology configuration is not available' (error 2178). The pod annotation
    (POD_TOPOLOGY at the pod's next start) is still written; the refusal is reported once (log
    and metric, not a failed pass) and the same update is not sent again on the next pass; a
    changed annotation is a new update, sent (and refused) once."""
    with SlurmClient(rig.lab.rest_url, lambda: rig.lab.token) as client:
        assert "topology_str" in client.api.node_update_fields
    annotate_node(rig, **{TOPOLOGY: "topo-switch:s2,topo-block:b2"})
    assert rig.service.run_pass()
    assert rig.annotations("gpu-n3")[TOPOLOGY] == "topo-switch:s2,topo-block:b2"
    assert topology_refusals(rig) == (2, 2)  # n3 and n4 (both on k1), refused once each
    assert "topo-switch" not in rig.slurm_node("n3")  # nothing changed in Slurm: nothing to restore
    # the next pass: not re-sent
    assert rig.service.run_pass()
    assert topology_refusals(rig) == (2, 2)
    # a changed annotation: sent again, refused again, once
    annotate_node(rig, **{TOPOLOGY: "topo-switch:s3,topo-block:b3"})
    assert rig.service.run_pass()
    assert rig.annotations("gpu-n3")[TOPOLOGY] == "topo-switch:s3,topo-block:b3"
    assert topology_refusals(rig) == (4, 4)
    assert rig.service.run_pass()
    assert topology_refusals(rig) == (4, 4)
    assert "topo-switch" not in rig.slurm_node("n3")
    # the Node loses its annotation: the pod's goes, Slurm is not asked to clear anything
    annotate_node(rig, **{TOPOLOGY: None})
    assert rig.service.run_pass()
    assert TOPOLOGY not in rig.annotations("gpu-n3")


def exists(rig: Rig, node: str) -> bool:
    return f"NodeName={node} " in rig.lab.run("scontrol", "show", "node", node).stdout


def _pod_info(pod: str, node: str, uid: str = NODESET_UID) -> str:
    return json.dumps(
        {"namespace": NS, "podName": pod, "node": node, "nodeSetName": "gpu", "nodeSetUID": uid}, separators=(",", ":")
    )


def test_defunct_dynamic_nodes_are_deleted_only_under_slinkys_conditions(rig: Rig) -> None:
    suffix = f"{os.getpid() % 10000}"
    gone, mapped, other_uid, responding = (f"pz{suffix}{c}" for c in "abcd")
    created = []
    nodeset = rig.kube.get("nodesets", NS, "gpu")
    nodeset["spec"].update(scalingMode="DaemonSet", pruneSlurmNodeRecords="NodeNotFound")
    rig.kube.add("nodes", {"metadata": {"name": mapped}, "spec": {}})  # still maps to its Slurm node
    comments = {
        gone: _pod_info(f"gpu-{gone}", "k-gone"),
        mapped: _pod_info(f"gpu-{mapped}", mapped),
        other_uid: _pod_info(f"gpu-{other_uid}", "k-gone", uid="uid-of-an-older-nodeset"),
        responding: _pod_info(f"gpu-{responding}", "k-gone"),
    }
    try:
        for node, comment in comments.items():
            rig.lab.run(
                "scontrol",
                "create",
                f"nodename={node}",
                "NodeAddr=127.0.0.1",
                "Port=1",
                "CPUs=1",
                "RealMemory=100",
                "State=FUTURE",
                check=True,
            )
            created.append(node)
            rig.lab.run("scontrol", "update", f"nodename={node}", "state=down", "reason=pod gone", check=True)
            if node != responding:
                rig.lab.run("scontrol", "update", f"nodename={node}", "state=noresp", check=True)
            rig.lab.run("scontrol", "update", f"nodename={node}", f"comment={comment}", check=True)
        assert "NOT_RESPONDING" in rig.slurm_node(gone) and "NOT_RESPONDING" not in rig.slurm_node(responding)
        # the gate off (StatefulSet mode): nothing is deleted
        nodeset["spec"]["scalingMode"] = "StatefulSet"
        assert rig.service.run_pass()
        assert all(exists(rig, n) for n in comments)
        nodeset["spec"]["scalingMode"] = "DaemonSet"
        assert rig.service.run_pass()
        assert not exists(rig, gone)
        assert all(exists(rig, n) for n in (mapped, other_uid, responding, "n3", "n4"))
        # settled: the survivors stay
        assert rig.service.run_pass()
        assert all(exists(rig, n) for n in (mapped, other_uid, responding))
    finally:
        for node in created:
            rig.lab.run("scontrol", "delete", f"nodename={node}")

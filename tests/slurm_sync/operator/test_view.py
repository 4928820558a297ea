"""The operator's defensive views of Kubernetes objects (slurm_sync/operator/view.py): reading never fails,
and a field that cannot be read takes the value that makes slurm_sync do nothing (no intent, not ours,
protected, claims retained)."""

from __future__ import annotations

from typing import Any

import pytest

from slinky_common import names
from slurm_sync.operator.view import (
    ControllerPodView,
    KubeNodeView,
    NodeCondition,
    NodeSetView,
    PodView,
    nodeset_controller,
    read_controller_pod,
    read_kube_node,
    read_nodeset,
    read_pod,
)
from tests.slurm_sync.kubefixtures import NODESET, NODESET_UID, NS, controller_pod, nodeset, pod

# --- worker pods --------------------------------------------------------------------------------------


def owned(ref: dict[str, Any]) -> dict[str, Any]:
    """A pod with the NodeSet hostname label removed and ``ref`` as its only ownerReference."""
    obj = pod("gpu-0")
    del obj["metadata"]["labels"][names.LABEL_NODESET_POD_HOSTNAME]
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


def test_a_worker_pod_is_read_with_its_slurm_node_nodeset_and_state_conditions() -> None:
    obj = pod("gpu-0", "gpu-a", node_name="k1", states=("IDLE", "DRAIN"), reason="r",
              annotations={names.ANNOTATION_POD_CORDON: "true"})  # fmt: skip
    obj["metadata"]["uid"] = "u-0"
    view = read_pod(obj)
    assert view is not None
    assert (view.namespace, view.name, view.slurm_node, view.node_name, view.nodeset, view.uid) == (
        NS, "gpu-0", "gpu-a", "k1", NODESET, "u-0",
    )  # fmt: skip
    assert (view.phase, view.ready, view.terminating, view.cordoned, view.healthy) == (
        "Running",
        True,
        False,
        True,
        True,
    )
    assert sorted(view.state_conditions) == ["SlurmNodeStateDrain", "SlurmNodeStateIdle"]
    assert view.state_conditions["SlurmNodeStateDrain"]["status"] == "True"


@pytest.mark.parametrize(
    "ref",
    [
        {"kind": "NodeSet", "name": NODESET, "uid": NODESET_UID},  # not the controller
        {"kind": "NodeSet", "name": NODESET, "controller": "true"},  # not the boolean true
        {"kind": "StatefulSet", "name": NODESET, "controller": True},
        {"kind": "NodeSet", "name": "", "controller": True},
    ],
)
def test_a_pod_no_nodeset_controls_and_without_the_hostname_label_is_not_a_worker(ref: dict[str, Any]) -> None:
    assert read_pod(owned(ref)) is None


def test_either_a_controlling_nodeset_or_the_hostname_label_makes_a_worker_and_a_nameless_pod_is_none() -> None:
    controlled = read_pod(owned({"kind": "NodeSet", "name": "cpu", "controller": True}))
    assert controlled is not None and (controlled.nodeset, controlled.slurm_node) == ("cpu", "gpu-0")
    labelled = pod("gpu-1")
    del labelled["metadata"]["ownerReferences"]
    view = read_pod(labelled)
    assert view is not None and (view.nodeset, view.slurm_node) == (None, "gpu-1")
    nameless = pod("gpu-2")
    del nameless["metadata"]["name"]
    assert read_pod(nameless) is None
    assert read_pod({}) is None and read_pod({"metadata": "x", "spec": 1, "status": []}) is None


def test_the_slurm_node_is_the_hostname_label_else_the_pod_hostname_else_its_name() -> None:
    obj = owned({"kind": "NodeSet", "name": NODESET, "controller": True})
    obj["spec"]["hostname"] = "host-a"
    assert getattr(read_pod(obj), "slurm_node", None) == "host-a"
    del obj["spec"]["hostname"]
    assert getattr(read_pod(obj), "slurm_node", None) == "gpu-0"


def test_what_cannot_be_read_in_a_pod_reads_as_not_ready_unknown_and_unbound() -> None:
    obj = pod("gpu-0", node_name=None, labels={"n": 1})  # type: ignore[dict-item]  # not a string: dropped
    obj["metadata"]["annotations"] = {names.ANNOTATION_POD_CORDON: True, "ok": "1"}
    obj["status"] = {"conditions": ["Ready", {"type": 1, "status": "True"}, {"type": "Ready", "status": "true"}]}
    view = read_pod(obj)
    assert view is not None
    assert (view.phase, view.ready, view.node_name, view.state_conditions) == ("Unknown", False, None, {})
    assert (dict(view.annotations), view.cordoned, view.healthy) == ({"ok": "1"}, False, False)
    assert "n" not in view.labels and view.labels[names.LABEL_NODESET_POD_HOSTNAME] == "gpu-0"


def test_clean_labels_are_shared_with_the_object_not_copied() -> None:
    obj = pod("gpu-0")
    view = read_pod(obj)
    assert view is not None and view.labels is obj["metadata"]["labels"]
    assert view.annotations is obj["metadata"]["annotations"]


def test_a_pod_is_healthy_only_running_ready_and_not_terminating_and_a_cordon_request_is_its_own() -> None:
    def view(**kw: Any) -> PodView:
        read = read_pod(pod("gpu-0", **kw))
        assert read is not None
        return read

    assert view().healthy
    assert not view(phase="Pending").healthy and not view(terminating=True).healthy
    assert view(terminating=True).terminating
    requested = view(annotations={names.ANNOTATION_POD_CORDON_REQUESTED: "true", names.ANNOTATION_POD_CORDON: "yes"})
    assert (requested.cordon_requested, requested.cordoned) == (True, False)


# --- NodeSets -----------------------------------------------------------------------------------------


def test_a_nodeset_is_read_with_its_intents_reports_and_spec_fields() -> None:
    obj = nodeset(intents={"gpu-0": "maint"}, protect=False, observed="h1", deleting=True, when_deleted="Delete")
    obj["status"][names.STATUS_DRAINING_PODS] += [
        {"name": "gpu-1", "reason": "", names.DRAIN_DELETE_NODE: True},
        {"name": "gpu-2", names.DRAIN_DELETE_NODE: "true"},  # only the boolean flags a record deletion
        {"reason": "no name"},
        "gpu-3",
    ]
    obj["status"][names.STATUS_RESERVATION] = {"name": "upd"}
    obj["metadata"]["annotations"][names.ANNOTATION_RESERVATION_OBSERVED] = "r1"
    obj["spec"] |= {"scalingMode": "DaemonSet", "pruneSlurmNodeRecords": "NodeNotFound", "replicas": 3}
    assert read_nodeset(obj) == NodeSetView(
        namespace=NS,
        name=NODESET,
        uid=NODESET_UID,
        protect=False,
        intents={"gpu-0": "maint", "gpu-1": "drain requested", "gpu-2": "drain requested"},
        record_deletes=frozenset({"gpu-1"}),
        observed_hash="h1",
        deleting=True,
        retain_claims=False,
        controller="slurm",
        scaling_mode="DaemonSet",
        prune_records="NodeNotFound",
        reservation={"name": "upd"},
        reservation_report="r1",
        partition=None,
        deletion_report=obj["metadata"]["annotations"][names.ANNOTATION_DELETION_OBSERVED],
        replicas=3,
    )


def test_an_unreadable_nodeset_is_protected_retains_its_claims_and_has_no_intent() -> None:
    view = read_nodeset({"metadata": None, "spec": {"workloadDisruptionProtection": "false", "replicas": True,
                                                    "persistentVolumeClaimRetentionPolicy": "Delete"},
                         "status": {names.STATUS_DRAINING_PODS: None}})  # fmt: skip
    assert view == NodeSetView("", "", "", True, {}, frozenset(), None, replicas=None)
    assert (view.retain_claims, view.scaling_mode, view.prune_records, view.controller) == (
        True,
        "StatefulSet",
        "Never",
        "",
    )
    assert read_nodeset({}) == view


@pytest.mark.parametrize(("replicas", "read"), [(0, 0), (4, 4), (-1, None), ("3", None), (False, None), (2.0, None)])
def test_replicas_are_a_count_or_none(replicas: Any, read: int | None) -> None:
    obj = nodeset()
    obj["spec"]["replicas"] = replicas
    assert read_nodeset(obj).replicas == read


@pytest.mark.parametrize(
    ("mode", "prune", "deleting", "when_deleted", "prunes", "releases"),
    [
        ("DaemonSet", "NodeNotFound", True, None, True, True),
        ("StatefulSet", "NodeNotFound", True, "Retain", False, True),
        ("DaemonSet", "Never", False, None, False, False),
        ("DaemonSet", "NodeNotFound", True, "Delete", True, False),
    ],
)
def test_pruning_needs_daemonset_mode_and_node_not_found_and_release_a_retaining_deletion(
    mode: str, prune: str, deleting: bool, when_deleted: str | None, prunes: bool, releases: bool
) -> None:
    obj = nodeset(deleting=deleting, when_deleted=when_deleted)
    obj["spec"] |= {"scalingMode": mode, "pruneSlurmNodeRecords": prune}
    view = read_nodeset(obj)
    assert (view.prunes_defunct_nodes, view.releases_claims) == (prunes, releases)


def test_the_partition_is_named_as_the_controller_hook_writes_it_and_none_when_it_cannot_be() -> None:
    obj = nodeset()
    assert read_nodeset(obj).partition is None  # not enabled
    obj["spec"]["partition"] = {"enabled": True, "config": "MaxTime=10"}
    assert read_nodeset(obj).partition == NODESET
    obj["spec"]["template"] = {"spec": {"hostname": "gpu-node-"}}
    assert read_nodeset(obj).partition == "gpu-node"  # the hostname prefix, trimmed of "-"
    obj["spec"]["partition"]["config"] = 7  # the hook refuses such a spec too
    assert read_nodeset(obj).partition is None
    obj["spec"]["partition"]["config"] = ""
    obj["spec"]["template"]["spec"]["hostname"] = "bad name"
    assert read_nodeset(obj).partition is None
    assert nodeset_controller(obj) == "slurm" and nodeset_controller({"spec": {"controllerRef": "x"}}) == ""


# --- Kubernetes nodes and controller pods ---------------------------------------------------------------


def test_a_kubernetes_node_is_read_with_its_cordon_topology_features_and_conditions() -> None:
    obj = {
        "metadata": {
            "name": "k1.example.com",
            "annotations": {
                names.ANNOTATION_NODE_CORDON_REASON: "disk",
                names.ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s1",
                names.ANNOTATION_FEATURES_SPEC: "a,b",
            },
        },
        "spec": {"unschedulable": True},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"},
                                  {"type": "DiskPressure", "status": 1}, {"status": "True"}, "Ready"]},
    }  # fmt: skip
    assert read_kube_node(obj) == KubeNodeView(
        name="k1.example.com",
        unschedulable=True,
        cordon_reason="disk",
        hostname="k1",
        topology="topo-switch:s1",
        features="a,b",
        conditions=(NodeCondition("Ready", "True", "KubeletReady", "ok"), NodeCondition("DiskPressure", "", "", "")),
    )


def test_a_node_is_schedulable_unless_it_says_so_and_the_hostname_override_must_be_a_dns_label() -> None:
    annotations = {names.ANNOTATION_HOSTNAME_OVERRIDE: "w-1"}
    obj = {"metadata": {"name": "k1", "annotations": annotations}, "spec": {"unschedulable": "true"}}
    view = read_kube_node(obj)
    assert (view.unschedulable, view.hostname, view.cordon_reason, view.topology, view.features) == (
        False, "w-1", None, None, None,
    )  # fmt: skip
    annotations[names.ANNOTATION_HOSTNAME_OVERRIDE] = "W_1"
    assert read_kube_node(obj).hostname == "k1"
    assert read_kube_node({}) == KubeNodeView("", False, None)


def test_a_controller_pod_is_active_only_when_labelled_true_and_its_hostname_defaults_to_its_name() -> None:
    assert read_controller_pod(controller_pod("slurm-controller-0", active=True)) == ControllerPodView(
        NS, "slurm-controller-0", "slurm-controller-0", True
    )
    obj = controller_pod("slurm-controller-1")
    obj["metadata"]["labels"][names.LABEL_ACTIVE_CONTROLLER] = "yes"
    obj["spec"] = {}
    assert read_controller_pod(obj) == ControllerPodView(NS, "slurm-controller-1", "slurm-controller-1", False)
    obj["spec"] = {"hostname": "ctld"}
    assert read_controller_pod(obj).hostname == "ctld"

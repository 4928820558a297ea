"""Shared child builders: metadata propagation, Slinky's hash rule, Services."""

import hashlib

from hooks.objects import child_metadata, content_hash, service
from slinky_common import names
from slinky_common.wellknown import component_labels

PARENT = {
    "metadata": {
        "name": "slurm",
        "namespace": "slurm",
        "labels": {"team": "hpc", names.LABEL_NAME: "user-value"},
        "annotations": {
            "note": "n",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "metacontroller.k8s.io/last-applied-configuration": "{}",
        },
    }
}


def test_child_metadata_propagates_parent_labels_but_ours_win():
    meta = child_metadata(PARENT, "slurm-controller", component_labels("slurmctld", "slurm", "controller"), {"h": "1"})
    assert meta == {
        "name": "slurm-controller",
        "labels": {
            "team": "hpc",
            names.LABEL_NAME: "slurmctld",
            names.LABEL_INSTANCE: "slurm",
            names.LABEL_COMPONENT: "controller",
        },
        "annotations": {"note": "n", "h": "1"},
    }


def test_content_hash_follows_key_order_and_is_empty_without_data():
    assert content_hash({}) == "" and content_hash(None) == ""
    expected = hashlib.sha256(b"ab").hexdigest()
    assert content_hash({"y": "b", "x": "a"}) == expected
    assert content_hash({"x": b"a", "y": b"b"}) == expected
    assert content_hash({"x": "a"}) != content_hash({"x": "b"})


def test_service_applies_override_and_drops_external_ips():
    svc = service(
        PARENT,
        "slurm-controller",
        {"l": "1"},
        {"s": "1"},
        "slurmctld",
        6817,
        {
            "port": 7000,
            "nodePort": 30001,
            "spec": {"type": "NodePort", "externalIPs": ["1.2.3.4"]},
            "metadata": {"labels": {"x": "y"}},
        },
    )
    assert svc["spec"] == {
        "selector": {"s": "1"},
        "ports": [{"name": "slurmctld", "port": 7000, "targetPort": "slurmctld", "protocol": "TCP", "nodePort": 30001}],
        "type": "NodePort",
    }
    assert svc["metadata"]["labels"] == {"team": "hpc", names.LABEL_NAME: "user-value", "x": "y", "l": "1"}


def test_headless_service_publishes_not_ready_addresses():
    svc = service(PARENT, "slurm-controller-internal", {}, {"s": "1"}, "slurmctld", 6817, headless=True)
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True

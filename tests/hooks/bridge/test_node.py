"""The node decorator: hook-side intents of slurm-bridge behaviour, vectors 15 and 22-24 and its finalize."""

from __future__ import annotations

import json

import pytest

from hooks.app import create_app
from slinky_common import names
from tests.hooks.bridge.builders import body, request

TAINT, DRAIN = names.ANNOTATION_DESIRED_TAINT, names.ANNOTATION_DRAIN_INTENT
REG, ERR = names.ANNOTATION_EXTERNAL_NODE_INTENT, names.ANNOTATION_NODE_ERROR
TAINT_VALUE = f"{names.TAINT_MANAGED_NODE}={names.BRIDGE_SCHEDULER_NAME}:NoExecute"


def node(name="n1", labels=None, annotations=None, cordoned=False, taints=None, deleting=False, capacity=None):
    meta = {"name": name, "labels": labels or {}, "annotations": annotations or {}}
    if deleting:
        meta["deletionTimestamp"] = "2025-06-03T15:20:00Z"
    spec = {}
    if cordoned:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {"capacity": capacity or {"cpu": "8", "memory": "32803912Ki"}},
    }


WORKER = {names.LABEL_BRIDGE_WORKER: "worker"}
EXTERNAL = {names.LABEL_EXTERNAL_NODE: "true"}


@pytest.fixture(scope="module")
def client():
    return create_app().test_client()


def call(client, route, target, controller=None):
    resp = client.post(
        f"/bridge/node/{route}", json=body(request(target, controller=controller, finalizing=route == "finalize"))
    )
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return resp.get_json()


@pytest.mark.parametrize(
    ("labels", "tainted"),
    [
        pytest.param({}, False, id="v22-kube-only-node-no-taint"),
        pytest.param(WORKER, True, id="v22-bridge-worker-taint"),
        pytest.param(EXTERNAL, True, id="v22-external-node-taint"),
    ],
)
def test_v22_taint_intent(client, labels, tainted):
    assert call(client, "sync", node(labels=labels))["annotations"][TAINT] == (TAINT_VALUE if tainted else None)


def test_taint_value_is_the_configured_scheduler_name(client):
    controller = {"metadata": {"annotations": {names.ANNOTATION_SETTING_SCHEDULER_NAME: "sb"}}}
    out = call(client, "sync", node(labels=WORKER), controller)["annotations"]
    assert out[TAINT] == f"{names.TAINT_MANAGED_NODE}=sb:NoExecute"


@pytest.mark.parametrize(
    ("cordoned", "reason"),
    [
        pytest.param(
            True, "slurm-bridge: Corresponding Kubernetes node (n1) is unschedulable", id="v23-cordoned-drains"
        ),
        pytest.param(False, None, id="v23-uncordoned-withdraws-drain"),
    ],
)
def test_v23_drain_intent(client, cordoned, reason):
    out = call(client, "sync", node(labels=WORKER, cordoned=cordoned))["annotations"]
    assert out[DRAIN] == reason
    assert reason is None or reason.startswith(names.BRIDGE_DRAIN_REASON_PREFIX)


def test_v24_external_registration(client):
    target = node(
        "kube-3",
        labels={**EXTERNAL, names.LABEL_SLURM_NODE_NAME: "slurm-3"},
        annotations={
            names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "slurm-bridge, gpu",
            names.ANNOTATION_TOPOLOGY_SPEC: "topo-switch:s1,topo-block:b1",
        },
    )
    out = call(client, "sync", target)["annotations"]
    assert out[ERR] is None
    reg = json.loads(out[REG])
    assert out[REG] == json.dumps(reg, sort_keys=True, separators=(",", ":"))
    assert reg == {
        "name": "slurm-3",
        "cpus": 8,
        "real_memory": 32035,
        "features": ["gpu", "slurm-bridge"],
        "topology": "topo-switch:s1,topo-block:b1",
        "node_conf": "NodeName=slurm-3 Sockets=1 CoresPerSocket=8 ThreadsPerCore=1 CPUs=8 RealMemory=32035 "
        "State=External Feature=gpu,slurm-bridge Topology=topo-switch:s1,topo-block:b1",
    }


@pytest.mark.parametrize(
    ("addresses", "conf"),
    [
        pytest.param([{"type": "Hostname", "address": "kube-5"}, {"type": "InternalIP", "address": "10.1.2.3"},
                      {"type": "InternalIP", "address": "10.9.9.9"}], "NodeName=kube-5 NodeAddr=10.1.2.3 ",
                     id="first-internal-ip"),
        pytest.param([{"type": "InternalIP", "address": "fd00::7"}], "NodeName=kube-5 NodeAddr=fd00::7 ", id="ipv6"),
        pytest.param([{"type": "InternalIP", "address": "10.1.2.3 State=Down"}], "NodeName=kube-5 Sockets=",
                     id="not-an-address"),
        pytest.param([{"type": "ExternalIP", "address": "192.0.2.1"}], "NodeName=kube-5 Sockets=", id="no-internal"),
    ],
)  # fmt: skip
def test_v24_the_nodes_internal_ip_is_its_node_addr(client, addresses, conf):
    """Slurm never has to resolve a Kubernetes Node's name; an address that is no IP is left out, never written."""
    target = node("kube-5", labels=EXTERNAL)
    target.setdefault("status", {})["addresses"] = addresses
    reg = json.loads(call(client, "sync", target)["annotations"][REG])
    assert reg["node_conf"].startswith(conf), reg["node_conf"]


def test_v15_slurm_name_defaults_to_the_node_name(client):
    reg = json.loads(call(client, "sync", node("kube-4", labels=EXTERNAL))["annotations"][REG])
    assert reg["name"] == "kube-4" and "Feature=" not in reg["node_conf"] and "Topology=" not in reg["node_conf"]


@pytest.mark.parametrize(
    "annotations",
    [
        pytest.param({names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a,,b"}, id="empty-partition"),
        pytest.param({names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "a b"}, id="blank-inside"),
        pytest.param({names.ANNOTATION_TOPOLOGY_SPEC: 'topo-switch:"s1" State=Down'}, id="topology-injection"),
    ],
)
def test_v24_malformed_node_annotations_give_error_and_no_registration(client, annotations):
    out = call(client, "sync", node(labels=EXTERNAL, annotations=annotations))["annotations"]
    assert out[REG] is None and next(iter(annotations)) in out[ERR]


def test_worker_without_external_label_is_never_registered(client):
    assert call(client, "sync", node(labels=WORKER))["annotations"][REG] is None


REGISTERED = {names.ANNOTATION_EXTERNAL_NODE_REGISTERED: "n1"}
MANAGED_TAINT = [{"key": names.TAINT_MANAGED_NODE, "value": names.BRIDGE_SCHEDULER_NAME, "effect": "NoExecute"}]


@pytest.mark.parametrize(
    ("target", "finalized"),
    [
        pytest.param(node(annotations=REGISTERED), False, id="v24-label-removed-held-until-unregistered"),
        pytest.param(node(), True, id="v24-label-removed-unregistered-released"),
        pytest.param(node(taints=MANAGED_TAINT), False, id="worker-label-removed-held-until-untainted"),
        pytest.param(
            node(labels=WORKER, annotations=REGISTERED, taints=MANAGED_TAINT),
            False,
            id="external-label-removed-worker-stays-held-until-unregistered",
        ),
        pytest.param(
            node(labels=EXTERNAL, annotations=REGISTERED, taints=MANAGED_TAINT),
            True,
            id="worker-label-removed-external-stays-nothing-to-undo",
        ),
        pytest.param(
            node(labels=EXTERNAL, annotations=REGISTERED, deleting=True), False, id="deleted-held-until-unregistered"
        ),
        pytest.param(node(labels=WORKER, taints=MANAGED_TAINT, deleting=True), True, id="deleted-taint-irrelevant"),
    ],
)
def test_finalize_holds_until_withdrawn_intents_are_confirmed(client, target, finalized):
    assert call(client, "finalize", target)["finalized"] is finalized


def test_finalize_of_a_deleted_node_withdraws_every_intent(client):
    out = call(client, "finalize", node(labels={**WORKER, **EXTERNAL}, cordoned=True, deleting=True))
    assert out["annotations"] == {TAINT: None, DRAIN: None, REG: None, ERR: None}


def test_same_request_same_bytes(client):
    payload = body(request(node(labels=EXTERNAL, annotations={names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "b,a"})))
    first = client.post("/bridge/node/sync", json=payload).get_data()
    assert first == client.post("/bridge/node/sync", json=payload).get_data()


@pytest.mark.parametrize(
    "status", [pytest.param({}, id="no-status"), pytest.param({"capacity": {"cpu": "8"}}, id="no-memory")]
)
def test_unreadable_capacity_leaves_the_registration_intent_as_it_is(client, status):
    """cpus/memory 0 would make slurm_sync re-create the Slurm node (drain, delete, add); a null
    intent would make it drain and delete it. Missing input changes neither."""
    published = call(client, "sync", node(labels=EXTERNAL))["annotations"]
    target = node(labels=EXTERNAL, annotations={k: v for k, v in published.items() if v is not None})
    target["status"] = status
    out = call(client, "sync", target)["annotations"]
    assert names.ANNOTATION_EXTERNAL_NODE_INTENT not in out and names.ANNOTATION_NODE_ERROR not in out
    assert out[names.ANNOTATION_DESIRED_TAINT] == published[names.ANNOTATION_DESIRED_TAINT]

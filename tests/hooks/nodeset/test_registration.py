"""A NodeSet pod replaced with other resources (docs/architecture.md §4.1): a dynamic Slurm node keeps
the resources of its first registration, so the old pod's drain intent asks slurm_sync to delete its
record, and the pod goes only once that record is absent (its name, held meanwhile, keeps the
replacement's slurmd from registering under the old record)."""

from __future__ import annotations

import pytest

from hooks.app import create_app
from slinky_common import names
from tests.hooks.nodeset.builders import children, nodeset, observed, request, sync

UPDATE = {"rollingUpdate": {"maxUnavailable": 1}}
SMALL = {"extraConf": "CPUs=4 RealMemory=500"}
RESIZED = {"extraConf": "CPUs=2 RealMemory=800"}


def registration(pod: dict) -> str:
    return pod["metadata"]["annotations"][names.ANNOTATION_REGISTRATION_HASH]


def intents(resp: dict) -> dict[str, bool]:
    return {i["name"]: i.get(names.DRAIN_DELETE_NODE, False) for i in resp["status"][names.STATUS_DRAINING_PODS]}


def pod_of(spec: dict) -> dict:
    return children(sync(create_app().test_client(), request(nodeset(replicas=1, **spec))))["gpu-0"]


@pytest.mark.parametrize(
    ("before", "after", "changes"),
    [
        (SMALL, RESIZED, True),
        ({}, {"slurmd": {"resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}}, True),  # POD_CPUS, POD_MEMORY
        ({}, {"extraConf": "Weight=7"}, True),
        ({}, {"slurmd": {"resources": {"limits": {"nvidia.com/gpu": 1}}}}, True),  # Gres=gpu:1
        ({"slurmd": {"image": "slurmd:1"}}, {"slurmd": {"image": "slurmd:2"}}, False),
        ({}, {"template": {"metadata": {"labels": {"team": "hpc"}}}}, False),
    ],
)
def test_the_registration_hash_follows_what_slurmd_registers(before, after, changes):
    assert (registration(pod_of(before)) != registration(pod_of(after))) is changes


def rolled(client, old_spec: dict, new_spec: dict, **state) -> tuple[dict, dict]:
    old = children(sync(client, request(nodeset(replicas=1, **old_spec))))["gpu-0"]
    spec = {"replicas": 1, "updateStrategy": UPDATE, **new_spec}
    resp = sync(client, request(nodeset(**spec), pods=[observed(old, **state)]))
    return old, resp


def test_a_pod_resized_by_a_rolling_update_goes_only_once_its_node_record_is_gone(client):
    old, resp = rolled(client, SMALL, RESIZED)
    assert intents(resp) == {"gpu-0": True}
    spec = {"replicas": 1, "updateStrategy": UPDATE, **RESIZED}
    drained = observed(old, slurm=("Idle", "Drain"), drained=True)
    kept = sync(client, request(nodeset(status=resp["status"], **spec), pods=[drained]))
    assert list(children(kept)) == ["gpu-0"] and children(kept)["gpu-0"] == old, "drained is not enough"
    absent = observed(old, slurm=(), absent=True)
    gone = sync(client, request(nodeset(status=kept["status"], **spec), pods=[absent]))
    assert children(gone) == {}
    new = children(sync(client, request(nodeset(status=gone["status"], **spec))))["gpu-0"]
    assert registration(new) != registration(old) and "CPUs=2 " in new["spec"]["containers"][0]["args"][4]


def test_a_pod_replaced_for_its_image_keeps_its_node_record(client):
    old, resp = rolled(client, {"slurmd": {"image": "slurmd:1"}}, {"slurmd": {"image": "slurmd:2"}})
    assert intents(resp) == {"gpu-0": False}
    spec = {"replicas": 1, "updateStrategy": UPDATE, "slurmd": {"image": "slurmd:2"}}
    drained = observed(old, slurm=("Idle", "Drain"), drained=True)
    assert children(sync(client, request(nodeset(status=resp["status"], **spec), pods=[drained]))) == {}


def test_a_pod_made_before_the_hash_existed_keeps_its_node_record(client):
    """Unknown is no reason to act: without the annotation the old registration is unknown."""
    old = children(sync(client, request(nodeset(replicas=1, **SMALL))))["gpu-0"]
    del old["metadata"]["annotations"][names.ANNOTATION_REGISTRATION_HASH]
    resp = sync(client, request(nodeset(replicas=1, updateStrategy=UPDATE, **RESIZED), pods=[observed(old)]))
    assert intents(resp) == {"gpu-0": False}

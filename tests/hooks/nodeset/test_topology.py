"""A NodeSet that asks for it holds each new slurmd back until the pod carries its Node's topology (issue 11, 7)."""

from __future__ import annotations

import pytest

from hooks.nodeset.pods import revision_hash
from slinky_common import names
from tests.hooks.nodeset.builders import children, condition, nodeset, request, slurmd, sync

TOPOLOGY_REF = f"metadata.annotations['{names.ANNOTATION_TOPOLOGY_SPEC}']"


def waiting(wait: str, **spec) -> dict:
    parent = nodeset(replicas=1, **spec)
    parent["metadata"]["annotations"] = {names.ANNOTATION_TOPOLOGY_WAIT: wait}
    return parent


def pod_of(client, parent: dict) -> dict:
    return children(sync(client, request(parent)))["gpu-0"]


def test_the_pod_waits_for_its_topology_annotation_before_slurmd_starts(client):
    pod = pod_of(client, waiting("90"))
    spec = pod["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["logfile", "topology-wait"]
    (wait,) = [c for c in spec["initContainers"] if c["name"] == "topology-wait"]
    assert wait["image"] == slurmd(pod)["image"] and "restartPolicy" not in wait  # runs to its end before slurmd
    assert {e["name"]: e["value"] for e in wait["env"]} == {
        "WAIT_SECONDS": "90", "TOPOLOGY_FILE": "/run/slinky/pod-topology/topology"}  # fmt: skip
    (volume,) = [v for v in spec["volumes"] if v["name"] == "pod-topology"]
    assert volume["downwardAPI"]["items"] == [
        {"path": "topology", "fieldRef": {"apiVersion": "v1", "fieldPath": TOPOLOGY_REF}}
    ]
    assert wait["volumeMounts"] == [{"name": "pod-topology", "mountPath": "/run/slinky/pod-topology", "readOnly": True}]
    # slurmd's POD_TOPOLOGY (the image's) and SLINKY_TOPOLOGY (Slinky's name) are resolved by the kubelet
    # when slurmd is created, after the wait
    env = {e["name"]: e for e in slurmd(pod)["env"]}
    for name in ("POD_TOPOLOGY", "SLINKY_TOPOLOGY"):
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == TOPOLOGY_REF


def test_a_topology_in_extraconf_wins_over_the_pods(client):
    pod = pod_of(client, nodeset(replicas=1, extraConf="Topology=topo-block:b1"))
    names = {e["name"] for e in slurmd(pod)["env"]}
    assert not names & {"POD_TOPOLOGY", "SLINKY_TOPOLOGY"}
    assert "Topology=topo-block:b1" in slurmd(pod)["args"][-1]


@pytest.mark.parametrize("parent", [
    nodeset(replicas=1),
    waiting("0"),
    waiting(""),
    waiting("60", extraConf="Topology=topo-switch:s1"),  # slurmd does not take its topology from the pod
])  # fmt: skip
def test_no_wait_unless_asked_for_and_used(client, parent):
    spec = pod_of(client, parent)["spec"]
    assert [c["name"] for c in spec["initContainers"]] == ["logfile"]
    assert "pod-topology" not in [v["name"] for v in spec["volumes"]]


def test_the_wait_is_part_of_the_revision_only_when_set():
    plain = nodeset(replicas=1)
    assert revision_hash(waiting("")) == revision_hash(plain)
    assert revision_hash(waiting("30")) != revision_hash(plain) != revision_hash(waiting("60"))


@pytest.mark.parametrize("value", ["-1", "1.5", "ten", "601", " 5"])
def test_an_unusable_wait_is_invalid_spec_naming_the_annotation(client, value):
    resp = sync(client, request(waiting(value)))
    invalid = condition(resp, names.CONDITION_INVALID_SPEC)
    assert invalid["status"] == "True" and names.ANNOTATION_TOPOLOGY_WAIT in invalid["message"], invalid

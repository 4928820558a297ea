"""Reading a NodeSet's spec (hooks/nodeset/spec.py): Slinky's defaults, and an InvalidSpec naming the field for
every value the CRD let through but no pod can be built from."""

from __future__ import annotations

import pytest

from hooks.nodeset.spec import MAX_REPLICAS, parse_nodeset
from slinky_common.errors import InvalidSpec
from slinky_common.nodesetconf import Elastic


def nodeset(**spec) -> dict:
    return {"metadata": {"name": "gpu", "namespace": "slurm"}, "spec": {"controllerRef": {"name": "slurm"}, **spec}}


def test_slinky_defaults() -> None:
    spec = parse_nodeset(nodeset())
    assert (spec.replicas, spec.scaling_mode, spec.update_type) == (1, "StatefulSet", "RollingUpdate")
    assert (spec.max_unavailable, spec.pvc_when_deleted, spec.pvc_when_scaled) == ("25%", "Retain", "Retain")
    assert (spec.min_ready_seconds, spec.ordinal_padding, spec.pin_to_node, spec.ssh_enabled) == (0, 0, False, False)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": -1}, f"spec.replicas must be an integer from 0 to {MAX_REPLICAS}, got -1"),
        ({"replicas": MAX_REPLICAS + 1}, f"spec.replicas must be an integer from 0 to {MAX_REPLICAS}, got 10001"),
        ({"ordinalPadding": 11}, "spec.ordinalPadding must be an integer from 0 to 10, got 11"),
        ({"scalingMode": "Job"}, "spec.scalingMode must be one of StatefulSet, DaemonSet, got 'Job'"),
        (
            {"updateStrategy": {"type": "Recreate"}},
            "spec.updateStrategy.type must be one of RollingUpdate, OnDelete, ScheduledUpdate, got 'Recreate'",
        ),
        (
            {"persistentVolumeClaimRetentionPolicy": {"whenScaled": "Keep"}},
            "spec.persistentVolumeClaimRetentionPolicy.whenScaled must be one of Retain, Delete, got 'Keep'",
        ),
        ({"updateStrategy": {"rollingUpdate": []}}, "spec.updateStrategy.rollingUpdate must be an object"),
        ({"ssh": {"enabled": "yes"}}, "spec.ssh.enabled must be a boolean"),
        ({"ssh": {"enabled": True, "extraSshdConfig": 1}}, "spec.ssh.extraSshdConfig must be a string"),
        ({"template": {"spec": []}}, "spec.template.spec must be an object"),
        ({"pinToNode": "true"}, "spec.pinToNode must be a boolean"),
    ],
)
def test_a_value_no_pod_can_be_built_from_is_named_with_its_path(spec: dict, message: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        parse_nodeset(nodeset(**spec))
    assert str(raised.value) == message


@pytest.mark.parametrize(("value", "parsed"), [(1, 1), ("3", 3), ("50%", "50%")])
def test_max_unavailable_takes_a_count_or_a_percentage(value: int | str, parsed: int | str) -> None:
    spec = parse_nodeset(nodeset(updateStrategy={"rollingUpdate": {"maxUnavailable": value}}))
    assert spec.max_unavailable == parsed


@pytest.mark.parametrize("value", [0, "0%", -1, "many", True])
def test_max_unavailable_that_would_never_update_or_is_unreadable_is_refused(value: int | str | bool) -> None:
    with pytest.raises(InvalidSpec, match=r"spec\.updateStrategy\.rollingUpdate\.maxUnavailable"):
        parse_nodeset(nodeset(updateStrategy={"rollingUpdate": {"maxUnavailable": value}}))


def test_an_elastic_nodeset_keeps_its_minimum_and_does_not_use_replicas() -> None:
    parsed = parse_nodeset(
        nodeset(
            replicas=5,
            elastic={"minReplicas": 1, "maxReplicas": 4},
            partition={"enabled": True},
            extraConf="CPUs=2 RealMemory=100",
        )
    )
    assert (parsed.replicas, parsed.elastic) == (1, Elastic(1, 4, 600, 600))
    assert parse_nodeset(nodeset(replicas=5)).elastic is None


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"elastic": {"maxReplicas": 4}}, "spec.elastic requires spec.partition.enabled"),
        (
            {"elastic": {"maxReplicas": 4}, "partition": {"enabled": True}, "scalingMode": "DaemonSet"},
            "spec.elastic requires spec.scalingMode StatefulSet",
        ),
        ({"elastic": {"minReplicas": 1}, "partition": {"enabled": True}}, "spec.elastic.maxReplicas is required"),
        (
            {"elastic": {"maxReplicas": 2}, "partition": {"enabled": True}, "extraConf": "CPUs=2"},
            "this NodeSet's spec.extraConf must give RealMemory= for an elastic NodeSet",
        ),
    ],
)
def test_an_elastic_nodeset_the_hook_cannot_serve_is_named(spec: dict, message: str) -> None:
    with pytest.raises(InvalidSpec, match=f"^{message}"):
        parse_nodeset(nodeset(**spec))

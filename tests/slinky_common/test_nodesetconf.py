"""A NodeSet's slurm.conf identity (slinky_common/nodesetconf.py), read alike by the Controller hook, which
writes it, and slurm_sync, which finds each partition's NodeSet by it."""

from __future__ import annotations

import pytest

from slinky_common import names, nodesetconf
from slinky_common.errors import BadHookRequest
from slinky_common.nodesetconf import NodeSetConf


def nodeset(name: str, **spec) -> dict:
    return {"metadata": {"name": name, "namespace": "slurm"}, "spec": {"controllerRef": {"name": "slurm"}, **spec}}


def test_nodeset_conf_uses_trimmed_template_hostname_else_the_name():
    assert nodesetconf.nodeset_conf(nodeset("gpu"), "ns") == NodeSetConf("gpu")
    hostname = nodeset(
        "gpu", template={"spec": {"hostname": "slinky-"}}, partition={"enabled": True, "config": " MaxTime=1 "}
    )
    assert nodesetconf.nodeset_conf(hostname, "ns") == NodeSetConf("slinky", "MaxTime=1")
    assert nodesetconf.nodeset_conf(nodeset("gpu", partition={"enabled": False, "config": "x"}), "ns") == NodeSetConf(
        "gpu"
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (
            {"partition": {"enabled": True, "config": "MaxTime=1\nPartitionName=evil Nodes=ALL"}},
            "spec.partition.config",
        ),
        ({"partition": {"enabled": True, "config": "MaxTime=1\rX=1"}}, "spec.partition.config"),
        ({"partition": {"enabled": True, "config": ["MaxTime=1"]}}, "spec.partition.config"),
        ({"template": {"spec": {"hostname": "a b"}}}, "spec.template.spec.hostname"),
        ({"template": {"spec": {"hostname": "x\nNodeName=y"}}}, "spec.template.spec.hostname"),
    ],
)
def test_nodeset_values_that_could_add_lines_are_rejected_naming_the_field(spec, field):
    with pytest.raises(BadHookRequest, match=f"NodeSet 'n' {field.replace('.', '[.]')}"):
        nodesetconf.nodeset_conf(nodeset("n", **spec), "NodeSet 'n'")


@pytest.mark.parametrize("value", ["A=1\r\nB=2", "A=1\x00", "A=1 \\\n", "A=1 \\"])
def test_extra_conf_that_would_break_the_following_lines_is_rejected(value):
    with pytest.raises(BadHookRequest, match=r"spec\.extraConf"):
        nodesetconf.check_extra_conf(value, "spec.extraConf")


def test_multi_line_extra_conf_with_inner_continuations_is_fine():
    assert nodesetconf.check_extra_conf("A=1 \\\n  B=2\nC=3\n", "spec.extraConf")


def test_a_deleting_nodeset_keeps_its_lines_but_its_partition_takes_no_new_job():
    deleting = nodeset("n", partition={"enabled": True, "config": "MaxTime=1 state=UP Default=YES"})
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    conf = nodesetconf.nodeset_conf(deleting, "ns")
    assert conf == NodeSetConf("n", f"MaxTime=1 Default=YES State={names.PARTITION_STATE_DELETING}")


def test_gres_names_come_from_extra_conf_else_the_slurmd_gpus():
    explicit = nodeset("g", extraConf="Gres=gpu:h100:8,shard:16 Features=x")
    assert nodesetconf.nodeset_conf(explicit, "ns").gres_types == ("gpu", "shard")
    gpus = nodeset("g", slurmd={"resources": {"limits": {"nvidia.com/gpu": 2}}})
    assert nodesetconf.nodeset_conf(gpus, "ns").gres_types == ("gpu",)


def test_extra_conf_tokens_by_capitalised_key_and_a_malformed_string_counts_as_empty():
    assert nodesetconf.parse_extra_conf("gres=gpu:1 Features=a Features=b") == {
        "Gres": ["gpu:1"],
        "Features": ["a", "b"],
    }
    assert nodesetconf.parse_extra_conf("Features=a stray") == {}

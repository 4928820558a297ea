"""A NodeSet's slurm.conf identity (slinky_common/nodesetconf.py), read alike by the Controller hook, which
writes it, and slurm_sync, which finds each partition's NodeSet by it."""

from __future__ import annotations

import pytest

from slinky_common import names, nodesetconf
from slinky_common.errors import BadHookRequest, InvalidSpec
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


# --- spec.elastic (docs/architecture.md §4.9) ------------------------------------------------------------------


def test_elastic_is_none_when_absent_and_defaults_its_times() -> None:
    assert nodesetconf.read_elastic({}) is None
    assert nodesetconf.read_elastic({"elastic": {"maxReplicas": 4}}) == nodesetconf.Elastic(0, 4, 600, 600)
    full = {"minReplicas": 1, "maxReplicas": 2, "suspendTime": 30, "resumeTimeout": 900}
    assert nodesetconf.read_elastic({"elastic": full}) == nodesetconf.Elastic(1, 2, 30, 900)


@pytest.mark.parametrize(
    ("elastic", "message"),
    [
        ([], "spec.elastic must be an object"),
        ({}, "spec.elastic.maxReplicas is required"),
        ({"maxReplicas": 0}, "spec.elastic.maxReplicas must be an integer from 1 to 10000, got 0"),
        ({"maxReplicas": 2, "minReplicas": 3}, "spec.elastic.minReplicas must be an integer from 0 to 2, got 3"),
        ({"maxReplicas": 2, "suspendTime": 0}, "spec.elastic.suspendTime must be an integer from 1 to"),
        ({"maxReplicas": 2, "resumeTimeout": "10m"}, "spec.elastic.resumeTimeout must be an integer from 1 to"),
    ],
)
def test_an_unusable_elastic_is_named(elastic: object, message: str) -> None:
    with pytest.raises(InvalidSpec) as caught:
        nodesetconf.read_elastic({"elastic": elastic})
    assert str(caught.value).startswith(message)


def test_an_elastic_nodeset_puts_its_always_on_and_on_demand_nodes_in_slurm_conf() -> None:
    spec = {
        "elastic": {"minReplicas": 2, "maxReplicas": 12},
        "ordinalPadding": 2,
        "extraConf": "CPUs=8 RealMemory=1000 Features=fast",
        "partition": {"enabled": True},
    }
    conf = nodesetconf.nodeset_conf(nodeset("gpu", **spec), "ns")
    assert conf.elastic == nodesetconf.ElasticNodes(
        "gpu-[00-01]", "gpu-[02-11]", "CPUs=8 Features=fast,gpu RealMemory=1000", nodesetconf.Elastic(2, 12, 600, 600)
    )
    sized = "CPUs=1 RealMemory=100"
    prefixed = nodesetconf.nodeset_conf(
        nodeset(
            "gpu",
            template={"spec": {"hostname": "g"}},
            elastic={"maxReplicas": 1},
            partition={"enabled": True},
            extraConf=sized,
        ),
        "ns",
    )
    assert prefixed.elastic is not None
    assert (prefixed.elastic.always_on, prefixed.elastic.on_demand) == (None, "g[0-0]")
    all_on = nodesetconf.nodeset_conf(
        nodeset("gpu", elastic={"minReplicas": 3, "maxReplicas": 3}, partition={"enabled": True}, extraConf=sized),
        "ns",
    )
    assert all_on.elastic is not None and (all_on.elastic.always_on, all_on.elastic.on_demand) == ("gpu-[0-2]", None)


def test_node_conf_is_what_slurmd_registers_with() -> None:
    slurmd = {"resources": {"limits": {"nvidia.com/gpu": 2}}}
    assert nodesetconf.node_conf("gpu", "Weight=3 Feature=a,b Topology=", slurmd, {}, "ns") == {
        "Weight": "3",
        "Features": "a,b,gpu",
        "Gres": "gpu:2",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("CPUs=4", "ns spec.extraConf must give RealMemory= for an elastic NodeSet"),
        ("Weight=2", "ns spec.extraConf must give CPUs= and RealMemory= for an elastic NodeSet"),
        ("CPUs=4 RealMemory=9 State=IDLE", "ns spec.extraConf: State= is not a node option"),
        ("CPUs=4 RealMemory=9 NodeAddr=10.0.0.1", "ns spec.extraConf: NodeAddr= is not a node option"),
        ("CPUs=4 RealMemory=9 Features=a#b", "ns spec.extraConf: Features='a#b,gpu' must hold only"),
        ('CPUs=4 RealMemory=9 Weight="3', "ns spec.extraConf: Weight='\"3' must hold only"),
    ],
)
def test_an_elastic_nodesets_options_are_node_options_with_plain_values_and_its_size(extra: str, message: str) -> None:
    """They go into slurm.conf: a bad one would stop slurmctld for the whole cluster, not one NodeSet's slurmd."""
    obj = nodeset("gpu", elastic={"maxReplicas": 2}, partition={"enabled": True}, extraConf=extra)
    with pytest.raises(InvalidSpec) as caught:
        nodesetconf.nodeset_conf(obj, "ns")
    assert str(caught.value).startswith(message)


def test_resume_timeout_stays_within_what_slurm_holds() -> None:
    with pytest.raises(InvalidSpec, match="from 1 to 65534, got 86400"):
        nodesetconf.read_elastic({"elastic": {"maxReplicas": 2, "resumeTimeout": 86400}})

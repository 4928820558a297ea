"""slurm.conf rendering (hooks/slurmconf.py): Slinky's sections and lines, determinism, injection checks."""

from __future__ import annotations

from hooks import slurmconf
from hooks.controller.model import Controller, Endpoint
from hooks.slurmconf import Scripts, SlurmConf
from slinky_common.nodesetconf import Elastic, ElasticNodes, NodeSetConf

# Whole files, as a user gets them through the hook, are pinned by tests/hooks/golden/ (test_golden.py).


def conf(**kwargs) -> SlurmConf:
    return SlurmConf(**{"cluster_name": "slurm_slurm", "controller": Controller("slurm", "slurm"), **kwargs})


def test_ha_writes_one_slurmctld_host_per_replica_in_order():
    lines = slurmconf.render(conf(controller=Controller("slurm", "slurm", backups=2))).splitlines()
    hosts = [line for line in lines if line.startswith("SlurmctldHost=")]
    assert hosts == [
        f"SlurmctldHost=slurm-controller-{i}(slurm-controller-{i}.slurm-controller-internal.slurm)" for i in range(3)
    ]


def test_nodesets_and_partitions_in_name_order_whatever_the_input_order():
    sets = [
        NodeSetConf("nodeset-2", "MaxTime=UNLIMITED PreemptMode=REQUEUE"),
        NodeSetConf("nodeset-0"),
        NodeSetConf("nodeset-1", "MaxTime=UNLIMITED OverSubscribe=EXCLUSIVE"),
    ]
    text = slurmconf.render(conf(nodesets=tuple(sets)))
    assert text == slurmconf.render(conf(nodesets=tuple(reversed(sets))))
    section = text.split("### NODESET & PARTITION ###\n")[1]
    assert section == (
        "NodeSet=nodeset-0 Feature=nodeset-0\n"
        "NodeSet=nodeset-1 Feature=nodeset-1\n"
        "PartitionName=nodeset-1 Nodes=nodeset-1 MaxTime=UNLIMITED OverSubscribe=EXCLUSIVE\n"
        "NodeSet=nodeset-2 Feature=nodeset-2\n"
        "PartitionName=nodeset-2 Nodes=nodeset-2 MaxTime=UNLIMITED PreemptMode=REQUEUE\n"
    )


def test_partition_without_options_has_no_trailing_space():
    text = slurmconf.render(conf(nodesets=(NodeSetConf("cpu", ""),)))
    assert "PartitionName=cpu Nodes=cpu\n" in text


def test_accounting_metrics_and_jwks_lines():
    text = slurmconf.render(conf(accounting=Endpoint("acct-accounting.slurm", 6819), metrics=True, jwks=True))
    assert (
        "### ACCOUNTING ###\nAccountingStorageType=accounting_storage/slurmdbd\n"
        "AccountingStorageHost=acct-accounting.slurm\nAccountingStoragePort=6819\n"
    ) in text
    assert "\nMetricsType=metrics/openmetrics\n" in text
    assert "\nAuthAltParameters=jwt_key=/etc/slurm/jwt.key,jwks=/etc/slurm/jwks.json\n" in text


def test_prolog_and_epilog_sections():
    scripts = Scripts(
        prolog=("p0.sh", "p1.sh"), epilog=("e0.sh",), prolog_slurmctld=("pc.sh",), epilog_slurmctld=("ec.sh",)
    )
    text = slurmconf.render(conf(scripts=scripts))
    assert (
        "#\n### SLURMCTLD PROLOG & EPILOG ###\nPrologSlurmctld=/etc/slurm/pc.sh\nEpilogSlurmctld=/etc/slurm/ec.sh\n"
        "#\n### PROLOG & EPILOG ###\nProlog=p0.sh\nProlog=p1.sh\nEpilog=e0.sh\n"
    ) in text
    assert text.index("### ACCOUNTING ###") < text.index("### SLURMCTLD PROLOG")


def test_extra_config_then_merged_config_come_last():
    extra = "SchedulerParameters=bf_continue\nslurmctldparameters=Enable_Stepmgr,reconfig_on_restart # comment\n"
    text = slurmconf.render(conf(extra_conf=extra, nodesets=(NodeSetConf("cpu"),)))
    assert text.endswith(
        "#\n### EXTRA CONFIG #"
        "##\nSchedulerParameters=bf_continue\nslurmctldparameters=Enable_Stepmgr,reconfig_on_restart # comment\n"
        "#\n### MERGED CONFIG ###\nSlurmctldParameters=enable_configless,enable_stepmgr,reconfig_on_restart\n"
    )


def test_merged_config_keeps_operator_options_on_key_collision():
    text = slurmconf.render(conf(extra_conf="AuthAltParameters=jwt_key=/tmp/other,disable_token_creation"))
    assert text.endswith("### MERGED CONFIG ###\nAuthAltParameters=disable_token_creation,jwt_key=/etc/slurm/jwt.key\n")


def test_external_minimal_conf_is_exact():
    external = Controller("slurm", "slurm", external=Endpoint("my-controller", 6817))
    text = slurmconf.render_external("_slurm", external, None)
    assert text == (
        "#\n### GENERAL ###\nClusterName=_slurm\nSlurmUser=slurm\nSlurmctldHost=my-controller\nSlurmctldPort=6817\n"
        "#\n### PLUGINS & PARAMETERS ###\nAuthType=auth/slurm\nCredType=cred/slurm\nAuthAltTypes=auth/jwt\n"
        "#\n### ACCOUNTING ###\nAccountingStorageType=accounting_storage/none\n"
    )
    with_acct = slurmconf.render_external("_slurm", external, Endpoint("slurm-accounting.ns", 6819))
    assert with_acct.endswith(
        "AccountingStorageType=accounting_storage/slurmdbd\nAccountingStorageHost=slurm-accounting.ns\nAccountingStoragePort=6819\n"
    )


def test_an_elastic_nodeset_refuses_jobs_larger_than_its_partition_unless_extra_conf_says_otherwise():
    """EnforcePartLimits=ANY with an elastic NodeSet (its every node is known to Slurm, so a larger job is refused
    at submit rather than held for good); extraConf's own setting replaces the line; none without one."""
    elastic = NodeSetConf("gpu", elastic=ElasticNodes(None, "gpu-[0-3]", "CPUs=4", Elastic(0, 4, 600, 600)))
    assert "\nEnforcePartLimits=ANY\n" in slurmconf.render(conf(nodesets=(elastic,)))
    for extra in ("EnforcePartLimits=NO", "enforcepartlimits=ALL # every partition"):
        text = slurmconf.render(conf(nodesets=(elastic,), extra_conf=extra))
        assert "EnforcePartLimits=ANY" not in text and text.lower().count("enforcepartlimits=") == 1, text
    assert "EnforcePartLimits" not in slurmconf.render(conf(nodesets=(NodeSetConf("cpu"),)))

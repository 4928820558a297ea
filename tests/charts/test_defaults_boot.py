"""The chart's default cluster boots on the real Slurm of the lab: charts/slurm with its defaults (no
NodeSet, as in Slinky, plus our default `all` partition), rendered by real helm, fed to the
Controller hook, gives a slurm.conf that slurmctld 26.05 starts with, under the cluster name
Slinky's operator would derive. Only what the lab's chroot needs is the test's own: the values add
`ProctrackType=proctrack/linuxproc` (no cgroups there) and paths and ports move to loopback."""

from __future__ import annotations

import os

import pytest

from tests.charts.rendered import hook_children, render
from tests.fixtures.secondcluster import NO_CGROUPS, SecondCluster, for_loopback, write_config
from tests.fixtures.slurm import wait_for

pytestmark = pytest.mark.slurm


def test_default_values_boot_slurmctld_with_the_all_partition_and_slinkys_cluster_name(second_cluster: SecondCluster):
    cluster = second_cluster
    controller = render({"controller": {"extraConf": NO_CGROUPS}})["Controller/slurm"]
    rendered = hook_children("controller", controller)["ConfigMap/slurm-config"]["data"]["slurm.conf"]
    write_config(cluster, for_loopback(rendered, cluster), {"slurm.key": os.urandom(32), "jwt.key": os.urandom(32)})

    cluster.start("slurmctld", "slurmctld", "-D", "-f", cluster.conf)
    up = f"slurmctld up\n{cluster.logs()}"
    wait_for(lambda: cluster.run("scontrol", "ping"), lambda out: "is UP" in out, timeout=30, what=up)

    partition = cluster.run("scontrol", "show", "partition", "all")
    assert "PartitionName=all" in partition and "Default=YES" in partition and "State=UP" in partition, partition
    config = cluster.run("scontrol", "show", "config")
    assert any(line.split() == ["ClusterName", "=", "slurm_slurm"] for line in config.splitlines()), config
    assert all(d.poll() is None for d in cluster.daemons), cluster.logs()

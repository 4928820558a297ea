"""A deleting NodeSet's partition, as the Controller hook renders it, refuses new jobs in the real Slurm.

The Controller hook's slurm.conf boots a second slurmctld in the lab's chroot (tests/slurm/
test_slurmconf_boots.py explains the set-up) with a NodeSet whose partition the user set to
State=UP and one dynamic slurmd in it. A held job is queued there. Then the NodeSet is deleted
(deletionTimestamp set, still listed): the hook's new slurm.conf, reconfigured into slurmctld,
sets the partition to DRAIN, a new submission is refused, and the queued job is still queued:
what the deletion waits for, instead of ending it.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.fixtures.secondcluster import (
    NO_CGROUPS,
    SecondCluster,
    for_loopback,
    nodeset_pod,
    render_controller,
    slurmd_command,
    write_config,
)
from tests.fixtures.slurm import wait_for
from tests.support.hooks import cr

pytestmark = pytest.mark.slurm


def test_a_deleting_nodesets_partition_refuses_new_jobs_and_keeps_queued_ones(second_cluster: SecondCluster):
    cluster = second_cluster
    keys = {"slurm.key": os.urandom(32), "jwt.key": os.urandom(32)}
    partition = {"enabled": True, "config": "MaxTime=UNLIMITED State=UP"}
    nodeset = cr("NodeSet", "gpu", {"controllerRef": {"name": "slurm"}, "replicas": 1, "partition": partition})
    write_config(cluster, for_loopback(render_controller(keys["slurm.key"], keys["jwt.key"], nodeset), cluster), keys)
    cluster.start("slurmctld", "slurmctld", "-D", "-f", cluster.conf)
    wait_for(lambda: cluster.run("scontrol", "ping"), lambda out: "is UP" in out, timeout=30,
             what=f"slurmctld up\n{cluster.logs()}")  # fmt: skip
    pod = nodeset_pod(nodeset)
    slurmd = slurmd_command(pod, cluster)
    cluster.start("slurmd", "env", f"SLURM_CONF={cluster.conf}", "SLINKY_TOPOLOGY=", "sh", "-c", slurmd)
    host = pod["spec"]["hostname"]
    wait_for(lambda: cluster.run("sinfo", "-h", "-N", "-p", "gpu", "-o", "%N %t"),
             lambda out: out.split() == [host, "idle"],
             timeout=30, what=f"{host} idle in partition gpu\n{cluster.logs()}")  # fmt: skip

    queued = cluster.run("sbatch", "--parsable", "-H", "-p", "gpu", "--wrap", "sleep 600")
    job = queued.strip().split(";")[0]
    assert job.isdigit(), queued

    nodeset["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    rendered = render_controller(keys["slurm.key"], keys["jwt.key"], nodeset)
    assert "PartitionName=gpu Nodes=gpu MaxTime=UNLIMITED State=DRAIN\n" in rendered
    write_config(cluster, for_loopback(rendered, cluster), keys)
    assert "error" not in cluster.run("scontrol", "reconfigure").lower()
    wait_for(lambda: cluster.run("scontrol", "show", "partition", "gpu"),
             lambda out: re.search(r"\bState=DRAIN\b", out) is not None,
             timeout=30, what=f"partition gpu DRAIN\n{cluster.logs()}")  # fmt: skip

    refused = cluster.run("sbatch", "--parsable", "-p", "gpu", "--wrap", "true")
    assert not refused.strip().split(";")[0].isdigit(), f"a new job was accepted by a draining partition: {refused}"
    assert "Required partition not available (inactive or drain)" in refused, refused
    state = cluster.run("squeue", "-h", "-j", job, "-o", "%T %P")
    assert state.split() == ["PENDING", "gpu"], f"the queued job must stay queued: {state}\n{cluster.logs()}"
    assert NO_CGROUPS in rendered

"""The bridge's partition, run by the real Slurm 26.05 of the lab: charts/slurm with
examples/values/slurm-bridge-partition.yaml, through the Controller hook, boots a second slurmctld (inside the lab's
chroot, own ports and state; tests/fixtures/secondcluster.py), and a node registered the way the bridge registers a
Kubernetes Node (the node hook's `node_conf`: State=External, the partition as its feature) is a node of the
partition `slurm-bridge`, the one the bridge's placeholder jobs ask for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from hooks.app import create_app
from hooks.bridge import node as node_hook
from slinky_common import names
from tests.charts import helm
from tests.fixtures.secondcluster import NO_CGROUPS, SecondCluster, for_loopback, write_config
from tests.fixtures.slurm import wait_for
from tests.support.hooks import by_kind, related, request, secret

pytestmark = pytest.mark.slurm
PARTITION_VALUES = Path(__file__).resolve().parents[2] / "examples" / "values" / "slurm-bridge-partition.yaml"


def test_a_node_the_bridge_registers_lands_in_the_slurm_bridge_partition(second_cluster: SecondCluster) -> None:
    cluster = second_cluster
    values = yaml.safe_load(PARTITION_VALUES.read_text())
    values["controller"]["extraConf"] += "\n" + NO_CGROUPS  # the chroot has no cgroup filesystem (as the hook tests)
    (controller,) = [d for d in helm.render("slurm", values, "slurm", release="slurm") if d["kind"] == "Controller"]
    keys = {"slurm.key": os.urandom(32), "jwt.key": os.urandom(32)}
    parent = {**controller, "metadata": {**controller["metadata"], "uid": "uid-slurm", "generation": 1}}
    rel = related(secret("slurm-auth-slurm", {"slurm.key": keys["slurm.key"]}),
                  secret("slurm-auth-jwt", {"jwt.key": keys["jwt.key"]}))  # fmt: skip
    answer = create_app().test_client().post("/controller/sync", json=request(parent, rel=rel))
    assert answer.status_code == 200, answer.get_json()
    write_config(cluster, for_loopback(by_kind(answer.get_json())["ConfigMap/slurm-config"]["data"]["slurm.conf"],
                                       cluster), keys)  # fmt: skip
    cluster.start("slurmctld", "slurmctld", "-D", "-f", cluster.conf)
    wait_for(lambda: cluster.run("scontrol", "ping"), lambda out: "is UP" in out, timeout=30,
             what=f"slurmctld up\n{cluster.logs()}")  # fmt: skip
    shown = cluster.run("scontrol", "show", "partition", "slurm-bridge")
    assert "PartitionName=slurm-bridge" in shown and "State=UP" in shown and "Default=NO" in shown, shown

    node = {
        "metadata": {
            "name": "kube-ext1",
            "labels": {names.LABEL_EXTERNAL_NODE: "true"},
            "annotations": {names.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "slurm-bridge"},
        },
        "status": {"capacity": {"cpu": "2", "memory": "1Gi"}},
    }
    conf = node_hook.registration(node)["node_conf"]  # what slurm_sync POSTs to new/node
    created = cluster.run("scontrol", "create", *conf.split())
    assert "error" not in created.lower(), f"{conf}: {created}\n{cluster.logs()}"
    wait_for(
        lambda: cluster.run("sinfo", "-h", "-N", "-p", "slurm-bridge", "-o", "%N"),
        lambda out: out.split() == ["kube-ext1"],
        timeout=30,
        what=f"kube-ext1 in partition slurm-bridge\n{cluster.run('scontrol', 'show', 'node')}\n{cluster.logs()}",
    )
    assert "EXTERNAL" in cluster.run("scontrol", "show", "node", "kube-ext1")

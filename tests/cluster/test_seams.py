"""The three seam bugs of issue 23, each on the cluster lab as a user would meet it.

1. A NodeSet whose extraConf sorts after Topology (`Weight=7`) registered its nodes INVALID_REG.
2. A rolling update that changes a NodeSet's CPUs and memory left the new pod under the old node record.
3. A LoginSet of an external Controller pointed sackd at a Service that does not exist.

Each test makes its own objects and deletes them at the end, leaving the example cluster as it was.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.cluster.lab import CONTROLLER_POD, scontrol_node
from tests.cluster.plugin import NAMESPACE, ClusterLab, eventually, ready
from tests.fixtures.slurm import wait_for

pytestmark = pytest.mark.cluster
SEAM = "slurm-worker-seam"


def apply(lab: ClusterLab, obj: dict) -> None:
    lab.kubectl("apply", "-f", "-", input_text=json.dumps(obj))


def nodeset(cpu: str, memory: str) -> dict:
    """A one-pod NodeSet in its own partition, with a key that sorts after Topology in its --conf."""
    return {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "NodeSet",
        "metadata": {"name": SEAM, "namespace": NAMESPACE},
        "spec": {
            "controllerRef": {"name": "slurm"},
            "replicas": 1,
            "slurmd": {"image": "ghcr.io/slinkyproject/slurmd:25.05-ubuntu24.04",
                       "resources": {"limits": {"cpu": cpu, "memory": memory}}},
            "template": {"spec": {"hostname": "seam-"}},
            "extraConf": "Weight=7",
            "partition": {"enabled": True, "config": "State=UP MaxTime=UNLIMITED"},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
        },
    }  # fmt: skip


def seam_pod(lab: ClusterLab) -> dict | None:
    pods = lab.pods(f"app.kubernetes.io/instance={SEAM}")
    return pods[0] if len(pods) == 1 and ready(pods[0]) else None


def idle_node(lab: ClusterLab, node: str, what: str) -> dict[str, str]:
    """The node's scontrol fields once it is IDLE (the last ones are in the failure message). A new partition
    rolls slurmctld, so the command may fail for a while."""
    return wait_for(lambda: scontrol_node(lab, node, check=False), lambda f: f.get("State", "").split("+")[0] == "IDLE",
                    timeout=180, interval=1, what=what)  # fmt: skip


@pytest.fixture
def seam_nodeset(cluster_lab: ClusterLab) -> Iterator[None]:
    apply(cluster_lab, nodeset("2", "4Gi"))
    yield
    cluster_lab.kubectl("delete", "-n", NAMESPACE, "nodeset", SEAM, "--wait=true", "--timeout=180s")


def test_a_nodeset_with_weight_then_a_rolling_update_of_its_sizes(cluster_lab: ClusterLab, seam_nodeset: None) -> None:
    pod = eventually("the seam NodeSet's pod Ready", lambda: seam_pod(cluster_lab), timeout=180)
    node = pod["spec"]["hostname"]
    fields = idle_node(cluster_lab, node, f"node {node} IDLE")
    assert fields["Weight"] == "7" and "INVALID_REG" not in fields["State"], fields
    assert (int(fields["CPUEfctv"]), int(fields["RealMemory"]) - int(fields.get("MemSpecLimit", "0"))) == (2, 4096)

    apply(cluster_lab, nodeset("1", "2Gi"))  # a rolling update: drain, delete, a new pod with new limits
    new = eventually("the replacement pod Ready", lambda: (p := seam_pod(cluster_lab)) and p["metadata"]["uid"] !=
                   pod["metadata"]["uid"] and p, timeout=240)  # fmt: skip
    assert new["spec"]["hostname"] == node  # same ordinal, same Slurm node name
    fields = idle_node(cluster_lab, node, f"node {node} IDLE again")
    assert (int(fields["CPUEfctv"]), int(fields["RealMemory"]) - int(fields.get("MemSpecLimit", "0"))) == (1, 2048)
    out = cluster_lab.exec(CONTROLLER_POD, ["srun", "-p", SEAM.removeprefix("slurm-worker-"), "-N1", "-c1",
                                            "--mem=2000", "sh", "-c", "hostname"]).stdout  # fmt: skip
    assert out.strip() == node
    too_big = cluster_lab.exec(CONTROLLER_POD, ["srun", "-p", SEAM.removeprefix("slurm-worker-"), "-N1",
                                                "--mem=4000", "--immediate=5", "true"], check=False)  # fmt: skip
    assert too_big.returncode != 0, "a job asking for the old memory ran on the resized node"


def test_a_loginset_of_an_external_controller_runs_sinfo(cluster_lab: ClusterLab) -> None:
    controller = {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "Controller",
        "metadata": {"name": "outside", "namespace": NAMESPACE},
        "spec": {"clusterName": "slurm", "external": True,
                 "externalConfig": {"host": "slurm-controller.slurm", "port": 6817},
                 "slurmKeyRef": {"name": "slurm-auth-slurm", "key": "slurm.key"},
                 "jwtKeyRef": {"name": "slurm-auth-jwt", "key": "jwt.key"}},
    }  # fmt: skip
    loginset = {
        "apiVersion": "slinky.slurm.net/v1beta1",
        "kind": "LoginSet",
        "metadata": {"name": "outside-login", "namespace": NAMESPACE},
        "spec": {"controllerRef": {"name": "outside"}, "replicas": 1,
                 "login": {"image": "ghcr.io/slinkyproject/login:25.05-ubuntu24.04"},
                 "sssdConfRef": {"name": "slurm-sssd-conf", "key": "sssd.conf"}},
    }  # fmt: skip
    try:
        apply(cluster_lab, controller)
        apply(cluster_lab, loginset)
        cluster_lab.kubectl(
            "wait", "-n", NAMESPACE, "--for=condition=Ready", "loginset/outside-login", "--timeout=180s"
        )
        (pod,) = cluster_lab.pods("app.kubernetes.io/instance=outside-login")
        sinfo = cluster_lab.exec(pod["metadata"]["name"], ["sinfo", "-h", "-p", "debug", "-o", "%P %D"]).stdout
        assert sinfo.split() == ["debug", "2"]
    finally:
        cluster_lab.kubectl("delete", "-n", NAMESPACE, "loginset/outside-login", "controller/outside",
                            "--ignore-not-found", "--wait=true", "--timeout=120s")  # fmt: skip

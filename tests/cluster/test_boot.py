"""Every custom resource of examples/crs/ boots its real daemon in the cluster lab, from what the hooks render.

Each check runs where a user would run it: Slurm commands inside the pods (hack/cluster/exec.sh), the
REST API from a pod through its Service name, objects through kubectl.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.cluster.lab import CONTROLLER_POD, scontrol_node
from tests.cluster.plugin import ClusterLab

pytestmark = pytest.mark.cluster
REST_PING = "http://slurm-restapi.slurm:6820/slurm/v0.0.45/ping"


def quantity_mib(text: str) -> int:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "": 1 / (1024 * 1024)}
    number, unit = re.fullmatch(r"([0-9]+)([KMGT]i)?", text).groups()  # type: ignore[union-attr]
    return int(int(number) * units[unit or ""])


def test_slurmctld_answers_scontrol_ping_in_its_pod(cluster_lab: ClusterLab) -> None:
    out = cluster_lab.exec(CONTROLLER_POD, ["scontrol", "ping"]).stdout
    assert re.search(r"Slurmctld\(primary\) at \S+ is UP", out), out


def test_every_nodeset_pod_is_an_idle_node_of_its_partition_with_the_pod_sizes(cluster_lab: ClusterLab) -> None:
    nodeset = cluster_lab.get("nodeset", "slurm-worker-debug")
    pods = cluster_lab.pods("app.kubernetes.io/instance=slurm-worker-debug")
    assert len(pods) == nodeset["spec"]["replicas"]
    limits = nodeset["spec"]["slurmd"]["resources"]["limits"]
    for pod in pods:
        node = pod["spec"]["hostname"]
        fields = scontrol_node(cluster_lab, node)
        assert fields["State"].split("+")[0] == "IDLE", fields["State"]
        assert "debug" in fields["Partitions"].split(","), fields["Partitions"]
        assert int(fields["CPUEfctv"]) == int(limits["cpu"]), fields
        usable = int(fields["RealMemory"]) - int(fields.get("MemSpecLimit", "0"))
        assert usable == quantity_mib(limits["memory"]), fields
        assert "debug" in fields["AvailableFeatures"].split(","), fields["AvailableFeatures"]


def test_restapi_answers_ping_with_the_token_crs_jwt_and_401_without(cluster_lab: ClusterLab) -> None:
    secret = cluster_lab.get("secret", "slurm-token-slurm")
    token = __import__("base64").b64decode(secret["data"]["SLURM_JWT"]).decode()
    with_token = cluster_lab.exec(CONTROLLER_POD, ["curl", "-s", "-w", "\n%{http_code}", "-H",
                                                   f"X-SLURM-USER-TOKEN: {token}", REST_PING]).stdout  # fmt: skip
    body, _, code = with_token.rpartition("\n")
    assert code == "200", with_token
    assert json.loads(body)["pings"][0]["responding"] is True
    without = cluster_lab.exec(
        CONTROLLER_POD, ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", REST_PING]
    ).stdout
    assert without == "401"


CHILD_KINDS = "statefulsets,deployments,services,configmaps,secrets,pods,poddisruptionbudgets,persistentvolumeclaims"


def resource_versions(lab: ClusterLab) -> dict[str, str]:
    items = lab.get(CHILD_KINDS)["items"]
    items += lab.get("controllers,nodesets,loginsets,restapis,accountings,tokens")["items"]
    return {f"{o['kind']}/{o['metadata']['name']}": o["metadata"]["resourceVersion"] for o in items}


def test_every_object_stays_at_a_fixed_point_once_ready(cluster_lab: ClusterLab) -> None:
    before = resource_versions(cluster_lab)
    time.sleep(60)
    after = resource_versions(cluster_lab)
    changed = sorted(k for k in before.keys() & after.keys() if before[k] != after[k])
    assert changed == [], f"updated within 60 s after Ready: {changed}"
    assert before.keys() == after.keys(), f"created/deleted: {sorted(before.keys() ^ after.keys())}"

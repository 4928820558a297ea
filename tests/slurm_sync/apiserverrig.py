"""What the tests of the whole service against the real API server and the real Slurm lab share: the cluster's
objects, worker pods, and the lab's nodes put back in service."""

from __future__ import annotations

from typing import Any

from slinky_common import names
from tests.crds.cases import example
from tests.fixtures.slurm import SlurmLab, wait_for

CONTROLLER = "slurm"


def worker_pod(name: str, slurm_node: str, controller: str = CONTROLLER) -> dict[str, Any]:
    labels = {names.LABEL_CLUSTER: controller, names.LABEL_NODESET_POD_HOSTNAME: slurm_node}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"hostname": slurm_node, "containers": [{"name": "slurmd", "image": "slurmd:26.05"}]},
    }


def restore(lab: SlurmLab, *nodes: str) -> None:
    for node in nodes:
        lab.run("scontrol", "update", f"nodename={node}", "state=resume")
    for node in nodes:

        def show(n: str = node) -> str:
            return lab.run("scontrol", "show", "node", n).stdout

        wait_for(
            show,
            lambda s: "DRAIN" not in s and "NOT_RESPONDING" not in s,
            what=f"{node} back in service",
        )


def cluster_objects(namespace: str, name: str, cluster_name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    controller = example("Controller")
    controller["metadata"] = {"name": name, "namespace": namespace}
    controller["spec"]["clusterName"] = cluster_name
    controller["spec"]["jwtKeyRef"] = {"name": "slurm-jwt", "key": "jwt.key"}
    restapi = example("RestApi")
    restapi["metadata"] = {"name": name, "namespace": namespace}
    restapi["spec"]["controllerRef"] = {"name": name}
    return controller, restapi

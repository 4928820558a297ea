"""What the cluster lab's tests share: the slurmctld pod's name and reading a node as slurmctld sees it."""

from __future__ import annotations

import re

from tests.cluster.plugin import ClusterLab

CONTROLLER_POD = "slurm-controller-0"


def scontrol_node(lab: ClusterLab, node: str, check: bool = True) -> dict[str, str]:
    """The node's `scontrol show node` fields; unchecked, a failed command (slurmctld restarting) gives its error."""
    done = lab.exec(CONTROLLER_POD, ["scontrol", "show", "node", node, "--oneliner"], check=check)
    if done.returncode != 0:
        return {"error": done.stderr.strip()}
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout))

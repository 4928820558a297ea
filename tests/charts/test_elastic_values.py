"""`nodesets.<key>.elastic` of charts/slurm (docs/operations.md, "Elastic NodeSets"): the NodeSet's
spec.elastic, with no replicas (Slurm's queue sizes it), which the Controller's hook turns into Slurm's power
saving lines for that NodeSet's nodes."""

from __future__ import annotations

from tests.charts.rendered import hook_children, render

ELASTIC = {"maxReplicas": 4, "suspendTime": 30, "resumeTimeout": 45}
GPU = {"elastic": ELASTIC, "extraConf": "CPUs=1 RealMemory=1024", "partition": {"enabled": True}}
VALUES = {"nodesets": {"gpu": GPU, "cpu": {"replicas": 2}}}


def test_an_elastic_entry_renders_spec_elastic_and_no_replicas() -> None:
    docs = render(VALUES)
    elastic, fixed = docs["NodeSet/slurm-worker-gpu"]["spec"], docs["NodeSet/slurm-worker-cpu"]["spec"]
    assert elastic["elastic"] == ELASTIC and "replicas" not in elastic
    assert fixed["replicas"] == 2 and "elastic" not in fixed


def test_the_controller_powers_the_elastic_nodes_as_slurm_would() -> None:
    docs = render(VALUES)
    children = hook_children("controller", docs["Controller/slurm"], docs["NodeSet/slurm-worker-gpu"])
    conf = children["ConfigMap/slurm-config"]["data"]["slurm.conf"]
    assert "SuspendTime=" in conf and "gpu-[0-3]" in conf, conf

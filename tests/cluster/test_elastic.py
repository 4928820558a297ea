"""Elastic NodeSets on the cluster lab (docs/architecture.md §4.9): examples/crs/nodeset-elastic.yaml, minimum
0 and maximum 4, with the lab's shorter times (suspendTime 30 s, resumeTimeout 45 s: hack/cluster/slurm-values.yaml,
or hack/cluster/lab-patches.yaml with CLUSTER_LAB_CLUSTER=examples).

Slurm's power saving decides; slurm_sync reports it on the NodeSet; the NodeSet hook creates the pods of the
nodes Slurm powers up and removes those of the nodes it powers down, through the drain protocol; the node agent
starts each pod's slurmd when the pod is created. Every job of these tests must end by itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.lab import CONTROLLER_POD, scontrol_node
from tests.cluster.plugin import LAB, NAMESPACE, ClusterLab, eventually

pytestmark = pytest.mark.cluster
NODESET = "slurm-worker-elastic"
PARTITION = "elastic"  # the NodeSet's hostname prefix names its partition and nodes (elastic-0 ... elastic-3)
NODES = tuple(f"elastic-{i}" for i in range(4))
SUSPEND_TIME, RESUME_TIMEOUT = 30, 45  # hack/cluster/slurm-values.yaml
SUBMIT = ("sbatch", "--parsable", "-p", PARTITION, "-t", "5", "--chdir=/tmp", "-o", "/dev/null")


def slurm(lab: ClusterLab, *command: str) -> str:
    return lab.exec(CONTROLLER_POD, list(command), timeout=90).stdout


def elastic_pods(lab: ClusterLab) -> list[str]:
    return sorted(p["metadata"]["name"] for p in lab.pods(f"app.kubernetes.io/instance={NODESET}"))


def node_states(lab: ClusterLab) -> dict[str, str]:
    """Each node of the partition by `sinfo`'s compact state (`idle~`: powered down; `alloc#`: powering up)."""
    out = slurm(lab, "sinfo", "-p", PARTITION, "-N", "-h", "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def all_powered_down(lab: ClusterLab) -> bool:
    return node_states(lab) == dict.fromkeys(NODES, "idle~") and not elastic_pods(lab)


def job_fields(lab: ClusterLab, job: str) -> dict[str, str]:
    """`scontrol show job` fields, {} once slurmctld forgot the job."""
    done = lab.exec(CONTROLLER_POD, ["scontrol", "show", "job", job, "--oneliner"], check=False)
    return dict(field.split("=", 1) for field in done.stdout.split() if "=" in field) if done.returncode == 0 else {}


def accounted(lab: ClusterLab, job: str) -> str:
    """The job's final state in accounting ("" while it has none)."""
    return slurm(lab, "sacct", "-j", job, "-X", "-n", "-P", "-o", "State").strip()


def until_ended(lab: ClusterLab, job: str, timeout: float) -> str:
    return eventually(
        f"job {job} ended",
        lambda: (s := accounted(lab, job)) not in ("", "PENDING", "RUNNING", "REQUEUED", "CONFIGURING") and s,
        timeout=timeout,
        interval=1,
    )


@pytest.fixture
def quiet(cluster_lab: ClusterLab) -> Iterator[ClusterLab]:
    """Every node powered down and no pod, before and after (a later test needs the same start)."""
    eventually("every elastic node powered down", lambda: all_powered_down(cluster_lab), timeout=SUSPEND_TIME + 120)
    yield cluster_lab
    eventually("every elastic node powered down", lambda: all_powered_down(cluster_lab), timeout=SUSPEND_TIME + 120)


def test_slurm_knows_every_node_without_a_pod_and_powers_up_exactly_the_ones_a_job_needs(quiet: ClusterLab) -> None:
    lab = quiet
    assert node_states(lab) == dict.fromkeys(NODES, "idle~") and elastic_pods(lab) == []
    too_large = lab.exec(CONTROLLER_POD, [*SUBMIT, "-N5", "--wrap", "true"], check=False)  # 4 nodes at most
    assert too_large.returncode != 0, f"a 5-node job was accepted: {too_large.stdout}"
    assert "Batch job submission failed: More processors requested than permitted" in too_large.stderr, too_large
    assert node_states(lab) == dict.fromkeys(NODES, "idle~") and elastic_pods(lab) == []
    job = slurm(lab, *SUBMIT, "-N2", "--wrap", "srun true; sleep 3").strip()
    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and accounted(lab, job) in ("", "PENDING", "RUNNING"):
        seen.update(elastic_pods(lab))
        time.sleep(0.3)
    assert until_ended(lab, job, 60) == "COMPLETED"
    assert len(seen) == 2, f"pods of the job's nodes only: {sorted(seen)}"


def test_an_idle_node_gives_its_pod_back_within_suspend_time(quiet: ClusterLab) -> None:
    lab = quiet
    job = slurm(lab, *SUBMIT, "-N1", "--wrap", "sleep 2").strip()
    assert until_ended(lab, job, 120) == "COMPLETED"
    ended = time.monotonic()
    eventually("no elastic pod", lambda: not elastic_pods(lab), timeout=SUSPEND_TIME + 30 + 15, interval=1)
    assert time.monotonic() - ended <= SUSPEND_TIME + 30, "back to 0 pods within suspendTime + 30 s"
    eventually("the nodes powered down again", lambda: node_states(lab) == dict.fromkeys(NODES, "idle~"), timeout=60)


@pytest.fixture
def held_pod(quiet: ClusterLab) -> Iterator[Path]:
    """The slurmd of elastic-3's pod is not started while the returned file exists (hack/cluster/lab/agent.py)."""
    hold = LAB / "hold" / f"{NAMESPACE}_{NODESET}-3" / "slurmd"
    hold.parent.mkdir(parents=True, exist_ok=True)
    hold.touch()
    try:
        yield hold
    finally:
        hold.unlink(missing_ok=True)


def told_failed(lab: ClusterLab, node: str) -> bool:
    return any(
        e.get("reason") == "ResumeFailed"
        and e["regarding"].get("name") == NODESET
        and f"{node} was not up within its ResumeTimeout" in e.get("note", "")
        for e in lab.get("events.events.k8s.io")["items"]
    )


def test_a_pod_that_never_comes_up_requeues_the_job_which_runs_later(held_pod: Path, cluster_lab: ClusterLab) -> None:
    lab = cluster_lab
    job = slurm(lab, *SUBMIT, "-N1", "-w", "elastic-3", "--wrap", "sleep 2").strip()
    eventually("the pod of elastic-3", lambda: f"{NODESET}-3" in elastic_pods(lab), timeout=30)
    requeued = eventually(
        "the job requeued after ResumeTimeout",
        lambda: (f := job_fields(lab, job)).get("Restarts") == "1" and f.get("JobState") == "PENDING" and f,
        timeout=RESUME_TIMEOUT + 60,
        interval=1,
    )
    assert requeued["JobState"] == "PENDING"
    eventually(
        "a ResumeFailed Event on the NodeSet naming elastic-3", lambda: told_failed(lab, "elastic-3"), timeout=30
    )
    eventually("the pod that never came up removed", lambda: f"{NODESET}-3" not in elastic_pods(lab), timeout=60)
    eventually("elastic-3 resumed, powered down", lambda: node_states(lab).get("elastic-3") == "idle~", timeout=60)
    held_pod.unlink()
    # Slurm starts a requeued job no sooner than 120 s after its requeue (its BeginTime)
    assert until_ended(lab, job, 120 + 120) == "COMPLETED"
    assert accounted(lab, job) == "COMPLETED"


def test_a_running_job_survives_a_suspend_attempt_a_rolling_update_and_a_leader_change(quiet: ClusterLab) -> None:
    lab = quiet
    job = slurm(lab, *SUBMIT, "-N1", "--wrap", "sleep 60").strip()
    node = eventually("the job running", lambda: (f := job_fields(lab, job)).get("JobState") == "RUNNING" and f,
                      timeout=120, interval=1)["NodeList"]  # fmt: skip
    # an administrator's power-down of a busy node: Slurm refuses it or keeps it for when the job ends
    lab.exec(CONTROLLER_POD, ["scontrol", "update", f"nodename={node}", "state=POWER_DOWN_ASAP"], check=False)
    patch = {"spec": {"template": {"metadata": {"annotations": {"lab/rollout": str(time.time())}}}}}
    lab.kubectl("patch", "-n", NAMESPACE, "nodeset", NODESET, "--type=merge", "-p", json.dumps(patch))
    leader = eventually("the slurm_sync leader", lambda: leader_of(lab), timeout=60)
    lab.kill_sync(leader)
    assert until_ended(lab, job, 180) == "COMPLETED"
    # the node powers down once the job ends and its pod goes; that pod's preStop sets our DOWN reason on the way
    # (CI at b5045ad read it then), which slurm_sync lifts once the node is powered down and the pod gone
    eventually(f"{node} with no reason of ours", lambda: free_of_our_reasons(lab, node),
               timeout=SUSPEND_TIME + RESUME_TIMEOUT + 60, interval=1)  # fmt: skip


def free_of_our_reasons(lab: ClusterLab, node: str) -> bool:
    """slurmctld answered, and the node carries no drain or DOWN reason of ours."""
    fields = scontrol_node(lab, node, check=False)
    return "NodeName" in fields and "slurm-operator" not in fields.get("Reason", "")


def leader_of(lab: ClusterLab) -> str:
    leaders = [name for name, role in lab.sync_roles().items() if role.startswith("leader ")]
    return leaders[0] if len(leaders) == 1 else ""


def test_the_slurmctld_pod_holds_no_kubernetes_credentials(cluster_lab: ClusterLab) -> None:
    """Slurm's ResumeProgram and SuspendProgram do nothing (slurm.conf's /bin/true): slurm_sync acts on what
    Slurm decided, so the slurmctld pod needs no token of any kind."""
    spec = cluster_lab.get("pod", CONTROLLER_POD)["spec"]
    assert spec.get("automountServiceAccountToken") is False
    sources = json.dumps(spec.get("volumes", []))
    assert "serviceAccountToken" not in sources and "kube-api-access" not in sources
    conf = slurm(cluster_lab, "scontrol", "show", "config")
    assert {
        line.split("=", 1)[0].strip(): line.split("=", 1)[1].strip() for line in conf.splitlines() if " = " in line
    }["ResumeProgram"] == "/bin/true"

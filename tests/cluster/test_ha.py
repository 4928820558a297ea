"""slurmctld high availability on the cluster lab: the backup takes control when the primary dies, no job is lost.

A second cluster "ha": a Controller with `ha: {enabled: true, backups: 1}` on a shared claim (and a short
SlurmctldTimeout, as a user who wants a fast takeover sets it) and a one-pod NodeSet. The primary's
slurmctld is killed and held down (the lab's agent leaves a held container stopped) until the backup
answers for a job that was running; then it starts again and takes control back. Deleted at the end.
"""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
from collections.abc import Iterator

import pytest

from tests.cluster.plugin import LAB, NAMESPACE, ClusterLab, eventually, ready

pytestmark = pytest.mark.cluster
TIMEOUT = 10  # SlurmctldTimeout for this test
SELECTOR = "app.kubernetes.io/name=slurmctld,app.kubernetes.io/instance=ha"
PRIMARY, BACKUP, WORKER = "ha-controller-0", "ha-controller-1", "ha-worker-0"
SHARED = "slurm-statesave-shared"
SLINKY = "slinky.slurm.net/v1beta1"
FINAL = ("COMPLETED", "FAILED", "CANCELLED", "NODE_FAIL", "TIMEOUT")


def answer(lab: ClusterLab, command: list[str]) -> str:
    """A Slurm command's output on the backup's pod, "" while no slurmctld answers within a minute (during a
    take-over a client first waits out the dead primary): the callers wait, in `eventually`, for an answer."""
    try:
        return lab.exec(BACKUP, command, check=False).stdout
    except subprocess.TimeoutExpired:
        return ""


def ping(lab: ClusterLab) -> str:
    return answer(lab, ["scontrol", "ping"])


def both_up(lab: ClusterLab) -> str:
    out = ping(lab)
    return out if out.count(" is UP") == 2 else ""


def job_state(lab: ClusterLab, job: str) -> str:
    return answer(lab, ["squeue", "-h", "-j", job, "-o", "%T"]).strip()


def final_state(lab: ClusterLab, job: str) -> str:
    """The job's state once it has ended, "" before (this cluster has no accounting: scontrol keeps an ended
    job for MinJobAge)."""
    state = re.search(r"JobState=(\S+)", answer(lab, ["scontrol", "show", "job", job]))
    return state[1] if state and state[1] in FINAL else ""


def saved_running(node: str) -> bool:
    """Whether slurmctld's state on the shared claim holds what the backup needs to keep a job running on
    ``node``: the job state written since the job started there (it names the node once allocated) and the
    dynamic node itself in the node state. slurmctld batches these writes for up to 5 s; one killed sooner
    loses them, as on any HA pair (the backup requeued the job: seen on the first try)."""
    state = LAB / "pvc" / NAMESPACE / SHARED
    with contextlib.suppress(OSError):
        return all(node.encode() in (state / name).read_bytes() for name in ("job_state", "node_state"))
    return False


def rolled_out(lab: ClusterLab) -> bool:
    """Every pod of the slurmctld StatefulSet on its latest revision and ready (kubectl rollout status)."""
    sts = lab.get("statefulset", "ha-controller")
    status, replicas = sts.get("status", {}), sts["spec"].get("replicas", 1)
    return (
        status.get("observedGeneration") == sts["metadata"].get("generation")
        and status.get("updateRevision") == status.get("currentRevision")
        and status.get("updatedReplicas") == status.get("readyReplicas") == replicas
    )


def ready_pods(lab: ClusterLab) -> list[str]:
    return sorted(p["metadata"]["name"] for p in lab.pods(SELECTOR) if ready(p))


@pytest.fixture
def ha_cluster(cluster_lab: ClusterLab) -> Iterator[None]:
    """A second cluster, "ha": HA asks for an existing ReadWriteMany claim at creation (it is immutable)."""
    lab_conf = cluster_lab.get("controller", "slurm")["spec"]
    objects = [
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": SHARED, "namespace": NAMESPACE},
         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}},
        {"apiVersion": SLINKY, "kind": "Controller", "metadata": {"name": "ha", "namespace": NAMESPACE},
         "spec": {"clusterName": "ha", "slurmKeyRef": lab_conf["slurmKeyRef"], "jwtKeyRef": lab_conf["jwtKeyRef"],
                  "configFileRefs": lab_conf["configFileRefs"], "ha": {"enabled": True, "backups": 1},
                  "persistence": {"enabled": True, "existingClaim": SHARED},
                  "extraConf": lab_conf["extraConf"].rstrip("\n") + f"\nSlurmctldTimeout={TIMEOUT}\n"}},
        # slurm_sync learns through slurmrestd which slurmctld is in control and labels it for the main Service
        {"apiVersion": SLINKY, "kind": "RestApi", "metadata": {"name": "ha", "namespace": NAMESPACE},
         "spec": {"controllerRef": {"name": "ha"}, "replicas": 1}},
        {"apiVersion": SLINKY, "kind": "NodeSet", "metadata": {"name": "ha-worker", "namespace": NAMESPACE},
         "spec": {"controllerRef": {"name": "ha"}, "replicas": 1, "partition": {"enabled": True},
                  "slurmd": {"resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}}},
    ]  # fmt: skip
    for obj in objects:
        cluster_lab.kubectl("apply", "-f", "-", input_text=json.dumps(obj))
    try:
        yield
    finally:
        # no job left in its partition, then the NodeSet: its finalizer waits for slurm_sync to drain it. The
        # second cluster goes even when its slurmctld no longer answers: left, it keeps slurm_sync unready.
        answer(cluster_lab, ["scancel", "-p", "ha-worker"])
        try:
            cluster_lab.kubectl("delete", "-n", NAMESPACE, "nodeset/ha-worker", "--wait=true", "--timeout=180s")
        finally:
            cluster_lab.kubectl("delete", "-n", NAMESPACE, "restapi/ha", "controller/ha", f"pvc/{SHARED}",
                                "--wait=true", "--timeout=180s")  # fmt: skip


def test_the_backup_takes_control_when_the_primary_dies_and_a_running_job_completes(
    cluster_lab: ClusterLab, ha_cluster: None
) -> None:
    both = [PRIMARY, BACKUP]
    eventually("two slurmctld pods Ready", lambda: ready_pods(cluster_lab) == both, timeout=300)
    # the Controller's first sync, before its NodeSet's partition, rolls both pods once (a partition is a
    # slurm.conf change, as in Slinky): the scenario starts once that rollout is over, or its last step restarts
    # the primary just after it came back and the final job waits through it (CI, 981035d)
    eventually("the slurmctld StatefulSet rolled out", lambda: rolled_out(cluster_lab), timeout=300)
    eventually("two slurmctld pods Ready", lambda: ready_pods(cluster_lab) == both, timeout=300)
    up = eventually("primary and backup both UP", lambda: both_up(cluster_lab), timeout=120)
    primary = re.search(r"Slurmctld\(primary\) at (\S+) is UP", up)
    assert primary and primary[1] == PRIMARY, up
    # clients reach slurmctld through the main Service, which follows the pod slurm_sync labels active
    eventually("sinfo through the main Service", lambda: cluster_lab.exec(BACKUP, ["sinfo", "-h"], check=False)
               .returncode == 0, timeout=120)  # fmt: skip
    submit = ["sbatch", "--parsable", "-p", "ha-worker", "-N1", "--chdir=/tmp", "-o", "/dev/null"]
    job = cluster_lab.exec(BACKUP, [*submit, "--wrap", f"sleep {6 * TIMEOUT}"]).stdout.strip()
    eventually(f"job {job} running", lambda: job_state(cluster_lab, job) == "RUNNING", timeout=120)
    eventually("the running job in the saved state", lambda: saved_running(WORKER), timeout=30)

    primary_dir = cluster_lab.kill(PRIMARY, "slurmctld", hold=True)  # not restarted until the backup answered
    try:
        eventually("the primary DOWN", lambda: re.search(r"primary\) at \S+ is DOWN", ping(cluster_lab)),
                   timeout=6 * TIMEOUT)  # fmt: skip
        answer = eventually("the backup answering", lambda: job_state(cluster_lab, job), timeout=12 * TIMEOUT)
        assert answer == "RUNNING", f"job {job} after the take-over: {answer}"
        assert re.search(r"backup\d*\) at \S+ is UP", ping(cluster_lab))
    finally:
        (primary_dir / "hold").unlink()

    state = eventually(f"job {job} ended", lambda: final_state(cluster_lab, job), timeout=180)
    assert state == "COMPLETED"
    shown = cluster_lab.exec(BACKUP, ["scontrol", "show", "job", job]).stdout
    assert re.search(r"\bRestarts=0\b", shown), f"job {job} ran again after a requeue: {shown}"
    # the primary, started again, takes control back, and the cluster still runs jobs
    eventually("primary and backup both UP again", lambda: both_up(cluster_lab), timeout=120)
    after = cluster_lab.exec(BACKUP, ["srun", "-p", "ha-worker", "-N1", "hostname"], timeout=120)
    assert after.stdout.strip(), after

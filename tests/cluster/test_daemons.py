"""Accounting and login, used as a Slurm user would: a job's record in slurmdbd, sinfo/srun/ssh on the login pod."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid

import pytest

from tests.cluster.lab import CONTROLLER_POD
from tests.cluster.plugin import LAB, ClusterLab

pytestmark = pytest.mark.cluster
PARTITION = "debug"  # the example NodeSet's partition (the examples set no default partition)
SLURMDB_JOBS = "http://slurm-restapi.slurm:6820/slurmdb/v0.0.45/jobs"
SSH = ("ssh", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
       "-o", "ConnectTimeout=10")  # fmt: skip


def login_pod(lab: ClusterLab) -> dict:
    (pod,) = lab.pods("app.kubernetes.io/instance=slurm-login-slinky")
    return pod


def token(lab: ClusterLab) -> str:
    return base64.b64decode(lab.get("secret", "slurm-token-slurm")["data"]["SLURM_JWT"]).decode()


def test_a_job_run_on_the_cluster_is_in_sacct_and_in_the_slurmdb_rest_api(cluster_lab: ClusterLab) -> None:
    name = f"acct-{uuid.uuid4().hex[:8]}"
    cluster_lab.exec(CONTROLLER_POD, ["srun", "-p", PARTITION, "-N1", "-J", name, "true"])
    sacct = cluster_lab.exec(CONTROLLER_POD, ["sacct", "-X", "-n", "-P", "-o", "JobID,JobName,State", "--name", name])
    rows = [line.split("|") for line in sacct.stdout.splitlines()]
    assert [(row[1], row[2]) for row in rows] == [(name, "COMPLETED")], sacct.stdout
    answer = cluster_lab.exec(CONTROLLER_POD, ["curl", "-sf", "-H", f"X-SLURM-USER-TOKEN: {token(cluster_lab)}",
                                               f"{SLURMDB_JOBS}?job_name={name}"]).stdout  # fmt: skip
    jobs = json.loads(answer)["jobs"]
    assert [(job["name"], job["state"]["current"]) for job in jobs] == [(name, ["COMPLETED"])]
    assert str(jobs[0]["job_id"]) == rows[0][0]


def test_sinfo_and_srun_work_from_the_login_pod_through_sackd(cluster_lab: ClusterLab) -> None:
    pod = login_pod(cluster_lab)["metadata"]["name"]
    sinfo = cluster_lab.exec(pod, ["sinfo", "-h", "-p", PARTITION, "-o", "%P %a %D %t"]).stdout.split()
    assert sinfo == [PARTITION, "up", "2", "idle"]
    hostnames = sorted(cluster_lab.exec(pod, ["srun", "-p", PARTITION, "-N2", "hostname"]).stdout.split())
    nodes = sorted(p["spec"]["hostname"] for p in cluster_lab.pods("app.kubernetes.io/instance=slurm-worker-debug"))
    assert hostnames == nodes == ["debug-0", "debug-1"]


def test_ssh_login_with_the_crs_authorized_key_reaches_the_login_pod(cluster_lab: ClusterLab) -> None:
    pod = login_pod(cluster_lab)
    loginset = cluster_lab.get("loginset", "slurm-login-slinky")
    key = LAB / "ssh" / "id_ed25519"
    assert key.with_suffix(".pub").read_text().strip() in loginset["spec"]["rootSshAuthorizedKeys"]
    done = subprocess.run([*SSH, "-i", str(key), f"root@{pod['status']['podIP']}",
                           f"hostname && sinfo -h -p {PARTITION} -o %D"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [pod["metadata"]["name"], "2"]


def test_an_ssh_login_without_the_key_is_refused(cluster_lab: ClusterLab, tmp_path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    done = subprocess.run([*SSH, "-i", str(other), f"root@{login_pod(cluster_lab)['status']['podIP']}", "true"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 255 and "Permission denied" in done.stderr, done.stderr

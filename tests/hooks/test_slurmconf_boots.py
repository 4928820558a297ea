"""What the hooks render, run by the real Slurm 26.05 of the lab.

* The Controller hook's slurm.conf boots a second slurmctld inside the lab's chroot (own ports,
  own state dir; the lab's cluster is not touched). The test rewrites only paths and hosts/ports
  for loopback; every other byte is the hook's. A dynamic slurmd started with the arguments the
  NodeSet hook gives its pod registers and lands in that NodeSet's partition.
* A JWT the Token hook mints with the lab's key is accepted by the lab's slurmrestd, and one
  minted with another key is refused.

Two inputs are the test's, not the hook's, because the chroot has no cgroup filesystem: the
Controller CR's `extraConf` asks for `ProctrackType=proctrack/linuxproc` (what a user on such a
host would write), and cgroup.conf says `CgroupPlugin=disabled` (hack/slurm/cluster.sh does the same).
"""

from __future__ import annotations

import base64
import os

import httpx
import pytest

from hooks.app import create_app
from tests.fixtures.secondcluster import (
    SecondCluster,
    for_loopback,
    nodeset_pod,
    render_controller,
    slurmd_command,
    write_config,
)
from tests.fixtures.slurm import SlurmLab, wait_for
from tests.support.hooks import cr, related, request, secret

pytestmark = pytest.mark.slurm


def boot_with_nodeset(cluster: SecondCluster, nodeset: dict, site_files: dict | None = None) -> tuple[str, str]:
    """slurmctld from the Controller hook's slurm.conf (plus a site's own config files, which configless
    slurmd fetch as they fetch slurm.conf), then the NodeSet pod's slurmd; returns (slurm.conf, hostname)."""
    keys = {"slurm.key": os.urandom(32), "jwt.key": os.urandom(32)}
    rendered = render_controller(keys["slurm.key"], keys["jwt.key"], nodeset)
    conf = for_loopback(rendered, cluster)
    changed = [(a, b) for a, b in zip(rendered.splitlines(), conf.splitlines(), strict=True) if a != b]
    assert {a.partition("=")[0] for a, _ in changed} <= {
        "SlurmctldHost", "SlurmctldPort", "SlurmctldAddr", "StateSaveLocation", "SlurmdPort", "SlurmdSpoolDir",
        "SlurmctldLogFile", "SlurmSchedLogFile", "SlurmdLogFile", "AuthAltParameters",
    }  # fmt: skip
    write_config(cluster, conf, keys)
    for name, text in (site_files or {}).items():
        (cluster.host / "etc" / name).write_text(text)

    cluster.start("slurmctld", "slurmctld", "-D", "-f", cluster.conf)
    wait_for(
        lambda: cluster.run("scontrol", "ping"),
        lambda out: "is UP" in out,
        timeout=30,
        what=f"slurmctld up\n{cluster.logs()}",
    )

    pod = nodeset_pod(nodeset)
    # SLURM_CONF only tells slurmd where slurm.key is (the pod mounts it at /etc/slurm); the
    # config itself comes from slurmctld (configless). The pod's topology annotation is unset.
    cluster.start(
        "slurmd", "env", f"SLURM_CONF={cluster.conf}", "SLINKY_TOPOLOGY=", "sh", "-c", slurmd_command(pod, cluster)
    )
    host = pod["spec"]["hostname"]
    partition = nodeset["metadata"]["name"]
    wait_for(
        lambda: cluster.run("sinfo", "-h", "-N", "-p", partition, "-o", "%N %t"),
        lambda out: out.split() == [host, "idle"],
        timeout=30,
        what=f"{host} idle in partition {partition}\n{cluster.run('scontrol', 'show', 'node')}\n{cluster.logs()}",
    )
    return rendered, host


def test_rendered_slurm_conf_boots_slurmctld_and_a_nodeset_slurmd_joins_its_partition(second_cluster: SecondCluster):
    cluster = second_cluster
    nodeset = cr(
        "NodeSet",
        "gpu",
        {
            "controllerRef": {"name": "slurm"},
            "replicas": 1,
            "partition": {"enabled": True, "config": "MaxTime=UNLIMITED State=UP"},
        },
    )
    rendered, host = boot_with_nodeset(cluster, nodeset)
    assert "NodeSet=gpu Feature=gpu\nPartitionName=gpu Nodes=gpu MaxTime=UNLIMITED State=UP\n" in rendered
    node = cluster.run("scontrol", "show", "node", host)
    assert "ActiveFeatures=gpu" in node, node
    assert all(d.poll() is None for d in cluster.daemons), cluster.logs()


def test_a_nodeset_whose_slurmd_has_gpus_registers_them_as_gres_and_runs_a_gpu_job(second_cluster: SecondCluster):
    """GresTypes and the node's Gres= come from the hooks; which devices back them is the site's gres.conf
    (on a GPU node `AutoDetect=nvidia`; the lab has no GPU, so two stand-in character devices)."""
    cluster = second_cluster
    nodeset = cr("NodeSet", "accel", {"controllerRef": {"name": "slurm"}, "replicas": 1,
                                      "slurmd": {"resources": {"limits": {"nvidia.com/gpu": 2}}},
                                      "partition": {"enabled": True, "config": "State=UP"}})  # fmt: skip
    site_gres = "AutoDetect=off\nName=gpu File=/dev/null\nName=gpu File=/dev/zero\n"
    rendered, host = boot_with_nodeset(cluster, nodeset, {"gres.conf": site_gres})
    assert "\nGresTypes=gpu\n" in rendered
    node = cluster.run("scontrol", "show", "node", host)
    assert "Gres=gpu:2" in node, node
    job = cluster.run("srun", "-p", "accel", "--gres=gpu:2", "-t", "1", "sh", "-c", "echo gres-ok")
    assert "gres-ok" in job, f"{job}\n{cluster.logs()}"
    refused = cluster.run("srun", "-p", "accel", "--gres=gpu:3", "-t", "1", "true")
    assert "Requested node configuration is not available" in refused, refused
    assert all(d.poll() is None for d in cluster.daemons), cluster.logs()


def test_a_nodeset_without_topology_registers_its_extra_conf_and_stays_idle(second_cluster: SecondCluster):
    """The pod's topology annotation is unset: an empty `Topology=` made slurmd take `Weight=7` as the
    topology (State=IDLE+DRAIN+DYNAMIC_NORM+INVALID_REG, "Failed to set topology 'Weight=7'")."""
    cluster = second_cluster
    nodeset = cr("NodeSet", "heavy", {"controllerRef": {"name": "slurm"}, "replicas": 1, "extraConf": "Weight=7",
                                      "partition": {"enabled": True, "config": "State=UP"}})  # fmt: skip
    _rendered, host = boot_with_nodeset(cluster, nodeset)
    node = cluster.run("scontrol", "show", "node", host)
    assert "Weight=7" in node and "State=IDLE+DYNAMIC_NORM " in node, node
    assert "DRAIN" not in node and "INVALID_REG" not in node and "topology" not in node.lower(), node
    assert all(d.poll() is None for d in cluster.daemons), cluster.logs()


# --- tokens ----------------------------------------------------------------------------------------


def mint(key: bytes, username: str = "root") -> str:
    parent = cr(
        "Token", "rest", {"jwtKeyRef": {"name": "jwt", "key": "jwt.key"}, "username": username, "lifetime": "15m"}
    )
    resp = (
        create_app()
        .test_client()
        .post("/token/sync", json=request(parent, rel=related(secret("jwt", {"jwt.key": key}))))
    )
    assert resp.status_code == 200, resp.get_json()
    (child,) = resp.get_json()["children"]
    return base64.b64decode(child["data"]["SLURM_JWT"]).decode()


def get(lab: SlurmLab, what: str, token: str) -> httpx.Response:
    return httpx.get(lab.rest_url + lab.path(what), headers={"X-SLURM-USER-TOKEN": token}, timeout=30)


def test_token_minted_with_the_clusters_key_is_accepted_by_slurmrestd(slurm_lab: SlurmLab):
    token = mint(slurm_lab.jwt_key_file.read_bytes())
    ping = get(slurm_lab, "ping", token)
    assert ping.status_code == 200 and all(p["responding"] for p in ping.json()["pings"]), ping.text
    diag = get(slurm_lab, "diag", token)  # unlike ping, diag fails when slurmctld rejects the token
    assert diag.status_code == 200 and diag.json()["errors"] == [], diag.text


def test_token_minted_with_another_key_is_refused(slurm_lab: SlurmLab):
    token = mint(os.urandom(32))
    ping = get(slurm_lab, "ping", token)
    assert not any(p["responding"] for p in ping.json()["pings"]), ping.text
    diag = get(slurm_lab, "diag", token)
    assert diag.status_code != 200 and diag.json()["errors"], diag.text

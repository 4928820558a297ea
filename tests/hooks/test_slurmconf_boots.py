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
import json
import os
import time

import httpx
import pytest

from hooks.app import create_app
from slinky_common import names, slurmstate
from slinky_common.nodesetconf import on_demand_nodes
from slinky_common.powerreport import PowerReport
from tests.fixtures.secondcluster import (
    KEYS,
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


# --- elastic NodeSets (docs/architecture.md §4.9) ---------------------------------------------------------------


def elastic_nodeset(name: str, **elastic: int) -> dict:
    return cr(
        "NodeSet",
        name,
        {
            "controllerRef": {"name": "slurm"},
            "elastic": {"suspendTime": 5, "resumeTimeout": 120, **elastic},
            "extraConf": "CPUs=1 RealMemory=100",
            "partition": {"enabled": True, "config": "State=UP"},
        },
    )


def boot_elastic(cluster: SecondCluster, nodeset: dict, extra_conf: str = "") -> str:
    """slurmctld from the Controller hook's slurm.conf with `nodeset` in it; no slurmd yet. Returns slurm.conf."""
    keys = {"slurm.key": os.urandom(32), "jwt.key": os.urandom(32)}
    rendered = render_controller(keys["slurm.key"], keys["jwt.key"], nodeset, extra_conf)
    write_config(cluster, for_loopback(rendered, cluster), keys)
    cluster.start("slurmctld", "slurmctld", "-D", "-f", cluster.conf)
    wait_for(lambda: cluster.run("scontrol", "ping"), lambda out: "is UP" in out, timeout=30, what="slurmctld up")
    return rendered


def pod_for(nodeset: dict, hostname: str, since: int | None = None) -> dict:
    """The pod the NodeSet hook gives the ordinal whose hostname is `hostname`: an always-on ordinal's as it is, an
    on-demand one's once slurm_sync reports its node up (the report here says every one is, first seen powering
    up at `since`)."""
    everyone = json.loads(json.dumps(nodeset))
    up = tuple(sorted(on_demand_nodes(everyone)))
    report = PowerReport(up=up, up_since=tuple((n, since) for n in up) if since is not None else ())
    everyone["metadata"].setdefault("annotations", {})[names.ANNOTATION_POWER_OBSERVED] = report.value()
    controller = cr("Controller", "slurm", KEYS)
    body = request(everyone, rel={f"Controller.{names.API_VERSION}": {"slurm/slurm": controller}})
    resp = create_app().test_client().post("/nodeset/sync", json=body)
    assert resp.status_code == 200, resp.get_json()
    (pod,) = [c for c in resp.get_json()["children"] if c["kind"] == "Pod" and c["spec"]["hostname"] == hostname]
    return pod


def start_pod_slurmd(cluster: SecondCluster, nodeset: dict, hostname: str, since: int | None = None) -> None:
    command = slurmd_command(pod_for(nodeset, hostname, since), cluster)
    cluster.start(f"slurmd-{hostname}", "env", f"SLURM_CONF={cluster.conf}", "SLINKY_TOPOLOGY=", "sh", "-c", command)


def node_states(cluster: SecondCluster, partition: str) -> dict[str, str]:
    out = cluster.run("sinfo", "-h", "-N", "-p", partition, "-o", "%N %t")
    return dict(line.split() for line in out.splitlines() if line.strip())


def test_an_elastic_nodeset_is_all_powered_down_holds_a_larger_job_and_powers_a_node_up_for_one(
    second_cluster: SecondCluster,
) -> None:
    """Minimum 0, maximum 4: four powered-down nodes; a 5-node job is refused at submit with Slurm's reason (the
    hook sets EnforcePartLimits=ANY with an elastic NodeSet); a 1-node job powers one node up, the pod's slurmd
    (`-b`, the hook's arguments) registers it and the job runs; idle for suspendTime, Slurm powers the node down
    again (then the pod would go)."""
    cluster = second_cluster
    nodeset = elastic_nodeset("ela", minReplicas=0, maxReplicas=4)
    rendered = boot_elastic(cluster, nodeset)
    assert "NodeName=ela-[0-3] State=CLOUD CPUs=1 Features=ela RealMemory=100 SuspendTime=5\n" in rendered, rendered
    assert rendered.count("EnforcePartLimits=") == 1 and "\nEnforcePartLimits=ANY\n" in rendered, rendered
    wait_for(lambda: node_states(cluster, "ela"), lambda s: s == dict.fromkeys(
        ["ela-0", "ela-1", "ela-2", "ela-3"], "idle~"), timeout=30, what="four powered-down nodes")  # fmt: skip

    refused = cluster.run("sbatch", "-p", "ela", "-N", "5", "--wrap", "true")
    assert "Batch job submission failed: More processors requested than permitted" in refused, refused
    assert cluster.run("squeue", "-h", "-p", "ela").strip() == ""

    submitted = cluster.run("sbatch", "--parsable", "-p", "ela", "-N", "1", "-t", "2", "--wrap", "sleep 6")
    job = submitted.strip().split(";")[0]
    assert job.isdigit(), submitted
    node = wait_for(
        lambda: cluster.run("squeue", "-h", "-j", job, "-o", "%N").strip(),
        lambda n: n.startswith("ela-"),
        timeout=30,
        what=f"job {job} placed on a node\n{cluster.logs()}",
    )
    # Given the job while powered down (alloc~), then powering up (alloc#) once ResumeProgram ran.
    wait_for(
        lambda: node_states(cluster, "ela")[node], lambda s: s.endswith("#"), timeout=30, what=f"{node} powering up"
    )
    rest = node_states(cluster, "ela")
    assert sorted(n for n, state in rest.items() if state == "idle~") == sorted(set(rest) - {node})

    # As slurm_sync does (slurm_sync/operator/power.py): the second it saw the node powering up, and the pod only
    # from the next second on; the pod's slurmd reports that second as its boot time.
    since = int(time.time())
    while time.time() < since + 1:
        time.sleep(0.05)
    start_pod_slurmd(cluster, nodeset, node, since)
    wait_for(lambda: node_states(cluster, "ela")[node], lambda s: s in ("alloc", "mix", "comp", "idle"), timeout=60,
             what=f"{node} registered\n{cluster.run('scontrol', 'show', 'node', node)}\n{cluster.logs()}")  # fmt: skip
    # Registrations after the first (a reconfigure asks every node) never look like a reboot of the node, whatever
    # second boundary they cross: the job keeps running.
    for _ in range(6):
        cluster.run("scontrol", "reconfigure")
        time.sleep(0.35)
    wait_for(
        lambda: cluster.run("scontrol", "show", "job", job),
        lambda out: "JobState=COMPLETED" in out,
        timeout=120,
        what=f"job {job} completed on {node}\n{cluster.run('scontrol', 'show', 'node', node)}\n{cluster.logs()}",
    )
    assert "Restarts=0" in cluster.run("scontrol", "show", "job", job)
    wait_for(
        lambda: node_states(cluster, "ela")[node],
        lambda state: state in ("idle%", "idle~"),
        timeout=60,
        what=f"{node} powering down after 5 s idle\n{cluster.run('scontrol', 'show', 'node', node)}",
    )
    cluster.stop_one(f"slurmd-{node}")  # the NodeSet hook removes the pod of a node powering down
    wait_for(lambda: node_states(cluster, "ela")[node], lambda s: s == "idle~", timeout=90, what=f"{node} idle~")


def test_a_site_that_sets_enforce_part_limits_no_has_a_job_larger_than_the_elastic_maximum_held(
    second_cluster: SecondCluster,
) -> None:
    """A site whose other NodeSets scale up for pending jobs sets EnforcePartLimits=NO in extraConf
    (docs/operations.md, "Elastic NodeSets"): it replaces the hook's line, and a job larger than the elastic
    maximum pends with Slurm's reason and powers nothing up."""
    cluster = second_cluster
    rendered = boot_elastic(cluster, elastic_nodeset("ela", minReplicas=0, maxReplicas=4), "EnforcePartLimits=NO")
    assert rendered.count("EnforcePartLimits=") == 1, rendered
    wait_for(lambda: node_states(cluster, "ela"), lambda s: len(s) == 4, timeout=30, what="four nodes")
    too_large = cluster.run("sbatch", "--parsable", "-p", "ela", "-N", "5", "--wrap", "true").strip().split(";")[0]
    assert too_large.isdigit(), too_large
    wait_for(lambda: cluster.run("squeue", "-h", "-j", too_large, "-o", "%T %r").strip(),
             lambda out: out == "PENDING PartitionConfig", timeout=30, what="the 5-node job held")  # fmt: skip
    time.sleep(12)  # Slurm's power-save pass (every 10 s) has seen the job: it powers nothing up for it
    assert set(node_states(cluster, "ela").values()) == {"idle~"}, node_states(cluster, "ela")
    cluster.run("scancel", too_large)


def test_an_elastic_nodesets_always_on_nodes_register_and_are_never_powered_down(
    second_cluster: SecondCluster,
) -> None:
    cluster = second_cluster
    nodeset = elastic_nodeset("ela", minReplicas=1, maxReplicas=3)
    rendered = boot_elastic(cluster, nodeset)
    assert "NodeName=ela-[0-0] CPUs=1 Features=ela RealMemory=100 SuspendTime=INFINITE\n" in rendered, rendered
    start_pod_slurmd(cluster, nodeset, "ela-0")
    wait_for(lambda: node_states(cluster, "ela").get("ela-0"), lambda s: s == "idle", timeout=60,
             what=f"ela-0 idle\n{cluster.run('scontrol', 'show', 'node', 'ela-0')}\n{cluster.logs()}")  # fmt: skip
    time.sleep(20)  # suspendTime 5 s and Slurm's power-save interval of 10 s have passed twice over
    assert node_states(cluster, "ela") == {"ela-0": "idle", "ela-1": "idle~", "ela-2": "idle~"}


def test_a_node_whose_pod_never_registers_is_down_its_job_requeued_and_a_resume_makes_it_usable_again(
    second_cluster: SecondCluster,
) -> None:
    """What slurm_sync's power step relies on (slurm_sync/operator/power.py): not up within ResumeTimeout, the node
    is DOWN and powered down with Slurm's own reason (slinky_common/slurmstate.py RESUME_TIMEOUT_REASON), the job is
    requeued, not failed; after RESUME the node is powered down and idle, and the job runs once a pod registers it."""
    cluster = second_cluster
    nodeset = elastic_nodeset("ela", minReplicas=0, maxReplicas=1, resumeTimeout=10)
    boot_elastic(cluster, nodeset)
    submitted = cluster.run("sbatch", "--parsable", "-p", "ela", "-N", "1", "-t", "2", "--wrap", "hostname")
    job = submitted.strip().split(";")[0]
    assert job.isdigit(), submitted
    node = wait_for(
        lambda: cluster.run("scontrol", "show", "node", "ela-0"),
        lambda out: "State=DOWN+CLOUD+POWERED_DOWN" in out,
        timeout=90,
        what=f"ela-0 down after ResumeTimeout\n{cluster.logs()}",
    )
    assert f"Reason={slurmstate.RESUME_TIMEOUT_REASON}" in node, node
    requeued = cluster.run("scontrol", "show", "job", job)
    assert "JobState=PENDING" in requeued and "Restarts=1" in requeued, requeued
    state = node.split("State=", 1)[1].split()[0]
    assert slurmstate.power(state.split("+")) == slurmstate.RESUME_FAILED, state

    cluster.run("scontrol", "update", "nodename=ela-0", "state=resume")  # what slurm_sync sends through slurmrestd
    wait_for(lambda: node_states(cluster, "ela").get("ela-0"), lambda s: s == "idle~", timeout=30,
             what="ela-0 powered down and usable again")  # fmt: skip
    # A requeued job waits some 120 s (BeginTime) before it may start again; the test does not.
    cluster.run("scontrol", "update", f"jobid={job}", "starttime=now")
    # The pod comes when Slurm powers the node up again (a slurmd started earlier would not register it: its
    # boot time would be older than the resume request).
    wait_for(lambda: node_states(cluster, "ela").get("ela-0"), lambda s: s.endswith("#"), timeout=60,
             what="ela-0 powering up again")  # fmt: skip
    start_pod_slurmd(cluster, nodeset, "ela-0")
    wait_for(
        lambda: cluster.run("scontrol", "show", "job", job),
        lambda out: "JobState=COMPLETED" in out,
        timeout=240,
        what=f"job {job} run after the resume\n{cluster.run('scontrol', 'show', 'node', 'ela-0')}\n{cluster.logs()}",
    )

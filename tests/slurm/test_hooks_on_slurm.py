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
import shlex
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from hooks.app import create_app
from slinky_common import names
from tests.fixtures.slurm import EXEC, SlurmLab, wait_for
from tests.support.hooks import by_kind, cr, related, request, secret

pytestmark = pytest.mark.slurm

NO_CGROUPS = "ProctrackType=proctrack/linuxproc"
KEYS = {"slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"}, "jwtKeyRef": {"name": "jwt-key", "key": "jwt.key"}}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class SecondCluster:
    """A scratch dir inside the lab's chroot and the daemons this test started there (by PID)."""

    lab: SlurmLab
    inner: str  # the dir as the daemons see it
    ctld_port: int = field(default_factory=free_port)
    slurmd_port: int = field(default_factory=free_port)
    daemons: list[subprocess.Popen] = field(default_factory=list)

    @property
    def host(self) -> Path:
        return self.lab.root / self.inner.lstrip("/")

    @property
    def conf(self) -> str:
        return f"{self.inner}/etc/slurm.conf"

    def start(self, name: str, *argv: str) -> None:
        """A foreground daemon in the chroot; exec.sh execs, so the Popen PID is the daemon's."""
        with open(self.host / "log" / f"{name}.out", "ab") as out:
            self.daemons.append(subprocess.Popen([str(EXEC), *argv], stdin=subprocess.DEVNULL, stdout=out, stderr=out))

    def run(self, *argv: str) -> str:
        """A Slurm client command against this cluster (not the lab's)."""
        result = self.lab.run("env", f"SLURM_CONF={self.conf}", *argv, timeout=30)
        return result.stdout + result.stderr

    def logs(self) -> str:
        return "\n".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in sorted((self.host / "log").iterdir())
        )

    def stop(self) -> None:
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=15)


@pytest.fixture()
def second_cluster(slurm_lab: SlurmLab) -> Iterator[SecondCluster]:
    cluster = SecondCluster(slurm_lab, f"/var/lib/slinky-hooktest-{uuid.uuid4().hex[:8]}")
    for sub in ("etc", "state", "spool", "log"):
        (cluster.host / sub).mkdir(parents=True)
    cluster.host.chmod(0o755)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.host)


def for_loopback(conf: str, cluster: SecondCluster) -> str:
    """The hook's slurm.conf with paths and hosts/ports moved to `cluster`; nothing else changes."""
    d = cluster.inner
    values = {
        "SlurmctldHost": "localhost(127.0.0.1)",  # slurmctld knows itself by "localhost"
        "SlurmctldPort": str(cluster.ctld_port),
        "SlurmctldAddr": "127.0.0.1",
        "StateSaveLocation": f"{d}/state",
        "SlurmdPort": str(cluster.slurmd_port),
        "SlurmdSpoolDir": f"{d}/spool",
        "SlurmctldLogFile": f"{d}/log/slurmctld.log",
        "SlurmSchedLogFile": f"{d}/log/slurmctld.log",
        "SlurmdLogFile": f"{d}/log/slurmd.log",
    }
    lines = []
    for line in conf.splitlines():
        key, sep, _old = line.partition("=")
        if sep and key in values:
            line = f"{key}={values[key]}"
        elif key == "AuthAltParameters":
            line = line.replace("/etc/slurm/", f"{d}/etc/")
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_config(cluster: SecondCluster, slurm_conf: str, keys: dict[str, bytes]) -> None:
    etc = cluster.host / "etc"
    (etc / "slurm.conf").write_text(slurm_conf)
    (etc / "cgroup.conf").write_text("CgroupPlugin=disabled\n")
    for name, value in keys.items():
        (etc / name).write_bytes(value)
        (etc / name).chmod(0o600)
    d = cluster.inner
    owned = cluster.lab.run("chown", "-R", "slurm:slurm", f"{d}/state", f"{d}/log", *(f"{d}/etc/{n}" for n in keys))
    assert owned.returncode == 0, owned.stderr


def render_controller(slurm_key: bytes, jwt_key: bytes, nodeset: dict) -> str:
    parent = cr("Controller", "slurm", {**KEYS, "extraConf": NO_CGROUPS})
    rel = related(secret("slurm-key", {"slurm.key": slurm_key}), secret("jwt-key", {"jwt.key": jwt_key}), nodeset)
    resp = create_app().test_client().post("/controller/sync", json=request(parent, rel=rel))
    assert resp.status_code == 200, resp.get_json()
    return by_kind(resp.get_json())["ConfigMap/slurm-config"]["data"]["slurm.conf"]


def nodeset_pod(nodeset: dict) -> dict:
    controller = cr("Controller", "slurm", KEYS)
    body = request(nodeset, rel={f"Controller.{names.API_VERSION}": {"slurm/slurm": controller}})
    resp = create_app().test_client().post("/nodeset/sync", json=body)
    assert resp.status_code == 200, resp.get_json()
    (pod,) = [c for c in resp.get_json()["children"] if c["kind"] == "Pod"]
    return pod


def slurmd_command(pod: dict, cluster: SecondCluster) -> str:
    """The pod's slurmd arguments as its shell sees them; only --conf-server moves to loopback.

    `-N` gives the node the pod's hostname (as in a pod) and `-D` keeps it in the foreground.
    """
    (slurmd,) = [c for c in pod["spec"]["containers"] if c["name"] == "slurmd"]
    args = list(slurmd["args"])
    args[args.index("--conf-server") + 1] = f"127.0.0.1:{cluster.ctld_port}"
    conf_at = args.index("--conf") + 1  # one single-quoted shell word
    words = [arg if i == conf_at else shlex.quote(arg) for i, arg in enumerate(args)]
    return f"exec slurmd -D -N {shlex.quote(pod['spec']['hostname'])} {' '.join(words)}"


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

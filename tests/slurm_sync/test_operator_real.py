"""The whole service against the real Slurm 26.05 lab (slurmrestd via --slurm-url) and a small
stateful Kubernetes fake: discovery, token minting, drains, marks, fail-closed, recovery.

The lab is shared: these tests drain only n3/n4 and restore them (resume, scancel, comment) in
``finally`` blocks. The outage test kills the lab's slurmrestd and starts it again exactly as the lab did (not
with up.sh, which would rebuild the whole lab with a new JWT key under everyone else's tests).
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx
import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service, health_server
from slurm_sync.slurm.client import SlurmClient
from tests.fixtures.slurm import SlurmLab, _load_lab, wait_for
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_pod, kube_node, nodeset, pod

pytestmark = pytest.mark.slurm
OUR_REASON = "slurm-operator: scale-in to 1 replicas"


@dataclass
class Rig:
    lab: SlurmLab
    kube: FakeKube
    service: Service
    metrics: Metrics
    jobs: list[str] = field(default_factory=list)  # submitted by the test: cancelled at the end (rig_of)

    def pod(self, name: str) -> dict:
        return self.kube.get("pods", NS, name)

    def annotations(self, name: str) -> dict[str, str]:
        return self.pod(name)["metadata"].get("annotations") or {}

    def conditions(self, name: str) -> dict[str, str]:
        return {
            c["type"]: c.get("message", "")
            for c in self.pod(name)["status"]["conditions"]
            if c["type"].startswith("SlurmNodeState")
        }

    def set_intents(self, intents: dict[str, str]) -> None:
        self.kube.get("nodesets", NS, "gpu")["status"] = nodeset(intents)["status"]

    def object_writes(self, since: int = 0) -> list[tuple[str, str, str, dict]]:
        """The writes to objects (events aside: they are checked on their own)."""
        return [w for w in self.kube.writes[since:] if not is_event(w)]

    def events(self, since: int = 0) -> list[tuple[str, str, str, str, str]]:
        """(type, reason, regarding kind, regarding name, note) of each event posted."""
        return [
            (b["type"], b["reason"], b["regarding"]["kind"], b["regarding"]["name"], b["note"])
            for w in self.kube.writes[since:]
            if is_event(w)
            for b in [w[3]]
        ]

    def slurm_node(self, name: str) -> str:
        return self.lab.run("scontrol", "show", "node", name, check=True).stdout

    def set_key(self, key: bytes, version: str) -> None:
        secret = self.kube.get("secrets", NS, "slurm-jwt")
        secret["data"]["jwt.key"] = base64.b64encode(key).decode()
        secret["metadata"]["resourceVersion"] = version


def is_event(write: tuple[str, str, str, dict]) -> bool:
    return write[0] == "POST" and write[1].startswith("/apis/events.k8s.io/")


def restore(lab: SlurmLab, *nodes: str) -> None:
    """Resume and uncomment ``nodes``, and wait out the NOT_RESPONDING Slurm briefly shows after a
    resume, so the next test starts from settled nodes."""
    for node in nodes:
        lab.run("scontrol", "update", f"nodename={node}", "state=resume")
        lab.run("scontrol", "update", f"nodename={node}", "comment=")
    for node in nodes:
        wait_for(
            lambda n=node: lab.run("scontrol", "show", "node", n).stdout,
            lambda s: "NOT_RESPONDING" not in s,
            what=f"{node} responding after resume",
        )


def build_rig(lab: SlurmLab, server: HTTPServer) -> Rig:
    with SlurmClient(lab.rest_url, lambda: lab.token) as client:
        ctld_host = client.ping().controllers[0].hostname
        cluster_name = client.cluster
    kube = FakeKube()
    kube.add(
        "controllers",
        {
            "metadata": {"name": "slurm", "namespace": NS, "uid": "uid-controller-slurm"},
            "spec": {"clusterName": cluster_name, "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"}},
        },
    )
    kube.add(
        "restapis",
        {
            "metadata": {"name": "slurm", "namespace": NS, "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"controllerRef": {"name": "slurm"}},
        },
    )
    kube.add("secrets", {"metadata": {"name": "slurm-jwt", "namespace": NS}, "data": {"jwt.key": ""}})
    kube.add("nodesets", nodeset())
    kube.add("nodes", kube_node())
    kube.add("pods", pod("gpu-n3", "n3"))
    kube.add("pods", pod("gpu-n4", "n4"))
    kube.add("pods", controller_pod(ctld_host))
    kube.install(server)
    metrics = Metrics()
    config = Config(
        namespaces=(NS,),
        slurm_url=lab.rest_url,
        token_user="slurm",
        slurm_timeout=5,
        poll_interval=0.5,
        absence_confirm_seconds=0,
    )
    rig = Rig(
        lab, kube, Service(config, Kube(api_client(server.url_for("/")), metrics.count_kube_write), metrics), metrics
    )
    rig.set_key(lab.jwt_key_file.read_bytes(), "1")
    return rig


@contextlib.contextmanager
def rig_of(lab: SlurmLab, server: HTTPServer, *nodes: str) -> Iterator[Rig]:
    """A rig whose jobs (``rig.jobs``) are cancelled and whose ``nodes`` are restored at the end."""
    rig = build_rig(lab, server)
    try:
        yield rig
    finally:
        rig.service.close()
        lab = _load_lab()
        if rig.jobs:
            lab.run("scancel", *rig.jobs)
        restore(lab, *nodes)


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
        yield rig


def sbatch(lab: SlurmLab, node: str) -> int:
    done = lab.run("sbatch", "-w", node, "-t", "10", "-o", "/dev/null", "--wrap", "sleep 300", check=True)
    return int(re.search(r"Submitted batch job (\d+)", done.stdout).group(1))  # type: ignore[union-attr]


def test_busy_node_is_drained_but_marked_only_after_the_job_ends(rig: Rig) -> None:
    job = sbatch(rig.lab, "n3")
    try:
        wait_for(lambda: rig.slurm_node("n3"), lambda s: "State=ALLOCATED" in s or "State=MIXED" in s, what="job on n3")
        rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
        assert rig.service.run_pass()
        out = wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 draining")
        assert f"Reason={OUR_REASON}" in out
        assert rig.service.run_pass()
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n3")
        assert {"SlurmNodeStateDrain", "SlurmNodeStateAllocated"} <= set(rig.conditions("gpu-n3")) or {
            "SlurmNodeStateDrain",
            "SlurmNodeStateMixed",
        } <= set(rig.conditions("gpu-n3"))
        assert rig.pod("gpu-n3")["metadata"]["labels"][names.LABEL_POD_PROTECT] == "true"
        observed = rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_SLURM_OBSERVED]
        rig.lab.run("scancel", str(job), check=True)
        wait_for(
            lambda: rig.slurm_node("n3"),
            lambda s: "ALLOCATED" not in s and "MIXED" not in s and "COMPLETING" not in s,
            what="n3 idle",
        )
        assert rig.service.run_pass()
        assert rig.annotations("gpu-n3")[names.ANNOTATION_DRAINED] == "true"
        assert names.LABEL_POD_PROTECT not in rig.pod("gpu-n3")["metadata"]["labels"]
        assert (
            rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_SLURM_OBSERVED] != observed
        )
        assert rig.annotations("gpu-n4").get(names.ANNOTATION_DRAINED) is None
        # settled: another pass writes nothing anywhere
        before = len(rig.kube.writes)
        assert rig.service.run_pass()
        assert rig.kube.writes[before:] == []
    finally:
        rig.lab.run("scancel", str(job))


def test_administrators_drain_is_mirrored_and_never_lifted(rig: Rig) -> None:
    rig.lab.run("scontrol", "update", "nodename=n4", "state=drain", "reason=maint", check=True)
    for _ in range(2):
        assert rig.service.run_pass()
        assert rig.conditions("gpu-n4")["SlurmNodeStateDrain"] == "maint"
    assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
    out = rig.slurm_node("n4")
    assert "DRAIN" in out and "Reason=maint" in out
    # the pod link is written to the Slurm node comment
    assert '"podName":"gpu-n4"' in out


@dataclass(frozen=True)
class Daemon:
    """How the lab ran slurmrestd: enough to start it again exactly so."""

    argv: list[str]
    environ: list[str]
    uid: str
    gid: str


def _lab_dir(lab: SlurmLab) -> Path:
    return lab.root / "var/lib/slinky-lab"


def lab_slurmrestd(lab: SlurmLab) -> tuple[int, Daemon]:
    """The lab's slurmrestd: its PID (from the lab's pid file) and how it was started."""
    pid = int((_lab_dir(lab) / "pids/slurmrestd").read_text().split()[0])
    proc = Path(f"/proc/{pid}")
    ids = {
        line.split(":")[0]: line.split()[1]
        for line in (proc / "status").read_text().splitlines()
        if line.startswith(("Uid:", "Gid:"))
    }
    return pid, Daemon(
        argv=[a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0")[:-1]],
        environ=[e.decode() for e in (proc / "environ").read_bytes().split(b"\0")[:-1]],
        uid=ids["Uid"],
        gid=ids["Gid"],
    )


def kill_slurmrestd(lab: SlurmLab) -> Daemon:
    """SIGKILL the lab's slurmrestd, remembering its command."""
    pid, daemon = lab_slurmrestd(lab)
    proc = Path(f"/proc/{pid}")
    os.kill(pid, signal.SIGKILL)
    wait_for(
        lambda: proc.exists() and "State:\tZ" not in (proc / "status").read_text(),
        lambda alive: not alive,
        what="slurmrestd gone",
    )
    return daemon


def spawn_slurmrestd(lab: SlurmLab, daemon: Daemon, out: IO[bytes]) -> subprocess.Popen[bytes]:
    """slurmrestd as the lab runs it (same chroot, user, environment, arguments), in a session of its own."""
    return subprocess.Popen(
        ["chroot", str(lab.root), "/usr/bin/env", "-i", "-C", "/var/lib/slinky-lab", *daemon.environ,
         "setpriv", f"--reuid={daemon.uid}", f"--regid={daemon.gid}", "--clear-groups", *daemon.argv],
        stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
    )  # fmt: skip


def start_slurmrestd(lab: SlurmLab, daemon: Daemon) -> None:
    """Start slurmrestd again as the lab did (same chroot, user, environment, arguments) and record
    it in the lab's pid file, so the rest of the lab keeps its state and JWT key."""
    lab_dir = _lab_dir(lab)
    with open(lab_dir / "log/slurmrestd.out", "ab") as out:
        child = spawn_slurmrestd(lab, daemon, out)
    start_time = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    (lab_dir / "pids/slurmrestd").write_text(f"{child.pid} {start_time}\n")
    wait_for(lambda: _pings(lab), bool, timeout=60, what="slurmrestd back")


def _pings(lab: SlurmLab) -> bool:
    try:
        return httpx.get(lab.rest_url + lab.path("ping"), headers=lab.headers, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def test_slurmrestd_outage_fails_closed_and_recovers(rig: Rig) -> None:
    server = health_server("127.0.0.1:0", rig.service.health, rig.metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    daemon: Daemon | None = None
    try:
        assert httpx.get(base + "/readyz").status_code == 503  # before the first pass
        rig.set_intents({"gpu-n4": "scale-in to 1 replicas"})
        assert rig.service.run_pass()
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" in s, what="n4 drained by us")
        assert rig.service.run_pass()
        assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
        assert httpx.get(base + "/readyz").status_code == 200
        # intent gone (scale back up) while slurmrestd dies: nothing may move
        rig.set_intents({})
        daemon = kill_slurmrestd(rig.lab)
        before = len(rig.kube.writes)
        assert not rig.service.run_pass()
        assert rig.object_writes(before) == []
        (event,) = rig.events(before)  # said on the Controller
        assert event[:4] == ("Warning", "SlurmUnreadable", "Controller", "slurm") and "Connection refused" in event[4]
        assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"  # unknown is not false
        assert names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations("gpu-n3")
        assert f"Reason={OUR_REASON}" in rig.slurm_node("n4")  # not undrained (scontrol talks to slurmctld)
        ready = httpx.get(base + "/readyz")
        assert ready.status_code == 503 and "slurm/slurm" in ready.text
        assert (
            rig.metrics.registry.get_sample_value(
                "slurm_sync_slurm_errors_total", {"cluster": f"{NS}/slurm", "kind": "unavailable"}
            )
            >= 1
        )
        # slurmrestd returns: the loop recovers by itself, and only now lifts our drain (mark first)
        start_slurmrestd(rig.lab, daemon)
        daemon = None
        assert rig.service.run_pass()
        assert httpx.get(base + "/readyz").status_code == 200
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n4")
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" not in s, what="n4 undrained by us")
        # Slurm briefly shows NOT_RESPONDING after an undrain; the conditions follow it
        wait_for(
            lambda: (rig.service.run_pass(), rig.conditions("gpu-n4"))[1],
            lambda c: c == {"SlurmNodeStateIdle": ""},
            what="gpu-n4 conditions back to Idle",
        )
    finally:
        server.shutdown()
        server.server_close()
        if daemon is not None:
            start_slurmrestd(rig.lab, daemon)


def test_slurmrestd_dying_between_the_listing_and_the_updates_of_one_pass_moves_nothing(rig: Rig) -> None:
    """The listing and ping of a pass succeed, then slurmrestd dies before the pass's first node
    update: the half pass may not set a drained or absent mark nor lift a drain, and the next full
    pass finishes the job."""
    rig.set_intents({"gpu-n4": "scale-in to 1 replicas"})
    assert rig.service.run_pass()
    wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" in s, what="n4 drained by us")
    assert rig.service.run_pass()
    assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
    # now: drain n3 (new intent) and lift our drain of n4 (intent gone) in one pass
    rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
    dead: list[Daemon] = []
    reads: list[str] = []

    def die_before_the_first_write(request: httpx.Request) -> None:
        if request.method == "GET":
            reads.append(request.url.path)
        elif not dead:
            dead.append(kill_slurmrestd(rig.lab))

    (handle,) = rig.service.clusters.handles.values()
    handle.client._http.event_hooks["request"].append(die_before_the_first_write)
    try:
        assert not rig.service.run_pass()
        assert dead, "the pass made no Slurm write: the test did not test anything"
        assert any(p.endswith("/nodes/") for p in reads) and any(p.endswith("/ping/") for p in reads)
        n3, n4 = rig.slurm_node("n3"), rig.slurm_node("n4")
        assert "DRAIN" not in n3  # its drain failed ...
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n3")  # ... and no mark claims one
        assert "DRAIN" in n4 and f"Reason={OUR_REASON}" in n4  # not undrained
        # the mark goes before the undrain by design (a drained mark never outlives its drain); the
        # node stays drained, so the next pass lifts it
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n4")
        assert all(names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations(p) for p in ("gpu-n3", "gpu-n4"))
        ready, why = rig.service.health.ready()  # Slurm was read, but our writes failed: not ready, and why
        assert not ready and f"{NS}/slurm: Slurm cluster " in why and "update node n3 (DRAIN): POST " in why
        handle.client._http.event_hooks["request"].remove(die_before_the_first_write)
        start_slurmrestd(rig.lab, dead.pop())
        assert rig.service.run_pass()
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" not in s, what="n4 undrained by the next pass")
        wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 drained by the next pass")
        assert all(names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations(p) for p in ("gpu-n3", "gpu-n4"))
    finally:
        if dead:
            start_slurmrestd(rig.lab, dead.pop())

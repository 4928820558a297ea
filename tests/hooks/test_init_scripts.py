"""Every init and sidecar script the hooks put in a pod runs for real: Debian's busybox in a root
without a `slurm` account (as in the default alpine image), over volumes laid out as the kubelet
lays them out; the owners and modes it leaves are read back."""

from __future__ import annotations

import contextlib
import errno
import os
import select
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hooks import cluster
from hooks.app import create_app
from slinky_common import names
from tests.fixtures import busybox
from tests.hooks.kinds import accounting as accounting_kind
from tests.hooks.kinds import controller as controller_kind
from tests.hooks.kinds import loginset as loginset_kind
from tests.hooks.kinds import restapi as restapi_kind
from tests.hooks.nodeset import builders as nodeset_kind
from tests.support.hooks import by_kind, related

JSON = dict[str, Any]
SLURM_KEY = b"k" * 1024
SLURM_IDS = (cluster.SLURM_UID, cluster.SLURM_UID)
# Not a speed budget: only how long to wait for a script that hangs before failing instead of hanging.
HANG_GUARD_SECONDS = 60
# Runs in the slurmctld image (bash, tini, scontrol), never in a busybox image; names no account.
NOT_BUSYBOX = {("controller", "reconfigure")}


@pytest.fixture(scope="module", autouse=True)
def _root_and_busybox() -> None:
    busybox.require_root()
    busybox.busybox()


@pytest.fixture()
def client():
    return create_app().test_client()


def login_pod(client) -> JSON:
    controller = loginset_kind.controller()
    controller["spec"]["slurmKeyRef"] = {"name": "slurm-auth", "key": "slurm.key"}
    rel = related(controller, loginset_kind.secret("sssd", {"sssd.conf": b"[sssd]\n"}))
    resp = loginset_kind.sync(client, loginset_kind.loginset_cr(), rel=rel)
    return loginset_kind.pod_of(resp)["spec"]


def controller_pod(client, **spec: Any) -> JSON:
    resp = controller_kind.sync(client, controller_kind.controller(**spec), rel=related(*controller_kind.keys()))
    return controller_kind.pod_template(resp)["spec"]


def nodeset_pod(client, topology_wait: str | None = None) -> JSON:
    parent = nodeset_kind.nodeset(replicas=1)
    if topology_wait is not None:
        parent["metadata"]["annotations"] = {names.ANNOTATION_TOPOLOGY_WAIT: topology_wait}
    resp = nodeset_kind.sync(client, nodeset_kind.request(parent))
    return nodeset_kind.children(resp)["gpu-0"]["spec"]


def restapi_pod(client) -> JSON:
    resp = restapi_kind.sync(client, restapi_kind.restapi_cr(), rel=related(restapi_kind.controller()))
    return by_kind(resp)["Deployment/slurm-restapi"]["spec"]["template"]["spec"]


def accounting_pod(client) -> JSON:
    resp = accounting_kind.sync(client, accounting_kind.accounting_cr())
    return by_kind(resp)["StatefulSet/slurm-accounting"]["spec"]["template"]["spec"]


def container(pod_spec: JSON, name: str) -> JSON:
    return next(c for c in pod_spec.get("initContainers") or [] if c["name"] == name)


def owner_and_mode(path: Path) -> tuple[int, int, int]:
    st = path.lstat()
    return st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)


def test_every_script_container_of_every_pod_is_run_below(client):
    """A new init or sidecar container in any pod must get a run-for-real test here."""
    pods = {
        "controller": controller_pod(client, inplaceReconfigure=True),
        "nodeset": nodeset_pod(client, topology_wait="30"),
        "loginset": login_pod(client),
        "restapi": restapi_pod(client),
        "accounting": accounting_pod(client),
    }
    found = {(kind, c["name"]) for kind, spec in pods.items() for c in spec.get("initContainers") or []}
    run_here = {
        ("loginset", "initconf"),
        ("controller", "logfile"),
        ("nodeset", "logfile"),
        ("nodeset", "topology-wait"),
    }
    assert found == run_here | NOT_BUSYBOX
    for kind, name in NOT_BUSYBOX:
        assert container(pods[kind], name)["image"] == cluster.default_image("slurmctld")


def test_login_initconf_copies_the_key_owned_by_slurms_numeric_ids(client, tmp_path):
    pod = login_pod(client)
    initconf = container(pod, "initconf")
    root = busybox.minimal_root(tmp_path / "root")
    busybox.lay_out_volumes(root, pod, initconf, {"slurm-auth": {"slurm.key": SLURM_KEY}})

    result = busybox.run(root, pod, initconf)

    assert result.returncode == 0, result.stderr
    etc = root / "mnt/etc/slurm"
    assert sorted(os.listdir(etc)) == ["slurm.key"]  # the payload, not the kubelet's `..data` links
    key = etc / "slurm.key"
    assert not key.is_symlink() and key.read_bytes() == SLURM_KEY
    assert owner_and_mode(key) == (*SLURM_IDS, 0o600)
    assert owner_and_mode(etc)[:2] == SLURM_IDS
    source = root / "mnt/slurm" / busybox.PAYLOAD_DIR / "slurm.key"
    assert owner_and_mode(source) == (0, 0, 0o600), "the read-only source volume is left alone"


def test_login_initconf_gives_config_files_0644(client, tmp_path):
    """The script also places *.conf files (a user may project some into the volume)."""
    pod = login_pod(client)
    volume = next(v for v in pod["volumes"] if v["name"] == "slurm-config")
    site = {"configMap": {"name": "site", "items": [{"key": "oci.conf", "path": "oci.conf"}]}}
    volume["projected"]["sources"].append(site)
    initconf = container(pod, "initconf")
    root = busybox.minimal_root(tmp_path / "root")
    data = {"slurm-auth": {"slurm.key": SLURM_KEY}, "site": {"oci.conf": b"RunTimeRun=x\n"}}
    busybox.lay_out_volumes(root, pod, initconf, data)

    result = busybox.run(root, pod, initconf)

    assert result.returncode == 0, result.stderr
    etc = root / "mnt/etc/slurm"
    assert owner_and_mode(etc / "oci.conf") == (*SLURM_IDS, 0o644)
    assert owner_and_mode(etc / "slurm.key") == (*SLURM_IDS, 0o600)


@pytest.fixture()
def sidecars() -> Iterator[list[subprocess.Popen[str]]]:
    """Started sidecars; each one's process group is ended after the test (its shell's `cat` outlives it)."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _until(done: Callable[[], bool], proc: subprocess.Popen[str], what: str) -> None:
    """Poll `done` while the sidecar runs; the guard only turns a hang into a failure."""
    deadline = time.monotonic() + HANG_GUARD_SECONDS
    while not done():
        assert proc.poll() is None, f"the sidecar exited {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}"
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(0.05)


def _is_fifo(path: Path) -> bool:
    return path.exists() and stat.S_ISFIFO(path.lstat().st_mode)


def _write_when_read(path: Path, text: str, proc: subprocess.Popen[str]) -> None:
    """Write to the FIFO once the sidecar has it open for reading (a non-blocking open fails before)."""
    fds: list[int] = []

    def opened() -> bool:
        try:
            fds.append(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        return bool(fds)

    _until(opened, proc, f"a reader on {path}")
    os.write(fds[0], text.encode())
    os.close(fds[0])


def _read_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], HANG_GUARD_SECONDS)
    assert ready, "the sidecar copied nothing to its output"
    return proc.stdout.readline()


@pytest.mark.parametrize(
    ("kind", "expected_owner"),
    [("controller", SLURM_IDS), ("nodeset", (0, 0))],
)
def test_logfile_sidecar_makes_a_fifo_copies_it_to_stdout_and_ends_on_term(
    client, tmp_path, sidecars, kind, expected_owner
):
    pod = controller_pod(client) if kind == "controller" else nodeset_pod(client)
    logfile = container(pod, "logfile")
    root = busybox.minimal_root(tmp_path / "root")
    busybox.lay_out_volumes(root, pod, logfile, {})
    socket = root / next(e["value"] for e in logfile["env"] if e["name"] == "SOCKET").lstrip("/")

    proc = busybox.start(root, pod, logfile)
    sidecars.append(proc)
    _until(lambda: _is_fifo(socket), proc, f"a FIFO at {socket}")
    uid, gid, mode = owner_and_mode(socket)
    assert (uid, mode) == (expected_owner[0], 0o777), "any daemon user must be able to write the log"
    assert gid == (pod.get("securityContext") or {}).get("fsGroup", expected_owner[1])
    _write_when_read(socket, "slurmd: started\n", proc)
    assert _read_line(proc) == "slurmd: started\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=HANG_GUARD_SECONDS) == 0


@pytest.mark.parametrize(("topology", "wait", "says"), [
    (b"topo-switch:s1,topo-block:b1", "30", "topology: topo-switch:s1,topo-block:b1"),
    (b"", "1", "no topology on this pod after 1s: slurmd starts without it"),
])  # fmt: skip
def test_nodeset_topology_wait_ends_when_the_pod_carries_topology_or_the_bound_passes(
    client, tmp_path, topology, wait, says
):
    """An empty downwardAPI file is a pod without the annotation; either way the wait ends with 0 (slurmd starts)."""
    pod = nodeset_pod(client, topology_wait=wait)
    waiter = container(pod, "topology-wait")
    root = busybox.minimal_root(tmp_path / "root")
    busybox.lay_out_volumes(root, pod, waiter, {"pod-topology": {"topology": topology}})

    result = busybox.run(root, pod, waiter)

    assert result.returncode == 0, result.stderr
    assert says in result.stdout, result.stdout

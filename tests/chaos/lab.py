"""Stopping the lab's slurmctld while slurmrestd keeps serving, and starting it again exactly as
``hack/slurm/cluster.sh`` did (same chroot, working directory, environment and arguments), so the
lab keeps its state, its running jobs and its JWT key, and ``hack/slurm/down.sh`` still finds it
through the pid file. Never ``up.sh``: that would rebuild the lab under the running tests.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.fixtures.slurm import SlurmLab, wait_for

INNER_DIR = "/var/lib/slinky-lab"  # the lab's runtime dir as the daemons see it (cluster.sh's LAB_DIR)


@dataclass(frozen=True)
class Started:
    """How a lab daemon was started: enough to start it again the same way."""

    argv: list[str]
    environ: list[str]


def _pid_file(lab: SlurmLab, daemon: str) -> Path:
    return lab.root / INNER_DIR.lstrip("/") / "pids" / daemon


def _alive(proc: Path) -> bool:
    try:
        return "State:\tZ" not in (proc / "status").read_text()
    except FileNotFoundError:
        return False


def stop_slurmctld(lab: SlurmLab) -> Started:
    """SIGTERM (slurmctld saves its state on the way out) and wait until it is gone."""
    pid = int(_pid_file(lab, "slurmctld").read_text().split()[0])
    proc = Path(f"/proc/{pid}")
    started = Started(
        argv=[a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0")[:-1]],
        environ=[e.decode() for e in (proc / "environ").read_bytes().split(b"\0")[:-1]],
    )
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: _alive(proc), lambda alive: not alive, timeout=30, what="slurmctld stopped")
    return started


def start_slurmctld(lab: SlurmLab, started: Started) -> None:
    """Start it as root in its own session (it drops to SlurmUser itself), record it in the lab's
    pid file, and wait until it answers and knows its nodes again."""
    with open(lab.root / INNER_DIR.lstrip("/") / "log/slurmctld.out", "ab") as out:
        child = subprocess.Popen(
            ["chroot", str(lab.root), "/usr/bin/env", "-i", "-C", INNER_DIR, *started.environ, *started.argv],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, cwd="/",
        )  # fmt: skip
    start_time = Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    _pid_file(lab, "slurmctld").write_text(f"{child.pid} {start_time}\n")
    wait_for(lambda: _node_states(lab), lambda states: bool(states) and not any("UNKNOWN" in s for s in states),
             timeout=60, what="slurmctld back with every node known")  # fmt: skip


def _node_states(lab: SlurmLab) -> list[list[str]]:
    """Each node's state list, straight from the lab's slurmrestd ([] while it cannot tell)."""
    try:
        answer = httpx.get(lab.rest_url + lab.path("nodes"), headers=lab.headers, timeout=15)
        return [n.get("state") or [] for n in answer.json().get("nodes") or []] if answer.status_code == 200 else []
    except (httpx.HTTPError, ValueError):
        return []


@contextmanager
def slurmctld_stopped(lab: SlurmLab) -> Iterator[None]:
    """slurmctld down, slurmrestd up, for the duration of the block; always restarted after."""
    started = stop_slurmctld(lab)
    try:
        yield
    finally:
        start_slurmctld(lab, started)

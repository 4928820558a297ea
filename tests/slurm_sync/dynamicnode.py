"""A dynamic slurmd on the real Slurm lab (`slurmd -Z`, as a NodeSet pod's), for the tests that register,
delete and register again one node record of their own (named after the test process)."""

from __future__ import annotations

import os
import socket
import subprocess

from tests.fixtures.slurm import EXEC, SlurmLab, wait_for

NODE = f"dr{os.getpid() % 100000}"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_slurmd(cpus: int, memory: int) -> subprocess.Popen[bytes]:
    """exec.sh execs: this PID is slurmd's."""
    conf = f"NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()} CPUs={cpus} RealMemory={memory}"
    argv = [str(EXEC), "slurmd", "-D", "-Z", "-N", NODE, "--conf", conf]
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def stop(slurmd: subprocess.Popen[bytes]) -> None:
    if slurmd.poll() is None:
        slurmd.terminate()
        slurmd.wait(timeout=30)


def registered_idle(lab: SlurmLab) -> str:
    return wait_for(
        lambda: lab.run("scontrol", "show", "node", NODE).stdout,
        lambda s: "State=IDLE+DYNAMIC_NORM " in s,
        what=f"dynamic node {NODE} registered idle",
    )

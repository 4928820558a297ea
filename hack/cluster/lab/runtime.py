"""The cluster lab's container runtime: a pod is a network namespace, each container a process tree.

What a kubelet and container runtime give a pod, made with the host's own tools (iproute2, util-linux):
- the pod's network namespace with one address on the lab bridge, so every rendered port stays as
  rendered and pods reach each other (and the host reaches them) by address;
- per container: new mount, UTS, IPC and PID namespaces; an overlay over the lab's root filesystem
  (one Debian sid tree holding every daemon Slinky's images run) so nothing a container writes is seen
  by another; its volumes bind-mounted at their mountPaths; /etc/hosts kept by the agent; the pod's
  hostname; the container's user and groups. The container's process is PID 1 of its PID namespace,
  as in a real container: when it ends, every process it left (slurmstepd included) ends with it.

The image decides what runs when the container has no command, from `hack/cluster/images/`: see
`images.py`. Nothing the hooks render is rewritten.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

BRIDGE = "clbr0"
SUBNET = ipaddress.ip_network("10.77.0.0/16")
GATEWAY = ipaddress.ip_address("10.77.0.1")
NETNS_PREFIX = "cl-"
SETUP_SCRIPT = Path(__file__).resolve().parent.parent / "container.sh"


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=30)


def ensure_bridge() -> None:
    """The lab bridge with the gateway address; the host reaches every pod through it."""
    if run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{GATEWAY}/{SUBNET.prefixlen}", "dev", BRIDGE)
    run("ip", "link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    run("ip", "link", "del", BRIDGE, check=False)


def lab_netns() -> list[str]:
    """Every network namespace the lab made (down.sh removes them all)."""
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(NETNS_PREFIX)]


@dataclass
class Network:
    """A pod's network namespace and address."""

    name: str
    address: str

    @classmethod
    def create(cls, key: str, address: str) -> Network:
        name = NETNS_PREFIX + key
        host_if, pod_if = f"cv{key}"[:15], f"cp{key}"[:15]
        run("ip", "netns", "del", name, check=False)
        run("ip", "link", "del", host_if, check=False)
        run("ip", "netns", "add", name)
        run("ip", "link", "add", host_if, "type", "veth", "peer", "name", pod_if)
        run("ip", "link", "set", host_if, "master", BRIDGE, "up")
        run("ip", "link", "set", pod_if, "netns", name)
        inside = ("ip", "netns", "exec", name, "ip")
        run(*inside, "link", "set", "lo", "up")
        run(*inside, "link", "set", pod_if, "name", "eth0")
        run(*inside, "addr", "add", f"{address}/{SUBNET.prefixlen}", "dev", "eth0")
        run(*inside, "link", "set", "eth0", "up")
        run(*inside, "route", "add", "default", "via", str(GATEWAY))
        return cls(name, address)

    def delete(self) -> None:
        run("ip", "netns", "del", self.name, check=False)
        run("ip", "link", "del", f"cv{self.name.removeprefix(NETNS_PREFIX)}"[:15], check=False)


@dataclass
class Mount:
    """A volume mount as the container sees it: host source, container path, read-only."""

    source: str
    target: str
    read_only: bool


@dataclass
class ContainerSpec:
    """What is needed to start one container process."""

    name: str
    argv: list[str]
    env: dict[str, str]
    workdir: str
    uid: int
    gid: int
    groups: list[int]
    mounts: list[Mount]
    hostname: str


@dataclass
class Process:
    """A running container: the unshare process on the host and, below it, the container's PID 1."""

    popen: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)

    def init_pid(self) -> int | None:
        """The container's PID 1 seen from the host (the only child of unshare --fork)."""
        try:
            children = Path(f"/proc/{self.popen.pid}/task/{self.popen.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def signal(self, sig: int) -> None:
        pid = self.init_pid()
        for target in (pid, self.popen.pid) if sig == signal.SIGKILL else (pid,):
            if target:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(target, sig)


def start_container(spec: ContainerSpec, netns: str, rootfs: str, state: Path, log: Path) -> Process:
    """Start one container (see container.sh for the namespaces and mounts it makes)."""
    for sub in ("upper", "work", "root"):  # a restarted container starts from the image again
        path = state / sub
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True, exist_ok=True)
    mounts = state / "mounts"
    mounts.write_text("".join(f"{m.source}\0{m.target}\0{'ro' if m.read_only else 'rw'}\0" for m in spec.mounts))
    argv = ["nsenter", f"--net=/run/netns/{netns}", "unshare", "--mount", "--uts", "--ipc", "--pid", "--fork",
            "--propagation", "private", "--", "/bin/bash", str(SETUP_SCRIPT), rootfs, str(state), spec.hostname,
            f"{spec.uid}:{spec.gid}", ",".join(str(g) for g in spec.groups), spec.workdir, *spec.argv]  # fmt: skip
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        popen = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=spec.env, start_new_session=True)  # fmt: skip
    (state / "pid").write_text(f"{popen.pid}\n")  # for hack/cluster/exec.sh
    return Process(popen)


def exec_in(pid: int, argv: list[str], uid: int, gid: int, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run a command in a running container's namespaces and root, as its user (kubectl exec, probes)."""
    enter = ["nsenter", "-t", str(pid), "-m", "-u", "-i", "-n", "-p", "-r", "-w", f"-S{uid}", f"-G{gid}"]
    env = environ_of(pid)
    return subprocess.run([*enter, *argv], capture_output=True, text=True, timeout=timeout, env=env)


def environ_of(pid: int) -> dict[str, str]:
    """A process's environment, as a command run in its container inherits it."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}

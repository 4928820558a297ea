"""pytest plugin: the cluster lab that ``hack/cluster/up.sh`` (``make cluster-up``) starts.

Registered in ``tests/conftest.py``. The lab is not started here: ``make test`` runs
``hack/cluster/up.sh`` before ``tests/cluster`` and ``down.sh`` after. When it could not start, its one
line in ``.cluster-lab/error`` is the reason these tests are skipped; a lab that was up and stopped
answering is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.slurm import read_env_file, wait_for

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / ".cluster-lab"
KUBECTL = REPO / ".cache" / "bin" / "kubectl"
EXEC = REPO / "hack" / "cluster" / "exec.sh"
NAMESPACE = "slurm"
SUMMARIES: list[str] = []  # lines a test leaves for the end of the run (the lifecycle's figures)


@dataclass(frozen=True)
class ClusterLab:
    kubeconfig: Path
    sync_url: str
    sync_replicas: tuple[tuple[str, str], ...] = ()  # slurm_sync replicas: (name, URL of its /readyz server)

    def kubectl(self, *args: str, timeout: float = 240, input_text: str | None = None) -> str:
        done = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                              text=True, timeout=timeout, input=input_text)  # fmt: skip
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, decoded."""
        return json.loads(self.kubectl("get", "-n", NAMESPACE, *args, "-o", "json"))

    def exec(self, pod: str, command: Sequence[str], container: str | None = None, timeout: float = 60,
             check: bool = True) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """A command in a pod's container (hack/cluster/exec.sh, as `kubectl exec`)."""
        argv = [str(EXEC), NAMESPACE, pod, *(["--container", container] if container else []), "--", *command]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if check:
            assert done.returncode == 0, f"{' '.join(command)} in {pod}: exit {done.returncode}: {done.stderr.strip()}"
        return done

    def pods(self, selector: str) -> list[dict]:
        return [p for p in self.get("pods", "-l", selector)["items"] if not p["metadata"].get("deletionTimestamp")]

    def kill(self, pod: str, container: str, hold: bool = False) -> Path:
        """SIGKILL a running container's process, as a crash would; the node agent restarts it unless
        ``hold`` (its ``hold`` file, removed by the caller, keeps it down). The container's directory."""
        state = container_dir(NAMESPACE, pod, container)
        if hold:
            (state / "hold").touch()
        os.kill(container_pid(state), signal.SIGKILL)
        return state

    def sync_roles(self) -> dict[str, str]:
        """Each slurm_sync replica's /readyz line ("leader <identity>: ok", "standby …"), "" when it
        does not answer (restarting)."""
        roles = {}
        for name, url in self.sync_replicas:
            try:
                with urllib.request.urlopen(f"{url}/readyz", timeout=5) as answer:
                    roles[name] = answer.read().decode().strip()
            except urllib.error.HTTPError as exc:
                roles[name] = exc.read().decode().strip()
            except OSError:
                roles[name] = ""
        return roles

    def kill_sync(self, name: str) -> int:
        """SIGKILL a slurm_sync replica's process (hack/cluster/replica.sh starts it again a second
        later, as the kubelet would); its PID."""
        wrapper = (LAB / "run" / "pids" / name).read_text().split()[0]
        (child,) = Path(f"/proc/{wrapper}/task/{wrapper}/children").read_text().split()
        os.kill(int(child), signal.SIGKILL)
        return int(child)


def ready(obj: dict) -> bool:
    """Whether a pod or one of our custom resources has condition Ready=True."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def container_pid(state: Path) -> int:
    """The container's own process (the child of the lab's container.sh), 0 when it is not running."""
    with contextlib.suppress(OSError, ValueError):
        outer = (state / "pid").read_text().strip()
        children = Path(f"/proc/{outer}/task/{outer}/children").read_text().split()
        return int(children[0]) if children else 0
    return 0


def container_dir(namespace: str, pod: str, container: str) -> Path:
    """A running container's directory in the lab (hack/cluster/exec.sh finds containers the same way)."""
    for marker in (LAB / "pods").glob("*/pod"):
        with contextlib.suppress(OSError):
            if marker.read_text().strip() == f"{namespace}/{pod}":
                state = marker.parent / "containers" / container
                if container_pid(state):
                    return state
    raise AssertionError(f"no running container {container} of {namespace}/{pod}")


def eventually(what: str, probe: Callable[[], Any], timeout: float = 60, interval: float = 0.5) -> Any:
    """probe() until it gives something truthy (tests.fixtures.slurm.wait_for, argument order of these tests)."""
    return wait_for(probe, bool, timeout=timeout, interval=interval, what=what)


def _why_not_up() -> str:
    error = LAB / "error"
    if error.is_file() and error.read_text().strip():
        return error.read_text().strip().splitlines()[0]
    return "not started: run `make cluster-up` (hack/cluster/up.sh)"


@pytest.fixture(scope="session")
def cluster_lab() -> ClusterLab:
    """The running cluster lab (skips, with up.sh's reason, when it could not start)."""
    env_file = LAB / "env"
    if not env_file.is_file():
        pytest.skip(f"the cluster lab is not up: {_why_not_up()}")
    env = read_env_file(env_file)
    replicas = tuple(
        (n, url) for n, _, url in (r.partition("=") for r in env.get("CLUSTER_LAB_SYNC_REPLICAS", "").split())
    )
    lab = ClusterLab(Path(env["KUBECONFIG"]), env["CLUSTER_LAB_SYNC_URL"], replicas)
    lab.kubectl("get", "--raw", "/readyz", timeout=10)
    return lab


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARIES:
        terminalreporter.write_sep("-", "cluster lab")
        for line in SUMMARIES:
            terminalreporter.write_line(line)

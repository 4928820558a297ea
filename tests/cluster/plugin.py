"""pytest plugin: the cluster lab that ``hack/cluster/up.sh`` (``make cluster-up``) starts.

Registered in ``tests/conftest.py``. The lab is not started here: ``make test`` runs
``hack/cluster/up.sh`` before ``tests/cluster`` and ``down.sh`` after. When it could not start, its one
line in ``.cluster-lab/error`` is the reason these tests are skipped; a lab that was up and stopped
answering is a failure.
"""

from __future__ import annotations

import json
import subprocess
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


@dataclass(frozen=True)
class ClusterLab:
    kubeconfig: Path
    sync_url: str

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
    lab = ClusterLab(Path(env["KUBECONFIG"]), env["CLUSTER_LAB_SYNC_URL"])
    lab.kubectl("get", "--raw", "/readyz", timeout=10)
    return lab

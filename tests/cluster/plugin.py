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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.cluster import privilege
from tests.fixtures.slurm import read_env_file, wait_for

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / ".cluster-lab"
KUBECTL = REPO / ".cache" / "bin" / "kubectl"
EXEC = REPO / "hack" / "cluster" / "exec.sh"
NAMESPACE = "slurm"
OPERATIONS_DOC = REPO / "docs" / "operations.md"  # where an unused grant is explained
SUMMARIES: list[str] = []  # lines a test leaves for the end of the run (the lifecycle's figures)


@dataclass(frozen=True)
class ClusterLab:
    kubeconfig: Path
    host_replicas: tuple[tuple[str, str], ...] = ()  # CLUSTER_LAB_OPERATOR=worktree: (name, URL of its /readyz)
    sync_pods: tuple[str, str, int] | None = None  # the operator chart's slurm_sync pods: namespace, selector, port
    image: str = ""  # the project's image the operator chart runs ("" with CLUSTER_LAB_OPERATOR=worktree)
    cluster: str = "chart"  # how the Slurm cluster was made: `helm install` of charts/slurm, or "examples"

    def kubectl(self, *args: str, timeout: float = 240, input_text: str | None = None) -> str:
        done = subprocess.run([str(KUBECTL), "--kubeconfig", str(self.kubeconfig), *args], capture_output=True,
                              text=True, timeout=timeout, input=input_text)  # fmt: skip
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
        return done.stdout

    def get(self, *args: str) -> Any:
        """`kubectl get ... -o json`, decoded."""
        return json.loads(self.kubectl("get", "-n", NAMESPACE, *args, "-o", "json"))

    def exec(self, pod: str, command: Sequence[str], container: str | None = None, timeout: float = 60,
             check: bool = True, namespace: str = NAMESPACE) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """A command in a pod's container (hack/cluster/exec.sh, as `kubectl exec`)."""
        argv = [str(EXEC), namespace, pod, *(["--container", container] if container else []), "--", *command]
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

    @property
    def sync_replicas(self) -> tuple[tuple[str, str], ...]:
        """slurm_sync's replicas, each (name, URL of its /readyz server): the operator chart's pods, as they are
        now, or the work tree's two host processes."""
        if self.sync_pods is None:
            return self.host_replicas
        namespace, selector, port = self.sync_pods
        pods = json.loads(self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json"))["items"]
        return tuple(sorted(
            (p["metadata"]["name"], f"http://{p['status']['podIP']}:{port}") for p in pods
            if p.get("status", {}).get("podIP") and not p["metadata"].get("deletionTimestamp")
        ))  # fmt: skip

    def sync_log(self, name: str) -> Path:
        """A replica's log: its container's, or the host process's."""
        if self.sync_pods is None:
            return LAB / "logs" / f"{name}.log"
        return LAB / "logs" / "pods" / f"{self.sync_pods[0]}_{name}" / "slurm-sync.log"

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

    @contextlib.contextmanager
    def dark_node(self, node: str) -> Iterator[None]:
        """The node's kubelet gone dark (hack/cluster/lab/agent.py `dark`) for the block: its pods run on, nothing
        about them is reported and no deletion is carried out; then it reports and deletes again."""
        mark = LAB / "run" / "dark" / node
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()
        try:
            yield
        finally:
            mark.unlink(missing_ok=True)

    def kill_sync(self, name: str) -> int:
        """SIGKILL a slurm_sync replica's process, as a crash would: its pod's container, which the node agent
        restarts as a kubelet does (or the host process, which hack/cluster/replica.sh starts again a second
        later); its PID."""
        if self.sync_pods is not None:
            pid = container_pid(container_dir(self.sync_pods[0], name, "slurm-sync"))
            os.kill(pid, signal.SIGKILL)
            return pid
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
    pods = env.get("CLUSTER_LAB_SYNC_PODS", "").split()
    lab = ClusterLab(Path(env["KUBECONFIG"]), replicas, (pods[0], pods[1], int(pods[2])) if pods else None,
                     env.get("CLUSTER_LAB_IMAGE", ""), env.get("CLUSTER_LAB_CLUSTER", "chart"))  # fmt: skip
    lab.kubectl("get", "--raw", "/readyz", timeout=10)
    return lab


OPERATOR_ACCOUNTS = {  # the operator chart's ServiceAccounts (namespace slinky, release slurm-operator)
    "slurm_sync": "system:serviceaccount:slinky:slurm-operator-slurm-sync",
    "the hook server": "system:serviceaccount:slinky:slurm-operator-hooks",
}
SYNC_ROLES = (("clusterrole", "slurm-operator-slurm-sync"), ("role", "slurm-operator-slurm-sync-lease"))


def least_privilege(kubeconfig: Path, audit: Path, doc: str) -> tuple[list[str], list[str]]:
    """The figure's lines, and the unused grants docs/operations.md does not explain (privilege.py)."""
    lab = ClusterLab(kubeconfig)
    roles = [json.loads(lab.kubectl("get", kind, name, "-n", "slinky", "-o", "json")) for kind, name in SYNC_ROLES]
    events = audit.read_text().splitlines()
    granted = privilege.grants(roles)
    unused = sorted(granted - privilege.uses(events, OPERATOR_ACCOUNTS["slurm_sync"]), key=str)
    hooks = privilege.uses(events, OPERATOR_ACCOUNTS["the hook server"])
    lines = [
        f"least privilege: slurm_sync used {len(granted) - len(unused)} of its {len(granted)} grants; never used: "
        f"{', '.join(map(str, unused)) or 'none'}",
        f"least privilege: the hook server's ServiceAccount asked for {len(hooks)} kinds of request",
    ]
    return lines, [str(g) for g in privilege.unexplained(unused, doc)]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the cluster lab's tests, the least-privilege figure (from the API server's audit log); with
    CLUSTER_LAB_PRIVILEGE_CHECK=1 (hack/cluster/test.sh, when it runs every cluster test) an unused grant that
    docs/operations.md does not explain fails the run."""
    env_file, audit = LAB / "env", LAB / "logs" / "audit.log"
    ran = any(item.get_closest_marker("cluster") for item in session.items)
    if not (ran and env_file.is_file() and audit.is_file()):
        return
    env = read_env_file(env_file)
    if env.get("CLUSTER_LAB_OPERATOR") != "chart":
        return
    try:
        lines, missing = least_privilege(Path(env["KUBECONFIG"]), audit, OPERATIONS_DOC.read_text())
    except (AssertionError, OSError, ValueError) as exc:
        SUMMARIES.append(f"least privilege: not computed: {exc}")
        return
    SUMMARIES.extend(lines)
    if missing and os.environ.get("CLUSTER_LAB_PRIVILEGE_CHECK") == "1":
        SUMMARIES.append(
            f"least privilege: FAILED: unused grants docs/operations.md does not explain: {', '.join(missing)}"
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if SUMMARIES:
        terminalreporter.write_sep("-", "cluster lab")
        for line in SUMMARIES:
            terminalreporter.write_line(line)

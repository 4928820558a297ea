"""pytest plugin: the real Kubernetes API server that ``hack/kube/up.sh`` starts.

Registered in ``tests/conftest.py``. Tests that use ``kube_lab`` carry ``@pytest.mark.kube`` (added
automatically). The server is not started here: ``make test`` / ``make kube-up`` run
``hack/kube/up.sh``, which writes ``.kube-lab/env``. When it could not be built or started, its one
line in ``.kube-lab/error`` is the reason the kube tests are skipped; a server that was up and stopped
answering is a failure.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client, config

from tests.fixtures.slurm import read_env_file

REPO = Path(__file__).resolve().parents[2]
LAB = REPO / ".kube-lab"
ENV_FILE = LAB / "env"
ERROR_FILE = LAB / "error"


@dataclass(frozen=True)
class KubeLab:
    kubeconfig: Path
    url: str
    k8s_version: str

    def api_client(self) -> client.ApiClient:
        """A fresh client of the official library for the lab's administrator (caller closes it)."""
        return config.new_client_from_config(config_file=str(self.kubeconfig))


def _why_not_up() -> str:
    if ERROR_FILE.is_file() and ERROR_FILE.read_text().strip():
        return ERROR_FILE.read_text().strip().splitlines()[0]
    return "not started: run `make kube-up` (hack/kube/up.sh)"


def _load_lab() -> KubeLab:
    if not ENV_FILE.is_file():
        pytest.skip(f"the Kubernetes API server lab is not up: {_why_not_up()}")
    env = read_env_file(ENV_FILE)
    lab = KubeLab(Path(env["KUBECONFIG"]), env["KUBE_LAB_URL"], env.get("KUBE_LAB_K8S_VERSION", "?"))
    with lab.api_client() as api:
        try:
            client.VersionApi(api).get_code(_request_timeout=10)
        except Exception as exc:
            pytest.fail(f"the API server at {lab.url} does not answer ({exc}); logs in {LAB / 'logs'}", pytrace=False)
    return lab


@pytest.fixture(scope="session")
def kube_lab() -> KubeLab:
    """The running API server (skips, with up.sh's reason, when it could not be built)."""
    return _load_lab()


@pytest.fixture
def kube_api(kube_lab: KubeLab) -> Iterator[client.ApiClient]:
    with kube_lab.api_client() as api:
        yield api


@pytest.fixture
def kube_namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace, deleted afterwards (the lab's garbage collector removes what it held)."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    core = client.CoreV1Api(kube_api)
    core.create_namespace({"metadata": {"name": name}})  # type: ignore[arg-type]  # the client takes dicts too
    yield name
    core.delete_namespace(name)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kube_lab" in getattr(item, "fixturenames", ()) and item.get_closest_marker("kube") is None:
            item.add_marker(pytest.mark.kube)


def pytest_report_header(config: pytest.Config) -> str:
    if not ENV_FILE.is_file():
        return f"kube lab: not up ({_why_not_up()})"
    env = read_env_file(ENV_FILE)
    return f"kube lab: Kubernetes libraries {env.get('KUBE_LAB_K8S_VERSION', '?')} at {env.get('KUBE_LAB_URL', '?')}"


_OUTCOMES: dict[str, set[str]] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Remember which tests ran against the real API server, for the summary below."""
    if "kube" not in report.keywords or (report.when != "call" and report.outcome == "passed"):
        return
    _OUTCOMES.setdefault(report.outcome, set()).add(report.nodeid)


def pytest_terminal_summary(terminalreporter) -> None:
    """How many tests ran against the real API server, and what building and starting it cost."""
    if not _OUTCOMES and not ENV_FILE.is_file():
        return
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(_OUTCOMES.items())) or "none ran"
    terminalreporter.write_sep("-", f"real Kubernetes API server tests: {counts}")
    if ENV_FILE.is_file():
        env = read_env_file(ENV_FILE)
        terminalreporter.write_line(
            f"kube lab: Kubernetes libraries {env.get('KUBE_LAB_K8S_VERSION')}; built this run: "
            f"{env.get('KUBE_LAB_BUILT_NOW')}; rootfs build {env.get('KUBE_LAB_ROOTFS_SECONDS')} s, this server "
            f"binary's build {env.get('KUBE_LAB_BUILD_SECONDS')} s (cached until hack/kube changes); "
            f"start {env.get('KUBE_LAB_START_SECONDS')} s"
        )
    else:
        terminalreporter.write_line(f"kube lab: not up ({_why_not_up()})")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube: talks to the real Kubernetes API server started by hack/kube (make kube-up)"
    )

"""The pins: the image installs requirements.lock only, so the shipped code may import nothing else; and what
it installs starts both processes."""

from __future__ import annotations

import ast
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.kube.plugin import KubeLab

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hooks", "slinky_common", "slurm_sync")  # what the image ships


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return {_norm(line.split("==")[0]): line.split("==")[1] for line in lines if "==" in line}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _norm(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0])


def test_every_declared_dependency_is_pinned_in_the_right_lock():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, test = _pins("requirements.lock"), _pins("requirements-test.lock")
    assert not runtime.keys() & test.keys(), "a package is pinned twice"
    assert {_requirement_name(d) for d in project["dependencies"]} <= runtime.keys()
    assert {_requirement_name(d) for d in project["optional-dependencies"]["test"]} <= runtime.keys() | test.keys()


def test_shipped_code_imports_only_runtime_packages():
    runtime = _pins("requirements.lock")
    distributions = packages_distributions()
    imported: set[str] = set()
    for path in [path for package in PACKAGES for path in ROOT.glob(f"{package}/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in PACKAGES}
    missing = {m for m in third_party if not {_norm(d) for d in distributions.get(m, [m])} & runtime.keys()}
    assert not missing, f"imported by our packages but not in requirements.lock: {sorted(missing)}"


# ---------------------------------------------------------------- what a user installs starts


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run(*command: str | Path, cwd: Path | None = None) -> None:
    done = subprocess.run([str(c) for c in command], cwd=cwd, env=_clean_env(), capture_output=True, text=True)
    assert done.returncode == 0, f"{' '.join(map(str, command))}: {done.stderr[-2000:]}"


def _clean_env(**extra: str) -> dict[str, str]:
    """The environment without the developer venv's traces (PYTHONPATH, VIRTUAL_ENV)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


@dataclass(frozen=True)
class ImageVenv:
    """The image's Python made as the Dockerfile makes it: requirements.lock with --no-deps, the code copied
    to an app directory; plus the package installed without dependencies for its two console scripts."""

    bin: Path
    app: Path


@pytest.fixture(scope="module")
def image_venv(tmp_path_factory: pytest.TempPathFactory) -> ImageVenv:
    root = tmp_path_factory.mktemp("image")
    venv, app = root / "venv", root / "app"
    _run(sys.executable, "-m", "venv", venv)
    pip = (venv / "bin/python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps")
    _run(*pip, "-r", ROOT / "requirements.lock")
    app.mkdir()
    for package in PACKAGES:
        shutil.copytree(ROOT / package, app / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", app)
    _run(*pip, ".", cwd=app)
    shutil.rmtree(app / "build", ignore_errors=True)
    return ImageVenv(venv / "bin", app)


def _healthz_of(command: list[str], port: int, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Start ``command``; the status of its first /healthz answer (within 60 s), or 0 and what it printed."""
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as proc:
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as answer:
                        return answer.status, ""
                except OSError:
                    time.sleep(0.3)
        finally:
            proc.terminate()
            try:
                out, _ = proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
        return 0, out.decode(errors="replace")[-3000:]


@pytest.mark.gunicorn
@pytest.mark.parametrize("how", ["slinky-hooks", "image command"])
def test_the_hook_server_starts_from_what_the_image_installs(image_venv: ImageVenv, how: str) -> None:
    """`packaging`, which gunicorn's gevent worker imports, was only in the test lock: every hook pod crash-looped."""
    port = _free_port()
    command = (
        [str(image_venv.bin / "slinky-hooks")]
        if how == "slinky-hooks"
        else [str(image_venv.bin / "gunicorn"), "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"]
    )
    env = _clean_env(HOOKS_BIND=f"127.0.0.1:{port}", HOOKS_WORKERS="1", PATH=f"{image_venv.bin}:{os.environ['PATH']}")
    status, printed = _healthz_of(command, port, image_venv.app, env)
    assert status == 200, printed


@pytest.mark.parametrize("how", ["slurm-sync", "image command"])
def test_slurm_sync_starts_from_what_the_image_installs(image_venv: ImageVenv, kube_lab: KubeLab, how: str) -> None:
    port = _free_port()
    command = (
        [str(image_venv.bin / "slurm-sync")]
        if how == "slurm-sync"
        else [str(image_venv.bin / "python"), "-m", "slurm_sync"]
    )
    flags = ["--kubeconfig", str(kube_lab.kubeconfig), "--bind", f"127.0.0.1:{port}", "--no-leader-elect"]
    flags += ["--namespace", f"image-venv-{uuid.uuid4().hex[:8]}"]  # watches an empty namespace: it writes nothing
    status, printed = _healthz_of(command + flags, port, image_venv.app, _clean_env())
    assert status == 200, printed


# ---------------------------------------------------------------- no package archive named


def _hosts_of(urls: list[str]) -> set[str]:
    return {host for url in urls if (host := urllib.parse.urlsplit(url).hostname)}


def machine_archive_hosts() -> set[str]:
    """The package archives and registries this machine is configured with (apt's sources, pip's and npm's
    configuration) and those the tools fall back on (PyPI, npm's registry), read here rather than listed:
    the list itself would be the names this test keeps out of the repository."""
    urls: list[str] = []
    apt = subprocess.run(["apt-get", "indextargets", "--format", "$(REPO_URI)"], capture_output=True, text=True)
    urls += apt.stdout.split() if apt.returncode == 0 else []
    for sources in Path("/etc/apt").glob("sources.list*"):
        for path in [sources] if sources.is_file() else sorted(sources.glob("*")):
            urls += re.findall(r"[a-z+]+://\S+", path.read_text(errors="replace"))
    pip = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    urls += re.findall(r"[a-z+]+://[^\s'\"]+", pip.stdout)
    from pip._internal.models.index import PyPI  # pip's default index and file host

    urls += [PyPI.url, PyPI.file_storage_domain and f"https://{PyPI.file_storage_domain}/"]
    if npm := shutil.which("npm"):
        urls += subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True).stdout.split()
    return {host for host in _hosts_of(urls) if "." in host}


def test_no_package_archive_or_registry_host_is_named_in_the_repository() -> None:
    """Mirrors come from the machine's configuration (hack/lib/mirror.sh reads apt's): a host written into the
    repository is a default that is wrong on the next machine."""
    hosts = machine_archive_hosts()
    assert hosts, "found no archive host in this machine's configuration to look for"
    grep = subprocess.run(
        ["git", "grep", "--untracked", "-n", "-i", "-F", *(arg for host in sorted(hosts) for arg in ("-e", host))],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert grep.returncode == 1, f"package hosts ({', '.join(sorted(hosts))}) named in:\n{grep.stdout[:3000]}"

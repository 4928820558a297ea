"""What the charts rely on in the Dockerfile, and where the processes in the image may write.

`make image` builds the Dockerfile with whichever engine exists; these tests read it and the
rendered charts, so they hold on machines without one.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts import helm

REPO = Path(__file__).resolve().parents[2]
OUR_CHARTS = ("slurm-operator", "slurm-bridge")
# The calls that create files or directories; each one in our packages must go through tempfile.
WRITING_CALLS = {
    "mkdtemp",
    "mkstemp",
    "NamedTemporaryFile",
    "TemporaryFile",
    "TemporaryDirectory",
    "write_text",
    "write_bytes",
    "makedirs",
    "mkdir",
}


def _instructions() -> list[tuple[str, str]]:
    lines = (REPO / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1])
        for line in lines
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_runs_as_the_non_root_uid_the_charts_declare() -> None:
    users = [arg for op, arg in _instructions() if op == "USER"]
    assert users == ["65532:65532"]  # podSecurityContext.runAsUser in every chart


def test_installs_the_runtime_lock_and_nothing_else() -> None:
    ops = _instructions()
    copied = [arg.split()[0] for op, arg in ops if op == "COPY"]
    assert copied == ["requirements.lock", "hooks/", "slinky_common/", "slurm_sync/"]
    installs = [arg for op, arg in ops if op == "RUN" and "pip" in arg]
    assert installs == ["pip install --no-deps -r requirements.lock"]


def test_default_command_is_the_hook_server_the_charts_also_name() -> None:
    (cmd,) = [arg for op, arg in _instructions() if op == "CMD"]
    assert "hooks/gunicorn_conf.py" in cmd and "hooks.app:create_app()" in cmd
    assert (REPO / "slurm_sync" / "__main__.py").exists()  # `python -m slurm_sync` in the charts


def _writing_calls() -> list[str]:
    found = []
    for path in [*REPO.glob("hooks/**/*.py"), *REPO.glob("slinky_common/**/*.py"), *REPO.glob("slurm_sync/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "attr", getattr(node.func, "id", ""))
                mode = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
                if name in WRITING_CALLS or (name == "open" and any(set(str(m)) & set("wax+") for m in mode)):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}:{ast.unparse(node.func)}")
    return found


def test_the_code_writes_only_temporary_files() -> None:
    """So the write paths are the temp dir and PROMETHEUS_MULTIPROC_DIR, which the next test mounts."""
    assert _writing_calls() == ["hooks/gunicorn_conf.py:47:tempfile.mkdtemp"]


def _our_containers(chart: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(pod spec, container) for every container running the project's image."""
    image = yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text())["image"]["repository"]
    objects = helm.render(chart, api_versions=("cert-manager.io/v1",), namespace="slinky")
    pods = [o["spec"]["template"]["spec"] for o in objects if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet")]
    return [(pod, c) for pod in pods for c in pod["containers"] if c["image"].startswith(image + ":")]


@pytest.mark.parametrize("chart", OUR_CHARTS)
def test_every_path_the_processes_write_is_an_emptydir(chart: str) -> None:
    containers = _our_containers(chart)
    assert len(containers) >= 2, "the hook server and slurm_sync"
    for pod, container in containers:
        empty = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert "TMPDIR" not in env, "tempfile writes under /tmp"
        writes = ["/tmp", *([env["PROMETHEUS_MULTIPROC_DIR"]] if "PROMETHEUS_MULTIPROC_DIR" in env else [])]
        for path in writes:
            assert mounts.get(path) in empty, f"{chart} {container['name']}: {path} is not a mounted emptyDir"
        assert "HOOKS_CONTROL_SOCKET" not in env  # gunicorn's socket would go under $HOME otherwise


def test_the_image_comes_from_one_place() -> None:
    """The project's registry path and version: pyproject's home, the charts' image and appVersion, `make image`."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    owner_repo = re.fullmatch(r"https://github\.com/([^/]+/[^/]+)", project["urls"]["Homepage"]).group(1)
    repository = f"ghcr.io/{owner_repo}"
    makefile = (REPO / "Makefile").read_text()
    assert f"IMAGE_REPOSITORY ?= {repository}\n" in makefile
    for chart in OUR_CHARTS:
        meta = yaml.safe_load((REPO / "charts" / chart / "Chart.yaml").read_text())
        values = yaml.safe_load((REPO / "charts" / chart / "values.yaml").read_text())
        assert (values["image"]["repository"], values["image"]["tag"]) == (repository, "")
        assert meta["appVersion"] == project["version"]
        images = {c["image"] for _, c in _our_containers(chart)}
        assert images == {f"{repository}:{project['version']}"}
    for chart in ("slurm-operator", "slurm-bridge", "slurm"):
        meta = yaml.safe_load((REPO / "charts" / chart / "Chart.yaml").read_text())
        assert meta["home"] == project["urls"]["Homepage"]


def test_the_build_context_is_only_what_the_dockerfile_copies() -> None:
    """No .venv, lab state or caches sent to the engine: .dockerignore ignores all but the COPY sources."""
    lines = [line for line in (REPO / ".dockerignore").read_text().splitlines() if line and not line.startswith("#")]
    assert lines[0] == "*"
    copied = [arg.split()[0] for op, arg in _instructions() if op == "COPY"]
    assert [line[1:] for line in lines if line.startswith("!")] == copied

"""The Dockerfile cannot be built here (no Docker engine); these read it for what the charts rely on."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    lines = (REPO / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_runs_as_the_non_root_uid_the_charts_declare() -> None:
    users = [arg for op, arg in _instructions() if op == "USER"]
    assert users == ["65532:65532"]  # podSecurityContext.runAsUser in every chart


def test_installs_exact_pins_and_only_the_two_packages() -> None:
    ops = _instructions()
    assert ("COPY", "requirements.lock ./") in ops
    assert any(op == "RUN" and "-r requirements.lock" in arg for op, arg in ops)
    copied = [arg.split()[0] for op, arg in ops if op == "COPY"]
    assert copied == ["requirements.lock", "hooks/", "slurm_sync/"]


def test_default_command_is_the_hook_server_the_charts_also_name() -> None:
    (cmd,) = [arg for op, arg in _instructions() if op == "CMD"]
    assert "hooks/gunicorn_conf.py" in cmd and "hooks.app:create_app()" in cmd
    assert (REPO / "slurm_sync" / "__main__.py").exists()  # `python -m slurm_sync` in the charts

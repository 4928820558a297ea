"""`make image` (hack/image.sh) picks the first usable engine and says in one line when there is none.

The engines here are stand-ins on a PATH of our own, so the test holds whatever the machine has;
they record the command line the script runs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ("bash", "dirname", "sed", "cat")


def _path_with(tmp_path: Path, engines: dict[str, int]) -> Path:
    """A PATH dir with the shell tools and stand-in engines that log their arguments and exit with
    the given code for `info` (docker's daemon check) and 0 for everything else."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    for engine, info_code in engines.items():
        script = bin_dir / engine
        script.write_text(
            f'#!/bin/bash\necho "{engine} $*" >> {tmp_path}/calls\n[ "$1" = info ] && exit {info_code}\nexit 0\n'
        )
        script.chmod(0o755)
    return bin_dir


def _image(tmp_path: Path, engines: dict[str, int]) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(_path_with(tmp_path, engines))}
    return subprocess.run(
        [str(ROOT / "hack/image.sh"), "reg.example/x:1"], capture_output=True, text=True, env=env, cwd=ROOT
    )


def _calls(tmp_path: Path) -> list[str]:
    calls = tmp_path / "calls"
    return calls.read_text().splitlines() if calls.exists() else []


def test_no_engine_is_one_line_saying_what_to_install(tmp_path: Path) -> None:
    result = _image(tmp_path, {})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "make image: no container engine can build here (docker not installed, podman not installed, buildah not "
        "installed); install podman or buildah (apt-get install podman) or start docker"
    ]


def test_docker_without_a_daemon_falls_through_to_podman(tmp_path: Path) -> None:
    result = _image(tmp_path, {"docker": 1, "podman": 0})
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path) == ["docker info", "podman build -t reg.example/x:1 -f Dockerfile ."]
    assert "push it with: podman push reg.example/x:1" in result.stdout


def test_buildah_alone_builds(tmp_path: Path) -> None:
    result = _image(tmp_path, {"buildah": 0})
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path) == ["buildah build --layers -t reg.example/x:1 -f Dockerfile ."]


def test_make_image_passes_the_charts_default_image(tmp_path: Path) -> None:
    bin_dir = _path_with(tmp_path, {"docker": 0})
    (bin_dir / "make").symlink_to(shutil.which("make"))
    env = {**os.environ, "PATH": str(bin_dir)}
    result = subprocess.run(
        ["make", "--no-print-directory", "image"], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    image = f"ghcr.io/slinky-metacontroller/slinky-metacontroller:{version}"  # tests/charts: the charts' default too
    assert _calls(tmp_path)[-1] == f"docker build -t {image} -f Dockerfile ."


def test_another_copy_of_the_base_image_can_be_named(tmp_path: Path) -> None:
    """With no Docker Hub in reach, `make image BASE_IMAGE=<mirror>/python:…` builds over a registry's copy."""
    bin_dir = _path_with(tmp_path, {"podman": 0})
    (bin_dir / "make").symlink_to(shutil.which("make"))
    env = {**os.environ, "PATH": str(bin_dir), "IMAGE_ENGINE": "podman"}
    base = "mirror.example/library/python:3.11-slim-bookworm"
    result = subprocess.run(
        ["make", "--no-print-directory", "image", f"BASE_IMAGE={base}", "IMAGE_TAG=1"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _calls(tmp_path)[-1].startswith(f"podman build --build-arg BASE_IMAGE={base} -t "), _calls(tmp_path)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm\nFROM ${BASE_IMAGE}\n" in dockerfile

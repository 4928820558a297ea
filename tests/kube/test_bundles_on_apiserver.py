"""`kubectl apply -f dist/install.yaml` (docs/operations.md) on an empty namespace of the real API
server: the bundle creates its namespace before the objects in it, and applies twice unchanged."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from tests.charts import helm
from tests.kube.plugin import KubeLab
from tests.kube.test_charts_on_apiserver import metacontroller  # noqa: F401 - the fixture, shared

REPO = Path(__file__).resolve().parents[2]


def kubectl(lab: KubeLab, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(lab.kubeconfig.parent), "KUBECONFIG": str(lab.kubeconfig)}
    return subprocess.run(["kubectl", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture
def operator_bundle(tmp_path: Path) -> Path:
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed")
    helm.helm()
    subprocess.run(
        ["make", "--no-print-directory", "manifests", f"DIST={tmp_path}"], cwd=REPO, check=True, capture_output=True
    )
    return tmp_path / "install.yaml"


def test_the_operator_bundle_applies_on_a_cluster_without_its_namespace(
    kube_lab: KubeLab,
    installed_crds,
    metacontroller,  # noqa: F811 - the imported fixture
    kube_api,
    operator_bundle: Path,
) -> None:
    core = client.CoreV1Api(kube_api)
    assert "slinky" not in {n.metadata.name for n in core.list_namespace().items}
    cluster_scoped = [
        d
        for d in yaml.safe_load_all(operator_bundle.read_text())
        if d and d["kind"] in ("ClusterRole", "ClusterRoleBinding", "CompositeController")
    ]
    try:
        first = kubectl(kube_lab, "apply", "-f", str(operator_bundle))
        assert first.returncode == 0, first.stderr
        deployments = {d.metadata.name for d in client.AppsV1Api(kube_api).list_namespaced_deployment("slinky").items}
        assert deployments == {"slurm-operator-hooks", "slurm-operator-slurm-sync"}
        again = kubectl(kube_lab, "apply", "-f", str(operator_bundle))
        assert again.returncode == 0, again.stderr
        assert "namespace/slinky unchanged" in again.stdout
    finally:
        kubectl(kube_lab, "delete", "namespace", "slinky", "--wait=false")
        for obj in cluster_scoped:  # the CRDs stay: other tests of this session use them
            kubectl(kube_lab, "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found")

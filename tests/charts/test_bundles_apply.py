"""`kubectl apply -f dist/install.yaml` and `kubectl apply -f dist/install-bridge.yaml` (docs/operations.md),
with the real kubectl, on a real API server without their namespaces: each bundle creates its namespaces
before the objects in them, and applies twice unchanged."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.charts import helm
from tests.kube.cli import kubectl
from tests.kube.plugin import KubeLab

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bundles(tmp_path: Path) -> Path:
    """`make manifests` into a temporary directory: install.yaml and install-bridge.yaml."""
    helm.helm()
    subprocess.run(
        ["make", "--no-print-directory", "manifests", f"DIST={tmp_path}"], cwd=REPO, check=True, capture_output=True
    )
    return tmp_path


VERSIONS = "jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{'\\n'}{end}"


def stored_versions(lab: KubeLab, bundle: Path) -> list[str]:
    listed = kubectl(lab, "get", "-f", str(bundle), "-o", VERSIONS)
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.splitlines()


def apply_twice_and_remove(
    lab: KubeLab, bundle: Path, namespaces: list[str], existing: tuple[str, ...] = ()
) -> set[str]:
    """Apply the bundle twice, the second storing nothing new (every resourceVersion stays), then
    delete what it made; the namespaces come first in the file (a test of hack/bundle.py), those of
    ``existing`` (another install's) are not in it and survive its deletion. Returns the second
    apply's output lines."""
    docs = [d for d in yaml.safe_load_all(bundle.read_text()) if d]
    assert [d["metadata"]["name"] for d in docs[: len(namespaces)]] == namespaces
    assert all(d["kind"] == "Namespace" for d in docs[: len(namespaces)])
    assert not {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"} & set(existing)
    for namespace in namespaces:  # left by an earlier test (the bridge chart keeps its managed namespace)
        gone = kubectl(lab, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true")
        assert gone.returncode == 0, gone.stderr
    for namespace in existing:  # as the other install left it
        kubectl(lab, "create", "namespace", namespace)
    try:
        first = kubectl(lab, "apply", "-f", str(bundle))
        assert first.returncode == 0, first.stderr
        stored = stored_versions(lab, bundle)
        assert len(stored) == len(docs)
        again = kubectl(lab, "apply", "-f", str(bundle))
        assert again.returncode == 0, again.stderr
        assert stored_versions(lab, bundle) == stored, "the second apply changed objects"
        return set(again.stdout.splitlines())
    finally:
        # Every object the bundle made but the CRDs (other tests of this session use them), waited
        # for: the namespaces' contents go with them only eventually, and a Role left behind for a
        # moment would stop a later `helm install` of the same chart.
        made = bundle.with_name(f"{bundle.stem}-made.yaml")
        made.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "CustomResourceDefinition"]))
        removed = kubectl(lab, "delete", "-f", str(made), "--ignore-not-found", "--wait=true")
        assert removed.returncode == 0, removed.stderr
        for namespace in existing:
            kept = kubectl(lab, "get", "namespace", namespace)
            assert kept.returncode == 0, f"deleting the bundle deleted {namespace}: {kept.stderr}"
            kubectl(lab, "delete", "namespace", namespace, "--ignore-not-found", "--wait=true")


def test_the_operator_bundle_applies_on_a_cluster_without_its_namespace(
    kube_lab: KubeLab, installed_crds, metacontroller, bundles: Path
) -> None:
    output = apply_twice_and_remove(kube_lab, bundles / "install.yaml", ["slinky"])
    assert {
        "namespace/slinky unchanged",
        "deployment.apps/slurm-operator-hooks unchanged",
        "deployment.apps/slurm-operator-slurm-sync unchanged",
    } <= output


def test_the_bridge_bundle_applies_on_a_cluster_without_its_namespaces(
    kube_lab: KubeLab, installed_crds, metacontroller, cert_manager, bundles: Path
) -> None:
    # slurm: the bridge's Token CR and the Role to read its Secret, in the Slurm cluster's namespace, which the
    # bundle uses but never makes (nor deletes).
    namespaces = ["slurm-bridge-system", "slurm-bridge"]
    output = apply_twice_and_remove(kube_lab, bundles / "install-bridge.yaml", namespaces, existing=("slurm",))
    assert {
        "namespace/slurm-bridge unchanged",
        "decoratorcontroller.metacontroller.k8s.io/slurm-bridge-pod unchanged",
        "certificate.cert-manager.io/slurm-bridge-admission unchanged",
        "token.slinky.slurm.net/slurm-bridge unchanged",
        "role.rbac.authorization.k8s.io/slurm-bridge-slurm-sync-token unchanged",
    } <= output

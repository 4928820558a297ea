"""A missing prerequisite is named at `helm install`, on the real API server (issue: Kubernetes' own
`no matches for kind "CompositeController"`, six times, never says Metacontroller)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from kubernetes import client

from tests.charts.helm import CHARTS
from tests.kube.cli import run
from tests.kube.kubeapi import METACONTROLLER, ensure_crds, stand_in_crd
from tests.kube.plugin import KubeLab

pytestmark = pytest.mark.kube


@contextmanager
def without_kind(kube_api: client.ApiClient, kind: str, plural: str) -> Iterator[None]:
    """Metacontroller's ``kind`` not served for a while (its stand-in CRD deleted, then made again)."""
    ext = client.ApiextensionsV1Api(kube_api)
    name = f"{plural}.{METACONTROLLER}"
    ext.delete_custom_resource_definition(name)
    try:
        deadline = time.monotonic() + 60
        while ext.list_custom_resource_definition(field_selector=f"metadata.name={name}").items:
            assert time.monotonic() < deadline, f"{name} still there"
            time.sleep(0.5)
        yield
    finally:
        ensure_crds(kube_api, [stand_in_crd(METACONTROLLER, "v1alpha1", kind, plural)])


def test_the_operator_chart_names_a_missing_metacontroller(
    kube_lab: KubeLab, installed_crds, metacontroller, kube_api, kube_namespace: str
) -> None:
    install = ["helm", "install", "slurm-operator", str(CHARTS / "slurm-operator"), "-n", kube_namespace]
    install += ["--set", "crds.enabled=false", "--dry-run=server"]
    served = run(kube_lab, *install)
    assert served.returncode == 0, served.stderr  # with Metacontroller's kinds served, it installs
    with without_kind(kube_api, "CompositeController", "compositecontrollers"):
        refused = run(kube_lab, *install)
        assert refused.returncode != 0
        assert "Metacontroller is not installed" in refused.stderr, refused.stderr
        assert "docs/getting-started.md" in refused.stderr and "controllers.enabled=false" in refused.stderr
        without = run(kube_lab, *install, "--set", "controllers.enabled=false")
        assert without.returncode == 0, without.stderr  # the way out the message names


def test_the_bridge_chart_names_a_missing_metacontroller(
    kube_lab: KubeLab, installed_crds, metacontroller, kube_api, kube_namespace: str
) -> None:
    install = ["helm", "install", "slurm-bridge", str(CHARTS / "slurm-bridge"), "-n", kube_namespace]
    install += ["--set", "certManager.enabled=false", "--set", "admission.createManagedNamespaces=false"]
    install += ["--set", f"sharedConfig.slurmJwtSecretNamespace={kube_namespace}", "--dry-run=server"]
    install += ["--set", f"admission.managedNamespaces={{{kube_namespace}}}"]
    served = run(kube_lab, *install)
    assert served.returncode == 0, served.stderr
    with without_kind(kube_api, "DecoratorController", "decoratorcontrollers"):
        refused = run(kube_lab, *install)
        assert refused.returncode != 0
        assert "Metacontroller is not installed" in refused.stderr and "DecoratorController" in refused.stderr

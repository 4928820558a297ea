"""`helm upgrade` of charts/slurm after `kubectl scale nodeset` (what an HPA or KEDA does too), with the real
helm and the real API server: a chart that sets `replicas` owns the field and the upgrade is refused on it;
`nodesets.<key>.replicas: null` leaves it to the scaler (docs/operations.md, "Upgrade")."""

from __future__ import annotations

import pytest
from kubernetes import client

from tests.charts.helm import CHARTS, render
from tests.kube.cli import run
from tests.kube.kubeapi import GROUP, VERSION
from tests.kube.plugin import KubeLab

NODESET = "slurm-worker-cpu"


def nodeset_spec(values: dict) -> dict:
    (nodeset,) = [d for d in render("slurm", values, "slurm") if d["kind"] == "NodeSet"]
    return nodeset["spec"]


def test_a_null_replicas_is_left_out_and_a_number_is_kept() -> None:
    assert "replicas" not in nodeset_spec({"nodesets": {"cpu": {"replicas": None}}})
    assert nodeset_spec({"nodesets": {"cpu": {"replicas": 3}}})["replicas"] == 3
    assert nodeset_spec({"nodesets": {"cpu": {}}})["replicas"] == 1  # nodesetDefaults


def replicas(kube_api: client.ApiClient, namespace: str) -> int:
    obj = client.CustomObjectsApi(kube_api).get_namespaced_custom_object(GROUP, VERSION, namespace, "nodesets", NODESET)
    return int(obj["spec"]["replicas"])


@pytest.mark.kube
@pytest.mark.parametrize("chart_replicas", ["1", "null"])
def test_helm_upgrade_after_kubectl_scale(
    kube_lab: KubeLab, installed_crds, kube_api, kube_namespace: str, chart_replicas: str
) -> None:
    release = ["slurm", str(CHARTS / "slurm"), "-n", kube_namespace]
    installed = run(kube_lab, "helm", "install", *release, "--set", f"nodesets.cpu.replicas={chart_replicas}")
    assert installed.returncode == 0, installed.stderr
    try:
        scaled = run(kube_lab, "kubectl", "scale", "nodeset", NODESET, "-n", kube_namespace, "--replicas=3")
        assert scaled.returncode == 0, scaled.stderr
        upgraded = run(kube_lab, "helm", "upgrade", *release, "--reuse-values", "--set", "nodesets.cpu.pinToNode=false")
        if chart_replicas == "null":
            assert upgraded.returncode == 0, upgraded.stderr
            assert replicas(kube_api, kube_namespace) == 3  # the scaler's number stays
        else:
            assert upgraded.returncode != 0 and "conflict" in upgraded.stderr.lower(), upgraded.stderr
            assert ".spec.replicas" in upgraded.stderr, upgraded.stderr
    finally:
        run(kube_lab, "helm", "uninstall", "slurm", "-n", kube_namespace, "--ignore-not-found")

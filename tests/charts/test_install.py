"""The charts against a real API server: every custom resource the values sets render is accepted, and
`helm install`, `helm upgrade` and `helm uninstall` of each chart work, keeping the generated keys
(found with `lookup`) across an upgrade; slurm_sync's PodDisruptionBudget and Lease Role are stored as
rendered and go with the release."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.charts.cases import CASES, Case
from tests.charts.helm import CHARTS, render
from tests.kube.cli import run_helm
from tests.kube.kubeapi import GROUP, METACONTROLLER, VERSION, create_cr
from tests.kube.plugin import KubeLab

Obj = dict[str, Any]


# --- rendered custom resources ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rendered_custom_resources_are_accepted(installed_crds, kube_api, kube_namespace: str, case: Case) -> None:
    """Server-side dry run: the full admission and validation path, nothing stored."""
    ours = [
        doc
        for doc in render(case.chart, case.values, kube_namespace, case.api_versions)
        if doc["apiVersion"] == f"{GROUP}/{VERSION}"
    ]
    for doc in ours:  # each in the test's namespace (the bridge's Token is rendered for the Slurm cluster's)
        create_cr(kube_api, {**doc, "metadata": {**doc["metadata"], "namespace": kube_namespace}}, kube_namespace,
                  dry_run=True)  # fmt: skip


# --- helm install / upgrade / uninstall ---------------------------------------------------------------


def secret_data(kube_api, namespace: str, name: str) -> dict[str, str]:
    return client.CoreV1Api(kube_api).read_namespaced_secret(name, namespace).data


def listed(kube_api, namespace: str, plural: str) -> list[str]:
    items = client.CustomObjectsApi(kube_api).list_namespaced_custom_object(GROUP, VERSION, namespace, plural)["items"]
    return sorted(item["metadata"]["name"] for item in items)


def slurm_sync_disruption_budgets(kube_api, namespace: str) -> list[str]:
    items = client.PolicyV1Api(kube_api).list_namespaced_pod_disruption_budget(namespace).items
    return sorted(b.metadata.name for b in items if b.metadata.name.endswith("-slurm-sync"))


def assert_slurm_sync_ha_installed(kube_api, namespace: str, name: str) -> None:
    """The stored PodDisruptionBudget covers exactly slurm_sync's pods, one at a time, and its Lease Role
    names the one Lease (docs/architecture.md §8), as the API server kept them."""
    deployment = client.AppsV1Api(kube_api).read_namespaced_deployment(name, namespace)
    pdb = client.PolicyV1Api(kube_api).read_namespaced_pod_disruption_budget(name, namespace)
    assert pdb.spec.max_unavailable == 1 and pdb.spec.min_available is None
    assert pdb.spec.selector.match_labels == deployment.spec.selector.match_labels
    assert pdb.spec.unhealthy_pod_eviction_policy == "AlwaysAllow"
    role = client.RbacAuthorizationV1Api(kube_api).read_namespaced_role(f"{name}-lease", namespace)
    assert sorted((r.verbs, r.resource_names) for r in role.rules) == [(["create"], None), (["get", "update"], [name])]


def test_slurm_chart_install_upgrade_uninstall_keeps_its_keys(
    kube_lab: KubeLab,
    installed_crds,
    kube_api,
    kube_namespace: str,
) -> None:
    release = ["slurm", str(CHARTS / "slurm"), "-n", kube_namespace]
    run_helm(kube_lab, "install", *release)
    assert listed(kube_api, kube_namespace, "controllers") == ["slurm"]
    keys = {name: secret_data(kube_api, kube_namespace, name) for name in ("slurm-auth-slurm", "slurm-auth-jwt")}
    assert all(keys.values())

    run_helm(kube_lab, "upgrade", *release, values={"nodesets": {"gpu": {"replicas": 2}}})
    assert "slurm-worker-gpu" in listed(kube_api, kube_namespace, "nodesets")
    assert {name: secret_data(kube_api, kube_namespace, name) for name in keys} == keys, "upgrade changed the keys"

    run_helm(kube_lab, "uninstall", "slurm", "-n", kube_namespace)
    assert listed(kube_api, kube_namespace, "controllers") == []
    assert {name: secret_data(kube_api, kube_namespace, name) for name in keys} == keys, "uninstall must keep the keys"


def test_bridge_chart_keeps_its_generated_ca_across_an_upgrade(
    kube_lab: KubeLab,
    metacontroller,
    kube_api,
    kube_namespace: str,
) -> None:
    release = ["slurm-bridge", str(CHARTS / "slurm-bridge"), "-n", kube_namespace]
    # The token in the bridge's own namespace (Slinky's layout): no Slurm cluster's namespace needed here
    # (tests/charts/test_bridge_token_install.py installs the documented layout).
    own_token = {"sharedConfig": {"slurmJwtSecretNamespace": ""}, "token": {"create": False}}
    run_helm(kube_lab, "install", *release, values=own_token)
    assert_slurm_sync_ha_installed(kube_api, kube_namespace, "slurm-bridge-slurm-sync")
    tls = secret_data(kube_api, kube_namespace, "slurm-bridge-admission-tls")
    run_helm(kube_lab, "upgrade", *release, values={**own_token, "schedulerConfig": {"partition": "gpu"}})
    assert secret_data(kube_api, kube_namespace, "slurm-bridge-admission-tls") == tls
    admission = client.AdmissionregistrationV1Api(kube_api)
    webhooks = [
        w
        for c in admission.list_mutating_webhook_configuration().items
        if c.metadata.name.startswith("slurm-bridge")
        for w in c.webhooks
    ]
    assert webhooks and all(w.client_config.ca_bundle == tls["ca.crt"] for w in webhooks)
    run_helm(kube_lab, "uninstall", "slurm-bridge", "-n", kube_namespace)
    assert slurm_sync_disruption_budgets(kube_api, kube_namespace) == []
    assert not [
        c for c in admission.list_mutating_webhook_configuration().items if c.metadata.name.startswith("slurm-bridge")
    ]


def test_operator_chart_install_upgrade_uninstall(
    kube_lab: KubeLab,
    installed_crds,
    metacontroller,
    kube_api,
    kube_namespace: str,
) -> None:
    # The CRDs are already installed (by the API, not by a release), so this release does not own them.
    values = {"crds": {"enabled": False}, "hooks": {"auth": {"enabled": True}}}
    release = ["slurm-operator", str(CHARTS / "slurm-operator"), "-n", kube_namespace]
    run_helm(kube_lab, "install", *release, values=values)
    apps = client.AppsV1Api(kube_api)
    deployments = sorted(d.metadata.name for d in apps.list_namespaced_deployment(kube_namespace).items)
    assert deployments
    assert_slurm_sync_ha_installed(kube_api, kube_namespace, "slurm-operator-slurm-sync")
    controllers = client.CustomObjectsApi(kube_api).list_cluster_custom_object(
        METACONTROLLER, "v1alpha1", "compositecontrollers"
    )
    assert len(controllers["items"]) == 6
    tokens = [
        s for s in client.CoreV1Api(kube_api).list_namespaced_secret(kube_namespace).items if "token" in s.metadata.name
    ]
    assert tokens, "hooks.auth.enabled generates a bearer token Secret"
    before = {s.metadata.name: s.data for s in tokens}

    upgrade = {**values, "hooks": {**values["hooks"], "replicas": 3}, "slurmSync": {"replicas": 1}}
    run_helm(kube_lab, "upgrade", *release, values=upgrade)
    assert {name: secret_data(kube_api, kube_namespace, name) for name in before} == before
    assert slurm_sync_disruption_budgets(kube_api, kube_namespace) == [], "no budget for a single replica"
    assert sorted(d.metadata.name for d in apps.list_namespaced_deployment(kube_namespace).items) == deployments

    run_helm(kube_lab, "uninstall", "slurm-operator", "-n", kube_namespace)
    assert apps.list_namespaced_deployment(kube_namespace).items == []
    assert client.PolicyV1Api(kube_api).list_namespaced_pod_disruption_budget(kube_namespace).items == []
    assert (
        client.CustomObjectsApi(kube_api).list_cluster_custom_object(
            METACONTROLLER, "v1alpha1", "compositecontrollers"
        )["items"]
        == []
    )

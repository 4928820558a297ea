"""Fixtures shared by the tests against the real API server (a plugin of tests/conftest.py, so tests of any
package can use them)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from kubernetes import client

from tests.fixtures.slurm import wait_for
from tests.kube.kubeapi import CERT_MANAGER, METACONTROLLER, apply_crds, conditions, ensure_crds, stand_in_crd
from tests.kube.plugin import KubeLab
from tests.support.kube import REPO_ROOT

CRD_FILES = sorted((REPO_ROOT / "crds").glob("*.yaml"))


@pytest.fixture(scope="session")
def installed_crds(kube_lab: KubeLab) -> list[str]:
    """Our six CRDs, installed once and Established."""
    with kube_lab.api_client() as api:
        names = apply_crds(api, CRD_FILES)
        for name in names:
            wait_for(
                functools.partial(conditions, api, name),
                lambda c: c.get("Established") == "True",
                what=f"{name} Established",
            )
    return names


@pytest.fixture(scope="session")
def metacontroller(kube_lab: KubeLab) -> None:
    """Metacontroller's two kinds served (stand-ins; our manifests are validated against its schema in
    tests/compositecontrollers)."""
    with kube_lab.api_client() as api:
        ensure_crds(
            api,
            [
                stand_in_crd(METACONTROLLER, "v1alpha1", "CompositeController", "compositecontrollers"),
                stand_in_crd(METACONTROLLER, "v1alpha1", "DecoratorController", "decoratorcontrollers"),
            ],
        )


@pytest.fixture
def cert_manager(kube_lab: KubeLab) -> Iterator[None]:
    """cert-manager's Issuer and Certificate served (stand-ins) for one test: the bridge chart renders
    for cert-manager whenever the cluster serves it, so the other tests must not see these kinds."""
    crds = [
        stand_in_crd(CERT_MANAGER, "v1", "Issuer", "issuers", scope="Namespaced"),
        stand_in_crd(CERT_MANAGER, "v1", "Certificate", "certificates", scope="Namespaced"),
    ]
    with kube_lab.api_client() as api:
        ensure_crds(api, crds)
    yield
    with kube_lab.api_client() as api:
        ext = client.ApiextensionsV1Api(api)
        for crd in crds:
            ext.delete_custom_resource_definition(crd["metadata"]["name"])
            wait_for(
                functools.partial(
                    ext.list_custom_resource_definition, field_selector=f"metadata.name={crd['metadata']['name']}"
                ),
                lambda listed: not listed.items,
                what="the cert-manager stand-ins gone",
            )

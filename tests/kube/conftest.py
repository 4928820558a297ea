"""Fixtures shared by the tests against the real API server."""

from __future__ import annotations

import pytest

from tests.fixtures.slurm import wait_for
from tests.kube.kubeapi import apply_crds, conditions
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
                lambda n=name: conditions(api, n), lambda c: c.get("Established") == "True", what=f"{name} Established"
            )
    return names

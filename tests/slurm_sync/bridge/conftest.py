"""`rig`: the bridge loop on the real Slurm lab and a fake API server (labrig.py), for the bridge tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from tests.fixtures.slurm import SlurmLab
from tests.slurm_sync.bridge.labrig import Rig, cancel_ours
from tests.slurm_sync.bridgekube import BridgeFake, kube_node


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    kube = BridgeFake()
    for n in range(1, 5):
        kube.add("nodes", kube_node(f"kn{n}", slurm_name=f"n{n}"))
    kube.install(httpserver)
    rig = Rig(slurm_lab, kube, httpserver.url_for("/"), [])
    try:
        yield rig
    finally:
        cancel_ours(slurm_lab)

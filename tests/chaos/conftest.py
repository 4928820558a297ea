"""Fixtures of the chaos suite: the lab's module-long jobs (scenes) and a proxy per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from pytest_httpserver import HTTPServer

from tests.chaos.proxy import FaultProxy
from tests.chaos.rigs import BridgeScene, OperatorScene
from tests.fixtures.slurm import SlurmLab, _load_lab
from tests.slurm_sync.fakekube import FakeKube


@pytest.fixture
def proxy(slurm_lab: SlurmLab) -> Iterator[FaultProxy]:
    chaos = FaultProxy(slurm_lab.rest_url)
    try:
        yield chaos
    finally:
        chaos.close()


@pytest.fixture
def install(httpserver: HTTPServer) -> Callable[[FakeKube], None]:
    """Serve one fake apiserver on the test's httpserver (replacing any served before)."""

    def serve(kube: FakeKube) -> None:
        httpserver.clear_all_handlers()
        kube.install(httpserver)

    return serve


@pytest.fixture(scope="module")
def operator_scene() -> Iterator[OperatorScene]:
    scene = OperatorScene(_load_lab())
    try:
        yield scene
    finally:
        scene.close()


@pytest.fixture(scope="module")
def bridge_scene() -> Iterator[BridgeScene]:
    scene = BridgeScene(_load_lab())
    try:
        yield scene
    finally:
        scene.close()

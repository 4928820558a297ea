"""`server`: the fake API server (pytest-httpserver) of the operator loop tests, cleared after each test;
`bench_api`: the slurm_sync bench's fake API server in a child process (bench/slurm_sync_fakes.py), holding a
cluster of the test module's ``SIZE`` nodes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from bench.slurm_sync_fakes import ServerProcess


@pytest.fixture
def server(httpserver: HTTPServer) -> Iterator[HTTPServer]:
    yield httpserver
    httpserver.clear()


@pytest.fixture(scope="module")
def bench_api(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    served = ServerProcess(request.module.SIZE)
    try:
        yield served
    finally:
        served.close()

"""`server`: the fake API server (pytest-httpserver) of the operator loop tests, cleared after each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer


@pytest.fixture
def server(httpserver: HTTPServer) -> Iterator[HTTPServer]:
    yield httpserver
    httpserver.clear()

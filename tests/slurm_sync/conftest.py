"""`rig`: the whole slurm_sync service on the real Slurm lab and a fake API server (servicerig.py), for the
tests under tests/slurm_sync/; a directory or module with a rig of its own (bridge/conftest.py) overrides it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_httpserver import HTTPServer

from tests.fixtures.slurm import SlurmLab
from tests.slurm_sync.servicerig import Rig, rig_of


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
        yield rig

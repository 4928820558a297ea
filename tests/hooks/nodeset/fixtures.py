"""The NodeSet hook's test client and pinned clock: tests/hooks/nodeset/conftest.py provides them to this
folder; a test elsewhere that drives the NodeSet hook imports them from here."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hooks.app import create_app
from hooks.nodeset import hook as nodeset_hook

# The kubelet's Ready transition in `observed` pods; the pinned clock starts a minute later.
READY_AT = datetime(2025, 1, 1, 0, 1, tzinfo=UTC).timestamp()
T0 = READY_AT + 60


class Clock:
    def __init__(self) -> None:
        self.now = T0
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        return self.now


@pytest.fixture(autouse=True)
def clock(monkeypatch):
    """Pins hooks.nodeset.hook.now() (the NodeSet hook's one clock read); set `clock.now` to move time."""
    pinned = Clock()
    monkeypatch.setattr(nodeset_hook, "now", pinned)
    return pinned


@pytest.fixture()
def client(clock):
    return create_app().test_client()

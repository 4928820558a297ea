"""Calls in flight (slurm_sync/inflight.py): readiness names a call that hangs long before its own timeout."""

from __future__ import annotations

import pytest

from slurm_sync.inflight import HUNG_AFTER, InFlight


def test_the_oldest_call_waiting_too_long_is_named_and_an_answered_one_is_forgotten() -> None:
    now = [0.0]
    calls = InFlight(lambda: now[0])
    assert calls.hung() == ""
    with calls.call("GET /slurm/v0.0.44/nodes"):
        now[0] = 1.0
        with calls.call("GET /api/v1/pods"):
            now[0] = HUNG_AFTER
            assert calls.hung() == ""  # not yet past the bound
            now[0] = HUNG_AFTER + 2.0
            assert calls.hung() == "GET /slurm/v0.0.44/nodes in flight for 6 s"
        assert calls.hung() == "GET /slurm/v0.0.44/nodes in flight for 6 s"
    assert calls.hung() == ""


def test_a_call_that_raises_is_no_longer_in_flight() -> None:
    now = [0.0]
    calls = InFlight(lambda: now[0])
    with pytest.raises(TimeoutError), calls.call("PUT lease"):
        raise TimeoutError
    now[0] = 100.0
    assert calls.hung() == ""

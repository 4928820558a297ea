"""The collector paused around a pass (slinky_common/gcpause.py): overlapping passes, a pause too long, and a
collector someone else turned off."""

from __future__ import annotations

import gc

import pytest

from slinky_common import gcpause


def test_overlapping_pauses_keep_the_collector_off_until_the_last_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Passes of two clusters overlap: the first to end leaves the collector off for the other (it was
    turned on under it), the last turns it on; a pause that lasts past MAX_PAUSED collects once."""
    assert gc.isenabled()
    first, second = gcpause.collector_paused(), gcpause.collector_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()
    second.__exit__(None, None, None)
    assert gc.isenabled()

    now = [0.0]
    collections: list[int] = []
    monkeypatch.setattr(gcpause, "_clock", lambda: now[0])
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(1) or 0)
    with gcpause.collector_paused():
        with gcpause.collector_paused():
            now[0] += gcpause.MAX_PAUSED + 1
        assert collections == [1] and not gc.isenabled()
        with gcpause.collector_paused():
            pass
        assert collections == [1]
    assert gc.isenabled()
    gc.disable()  # a collector someone else turned off stays off
    try:
        with gcpause.collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()

"""Automatic garbage collection paused around one unit of JSON-heavy work.

A hook request or a slurm_sync pass parses megabytes of JSON into millions of containers, and the
collector would trace them over and over while they are being built: two thirds of a 1,000-pod
NodeSet sync and 60% of an unchanged 5,000-node slurm_sync pass (`make bench`). Parsed JSON holds
no reference cycles, so reference counting frees it when the work ends; anything cyclic left over
goes in the next automatic collection. Work that overlaps in threads (slurm_sync's passes of several
clusters) shares one pause: the last one out re-enables the collector, and only if the pause disabled
it, so it is never left off. (slurm_sync imports this from hooks/.)

The hook server frees a parsed request before it sends the answer, inside the pause
(docs/architecture.md §7). It once held the request until the answer was sent, out of the
collector's sight (`gc.freeze`) meanwhile; but objects given back by `gc.unfreeze` skip the young
generations, so the garbage cycles made around each request were never collected: about 6 KB a
request behind gunicorn, without bound (issue 22). Freeing first costs the answer of a 1,000-pod
sync about a tenth more time, and nothing leaks past the collector.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

MAX_PAUSED = 60.0  # seconds a shared pause may last before a unit leaving it collects
_lock = threading.Lock()
_pausers = 0  # units of work inside collector_paused now
_ours = False  # the first of them disabled the collector (it was on): the last one out enables it
_collected = 0.0  # when the collector last ran for a pause (its start, or an explicit collection)
_clock = time.monotonic


@contextmanager
def collector_paused() -> Iterator[None]:
    """The collector off while any unit of work is inside (slurm_sync runs a pass per cluster side by side):
    the last one out turns it back on, and only if the first one in turned it off, so it is never left
    off, nor turned on under a pass still running (its work would be traced over and over as it builds).
    Units that overlap without end (passes of a hung peer, back to back, beside others) would keep it off
    for good: a unit that leaves a pause older than ``MAX_PAUSED`` collects once (cyclic garbage is bounded)."""
    global _pausers, _ours, _collected
    with _lock:
        if _pausers == 0:
            _ours = gc.isenabled()
            if _ours:
                gc.disable()
                _collected = _clock()
        _pausers += 1
    try:
        yield
    finally:
        collect = False
        with _lock:
            _pausers -= 1
            if _pausers == 0 and _ours:
                _ours = False
                gc.enable()
            elif _ours and _clock() - _collected > MAX_PAUSED:
                _collected, collect = _clock(), True
        if collect:
            gc.collect()

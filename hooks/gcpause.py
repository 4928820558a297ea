"""Automatic garbage collection paused around one unit of JSON-heavy work.

A hook request or a slurm_sync pass parses megabytes of JSON into millions of containers, and the
collector would trace them over and over while they are being built: two thirds of a 1,000-pod
NodeSet sync and 60% of an unchanged 5,000-node slurm_sync pass (`make bench`). Parsed JSON holds
no reference cycles, so reference counting frees it when the work ends; anything cyclic left over
goes in the next automatic collection. Whoever disabled the collector re-enables it, so
overlapping work in threads never leaves it off. (slurm_sync imports this from hooks/.)

The hook server frees a parsed request before it sends the answer, inside the pause
(docs/architecture.md §7). It once held the request until the answer was sent, out of the
collector's sight (`gc.freeze`) meanwhile; but objects given back by `gc.unfreeze` skip the young
generations, so the garbage cycles made around each request were never collected: about 6 KB a
request behind gunicorn, without bound (issue 22). Freeing first costs the answer of a 1,000-pod
sync about a tenth more time, and nothing leaks past the collector.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()

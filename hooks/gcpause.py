"""Automatic garbage collection paused around one unit of JSON-heavy work.

A hook request or a slurm_sync pass parses megabytes of JSON into millions of containers, and the
collector would trace them over and over while they are being built: two thirds of a 1,000-pod
NodeSet sync and 60% of an unchanged 5,000-node slurm_sync pass (`make bench`). Parsed JSON holds
no reference cycles, so reference counting frees it when the work ends; anything cyclic left over
goes in the next automatic collection. Whoever disabled the collector re-enables it, so
overlapping work in threads never leaves it off. (slurm_sync imports this from hooks/.)

The hook server frees a parsed request only once its answer is sent (docs/architecture.md §7):
freeing a 1,000-pod request takes a tenth of the sync, and Metacontroller need not wait for it.
The collector resumes before that, so `held_until_released` first moves every object it tracks
out of its sight (`gc.freeze`, constant time; the first collection would otherwise trace the
whole held request) and `Held.release` gives them back (`gc.unfreeze`).
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


class Held:
    """Objects kept alive past the work that made them, until `release` (idempotent) drops them."""

    def __init__(self) -> None:
        self._objects: list[object] = []
        self._frozen = False

    def keep(self, obj: object) -> None:
        self._objects.append(obj)

    def release(self) -> None:
        self._objects.clear()
        if self._frozen:
            self._frozen = False
            gc.unfreeze()


@contextmanager
def held_until_released() -> Iterator[Held]:
    """`collector_paused`, and what the work keeps in the yielded Held stays out of the collector's
    sight when it resumes, until released."""
    held = Held()
    if not gc.isenabled():
        yield held
        return
    gc.disable()
    try:
        yield held
    finally:
        if held._objects:
            gc.freeze()
            held._frozen = True
        gc.enable()

"""Absence is proven, never inferred.

A Slurm node or job is "gone" only when Slurm said so about that very object (its per-object
not-found answer) on two passes at least ``confirm_after`` seconds apart; Slurm finding the object in
between starts over (an error in between neither confirms nor voids). A listing that lacks an object is only a reason
to ask.
A listing that suddenly lacks many of the objects it had is a fault (``sudden_loss``) until each of
them is proven gone.

The evidence lives in memory: after a restart, absence is simply proven again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from slurm_sync.slurm.errors import SlurmNotFound, SlurmSuspect

K = TypeVar("K", bound=Hashable)
# A Slurm node name or job id: sortable, so a pass probes lost objects in a stable order.
SlurmKey = TypeVar("SlurmKey", str, int)

# A listing "suddenly lacks many" objects when it lacks at least this many of those it had ...
SUDDEN_LOSS_MIN = 3
# ... or at least this share of them (or all of them: an empty listing after a non-empty one).
SUDDEN_LOSS_SHARE = 0.25
# Per-object questions a pass asks at most (the rest wait for later passes, doing nothing meanwhile).
PROBES_PER_PASS = 32


def sudden_loss(before: Collection[K], now: Collection[K], expected: Collection[K] = ()) -> frozenset[K]:
    """What a listing lost since the previous one (minus what we removed ourselves) when the loss
    is too large to be ordinary; empty when it is not."""
    lost = frozenset(before) - frozenset(now) - frozenset(expected)
    if not lost:
        return frozenset()
    if not now or len(lost) >= SUDDEN_LOSS_MIN or len(lost) >= len(before) * SUDDEN_LOSS_SHARE:
        return lost
    return frozenset()


def refuse_unproven_loss(
    lost: frozenset[SlurmKey], had: int, gone: set[SlurmKey], ask: Callable[[SlurmKey], object], what: str
) -> None:
    """Raise SlurmSuspect while the objects a listing suddenly ``lost`` (of the ``had`` it had) are not
    each said gone by Slurm when asked by name (``ask`` raises SlurmNotFound); ``gone`` remembers the
    answers across passes and is cleared once the loss is proven. A lost object Slurm still has
    proves the listing wrong; any other error propagates (nothing known)."""
    for key in sorted(lost - gone)[:PROBES_PER_PASS]:
        try:
            ask(key)
        except SlurmNotFound:
            gone.add(key)
            continue
        raise SlurmSuspect(
            f"the {what} listing lacks {len(lost)} of the {had} {what}s it had, yet Slurm still has "
            f"{what} {key}: a wrong listing, nothing written"
        )
    missing = len(lost - gone)
    if missing:
        raise SlurmSuspect(
            f"the {what} listing lacks {len(lost)} of the {had} {what}s it had; {missing} not yet "
            "confirmed gone by Slurm, nothing written until they are"
        )
    gone.clear()


@dataclass
class AbsenceProof(Generic[K]):
    """First not-found answers per object; ``confirmed`` once a later pass, ``confirm_after`` seconds
    on, got the same answer."""

    confirm_after: float = 5.0
    clock: Callable[[], float] = time.monotonic
    _first: dict[K, tuple[int, float]] = field(default_factory=dict)  # key -> (pass, time) of the first not-found
    _pass: int = 0

    def next_pass(self) -> None:
        self._pass += 1

    def not_found(self, key: K) -> bool:
        """Record Slurm's not-found answer for ``key``; True when that confirms its absence."""
        first = self._first.setdefault(key, (self._pass, self.clock()))
        return first[0] < self._pass and self.clock() - first[1] >= self.confirm_after

    def found(self, key: K) -> None:
        """Slurm has the object (or said something else): any absence evidence is void."""
        self._first.pop(key, None)

    def forget_except(self, keys: Iterable[K]) -> None:
        """Drop evidence about objects nobody asks about any more."""
        keep = set(keys)
        self._first = {k: v for k, v in self._first.items() if k in keep}

    def pending(self) -> frozenset[K]:
        return frozenset(self._first)

    def due(self) -> float | None:
        """Seconds until the earliest evidence still too young to confirm will be old enough; None when none is."""
        now = self.clock()
        waits = [t + self.confirm_after - now for _, t in self._first.values() if t + self.confirm_after > now]
        return min(waits, default=None)

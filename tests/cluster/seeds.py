"""Which seeds a seeded random run of the cluster lab takes (the lifecycle's, the bridge's): CI's fixed ones, so a
red CI is a regression and not a new seed's luck, or, for `make soak`, new ones drawn and printed."""

from __future__ import annotations

import os
import random

import pytest


def seeded_runs(prefix: str, ci: dict[int, int], soak_operations: int) -> list[tuple[int, int]]:
    """(seed, operations) of each run. ``<prefix>_SEED`` (comma-separated) repeats given seeds and
    ``<prefix>_SEEDS=random:N`` draws N new ones, each ``<prefix>_OPS`` operations (``soak_operations``); else
    ``ci``, seed to operations (``<prefix>_OPS``, when set, for all)."""
    ops = os.environ.get(f"{prefix}_OPS", "").strip()
    given = os.environ.get(f"{prefix}_SEED", "").strip()
    drawn = os.environ.get(f"{prefix}_SEEDS", "").strip()
    if given:
        return [(int(seed), int(ops or soak_operations)) for seed in given.split(",")]
    if drawn:
        kind, _, count = drawn.partition(":")
        if kind != "random" or not count.isdigit():
            raise pytest.UsageError(f"{prefix}_SEEDS must be random:N, got {drawn!r}")
        return [(random.SystemRandom().randrange(1_000_000), int(ops or soak_operations)) for _ in range(int(count))]
    return [(seed, int(ops) if ops else count) for seed, count in ci.items()]

"""Shared measuring helpers for `make bench`.

Rules every suite follows (docs/architecture.md §7): a figure is only meaningful as a ratio against a floor or a
peer measured in the same run, so measurements come in interleaved pairs (subject, floor,
subject, floor, ...) that see the same machine noise; timing uses `time.perf_counter_ns`; every
callable is warmed up first; the garbage collector runs before each sample (and stays enabled
inside it, as in production, where a large request's allocations do trigger collections);
a sample repeats the callable enough times to last a few milliseconds, so that the clock's
resolution and call overhead do not matter; medians (and p90) are reported, never means.

A floor is the least the work can cost, so it runs with the collector paused (`gc_paused`):
parsing a large request with the collector on spends most of its time in collections (4-5x
slower for a 15 MB request), and a floor that includes them would flatter any subject. A JSON
floor parses and serialises with the fastest library in the venv for that very input
(`fastest`): msgspec parses a large request faster than orjson, orjson serialises faster.
"""

from __future__ import annotations

import functools
import gc
import math
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import msgspec
import orjson

SAMPLE_TARGET_NS = 5_000_000  # one sample lasts at least this long (inner loop calibrated)


@dataclass(frozen=True)
class Stats:
    """Per-call durations in nanoseconds, one value per sample."""

    samples_ns: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples_ns)

    @property
    def p90(self) -> float:
        return percentile(self.samples_ns, 90)

    @property
    def p99(self) -> float:
        return percentile(self.samples_ns, 99)

    @property
    def n(self) -> int:
        return len(self.samples_ns)


# The JSON libraries in the venv: a floor uses whichever is fastest on its input.
JSON_PARSERS: dict[str, Callable[[bytes], Any]] = {"orjson": orjson.loads, "msgspec": msgspec.json.decode}
JSON_SERIALISERS: dict[str, Callable[[Any], bytes]] = {"orjson": orjson.dumps, "msgspec": msgspec.json.encode}


def fastest(candidates: Mapping[str, Callable[[Any], object]], arg: Any, rounds: int = 5) -> str:
    """The name of the candidate that handles `arg` fastest: best of `rounds` calls each, alternating,
    the collector paused (as in a floor)."""
    best = dict.fromkeys(candidates, math.inf)
    for _ in range(rounds):
        for name, fn in candidates.items():
            start = time.perf_counter_ns()
            gc_paused(functools.partial(fn, arg))()
            best[name] = min(best[name], time.perf_counter_ns() - start)
    return min(best, key=lambda name: best[name])


def peak_rss_bytes() -> int:
    """This process's peak resident set (``VmHWM``). Not ``getrusage``'s ``ru_maxrss``: a process started by
    another inherits that one's peak in it (Linux keeps it across exec), so a child of a large bench
    would report its parent's size."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmHWM line")


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (q in 0..100) of `values`."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def gc_paused(fn: Callable[[], object]) -> Callable[[], object]:
    """`fn` with automatic garbage collection disabled while it runs (for floors)."""

    def paused() -> object:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return fn()
        finally:
            if was_enabled:
                gc.enable()

    return paused


def time_calls(fn: Callable[[], object], loops: int) -> float:
    """Collect garbage, then time `loops` calls; nanoseconds per call."""
    gc.collect()
    start = time.perf_counter_ns()
    for _ in range(loops):
        fn()
    return (time.perf_counter_ns() - start) / loops


def calibrate(fn: Callable[[], object], target_ns: float = SAMPLE_TARGET_NS) -> int:
    """How many calls make one sample last at least `target_ns` (powers of two; also warms up)."""
    loops = 1
    while True:
        per_call = time_calls(fn, loops)
        if per_call * loops >= target_ns or loops >= 1 << 16:
            return loops
        loops = min(1 << 16, max(loops * 2, 1 << math.ceil(math.log2(target_ns / max(per_call, 1.0)))))


def paired_ratio(subject: Stats, floor: Stats) -> float:
    """The median over pairs of subject/floor, pairs being the interleaved samples of `compare`.

    Both halves of a pair ran back to back and saw the same machine: a burst of another process
    that slows one pair shows in that pair's ratio, not in every figure, so this is steadier on a
    shared machine than the ratio of the medians.
    """
    return statistics.median(a / b for a, b in zip(subject.samples_ns, floor.samples_ns, strict=True))


def compare(
    subject: Callable[[], object],
    floor: Callable[[], object],
    *,
    warmup: int = 3,
    min_samples: int = 9,
    max_samples: int = 51,
    max_seconds: float = 3.0,
) -> tuple[Stats, Stats]:
    """Interleaved samples of `subject` and `floor`: at least `min_samples` pairs, then more
    until `max_seconds` of sampling or `max_samples` pairs, whichever comes first."""
    for _ in range(warmup):
        subject()
        floor()
    loops_s, loops_f = calibrate(subject), calibrate(floor)
    a: list[float] = []
    b: list[float] = []
    started = time.perf_counter()
    while len(a) < max_samples and (len(a) < min_samples or time.perf_counter() - started < max_seconds):
        a.append(time_calls(subject, loops_s))
        b.append(time_calls(floor, loops_f))
    return Stats(tuple(a)), Stats(tuple(b))


# --- reporting --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """One budget of docs/architecture.md §7: `value` must be at most `limit` (at least, with `at_least`)."""

    name: str
    value: float
    limit: float
    unit: str = "x"
    at_least: bool = False

    @property
    def ok(self) -> bool:
        if math.isnan(self.value):
            return False
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    @property
    def verdict(self) -> str:
        return "ok" if self.ok else "MISSED"

    @property
    def bound(self) -> str:
        return f"{'>=' if self.at_least else '<='} {self.limit:g}{self.unit}"

    @property
    def measured(self) -> str:
        return f"{self.value:.3g}{self.unit}"

    def describe(self) -> str:
        return f"{self.verdict:8} {self.name}: {self.measured} (budget {self.bound})"


@dataclass
class Report:
    """What one suite prints: a table, notes under it, and the budgets it checked."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    budgets: list[Budget] = field(default_factory=list)


def fmt_ns(ns: float) -> str:
    """A duration with a unit that keeps three significant digits readable."""
    if math.isnan(ns):
        return "n/a"
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1_000:.1f} us"
    if ns < 1_000_000_000:
        return f"{ns / 1_000_000:.2f} ms"
    return f"{ns / 1_000_000_000:.2f} s"


def fmt_ratio(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}x"


def print_table(columns: Sequence[str], rows: Sequence[Sequence[str]], out: IO[str]) -> None:
    """Columns sized to their widest cell; the first left-aligned (labels), the rest right-aligned (numbers)."""
    widths = [len(c) for c in columns]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]

    def line(cells: Sequence[str]) -> str:
        parts = [cells[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    print(line(columns), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for row in rows:
        print(line(row), file=out)


def print_report(report: Report, out: IO[str]) -> None:
    print(f"\n== {report.title} ==", file=out)
    print_table(report.columns, report.rows, out)
    for note in report.notes:
        print(f"  {note}", file=out)
    for budget in report.budgets:
        print(f"  budget: {budget.describe()}", file=out)

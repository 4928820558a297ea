"""Run the benchmark suites, print one table per suite, check the budgets of docs/architecture.md §7.

    .venv/bin/python -m bench                 # every suite (what `make bench` runs)
    .venv/bin/python -m bench --only nodeset  # one suite
    .venv/bin/python -m bench --quick         # fewer samples, for a smoke run

Every budget a suite prints is checked. The last screen is one table of them all (figure, budget,
measured, verdict, and a suite that could not run, with the reason), one line per suite (ok, MISSED
naming the budgets, or NOT RUN with the reason) and a last line with the verdict. Exit status: 0 when
every suite ran and every budget holds; 1 when every suite ran and a budget is missed; 2 when a suite
could not run (whatever the budgets of the others): the gate could not judge, which is a bench bug or a
broken machine to fix, never the load of a shared machine (a slow start, a watch's re-list).
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback
from dataclasses import dataclass
from typing import IO

from bench.measure import Budget, Report, print_report, print_table

# Suite name -> module with TITLE and run(quick) -> Report.
SUITES: dict[str, str] = {
    "nodeset": "bench.nodeset_sync",
    "http": "bench.http_p99",
    "slurm_sync": "bench.slurm_sync",
    "storm": "bench.storm",
    "bridge": "bench.bridge",
    "memory": "bench.hooks_memory",
    "elastic": "bench.elastic",
    "idle": "bench.idle",
}


@dataclass
class Outcome:
    """One suite of this run: its report, or why it could not run."""

    name: str
    report: Report | None = None
    error: str = ""
    seconds: float = 0.0

    @property
    def missed(self) -> list[Budget]:
        return [b for b in self.report.budgets if not b.ok] if self.report is not None else []

    def verdict(self) -> str:
        """One line: ran (its budgets held or which missed), or NOT RUN and why."""
        if self.report is None:
            return f"NOT RUN  {self.error}"
        count = len(self.report.budgets)
        if not self.missed:
            return f"ok       {count} budget(s) hold ({self.seconds:.0f} s)"
        names = "; ".join(f"{b.name}: {b.measured} (budget {b.bound})" for b in self.missed)
        return f"MISSED   {len(self.missed)} of {count} budget(s): {names}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", choices=sorted(SUITES), help="run only this suite (repeatable)")
    parser.add_argument("--quick", action="store_true", help="fewer samples: a smoke run, not a measurement")
    args = parser.parse_args(argv)
    selected = args.only or list(SUITES)

    print(
        f"make bench: Python {platform.python_version()} on {platform.machine()}, {_cpus()} CPU(s)"
        + (" [--quick: figures are indicative only]" if args.quick else "")
    )
    outcomes = [run_suite(name, args.quick) for name in selected]
    print_summary(outcomes, sys.stdout)
    return exit_status(outcomes, sys.stdout)


def run_suite(name: str, quick: bool) -> Outcome:
    """Run one suite and print its table; a suite that raises is reported (its traceback on stderr) and
    the others still run."""
    started = time.perf_counter()
    try:
        report = importlib.import_module(SUITES[name]).run(quick=quick)
    except Exception as err:
        print(f"\nmake bench: suite {name} could not run:", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        return Outcome(name, error=f"{type(err).__name__}: {err}".splitlines()[0][:160])
    outcome = Outcome(name, report, seconds=time.perf_counter() - started)
    print_report(report, sys.stdout)
    print(f"  ({name}: {outcome.seconds:.1f} s)")
    sys.stdout.flush()
    return outcome


def print_summary(outcomes: list[Outcome], out: IO[str]) -> None:
    """One table of every budget checked (and a row per suite that could not run), then one line per suite."""
    rows = []
    for outcome in outcomes:
        if outcome.report is None:
            rows.append([f"suite {outcome.name}", "-", outcome.error[:100], "NOT RUN"])
        else:
            rows += [[b.name, b.bound, b.measured, b.verdict] for b in outcome.report.budgets]
    print("\n== Summary: every budget of this run ==", file=out)
    print_table(["figure", "budget", "measured", "verdict"], rows, out)
    print("\n== Per suite ==", file=out)
    width = max(len(o.name) for o in outcomes)
    for outcome in outcomes:
        print(f"{outcome.name.ljust(width)}  {outcome.verdict()}", file=out)


def exit_status(outcomes: list[Outcome], out: IO[str]) -> int:
    """The last line and the exit status: 2 when a suite could not run (the gate could not judge: a bench
    bug or a broken machine, never load), else 1 when a budget was missed, else 0."""
    not_run = [o.name for o in outcomes if o.report is None]
    missed = {o.name: len(o.missed) for o in outcomes if o.missed}
    total = sum(len(o.report.budgets) for o in outcomes if o.report is not None)
    print(file=out)
    if not_run:
        also = f"; budget(s) missed in: {', '.join(missed)}" if missed else ""
        print(f"make bench: FAILED, suite(s) NOT RUN: {', '.join(not_run)} (see the traceback above){also}", file=out)
        return 2
    if missed:
        where = ", ".join(f"{name} ({count})" for name, count in missed.items())
        print(f"make bench: FAILED, {sum(missed.values())} of {total} budget(s) MISSED in: {where}", file=out)
        return 1
    print(f"make bench: ok, every suite ran ({', '.join(o.name for o in outcomes)}) and all {total} budget(s) hold",
          file=out)  # fmt: skip
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

"""Run the benchmark suites, print one table per suite, check the budgets of docs/architecture.md §7.

    .venv/bin/python -m bench                 # every suite (what `make bench` runs)
    .venv/bin/python -m bench --only nodeset  # one suite
    .venv/bin/python -m bench --quick         # fewer samples, for a smoke run

Every budget a suite prints is checked. The last screen is one table of them all (figure, budget,
measured, verdict, and a suite that could not run, with the reason). Exit status: 0 when every
suite ran and every budget holds; 1 when a budget is missed; 2 when a suite could not run.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback
from typing import IO

from bench.measure import Budget, Report, print_report, print_table

# Suite name -> module with TITLE and run(quick) -> Report.
SUITES: dict[str, str] = {
    "nodeset": "bench.nodeset_sync",
    "http": "bench.http_p99",
    "slurm_sync": "bench.slurm_sync",
    "bridge": "bench.bridge",
    "memory": "bench.hooks_memory",
}


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
    reports: list[Report] = []
    failed: dict[str, str] = {}
    for name in selected:
        started = time.perf_counter()
        try:
            report = importlib.import_module(SUITES[name]).run(quick=args.quick)
        except Exception as err:  # a suite that cannot run is reported, the others still run
            traceback.print_exc()
            failed[name] = f"{type(err).__name__}: {err}".splitlines()[0][:100]
            continue
        print_report(report, sys.stdout)
        print(f"  ({name}: {time.perf_counter() - started:.1f} s)")
        sys.stdout.flush()
        reports.append(report)
    budgets = [b for r in reports for b in r.budgets]
    print_summary(budgets, failed, sys.stdout)
    violated = [b for b in budgets if not b.ok]
    print()
    if violated:
        print(f"make bench: {len(violated)} of {len(budgets)} budget(s) MISSED")
    if failed:
        print(f"make bench: suite(s) that could not run: {', '.join(failed)}")
    if violated:
        return 1
    if failed:
        return 2
    print(f"make bench: all {len(budgets)} budget(s) hold")
    return 0


def print_summary(budgets: list[Budget], failed: dict[str, str], out: IO[str]) -> None:
    """One table of every budget checked, and a row per suite that could not run."""
    rows = [[b.name, b.bound, b.measured, b.verdict] for b in budgets]
    rows += [[f"suite {name}", "-", reason, "NOT RUN"] for name, reason in failed.items()]
    print("\n== Summary: every budget of this run ==", file=out)
    print_table(["figure", "budget", "measured", "verdict"], rows, out)


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

"""Run the benchmark suites, print one table per suite, check the budgets of docs/architecture.md §7.

    .venv/bin/python -m bench                 # every suite (what `make bench` runs)
    .venv/bin/python -m bench --only nodeset  # one suite
    .venv/bin/python -m bench --quick         # fewer samples, for a smoke run

Exit status: 0 when every suite ran and every budget holds; 1 when a budget is violated (the
violated budgets are listed at the end); 2 when a suite could not run.
"""

from __future__ import annotations

import argparse
import importlib
import platform
import sys
import time
import traceback

from bench.measure import Report, print_report

# Suite name -> module with TITLE and run(quick) -> Report. Add a suite here (issue 5: slurm_sync).
SUITES: dict[str, str] = {
    "nodeset": "bench.nodeset_sync",
    "http": "bench.http_p99",
    "slurm_sync": "bench.slurm_sync",
    "bridge": "bench.bridge",
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
    failed: list[str] = []
    for name in selected:
        started = time.perf_counter()
        try:
            report = importlib.import_module(SUITES[name]).run(quick=args.quick)
        except Exception:  # a suite that cannot run is reported, the others still run
            traceback.print_exc()
            failed.append(name)
            continue
        print_report(report, sys.stdout)
        print(f"  ({name}: {time.perf_counter() - started:.1f} s)")
        sys.stdout.flush()
        reports.append(report)

    violated = [b for r in reports for b in r.budgets if not b.ok]
    checked = sum(len(r.budgets) for r in reports)
    print()
    if failed:
        print(f"make bench: suite(s) failed to run: {', '.join(failed)}")
    if violated:
        print(f"make bench: {len(violated)} of {checked} budget(s) VIOLATED:")
        for budget in violated:
            print(f"  {budget.describe()}")
        return 1
    if failed:
        return 2
    print(f"make bench: all {checked} budget(s) hold")
    return 0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)

"""pytest plugin: the chaos suite's line in the terminal summary.

Each chaos test records ``("chaos", {"fault", "side", "wrong_writes", "wrongs"})`` with
``record_property`` before it asserts anything, so a failing test is counted too; the summary
says how many fault kinds and sides ran, how many wrong writes they made, and which failed.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

PROPERTY = "chaos"
_RUNS: list[dict[str, Any]] = []


def outcome(fault: str, side: str, wrongs: list[str]) -> dict[str, Any]:
    """What a chaos test records (see the module docstring)."""
    return {"fault": fault, "side": side, "wrong_writes": len(wrongs), "wrongs": list(wrongs)}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == PROPERTY:
            recorded = cast(dict[str, Any], value)  # what outcome() returned, recorded under PROPERTY
            _RUNS.append({**recorded, "outcome": report.outcome})


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _RUNS:
        return
    kinds = {r["fault"] for r in _RUNS}
    sides = {r["side"] for r in _RUNS}
    failed = [r for r in _RUNS if r["outcome"] != "passed"]
    wrong = sum(r["wrong_writes"] for r in _RUNS)
    terminalreporter.write_sep(
        "-", f"chaos: {len(kinds)} fault kinds x {len(sides)} sides, wrong writes: {wrong} "
             f"({len(_RUNS)} runs, {len(failed)} failed)")  # fmt: skip
    for run in sorted(failed, key=lambda r: (r["side"], r["fault"])):
        detail = "; ".join(run["wrongs"][:3]) or "no wrong write (see the failure above)"
        where = f"chaos {run['side']}/{run['fault']}"
        terminalreporter.write_line(f"{where}: {run['wrong_writes']} wrong write(s): {detail}")

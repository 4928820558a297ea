"""`make bench`'s verdict (bench/run.py, issue 22): a missed budget fails it (1), a suite that could not
run fails it louder (2) without stopping the others, and the last lines say which, per suite."""

from __future__ import annotations

import sys
import types

import pytest

from bench import run
from bench.measure import Budget, Report


def suite(monkeypatch: pytest.MonkeyPatch, name: str, *budgets: Budget, error: str = "") -> None:
    """A suite named ``name`` that reports ``budgets``, or raises RuntimeError(``error``)."""
    module = types.ModuleType(f"bench_test_{name}")

    def run_suite(quick: bool) -> Report:
        if error:
            raise RuntimeError(error)
        return Report(title=name, columns=["figure"], budgets=list(budgets))

    module.run = run_suite  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(run.SUITES, name, module.__name__)


def bench(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *names: str) -> tuple[int, str]:
    argv = [arg for name in names for arg in ("--only", name)]
    monkeypatch.setattr(run, "SUITES", {name: run.SUITES[name] for name in names})
    status = run.main(argv)
    return status, capsys.readouterr().out


def test_every_budget_held_is_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    suite(monkeypatch, "fast", Budget("fast ratio", 1.0, 1.3))
    suite(monkeypatch, "slow", Budget("slow ratio", 0.9, 0.8, at_least=True))
    status, out = bench(monkeypatch, capsys, "fast", "slow")
    assert status == 0
    assert out.splitlines()[-1] == "make bench: ok, every suite ran (fast, slow) and all 2 budget(s) hold"


def test_a_missed_budget_is_1_and_named_per_suite(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite(monkeypatch, "fast", Budget("fast ratio", 1.4, 1.3))
    suite(monkeypatch, "slow", Budget("slow ratio", 0.9, 0.8, at_least=True))
    status, out = bench(monkeypatch, capsys, "fast", "slow")
    assert status == 1
    assert "fast  MISSED   1 of 1 budget(s): fast ratio: 1.4x (budget <= 1.3x)" in out
    assert out.splitlines()[-1] == "make bench: FAILED, 1 of 2 budget(s) MISSED in: fast (1)"


def test_a_suite_that_cannot_run_is_2_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    suite(monkeypatch, "broken", error="the fake did not start")
    suite(monkeypatch, "fast", Budget("fast ratio", 1.4, 1.3))
    status, out = bench(monkeypatch, capsys, "broken", "fast")
    assert status == 2
    assert "broken  NOT RUN  RuntimeError: the fake did not start" in out
    assert "fast    MISSED   1 of 1 budget(s)" in out
    assert out.splitlines()[-1] == (
        "make bench: FAILED, suite(s) NOT RUN: broken (see the traceback above); budget(s) missed in: fast"
    )

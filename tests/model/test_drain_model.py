"""model/drain.pml against the code it models: every function a transition names exists, the names and busy states
it stands for are the code's, the full model has no counterexample, and dropping any one rule gives one (issue 29).
The spin runs are marked `model` (`make test`; `make unit` leaves them out); hack/model.sh installs spin."""

from __future__ import annotations

import ast
import re

import pytest

from slinky_common import names, slurmstate
from tests.model import spin

MODEL = spin.MODEL.read_text()
IMPLS = sorted(set(re.findall(r"impl: ([\w/]+\.py):([\w.]+)", MODEL)))


def defined(path: str, qualname: str) -> bool:
    """`qualname` (a function, or Class.method) is defined at the top of the module at `path`."""
    scope: list[ast.stmt] = ast.parse((spin.REPO / path).read_text()).body
    for part in qualname.split("."):
        found = next(
            (
                n
                for n in scope
                if isinstance(n, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef) and n.name == part
            ),
            None,
        )
        if found is None:
            return False
        scope = found.body if isinstance(found, ast.ClassDef) else []
    return True


def test_the_model_names_the_functions_of_each_side() -> None:
    assert len(IMPLS) > 30
    for side in (
        "hooks/nodeset/",
        "hooks/bridge/",
        "slurm_sync/operator/",
        "slurm_sync/bridge/",
        "slurm_sync/leader.py",
    ):
        assert any(path.startswith(side) for path, _ in IMPLS), side


@pytest.mark.parametrize(("path", "qualname"), IMPLS, ids=[f"{p}:{q}" for p, q in IMPLS])
def test_each_function_the_model_names_exists(path: str, qualname: str) -> None:
    assert defined(path, qualname), f"model/drain.pml names {path}:{qualname}, which the code no longer defines"


def test_the_names_the_model_stands_for_are_the_codes() -> None:
    declared = re.findall(r"^ \*   name: (\w+) (\S+)", MODEL, re.MULTILINE)
    assert len(declared) >= 10
    assert {name: value for name, value in declared} == {name: getattr(names, name) for name, _ in declared}


def test_the_busy_states_of_the_model_are_slurm_syncs() -> None:
    busy = re.search(r"^ \*   busy: ([A-Z_ ]+?)\s{2,}", MODEL, re.MULTILINE)
    assert busy is not None
    assert frozenset(busy.group(1).split()) == slurmstate.BUSY_STATES


def test_the_drift_check_finds_a_missing_function() -> None:
    assert defined("slurm_sync/proof.py", "AbsenceProof.not_found")
    assert not defined("slurm_sync/proof.py", "AbsenceProof.not_there")
    assert not defined("slurm_sync/proof.py", "not_found")


@pytest.mark.model
@pytest.mark.parametrize("scenario", spin.SCENARIOS)
def test_the_full_model_has_no_counterexample(scenario: str) -> None:
    result = spin.check(scenario)
    assert (result.errors, result.complete) == (0, True), f"{result.line()}\n{result.trail or result.output[-3000:]}"
    assert result.states > 1000


# Each rule the design relies on, dropped alone, and the scenario where that shows (model/drain.pml's header).
VARIANTS = [
    ("SCALE", "NO_BUSY_WINS", "a node listing says drained while the job listing shows a job: busy evidence kept it"),
    ("SCALE", "CONFIRM_ONCE", "one lying pass marks the node absent, then a job starts before the hook acts"),
    ("BRIDGE", "CONFIRM_ONCE", "one not-found for a running job deletes its bound pod"),
    ("SCALE", "NO_FENCE", "an old leader's write lands after another took the Lease"),
    ("DELETE", "NO_EMPTY_PROOF", "the fix of issue 29: one empty job listing ends the partition's queued job"),
    ("SCALE", "NO_EPOCH", "the fix of issue 29: an intent given again goes on the mark of the one withdrawn"),
]


@pytest.mark.model
@pytest.mark.parametrize(("scenario", "rule", "why"), VARIANTS, ids=[f"{s}-{r}" for s, r, _ in VARIANTS])
def test_dropping_one_rule_gives_a_counterexample(scenario: str, rule: str, why: str) -> None:
    result = spin.check(scenario, rules_removed=[rule])
    assert result.errors > 0, f"{result.line()}: expected a counterexample ({why})"
    assert "assertion violated" in result.trail or "acceptance cycle" in result.output, result.output[-2000:]


@pytest.mark.model
def test_a_view_of_the_marks_one_write_behind_is_safe_too() -> None:
    """Metacontroller's cache may show a pod's marks one write late (-DMC_STALE): with the intent's epoch on the
    drained mark, no busy pod is deleted then either (before it, this found a lift under a stale mark)."""
    result = spin.check("SCALE", rules_removed=["MC_STALE"])
    assert (result.errors, result.complete) == (0, True), f"{result.line()}\n{result.trail}"


def test_without_spin_the_check_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spin.shutil, "which", lambda _: None)
    with pytest.raises(spin.SpinMissing, match="make model"):
        spin.check("SCALE")

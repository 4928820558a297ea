"""Runs spin on model/drain.pml (issue 29): each scenario's safety check and its liveness claims, or a variant
with one rule removed, and reads back the figures (states, errors, seconds) and a short counterexample.

`python -m tests.model.spin` checks the full model and prints one line per run with the bounds; hack/model.sh
(`make model`, part of `make test`) installs spin first. tests/model/test_drain_model.py uses `check`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "model" / "drain.pml"
SCENARIOS = ("SCALE", "DELETE", "BRIDGE")
# The bounds of each scenario unless told otherwise (model/drain.pml explains each): SCALE has the leader
# change and the scale-in, -out, -in; DELETE a pending job, an optional scale-in and the deletion.
BOUNDS = {
    "SCALE": {"FAULTS": 1, "FLIPS": 3, "JOBS": 1, "TAKEOVERS": 1},
    "DELETE": {"FAULTS": 1, "FLIPS": 1, "JOBS": 0, "TAKEOVERS": 0},
    "BRIDGE": {"FAULTS": 1, "TAKEOVERS": 1},
}
# The liveness claims of each scenario (ltl blocks of the model).
CLAIMS = {"SCALE": ("drains",), "DELETE": ("deletes",), "BRIDGE": ("releases",)}
WORKERS = 2  # pan runs at once in `main` (the check's machines have two cores)
MISSING = (
    "spin is not installed: `make model` (or `make test`) installs it with apt-get "
    "(apt-get install -y spin); the model check cannot run without it"
)


class SpinMissing(RuntimeError):
    """spin or a C compiler is not on PATH."""


@dataclass(frozen=True)
class Result:
    """One pan run: what it checked and what it found."""

    scenario: str
    claim: str | None  # an ltl claim (liveness), or None for the safety run (assertions, end states)
    defines: tuple[str, ...]
    bounds: str
    errors: int
    states: int
    seconds: float
    complete: bool  # pan searched the whole state space (no "Search not completed")
    output: str
    trail: str  # the counterexample, shortened ("" when none)

    def line(self) -> str:
        what = f"ltl {self.claim}" if self.claim else "safety"
        flags = " ".join(f"-D{d}" for d in self.defines)
        status = "complete" if self.complete else "INCOMPLETE"
        return (
            f"model {self.scenario:6} {what:13} {self.errors} errors, {self.states} states, "
            f"{self.seconds:.1f} s, {status} ({self.bounds}){' ' + flags if flags else ''}"
        )


def require_spin() -> None:
    if shutil.which("spin") is None:
        raise SpinMissing(MISSING)
    if shutil.which("cc") is None and shutil.which("gcc") is None:
        raise SpinMissing("no C compiler (cc) on PATH: spin's verifier is C; apt-get install -y gcc")


def bounds_text(scenario: str, overrides: dict[str, int] | None = None) -> str:
    return " ".join(f"{k}={v}" for k, v in {**BOUNDS[scenario], **(overrides or {})}.items())


def check(
    scenario: str,
    claim: str | None = None,
    rules_removed: Iterable[str] = (),
    bounds: dict[str, int] | None = None,
    model: Path = MODEL,
) -> Result:
    """Build pan for `scenario` (with each of `rules_removed` defined) and run it: the safety check, or the
    liveness `claim` under weak fairness. Stops at the first error, whose trail is summarised."""
    require_spin()
    if scenario not in SCENARIOS:
        raise ValueError(f"unknown scenario {scenario!r}; one of {SCENARIOS}")
    defines = (*(() if scenario == "SCALE" else (scenario,)), *rules_removed)
    values = {**BOUNDS[scenario], **(bounds or {})}
    flags = [f"-D{d}" for d in defines] + [f"-D{k}={v}" for k, v in values.items()]
    with tempfile.TemporaryDirectory(prefix="spin-") as tmp:
        work = Path(tmp)
        source = work / model.name
        source.write_bytes(model.read_bytes())
        started = time.monotonic()
        _run(["spin", *flags, "-a", source.name], work)
        cc = [shutil.which("cc") or "gcc", "-O2", "-w", "-o", "pan", "pan.c", "-DVECTORSZ=2048"]
        cc += ["-DSAFETY", "-DNOCLAIM"] if claim is None else ["-DNFAIR=4"]
        _run(cc, work)
        pan = ["./pan", "-m200000", "-w22"] + ([] if claim is None else ["-a", "-f", "-N", claim])
        output = _run(pan, work, check=False)
        seconds = time.monotonic() - started
        errors = _number(r"errors: (\d+)", output)
        trail = summary(_run(["spin", *flags, "-t", "-p", "-g", source.name], work, check=False)) if errors else ""
    return Result(
        scenario=scenario,
        claim=claim,
        defines=tuple(rules_removed),
        bounds=bounds_text(scenario, bounds),
        errors=errors,
        states=_number(r"(\d+) states, stored", output),
        seconds=seconds,
        complete="Search not completed" not in output,
        output=output,
        trail=trail,
    )


def _run(cmd: Sequence[str], cwd: Path, check: bool = True) -> str:
    done = subprocess.run(list(cmd), cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}): {done.stdout[-2000:]}{done.stderr[-2000:]}")
    return done.stdout + done.stderr


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else -1


# A step of `spin -t -p -g`: "  12:	proc  3 (Slurm:1) drain.pml:201 (state 4)	[n_job = 1]"
_STEP = re.compile(r"^\s*\d+:\s+proc\s+\d+ \((\w+):\d+\) \S+ \(state \d+\)\s+\[(.*)\]$")
_GLOBAL = re.compile(r"^\t\t(\w+(?:\[\d\])?) = (\d+)$")
_QUIET = ("fresh_term", "o_drained", "o_absent", "flips", "takeovers", "faults", "job_starts")


def summary(trail: str, limit: int = 60) -> str:
    """The counterexample as who changed which shared variable, in order, and the violated claim."""
    lines: list[str] = []
    state: dict[str, str] = {}
    actor = "?"
    for raw in trail.splitlines():
        step = _STEP.match(raw)
        if step:
            actor = step.group(1)
            continue
        value = _GLOBAL.match(raw)
        if value:
            name, number = value.groups()
            if state.get(name) != number and not name.startswith(_QUIET):
                state[name] = number
                entry = f"{actor}: {name}={number}"
                if lines and lines[-1].startswith(f"{actor}:"):
                    lines[-1] += f" {name}={number}"
                else:
                    lines.append(entry)
        elif "assertion violated" in raw or "acceptance cycle" in raw or "<<<<<START OF CYCLE>>>>>" in raw:
            lines.append(raw.strip())
    return "\n".join(lines[-limit:])


def main(argv: Sequence[str] = ()) -> int:
    """The full model: each scenario's safety run and liveness claims; non-zero on an error or a cut search."""
    try:
        require_spin()
    except SpinMissing as exc:
        print(f"model: {exc}", file=sys.stderr)
        return 2
    print(f"model {MODEL.relative_to(REPO)}: safety (assertions, end states) and ltl claims under weak fairness")
    started = time.monotonic()
    runs = [(scenario, claim) for scenario in SCENARIOS for claim in (None, *CLAIMS[scenario])]
    with ThreadPoolExecutor(max_workers=WORKERS) as pool:  # each run is a pan process: threads only wait
        results = list(pool.map(lambda run: check(*run), runs))
    failed = False
    for result in results:
        print(result.line())
        if result.errors or not result.complete:
            failed = True
            print(result.trail or result.output[-3000:])
    states = sum(r.states for r in results)
    verdict = "FAILED" if failed else "ok"
    print(f"model: {verdict}: {len(results)} runs, {states} states in {time.monotonic() - started:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The pins: the image installs requirements.lock only, so the shipped code may import nothing else."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hooks", "slinky_common", "slurm_sync")  # what the image ships


def _pins(name: str) -> dict[str, str]:
    lines = (ROOT / name).read_text().splitlines()
    return {_norm(line.split("==")[0]): line.split("==")[1] for line in lines if "==" in line}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(spec: str) -> str:
    return _norm(re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0])


def test_every_declared_dependency_is_pinned_in_the_right_lock():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime, test = _pins("requirements.lock"), _pins("requirements-test.lock")
    assert not runtime.keys() & test.keys(), "a package is pinned twice"
    assert {_requirement_name(d) for d in project["dependencies"]} <= runtime.keys()
    assert {_requirement_name(d) for d in project["optional-dependencies"]["test"]} <= runtime.keys() | test.keys()


def test_shipped_code_imports_only_runtime_packages():
    runtime = _pins("requirements.lock")
    distributions = packages_distributions()
    imported: set[str] = set()
    for path in [path for package in PACKAGES for path in ROOT.glob(f"{package}/**/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m not in PACKAGES}
    missing = {m for m in third_party if not {_norm(d) for d in distributions.get(m, [m])} & runtime.keys()}
    assert not missing, f"imported by our packages but not in requirements.lock: {sorted(missing)}"

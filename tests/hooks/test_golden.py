"""Golden files: the full text of slurm.conf and slurmdbd.conf for representative CRs, byte for byte.

Each case goes through the hook over HTTP (CR in, ConfigMap/Secret out), so the files pin what a
user gets, not just the renderer. A golden is rewritten only on purpose:
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/hooks/test_golden.py`, then review the diff.
"""

from __future__ import annotations

import difflib
import os

import pytest

from tests.hooks.goldencases import (
    CASES,
    GOLDEN,
)


@pytest.mark.parametrize("name", sorted(CASES))
def test_config_matches_its_golden_file(name):
    text = CASES[name]().encode()
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_bytes(text)
    assert path.is_file(), f"{path} is missing; create it with UPDATE_GOLDEN=1 and review it"
    expected = path.read_bytes()
    diff = "".join(
        difflib.unified_diff(expected.decode().splitlines(True), text.decode().splitlines(True), str(path), "rendered")
    )
    assert text == expected, f"rendered text differs from {path} (UPDATE_GOLDEN=1 rewrites it on purpose):\n{diff}"


def test_every_golden_file_has_a_case():
    assert sorted(p.name for p in GOLDEN.iterdir()) == sorted(CASES)

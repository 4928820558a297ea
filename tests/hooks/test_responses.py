"""Recorded responses: every example request, golden case and speed-work case answers the same bytes.

The hook server's speed work (issue 16: kept children passed through as pre-serialised JSON,
lazily read timestamps, the parsed request freed after the answer) must change no answer, not
even a byte. Each case's status and exact body were recorded from the code before that work and
are compared here, through the Flask app exactly as Metacontroller reaches it:

* every request of examples/requests/ (route from the file name);
* every case of tests/hooks/test_golden.py (the whole response, not only the config text);
* tests/hooks/responses/requests/ (written by responses/generate.py): steady-state NodeSet
  resyncs as `make bench` sends them and every kind of last-applied annotation, scale-in,
  missing Controller, finalize, malformed requests.

Both clocks (NodeSet and Token hooks) are pinned. Expected bodies are `responses/<case>.<status>.json`;
a response is re-recorded only on purpose:
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/hooks/test_responses.py`, then review the diff.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from hooks import token
from hooks.app import create_app
from hooks.nodeset import hook as nodeset_hook
from tests.hooks import goldencases

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).parent / "responses"
EXAMPLES = ROOT / "examples" / "requests"
NOW = datetime(2025, 6, 2, 10, 0, 0, tzinfo=UTC).timestamp()


def route_of(stem: str) -> str:
    """`nodeset-sync` and `nodeset-sync--steady` -> `/nodeset/sync`."""
    return "/" + stem.split("--")[0].replace("-", "/")


def cases() -> dict[str, tuple[str, Callable[[], bytes]]]:
    """Case name -> (route, request body)."""
    found: dict[str, tuple[str, Callable[[], bytes]]] = {}
    for path in sorted(EXAMPLES.glob("*.json")):
        found[f"example-{path.stem}"] = (route_of(path.stem), path.read_bytes)
    for name, case in sorted(goldencases.CASES.items()):
        found[f"golden-{name}"] = (case.route, lambda case=case: orjson.dumps(case.body()))
    for path in sorted((RECORDED / "requests").glob("*.json")):
        found[path.stem] = (route_of(path.stem), path.read_bytes)
    return found


CASES = cases()


@pytest.fixture(autouse=True)
def pinned_clocks(monkeypatch):
    monkeypatch.setattr(nodeset_hook, "now", lambda: NOW)
    monkeypatch.setattr(token, "now", lambda: int(NOW))


def recorded(name: str) -> list[Path]:
    return sorted(RECORDED.glob(f"{name}.[0-9][0-9][0-9].json"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_response_is_byte_for_byte_the_recorded_one(name):
    route, body = CASES[name]
    resp = create_app().test_client().post(route, data=body(), content_type="application/json")
    if os.environ.get("UPDATE_GOLDEN") == "1":
        for old in recorded(name):
            old.unlink()
        (RECORDED / f"{name}.{resp.status_code}.json").write_bytes(resp.data)
    found = recorded(name)
    assert len(found) == 1, f"{name}: expected one recorded response, found {found} (UPDATE_GOLDEN=1 records it)"
    expected_status = int(found[0].name.split(".")[-2])
    expected = found[0].read_bytes()
    assert resp.status_code == expected_status, resp.data[:500]
    assert resp.data == expected, f"{route} answers other bytes than {found[0].name}:\n{_diff(expected, resp.data)}"


def test_every_recorded_response_has_a_case():
    names = {p.name.rsplit(".", 2)[0] for p in RECORDED.glob("*.json")}
    assert sorted(names - set(CASES)) == []


def test_the_cases_cover_every_example_and_golden_and_the_speed_work():
    assert sum(n.startswith("example-") for n in CASES) == len(list(EXAMPLES.glob("*.json")))
    assert sum(n.startswith("golden-") for n in CASES) == len(goldencases.CASES)
    assert {"nodeset-sync--steady", "nodeset-sync--annotation-edges", "nodeset-sync--scale-in"} <= CASES.keys()


def _diff(expected: bytes, got: bytes) -> str:
    """A readable diff of the two bodies (indented JSON when both parse), first 80 lines."""

    def lines(data: bytes) -> list[str]:
        try:
            return json.dumps(json.loads(data), indent=1).splitlines(True)
        except ValueError:
            return data.decode(errors="replace").splitlines(True)

    diff = difflib.unified_diff(lines(expected), lines(got), "recorded", "now")
    text = "".join(list(diff)[:80])
    return text or "(same JSON value, different bytes: key order, escapes or number forms)"

"""The one log format of both processes (slinky_common/logs.py)."""

from __future__ import annotations

import io
import json
import logging

import pytest

from slinky_common import logs


def _emit(kind: str) -> str:
    stream = io.StringIO()
    logs.configure("INFO", stream, kind)
    try:
        log = logging.getLogger("hooks.test")
        log.info("answered", extra={"route": "/nodeset/sync", "status": 200, "duration_ms": 1.5})
        try:
            raise RuntimeError("eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJ4In0.c2ln")
        except RuntimeError:
            log.exception("hook %s failed", "/nodeset/sync")
    finally:
        logging.getLogger().handlers.clear()
    return stream.getvalue()


def test_json_lines_carry_the_request_fields_and_the_exception_redacted() -> None:
    first, second = (json.loads(line) for line in _emit("json").splitlines())
    assert first["route"] == "/nodeset/sync" and first["status"] == 200 and first["duration_ms"] == 1.5
    assert second["level"] == "error" and second["message"] == "hook /nodeset/sync failed"
    assert "RuntimeError: <redacted>" in second["exception"]


def test_text_lines_are_readable() -> None:
    text = _emit("text")
    assert "info    hooks.test: answered route=/nodeset/sync status=200 duration_ms=1.5" in text
    assert "eyJ" not in text and "RuntimeError: <redacted>" in text


def test_an_unknown_format_names_the_choices() -> None:
    with pytest.raises(ValueError, match="'yaml' is not one of json, text"):
        logs.formatter("yaml")

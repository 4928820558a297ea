"""The one log format of both processes (slinky_common/logs.py)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

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


@pytest.fixture()
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, its handlers and level put back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield root
    finally:
        root.handlers[:], root.level = handlers, level


@pytest.mark.parametrize("level", [*logs.LEVELS, *(level.upper() for level in logs.LEVELS), "Warning"])
def test_every_level_both_processes_take_is_one_logging_takes_in_any_case(
    level: str, root_logger: logging.Logger
) -> None:
    """slurm-sync's --log-level and HOOKS_LOG_LEVEL are this closed set; configure() upper-cases it."""
    logs.configure(level, io.StringIO())
    assert root_logger.level == logging.getLevelName(level.upper())


def test_a_level_outside_the_set_is_refused_by_logging_itself(root_logger: logging.Logger) -> None:
    with pytest.raises(ValueError, match="LOUD"):
        logs.configure("LOUD", io.StringIO())

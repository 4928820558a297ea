"""gunicorn's logger in the shared log format (hooks/gunicorn_logger.py): its handlers get our formatter, and
each request makes one access line with method, route, status, duration and remote address."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from gunicorn.config import Config

from hooks.gunicorn_logger import GunicornLogger
from slinky_common.logs import JsonFormatter, TextFormatter

ENVIRON = {"REQUEST_METHOD": "POST", "PATH_INFO": "/nodeset/sync", "REMOTE_ADDR": "10.0.0.7"}


@pytest.fixture(autouse=True)
def gunicorn_loggers() -> Iterator[None]:
    """gunicorn's two loggers are process-wide: the handlers a test's logger made are closed and removed after
    it, and the loggers propagate again as they did."""
    loggers = [logging.getLogger("gunicorn.error"), logging.getLogger("gunicorn.access")]
    before = [(log.propagate, list(log.handlers)) for log in loggers]
    yield
    for log, (propagate, handlers) in zip(loggers, before, strict=True):
        for handler in _own(log):
            if handler not in handlers:
                handler.close()
                log.removeHandler(handler)
        log.propagate = propagate


def _own(log: logging.Logger) -> list[logging.Handler]:
    """The handlers gunicorn made (pytest adds its own to a logger that does not propagate)."""
    return [h for h in log.handlers if getattr(h, "_gunicorn", False)]


def _logger(tmp_path: Path, access: bool = True) -> tuple[GunicornLogger, Path, Path]:
    cfg = Config()
    errors, accesses = tmp_path / "error.log", tmp_path / "access.log"
    cfg.set("errorlog", str(errors))
    if access:
        cfg.set("accesslog", str(accesses))
    return GunicornLogger(cfg), errors, accesses


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_json_is_the_default_format_of_every_gunicorn_handler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKS_LOG_FORMAT", raising=False)
    logger, errors, _ = _logger(tmp_path)
    handlers = _own(logger.error_log) + _own(logger.access_log)
    assert len(handlers) == 2 and all(type(h.formatter) is JsonFormatter for h in handlers)
    logger.error_log.info("Booting worker with pid: %s", 42)
    (line,) = _lines(errors)
    assert (line["level"], line["logger"], line["message"]) == ("info", "gunicorn.error", "Booting worker with pid: 42")


def test_an_empty_log_format_is_json_and_text_is_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKS_LOG_FORMAT", "")
    assert [type(h.formatter) for h in _own(_logger(tmp_path)[0].error_log)] == [JsonFormatter]
    monkeypatch.setenv("HOOKS_LOG_FORMAT", "text")
    logger, errors, _ = _logger(tmp_path)
    assert [type(h.formatter) for h in _own(logger.error_log) + _own(logger.access_log)] == [TextFormatter] * 2
    logger.error_log.warning("Worker timeout")
    assert errors.read_text().rstrip("\n").endswith(" warning gunicorn.error: Worker timeout")


def test_an_unknown_log_format_stops_the_logger_naming_the_choices(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKS_LOG_FORMAT", "yaml")
    with pytest.raises(ValueError, match=r"^log format 'yaml' is not one of json, text$"):
        _logger(tmp_path)


def test_one_access_line_per_request_with_its_fields(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKS_LOG_FORMAT", raising=False)
    logger, _, accesses = _logger(tmp_path)
    logger.access(SimpleNamespace(status="400 BAD REQUEST"), None, ENVIRON, timedelta(microseconds=1234))
    (line,) = _lines(accesses)
    assert {k: v for k, v in line.items() if k != "time"} == {
        "level": "info",
        "logger": "gunicorn.access",
        "message": "POST /nodeset/sync 400",
        "method": "POST",
        "route": "/nodeset/sync",
        "status": 400,
        "duration_ms": 1.234,
        "remote": "10.0.0.7",
    }


def test_an_integer_status_and_a_missing_remote_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKS_LOG_FORMAT", raising=False)
    logger, _, accesses = _logger(tmp_path)
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/healthz"}
    logger.access(SimpleNamespace(status=200), None, environ, timedelta(seconds=2, microseconds=500_001))
    (line,) = _lines(accesses)
    assert (line["status"], line["duration_ms"], line["remote"], line["message"]) == (
        200,
        2500.001,
        "-",
        "GET /healthz 200",
    )


def test_no_access_line_unless_an_access_log_is_configured(tmp_path: Path) -> None:
    logger, _, accesses = _logger(tmp_path, access=False)
    assert _own(logger.access_log) == []
    capture = Capture()
    logger.access_log.addHandler(capture)
    try:
        logger.access(SimpleNamespace(status="200 OK"), None, ENVIRON, timedelta(milliseconds=1))
        logger.access_log.info("direct")  # the capture works: only access() stays silent
    finally:
        logger.access_log.removeHandler(capture)
    assert [r.getMessage() for r in capture.records] == ["direct"] and not accesses.exists()

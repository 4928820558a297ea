"""One log format for both processes: a JSON object per line (or plain text for a terminal).

The hook server (its Flask code and gunicorn's own error and access lines) and slurm_sync share
this formatter, so one log pipeline parses both. Every secret registered here (and anything shaped
like a JWT) is replaced before a line is written, whatever a message formats in.
`HOOKS_LOG_FORMAT=text` switches the hook server to text; slurm_sync has `--log-format`.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from typing import Any, Final, TextIO

REDACTED: Final = "<redacted>"
FORMATS: Final = ("json", "text")
# The levels both processes take, in any case: configure() upper-cases one for logging, gunicorn lower-cases it.
LEVELS: Final = ("debug", "info", "warning", "error", "critical")
_JWT: Final = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
# Minted tokens are remembered only until this many; the JWT pattern catches older ones.
_MAX_SECRETS: Final = 1024
# Fields an access line carries besides the standard ones (set with `extra=`).
ACCESS_FIELDS: Final = ("method", "route", "status", "duration_ms", "remote")


def register_secret(value: str) -> None:
    """Make ``value`` unloggable."""
    with _secrets_lock:
        if len(_secrets) >= _MAX_SECRETS:
            _secrets.clear()
        _secrets.add(value)


def redact(text: str) -> str:
    with _secrets_lock:
        known = list(_secrets)
    for secret in known:
        text = text.replace(secret, REDACTED)
    return _JWT.sub(REDACTED, text)


def _timestamp(record: logging.LogRecord) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z"


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {name: getattr(record, name) for name in ACCESS_FIELDS if hasattr(record, name)}


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, the access fields when present, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, ensure_ascii=False))


class TextFormatter(logging.Formatter):
    """The same fields as one readable line, for people reading a terminal."""

    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{_timestamp(record)} {record.levelname.lower():7} {record.name}: {record.getMessage()}"
        line = f"{line} {fields}" if fields else line
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return redact(line)


def formatter(kind: str) -> logging.Formatter:
    """The formatter named ``kind`` (one of FORMATS); ValueError names the choices otherwise."""
    if kind not in FORMATS:
        raise ValueError(f"log format {kind!r} is not one of {', '.join(FORMATS)}")
    return JsonFormatter() if kind == "json" else TextFormatter()


def configure(level: str = "INFO", stream: TextIO = sys.stderr, kind: str = "json") -> None:
    """Send every logger through one handler on ``stream`` in the format ``kind``."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter(kind))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

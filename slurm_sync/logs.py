"""Structured logs: one JSON object per line, with every secret we know of (and anything shaped
like a JWT) replaced, so a token can never reach a log sink, whatever a message formats in."""

from __future__ import annotations

import json
import logging
import re
import sys
import threading
import time
from typing import Final, TextIO

REDACTED: Final = "<redacted>"
_JWT: Final = re.compile(r"eyJ[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
_secrets: set[str] = set()
_secrets_lock = threading.Lock()
# Minted tokens are remembered only until this many; the JWT pattern catches older ones.
_MAX_SECRETS: Final = 1024


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


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(entry, ensure_ascii=False))


def configure(level: str = "INFO", stream: TextIO = sys.stderr) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

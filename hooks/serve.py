"""`slinky-hooks`: the hook server under gunicorn with hooks/gunicorn_conf.py.

Every setting is an environment variable (the charts set them); they are defined once here, with
their defaults, so `--help` and the gunicorn configuration cannot disagree. Arguments after the
options go to gunicorn unchanged.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

CONFIG_FILE: Final = Path(__file__).with_name("gunicorn_conf.py")
APP: Final = "hooks.app:create_app()"


@dataclass(frozen=True)
class Setting:
    env: str
    default: str
    help: str


SETTINGS: Final = (
    Setting("HOOKS_BIND", "127.0.0.1:8080", "host:port to listen on"),
    Setting("HOOKS_WORKERS", "", "gunicorn worker processes (default: one per core)"),
    Setting("HOOKS_TIMEOUT", "30", "seconds a worker may take for a request, and a client for each piece of an answer"),
    Setting("HOOKS_READ_TIMEOUT", "10", "seconds a client has to send a request's headers, then its body (else 408)"),
    Setting("HOOKS_MAX_CONNECTIONS", "1000", "open connections per worker; more wait in the listen backlog"),
    Setting("HOOKS_LOG_LEVEL", "info", "debug, info, warning, error"),
    Setting("HOOKS_LOG_FORMAT", "json", "json (one object per line) or text (for a terminal)"),
    Setting("HOOKS_ACCESS_LOG", "", "'-' logs one line per request to stdout (off by default: it halves throughput)"),
    Setting("HOOKS_CONTROL_SOCKET", "", "path of gunicorn's control socket for gunicornc (default: none)"),
    Setting("HOOKS_MAX_BODY_BYTES", str(256 * 1024 * 1024), "a larger request body gets 413 without being read whole"),
    Setting("HOOKS_AUTH_TOKEN_FILE", "", "file holding the bearer token every POST route demands (default: none)"),
    Setting("PROMETHEUS_MULTIPROC_DIR", "", "directory aggregating metrics over workers (default: a new one in /tmp)"),
)


def setting(env: str) -> str:
    """The value of one of SETTINGS: the environment's, else its default."""
    (known,) = [s for s in SETTINGS if s.env == env]
    return os.environ.get(env) or known.default


def read_timeout() -> int:
    """HOOKS_READ_TIMEOUT in seconds; ValueError naming the setting unless a positive whole number."""
    raw = setting("HOOKS_READ_TIMEOUT").strip()
    if not raw.isascii() or not raw.isdigit() or int(raw) <= 0:
        raise ValueError(f"HOOKS_READ_TIMEOUT must be a positive whole number of seconds, got {raw!r}")
    return int(raw)


def bind_problem(bind: str) -> str | None:
    """Why HOOKS_BIND cannot be listened on (naming it), or None. Checked before gunicorn binds, which would
    otherwise retry five times and end with "Can't connect to ('127.0.0.1', 8080)" naming no setting.
    A unix socket, or a socket handed over by a parent (gunicorn's re-exec, systemd), is left to gunicorn."""
    if bind.startswith(("unix:", "fd://")) or os.environ.get("LISTEN_FDS") or os.environ.get("GUNICORN_FD"):
        return None
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit():
        return f"HOOKS_BIND must be host:port, got {bind!r}"
    try:
        infos = socket.getaddrinfo(host.strip("[]") or "0.0.0.0", int(port), type=socket.SOCK_STREAM)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
            probe.bind(address)
    except OSError as err:
        return (
            f"HOOKS_BIND={bind}: cannot listen there: {err.strerror or err}; another process may hold that port "
            "(set HOOKS_BIND to another host:port)"
        )
    return None


def _epilog() -> str:
    rows = [f"  {s.env:26} {s.help}" + (f" (default: {s.default})" if s.default else "") for s in SETTINGS]
    return "environment:\n" + "\n".join(rows)


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(
        prog="slinky-hooks",
        description="Serve the Metacontroller hook routes (docs/architecture.md §3) with gunicorn.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Replace this process with gunicorn, so signals and exit codes are gunicorn's own."""
    _, rest = parse_args(argv)
    os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "-c", str(CONFIG_FILE), *rest, APP])

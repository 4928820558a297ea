"""`slinky-hooks`: the hook server under gunicorn with hooks/gunicorn_conf.py.

Every setting is an environment variable (the charts set them); they are defined once here, each with
its default and the parser that reads it, so `--help`, the check at start and the gunicorn configuration
cannot disagree. Arguments after the options go to gunicorn unchanged.

A bad value stops the process before gunicorn starts, with one line naming the variable and what it must
be: gunicorn alone would print a traceback naming nothing (`int('abc')`), or take an unknown log level for
`info`, or fail only in each worker it boots.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

from slinky_common import logs

CONFIG_FILE: Final = Path(__file__).with_name("gunicorn_conf.py")
APP: Final = "hooks.app:create_app()"
PROG: Final = "slinky-hooks"
T = TypeVar("T")


class SettingError(ValueError):
    """A setting's value the server must not run with; the message is one line naming the variable."""


class Invalid(ValueError):
    """What a parser found wrong with a value: the rest of the line after the variable's name."""


def _refused(expected: str, text: str) -> Invalid:
    return Invalid(f"must be {expected}, got {text!r}")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One environment variable: its default, its line in `--help`, and how its text becomes a value.
    An empty variable means the default, unless `refuse_blank` says why that is refused."""

    env: str
    default: str
    help: str
    parse: Callable[[str], T]
    refuse_blank: str = ""

    def raw(self) -> str:
        """The text: the environment's, else the default."""
        return os.environ.get(self.env) or self.default

    def value(self) -> T:
        """The parsed value; SettingError naming the variable and what it must be otherwise."""
        set_to = os.environ.get(self.env)
        try:
            if self.refuse_blank and set_to is not None and not set_to.strip():
                raise Invalid(f"is set but empty: {self.refuse_blank}")
            return self.parse(self.raw())
        except Invalid as err:
            raise SettingError(f"{self.env} {err}") from None


def _positive_whole(expected: str) -> Callable[[str], int]:
    """A parser of positive whole numbers (ASCII digits: `int` also takes '²' and '1_000')."""

    def parse(raw: str) -> int:
        text = raw.strip()
        if not (text.isascii() and text.isdigit()) or int(text) <= 0:
            raise _refused(expected, text)
        return int(text)

    return parse


def _optional(parse: Callable[[str], T]) -> Callable[[str], T | None]:
    """None for the empty default ("off", "one per core"), else `parse`."""
    return lambda raw: None if raw == "" else parse(raw)


def _one_of(choices: Sequence[str], *, any_case: bool = False) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        text = raw.strip().lower() if any_case else raw
        if text not in choices:
            raise _refused("one of " + ", ".join(choices), raw)
        return text

    return parse


def _host_port(raw: str) -> str:
    """host:port (the host may be empty: every address), or what gunicorn takes besides (unix:PATH, fd://N)."""
    if raw.startswith(("unix:", "fd://")):
        return raw
    _, sep, port = raw.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise _refused("host:port", raw)
    return raw


def _file_in_a_directory(expected: str, allowed: Sequence[str] = ()) -> Callable[[str], str]:
    """A path gunicorn creates a file at: its directory must exist, or gunicorn fails with a traceback."""

    def parse(raw: str) -> str:
        if raw not in allowed and not Path(raw).parent.is_dir():
            raise _refused(expected, raw)
        return raw

    return parse


def _directory(raw: str) -> str:
    if not Path(raw).is_dir():
        raise _refused("an existing directory", raw)
    return raw


def _token_file(raw: str) -> str:
    """The bearer token's file. One not readable yet (the Secret not mounted) is served with 503 until it
    is (hooks/app.py); one that is readable and empty would mean "no authentication"."""
    try:
        with open(raw, "rb") as f:
            empty = not f.read().strip()
    except OSError:
        return raw
    if empty:
        raise Invalid(f"{raw} is empty: refusing to serve hooks with an empty bearer token")
    return raw


SECONDS: Final = "a positive whole number of seconds"
BIND: Final = Setting("HOOKS_BIND", "127.0.0.1:8080", "host:port to listen on", _host_port)
WORKERS: Final = Setting(
    "HOOKS_WORKERS",
    "",
    "gunicorn worker processes (default: one per core)",
    _optional(_positive_whole("a positive whole number")),
)
TIMEOUT: Final = Setting(
    "HOOKS_TIMEOUT",
    "30",
    "seconds a worker may take for a request, and a client for each piece of an answer",
    _positive_whole(SECONDS),
)
READ_TIMEOUT: Final = Setting(
    "HOOKS_READ_TIMEOUT",
    "10",
    "seconds a client has to send a request's line and headers once it starts, then its body (else 408)",
    _positive_whole(SECONDS),
)
# Go's http.Transport (Metacontroller's client, and the API server's webhook client) reuses a connection idle
# for up to 90 s (IdleConnTimeout): a server closing it sooner races the client's next request on it, which then
# fails with "connection reset by peer". Past 90 s, the client is always the one to close.
IDLE_TIMEOUT: Final = Setting(
    "HOOKS_IDLE_TIMEOUT",
    "120",
    "seconds a connection may wait for its next request: above the 90 s Go clients (Metacontroller, the API "
    "server) keep one idle, so they close it first",
    _positive_whole(SECONDS),
)
MAX_CONNECTIONS: Final = Setting(
    "HOOKS_MAX_CONNECTIONS",
    "1000",
    "open connections per worker; more wait in the listen backlog",
    _positive_whole("a positive whole number"),
)
LOG_LEVEL: Final = Setting("HOOKS_LOG_LEVEL", "info", ", ".join(logs.LEVELS), _one_of(logs.LEVELS, any_case=True))
LOG_FORMAT: Final = Setting(
    "HOOKS_LOG_FORMAT", "json", "json (one object per line) or text (for a terminal)", _one_of(logs.FORMATS)
)
ACCESS_LOG: Final = Setting(
    "HOOKS_ACCESS_LOG",
    "",
    "'-' logs one line per request to stdout (off by default: it halves throughput)",
    _optional(_file_in_a_directory("'-' (stdout) or a file in an existing directory", allowed=("-",))),
)
CONTROL_SOCKET: Final = Setting(
    "HOOKS_CONTROL_SOCKET",
    "",
    "path of gunicorn's control socket for gunicornc (default: none)",
    _optional(_file_in_a_directory("a path in an existing directory")),
)
MAX_BODY_BYTES: Final = Setting(
    "HOOKS_MAX_BODY_BYTES",
    str(256 * 1024 * 1024),
    "a larger request body gets 413 without being read whole",
    _positive_whole("a positive whole number of bytes"),
)
AUTH_TOKEN_FILE: Final = Setting(
    "HOOKS_AUTH_TOKEN_FILE",
    "",
    "file holding the bearer token every POST route demands (default: none)",
    _optional(_token_file),
    refuse_blank="unset it to serve without authentication, or name the token file",
)
PROMETHEUS_MULTIPROC_DIR: Final = Setting(
    "PROMETHEUS_MULTIPROC_DIR",
    "",
    "directory aggregating metrics over workers (default: a new one in /tmp)",
    _optional(_directory),
)
SETTINGS: Final[tuple[Setting[Any], ...]] = (
    BIND,
    WORKERS,
    TIMEOUT,
    READ_TIMEOUT,
    IDLE_TIMEOUT,
    MAX_CONNECTIONS,
    LOG_LEVEL,
    LOG_FORMAT,
    ACCESS_LOG,
    CONTROL_SOCKET,
    MAX_BODY_BYTES,
    AUTH_TOKEN_FILE,
    PROMETHEUS_MULTIPROC_DIR,
)


def setting(env: str) -> str:
    """The text of one of SETTINGS: the environment's, else its default."""
    (known,) = [s for s in SETTINGS if s.env == env]
    return known.raw()


def read_timeout() -> int:
    """HOOKS_READ_TIMEOUT in seconds; SettingError (a ValueError) naming it unless a positive whole number."""
    return READ_TIMEOUT.value()


def check_settings() -> None:
    """Parse every setting; the first bad one stops the process with one line naming it. Run by `slinky-hooks`
    and by hooks/gunicorn_conf.py (the charts and the image start gunicorn on it directly), where a SystemExit
    passes through gunicorn's config loader as its message alone, exit status 1."""
    for known in SETTINGS:
        try:
            known.value()
        except SettingError as err:
            raise SystemExit(f"{PROG}: {err}") from None


def bind_problem(bind: str) -> str | None:
    """Why HOOKS_BIND cannot be listened on (naming it), or None. Checked before gunicorn binds, which would
    otherwise retry five times and end with "Can't connect to ('127.0.0.1', 8080)" naming no setting.
    A unix socket, or a socket handed over by a parent (gunicorn's re-exec, systemd), is left to gunicorn."""
    if bind.startswith(("unix:", "fd://")) or os.environ.get("LISTEN_FDS") or os.environ.get("GUNICORN_FD"):
        return None
    try:
        _host_port(bind)
    except Invalid as err:
        return f"{BIND.env} {err}"
    host, _, port = bind.rpartition(":")
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
        prog=PROG,
        description="Serve the Metacontroller hook routes (docs/architecture.md §3) with gunicorn.",
        epilog=_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    return parser.parse_known_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    """Check the settings, then replace this process with gunicorn, so signals and exit codes are gunicorn's own."""
    _, rest = parse_args(argv)
    check_settings()
    os.execv(sys.executable, [sys.executable, "-m", "gunicorn", "-c", str(CONFIG_FILE), *rest, APP])

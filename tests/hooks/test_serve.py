"""`slinky-hooks` (hooks/serve.py): each setting is its environment variable or its default, parsed by the
parser beside it; a bad one is one line naming it, before gunicorn starts; `--help` lists the settings, and
main hands every other argument to gunicorn."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest
from flask import Flask
from gunicorn.util import import_app

from hooks import serve

DEFAULTS = {
    "HOOKS_BIND": "127.0.0.1:8080",
    "HOOKS_WORKERS": "",
    "HOOKS_TIMEOUT": "30",
    "HOOKS_READ_TIMEOUT": "10",
    "HOOKS_IDLE_TIMEOUT": "120",
    "HOOKS_MAX_CONNECTIONS": "1000",
    "HOOKS_LOG_LEVEL": "info",
    "HOOKS_LOG_FORMAT": "json",
    "HOOKS_ACCESS_LOG": "",
    "HOOKS_CONTROL_SOCKET": "",
    "HOOKS_MAX_BODY_BYTES": "268435456",
    "HOOKS_AUTH_TOKEN_FILE": "",
    "PROMETHEUS_MULTIPROC_DIR": "",
}


@pytest.fixture()
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for env in DEFAULTS:
        monkeypatch.delenv(env, raising=False)
    return monkeypatch


def test_every_setting_defaults_to_its_documented_value(clean_env: pytest.MonkeyPatch) -> None:
    assert [s.env for s in serve.SETTINGS] == list(DEFAULTS)  # one of each, in --help's order
    assert {s.env: serve.setting(s.env) for s in serve.SETTINGS} == DEFAULTS


def test_the_environment_wins_and_an_empty_variable_means_the_default(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HOOKS_BIND", "0.0.0.0:9443")
    assert serve.setting("HOOKS_BIND") == "0.0.0.0:9443"
    clean_env.setenv("HOOKS_BIND", "")
    assert serve.setting("HOOKS_BIND") == "127.0.0.1:8080"
    clean_env.setenv("HOOKS_WORKERS", "3")
    assert serve.setting("HOOKS_WORKERS") == "3"


def test_a_setting_not_in_the_table_is_an_error_not_a_silent_default(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("HOOKS_BINDS", "0.0.0.0:1")
    with pytest.raises(ValueError):
        serve.setting("HOOKS_BINDS")


@pytest.mark.parametrize(("value", "seconds"), [(None, 10), ("", 10), ("1", 1), (" 7 ", 7), ("0030", 30)])
def test_read_timeout_is_a_positive_whole_number_of_seconds(
    clean_env: pytest.MonkeyPatch, value: str | None, seconds: int
) -> None:
    if value is not None:
        clean_env.setenv("HOOKS_READ_TIMEOUT", value)
    assert serve.read_timeout() == seconds


@pytest.mark.parametrize(
    ("value", "shown"), [("0", "'0'"), ("-1", "'-1'"), ("1.5", "'1.5'"), ("ten", "'ten'"), ("  ", "''"), ("²", "'²'")]
)
def test_a_read_timeout_that_is_not_a_positive_whole_number_names_the_setting(
    clean_env: pytest.MonkeyPatch, value: str, shown: str
) -> None:
    clean_env.setenv("HOOKS_READ_TIMEOUT", value)
    with pytest.raises(ValueError) as raised:
        serve.read_timeout()
    assert str(raised.value) == f"HOOKS_READ_TIMEOUT must be a positive whole number of seconds, got {shown}"


def test_help_lists_each_setting_with_its_help_and_a_default_only_when_it_has_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exited:
        serve.parse_args(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: slinky-hooks [-h]\n")
    rows = {line.split()[0]: line for line in out.split("environment:\n", 1)[1].splitlines()}
    assert list(rows) == list(DEFAULTS)
    assert rows["HOOKS_BIND"] == f"  {'HOOKS_BIND':26} host:port to listen on (default: 127.0.0.1:8080)"
    assert rows["HOOKS_AUTH_TOKEN_FILE"].endswith("every POST route demands (default: none)")
    assert rows["HOOKS_ACCESS_LOG"].endswith("(off by default: it halves throughput)")
    for setting in serve.SETTINGS:
        assert setting.help in rows[setting.env]
        assert rows[setting.env].count("(default:") == (1 if setting.default or "(default:" in setting.help else 0)


def test_arguments_other_than_help_are_left_for_gunicorn_in_order() -> None:
    argv = ["--bind", "0.0.0.0:1", "-w", "3", "--access-logfile", "-", "extra"]
    options, rest = serve.parse_args(argv)
    assert vars(options) == {} and rest == argv


def test_main_replaces_the_process_with_gunicorn_on_its_config_and_the_app(
    clean_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(serve.os, "execv", lambda path, args: calls.append((path, list(args))))
    serve.main(["--workers", "2", "--log-level", "debug"])
    assert calls == [
        (
            sys.executable,
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                str(serve.CONFIG_FILE),
                "--workers",
                "2",
                "--log-level",
                "debug",
                serve.APP,
            ],
        )
    ]


def test_main_answers_help_itself_without_starting_gunicorn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    calls: list[object] = []
    monkeypatch.setattr(serve.os, "execv", lambda *args: calls.append(args))
    with pytest.raises(SystemExit):
        serve.main(["-h"])
    assert calls == [] and "HOOKS_READ_TIMEOUT" in capsys.readouterr().out


def test_the_config_file_and_the_app_gunicorn_is_given_exist(clean_env: pytest.MonkeyPatch) -> None:
    assert serve.CONFIG_FILE.name == "gunicorn_conf.py" and serve.CONFIG_FILE.is_file()
    assert serve.CONFIG_FILE.parent.name == "hooks"
    assert isinstance(import_app(serve.APP), Flask)  # what gunicorn loads from "hooks.app:create_app()"


def test_a_busy_or_malformed_bind_is_named_before_gunicorn_retries() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        problem = serve.bind_problem(f"127.0.0.1:{port}")
    assert problem is not None and problem.startswith(f"HOOKS_BIND=127.0.0.1:{port}: cannot listen there:")
    assert serve.bind_problem("localhost") == "HOOKS_BIND must be host:port, got 'localhost'"
    assert serve.bind_problem("127.0.0.1:0") is None
    assert serve.bind_problem("unix:/tmp/hooks.sock") is None


def test_the_idle_timeout_outlasts_the_90_s_go_clients_keep_a_connection_idle(clean_env: pytest.MonkeyPatch) -> None:
    """Go's http.Transport (Metacontroller, the API server) reuses a connection idle up to 90 s (IdleConnTimeout):
    the server must not close one first."""
    assert serve.IDLE_TIMEOUT.value() == 120 > 90
    assert "90 s" in serve.IDLE_TIMEOUT.help
    clean_env.setenv("HOOKS_IDLE_TIMEOUT", "300")
    assert serve.IDLE_TIMEOUT.value() == 300


def test_every_setting_parses_its_default(clean_env: pytest.MonkeyPatch) -> None:
    values = {s.env: s.value() for s in serve.SETTINGS}
    assert values == {
        "HOOKS_BIND": "127.0.0.1:8080",
        "HOOKS_WORKERS": None,  # one per core: hooks/gunicorn_conf.py counts them
        "HOOKS_TIMEOUT": 30,
        "HOOKS_READ_TIMEOUT": 10,
        "HOOKS_IDLE_TIMEOUT": 120,
        "HOOKS_MAX_CONNECTIONS": 1000,
        "HOOKS_LOG_LEVEL": "info",
        "HOOKS_LOG_FORMAT": "json",
        "HOOKS_ACCESS_LOG": None,
        "HOOKS_CONTROL_SOCKET": None,
        "HOOKS_MAX_BODY_BYTES": 256 * 1024 * 1024,
        "HOOKS_AUTH_TOKEN_FILE": None,
        "PROMETHEUS_MULTIPROC_DIR": None,
    }
    serve.check_settings()


@pytest.mark.parametrize(
    ("env", "value", "parsed"),
    [
        ("HOOKS_BIND", "0.0.0.0:9443", "0.0.0.0:9443"),
        ("HOOKS_BIND", "[::1]:8080", "[::1]:8080"),
        ("HOOKS_BIND", ":8080", ":8080"),
        ("HOOKS_BIND", "unix:/run/hooks.sock", "unix:/run/hooks.sock"),
        ("HOOKS_WORKERS", " 3 ", 3),
        ("HOOKS_LOG_LEVEL", "DEBUG", "debug"),  # gunicorn and logging take any case
        ("HOOKS_LOG_LEVEL", "Warning", "warning"),
        ("HOOKS_LOG_FORMAT", "text", "text"),
        ("HOOKS_ACCESS_LOG", "-", "-"),
        ("HOOKS_ACCESS_LOG", "access.log", "access.log"),
        ("HOOKS_MAX_BODY_BYTES", "4096", 4096),
        ("HOOKS_AUTH_TOKEN_FILE", "/nonexistent/token", "/nonexistent/token"),  # not mounted yet: 503 until it is
    ],
)
def test_a_good_value_is_parsed(clean_env: pytest.MonkeyPatch, env: str, value: str, parsed: object) -> None:
    clean_env.setenv(env, value)
    (known,) = [s for s in serve.SETTINGS if s.env == env]
    assert known.value() == parsed
    serve.check_settings()


# A bad value of every setting, and the one line that stops the process.
BAD = [
    ("HOOKS_BIND", "localhost", "HOOKS_BIND must be host:port, got 'localhost'"),
    ("HOOKS_BIND", "0.0.0.0:http", "HOOKS_BIND must be host:port, got '0.0.0.0:http'"),
    ("HOOKS_BIND", "0.0.0.0:70000", "HOOKS_BIND must be host:port, got '0.0.0.0:70000'"),
    ("HOOKS_WORKERS", "abc", "HOOKS_WORKERS must be a positive whole number, got 'abc'"),
    ("HOOKS_WORKERS", "0", "HOOKS_WORKERS must be a positive whole number, got '0'"),
    ("HOOKS_TIMEOUT", "30s", "HOOKS_TIMEOUT must be a positive whole number of seconds, got '30s'"),
    ("HOOKS_READ_TIMEOUT", "1.5", "HOOKS_READ_TIMEOUT must be a positive whole number of seconds, got '1.5'"),
    ("HOOKS_IDLE_TIMEOUT", "0", "HOOKS_IDLE_TIMEOUT must be a positive whole number of seconds, got '0'"),
    ("HOOKS_IDLE_TIMEOUT", "-120", "HOOKS_IDLE_TIMEOUT must be a positive whole number of seconds, got '-120'"),
    ("HOOKS_MAX_CONNECTIONS", "1e3", "HOOKS_MAX_CONNECTIONS must be a positive whole number, got '1e3'"),
    ("HOOKS_LOG_LEVEL", "LOUD", "HOOKS_LOG_LEVEL must be one of debug, info, warning, error, critical, got 'LOUD'"),
    ("HOOKS_LOG_FORMAT", "yaml", "HOOKS_LOG_FORMAT must be one of json, text, got 'yaml'"),
    ("HOOKS_LOG_FORMAT", "JSON", "HOOKS_LOG_FORMAT must be one of json, text, got 'JSON'"),
    (
        "HOOKS_ACCESS_LOG",
        "/nonexistent/access.log",
        "HOOKS_ACCESS_LOG must be '-' (stdout) or a file in an existing directory, got '/nonexistent/access.log'",
    ),
    (
        "HOOKS_CONTROL_SOCKET",
        "/nonexistent/gunicorn.ctl",
        "HOOKS_CONTROL_SOCKET must be a path in an existing directory, got '/nonexistent/gunicorn.ctl'",
    ),
    ("HOOKS_MAX_BODY_BYTES", "64MiB", "HOOKS_MAX_BODY_BYTES must be a positive whole number of bytes, got '64MiB'"),
    ("HOOKS_MAX_BODY_BYTES", "²", "HOOKS_MAX_BODY_BYTES must be a positive whole number of bytes, got '²'"),
    (
        "HOOKS_AUTH_TOKEN_FILE",
        " ",
        "HOOKS_AUTH_TOKEN_FILE is set but empty: unset it to serve without authentication, or name the token file",
    ),
    (
        "PROMETHEUS_MULTIPROC_DIR",
        "/nonexistent",
        "PROMETHEUS_MULTIPROC_DIR must be an existing directory, got '/nonexistent'",
    ),
]


@pytest.mark.parametrize(("env", "value", "line"), BAD, ids=[f"{env}={value}" for env, value, _ in BAD])
def test_a_bad_value_stops_the_process_with_one_line_naming_it(
    clean_env: pytest.MonkeyPatch, env: str, value: str, line: str
) -> None:
    clean_env.setenv(env, value)
    with pytest.raises(SystemExit) as exited:
        serve.check_settings()
    assert exited.value.code == f"slinky-hooks: {line}"  # what the interpreter prints, exit status 1
    assert exited.value.__cause__ is None and exited.value.__suppress_context__


def test_the_table_of_bad_values_covers_every_setting() -> None:
    assert {env for env, _, _ in BAD} == {s.env for s in serve.SETTINGS}


def test_an_empty_token_file_stops_the_process(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An empty file would mean "no authentication"; one not there yet is a Secret not mounted yet (503 until)."""
    token = tmp_path / "token"
    token.write_text("\n")
    clean_env.setenv("HOOKS_AUTH_TOKEN_FILE", str(token))
    with pytest.raises(SystemExit) as exited:
        serve.check_settings()
    assert exited.value.code == (
        f"slinky-hooks: HOOKS_AUTH_TOKEN_FILE {token} is empty: refusing to serve hooks with an empty bearer token"
    )


def test_a_value_is_read_as_a_setting_error_naming_it(clean_env: pytest.MonkeyPatch) -> None:
    """What the app and the worker get (a ValueError): hooks/app.py's create_app raises it."""
    clean_env.setenv("HOOKS_MAX_CONNECTIONS", "lots")
    with pytest.raises(
        serve.SettingError, match=r"^HOOKS_MAX_CONNECTIONS must be a positive whole number, got 'lots'$"
    ):
        serve.MAX_CONNECTIONS.value()
    assert issubclass(serve.SettingError, ValueError)


def test_main_checks_every_setting_before_starting_gunicorn(
    clean_env: pytest.MonkeyPatch, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[object] = []
    monkeypatch.setattr(serve.os, "execv", lambda *args: calls.append(args))
    clean_env.setenv("HOOKS_WORKERS", "abc")
    with pytest.raises(SystemExit) as exited:
        serve.main([])
    assert exited.value.code == "slinky-hooks: HOOKS_WORKERS must be a positive whole number, got 'abc'"
    assert calls == []

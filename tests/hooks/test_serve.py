"""`slinky-hooks` (hooks/serve.py): each setting is its environment variable or its default, the read timeout
must be a positive whole number, `--help` lists the settings, and main hands every other argument to gunicorn."""

from __future__ import annotations

import socket
import sys

import pytest
from flask import Flask
from gunicorn.util import import_app

from hooks import serve

DEFAULTS = {
    "HOOKS_BIND": "127.0.0.1:8080",
    "HOOKS_WORKERS": "",
    "HOOKS_TIMEOUT": "30",
    "HOOKS_READ_TIMEOUT": "10",
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


def test_main_replaces_the_process_with_gunicorn_on_its_config_and_the_app(monkeypatch: pytest.MonkeyPatch) -> None:
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

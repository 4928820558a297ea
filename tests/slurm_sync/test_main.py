"""The command line of both processes: entry points, --help, and one-line start-up errors."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import tomllib
from importlib import import_module
from pathlib import Path

import pytest

from hooks import serve
from slurm_sync import __main__ as cli
from slurm_sync.metrics import Metrics
from slurm_sync.service import Health

ROOT = Path(__file__).resolve().parents[2]
# A value each flag accepts from its environment variable that differs from its default.
SPECIAL = {
    "mode": "both",
    "log_format": "text",
    "once": "1",
    "log_level": "DEBUG",
    "leader_elect": "false",
    "slurm_url": "http://slurmrestd:6820",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_sync", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )


def test_entry_points_name_the_two_processes() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert set(scripts) == {"slinky-hooks", "slurm-sync"}
    for target in scripts.values():
        module, function = target.split(":")
        assert callable(getattr(import_module(module), function))


def test_slurm_sync_help_names_every_flag_env_and_default(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    flags = sorted(set(re.findall(r"\[(--[a-z-]+)", text)))
    assert len(flags) > 15
    for flag in flags:
        dest = flag[2:].replace("-", "_")
        env = f"SLURM_SYNC_{dest.upper()}"
        assert f"[env {env}]" in text and "(default:" in text, flag
        before = getattr(cli.parse_args([]), dest)
        monkeypatch.setenv(env, SPECIAL.get(dest, "7"))
        assert getattr(cli.parse_args([]), dest) != before, f"{env} does not set {flag}"
        monkeypatch.delenv(env)


def test_hooks_help_lists_every_setting_the_gunicorn_config_reads(capsys) -> None:
    with pytest.raises(SystemExit):
        serve.parse_args(["--help"])
    out = capsys.readouterr().out
    assert "(default: 127.0.0.1:8080)" in out
    conf = (ROOT / "hooks/gunicorn_conf.py").read_text() + (ROOT / "hooks/app.py").read_text()
    # the process environment (os.environ), not a WSGI request's environ (PATH_INFO ...)
    read = set(re.findall(r'(?:setting\(|os\.environ\.get\(|os\.environ\[)"([A-Z_]+)"', conf))
    assert read <= {s.env for s in serve.SETTINGS}, read
    assert all(s.env in out for s in serve.SETTINGS)


def test_missing_kubeconfig_is_one_line_naming_the_fix() -> None:
    result = _run("--once", "--kubeconfig", "/nonexistent/kubeconfig")
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "/nonexistent/kubeconfig" in line and "set --kubeconfig" in line


@pytest.mark.parametrize(
    "content", [b"apiVersion: v1\nclusters: [{name: c\n  bad: : :", b"\x00\xff\xfe" * 40, b"- just\n- a list\n"]
)
def test_a_garbled_kubeconfig_is_one_line_naming_the_file(tmp_path: Path, content: bytes) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_bytes(content)
    result = _run("--once", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert f"cannot load a Kubernetes configuration from {kubeconfig}" in line and "set --kubeconfig" in line


def test_an_unreadable_jwt_key_file_is_one_line_naming_it(tmp_path: Path) -> None:
    for key, why in (
        (tmp_path / "missing", "cannot read it: No such file or directory"),
        (tmp_path / "empty", "is empty"),
    ):
        if key.name == "empty":
            key.write_bytes(b"")
        args = cli.parse_args(["--mode", "bridge", "--slurm-url", "http://x", "--jwt-key-file", str(key)])
        with pytest.raises(SystemExit, match=f"--jwt-key-file {key}.*{why}"):
            cli.bridge_tokens(args)


def test_unreachable_api_is_one_line_naming_the_server(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    result = _run("--once", "--kubeconfig", str(kubeconfig))
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert "cannot reach the Kubernetes API at https://127.0.0.1:9" in line and "check --kubeconfig" in line


@pytest.mark.kube
def test_every_line_slurm_sync_prints_is_json(kube_lab, kube_namespace: str) -> None:
    """The process as the charts run it, one pass against the real API server: stdout and stderr
    parse line by line as JSON objects (start-up, discovery and the pass's own lines)."""
    kubeconfig = str(kube_lab.kubeconfig)
    result = _run(
        "--once", "--kubeconfig", kubeconfig, "--namespace", kube_namespace, "--lease-namespace", kube_namespace,
        "--log-level", "DEBUG",
    )  # fmt: skip
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert lines, result
    records = [json.loads(line) for line in lines]  # raises on any line that is not JSON
    assert all(isinstance(r, dict) and r.get("message") for r in records), records


@pytest.mark.parametrize("url", ["slurm-restapi:6820", "ftp://slurm-restapi:6820", "http://", "restapi"])
def test_a_slurm_url_without_scheme_or_host_is_refused_at_start(url: str, capsys) -> None:
    with pytest.raises(SystemExit):
        cli.parse_args(["--slurm-url", url])
    assert "--slurm-url (or SLURM_SYNC_SLURM_URL) must be an http:// or https:// URL" in capsys.readouterr().err
    assert cli.parse_args(["--slurm-url", "https://slurm-restapi.slurm:6820"]).slurm_url


def test_a_busy_health_port_is_one_line_naming_the_setting() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(SystemExit, match=rf"--bind 127.0.0.1:{port} \(or SLURM_SYNC_BIND\): cannot listen"):
            cli._serve_health(f"127.0.0.1:{port}", Health(), Metrics())
    with pytest.raises(SystemExit, match="it is not host:port"):
        cli._serve_health("localhost", Health(), Metrics())


# A bad value of each typed flag, and the one line it gets (argparse's message, without its usage block).
BAD_FLAGS = [
    (["--poll-interval", "abc"], "argument --poll-interval: invalid float value: 'abc'"),
    (["--full-replan-interval", "1h"], "argument --full-replan-interval: invalid float value: '1h'"),
    (["--token-lifetime", "1.5"], "argument --token-lifetime: invalid int value: '1.5'"),
    (["--slurm-timeout", ""], "argument --slurm-timeout: invalid float value: ''"),
    (["--kube-api-qps", "fast"], "argument --kube-api-qps: invalid float value: 'fast'"),
    (["--kube-api-burst", "ten"], "argument --kube-api-burst: invalid int value: 'ten'"),
    (["--job-list-interval", "x"], "argument --job-list-interval: invalid float value: 'x'"),
    (["--absence-confirm-seconds", "x"], "argument --absence-confirm-seconds: invalid float value: 'x'"),
    (["--nodeset-deletion-grace", "x"], "argument --nodeset-deletion-grace: invalid float value: 'x'"),
    (["--lease-duration", "x"], "argument --lease-duration: invalid float value: 'x'"),
    (["--renew-deadline", "x"], "argument --renew-deadline: invalid float value: 'x'"),
    (["--retry-period", "x"], "argument --retry-period: invalid float value: 'x'"),
    (
        ["--log-level", "LOUD"],
        "argument --log-level: invalid choice: 'LOUD' (choose from 'DEBUG', 'INFO', 'WARNING', 'ERROR', 'CRITICAL')",
    ),
    (["--log-format", "yaml"], "argument --log-format: invalid choice: 'yaml' (choose from 'json', 'text')"),
    (["--mode", "all"], "argument --mode: invalid choice: 'all' (choose from 'operator', 'bridge', 'both')"),
    (["--leader-elect=yes"], "argument --leader-elect/--no-leader-elect: ignored explicit argument 'yes'"),
    (["--once=1"], "argument --once: ignored explicit argument '1'"),
    (["--poll-interval"], "argument --poll-interval: expected one argument"),
    (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (
        ["--kube-api-burst", "0"],
        "--kube-api-qps must be 0 (no limit) or more and --kube-api-burst at least 1, got 100 and 0",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD_FLAGS, ids=[" ".join(argv) for argv, _ in BAD_FLAGS])
def test_a_bad_flag_value_is_one_line_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse_args(argv)
    assert exited.value.code == 2
    assert capsys.readouterr() == ("", f"slurm-sync: {message} (see --help)\n")


# A bad value of each typed flag's environment variable, and the one line naming the variable.
BAD_ENV = [
    ("POLL_INTERVAL", "abc", "a number"),
    ("FULL_REPLAN_INTERVAL", "1h", "a number"),
    ("TOKEN_LIFETIME", "5m", "a whole number"),
    ("TOKEN_LIFETIME", "1.5", "a whole number"),
    ("SLURM_TIMEOUT", "", "a number"),
    ("KUBE_API_QPS", "fast", "a number"),
    ("KUBE_API_BURST", "ten", "a whole number"),
    ("JOB_LIST_INTERVAL", "x", "a number"),
    ("ABSENCE_CONFIRM_SECONDS", "x", "a number"),
    ("NODESET_DELETION_GRACE", "x", "a number"),
    ("LEASE_DURATION", "15s", "a number"),
    ("RENEW_DEADLINE", "x", "a number"),
    ("RETRY_PERIOD", "x", "a number"),
    ("LOG_LEVEL", "LOUD", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ("LOG_FORMAT", "yaml", "one of json, text"),
    ("LOG_FORMAT", "JSON", "one of json, text"),
    ("MODE", "all", "one of operator, bridge, both"),
    ("LEADER_ELECT", "maybe", "true or false"),
    ("ONCE", "twice", "true or false"),
]


@pytest.mark.parametrize(("name", "value", "expected"), BAD_ENV, ids=[f"{n}={v!r}" for n, v, _ in BAD_ENV])
def test_a_bad_environment_value_is_one_line_naming_the_variable(
    name: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(f"SLURM_SYNC_{name}", value)
    with pytest.raises(SystemExit) as exited:
        cli.parse_args([])
    line = f"slurm-sync: SLURM_SYNC_{name}={value!r}: expected {expected}"
    assert exited.value.code == 2 and str(exited.value) == line  # its text, for a caller that catches it
    assert capsys.readouterr() == ("", line + "\n")


def test_every_typed_flag_has_a_bad_flag_and_a_bad_environment_value_in_the_tables() -> None:
    typed = {
        action.dest
        for action in cli.parser()._actions
        if action.dest != "help" and (action.type is not None or action.choices is not None or action.nargs == 0)
    }
    assert len(typed) > 15
    assert typed <= {argv[0].split("=")[0][2:].replace("-", "_") for argv, _ in BAD_FLAGS}
    assert typed <= {name.lower() for name, _, _ in BAD_ENV}


@pytest.mark.parametrize(("value", "level"), [("debug", "DEBUG"), ("Warning", "WARNING"), ("CRITICAL", "CRITICAL")])
def test_the_log_level_takes_any_case(value: str, level: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.parse_args(["--log-level", value]).log_level == level
    monkeypatch.setenv("SLURM_SYNC_LOG_LEVEL", value)
    assert cli.parse_args([]).log_level == level


def test_once_takes_the_words_leader_elect_does(monkeypatch: pytest.MonkeyPatch) -> None:
    assert cli.parse_args([]).once is False
    for word, once in (("1", True), ("true", True), ("yes", True), ("0", False), ("off", False)):
        monkeypatch.setenv("SLURM_SYNC_ONCE", word)
        assert cli.parse_args([]).once is once, word


def test_a_bad_flag_value_is_one_line_on_stderr_of_the_process() -> None:
    result = _run("--poll-interval", "abc")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == "slurm-sync: argument --poll-interval: invalid float value: 'abc' (see --help)\n"

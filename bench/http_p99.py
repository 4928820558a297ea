"""NodeSet sync over HTTP under gunicorn, against a floor app in the same run (docs/architecture.md §7, issue 16).

Two servers run side by side with the same gunicorn settings (hooks/gunicorn_conf.py: sync
workers, `HOOKS_WORKERS` of them, logging as `make run`, each on a free loopback port):

* hook:  the hook server (`hooks.app:create_app()`), answering POST /nodeset/sync;
* floor: `floor_app()` below, a Flask app that reads the same request, parses it and answers the
  hook's answer, serialised from the same response as plain JSON data (the same bytes when orjson
  serialises it), each with the fastest JSON library in the venv for that input (the floor of
  bench/nodeset_sync.py, served): nothing else to do, the collector off for good, the parsed
  request freed once the answer is sent (as the hook does).

Requests: a small sync (10 pods) and a 1,000-pod sync as bench/nodeset_sync.py builds them, on one
and two workers, with as many connections as workers (a closed loop: every worker busy, no request
queued behind another, so latency is the time to answer one). The load generator is Debian's `wrk`
(C, light enough to leave the workers the CPU on a 2-core machine); `ensure_wrk` installs it with
apt-get when it is missing and stops the suite, saying why, when it cannot.

Rounds alternate floor and hook (floor, hook, floor, hook, ...) after a warm-up of each, so both see
the same machine; a figure is the median over rounds, and a ratio the median over (hook, floor)
round pairs of hook/floor. Budgets: the small sync's p99 at most 1.5x the floor's; the 1,000-pod
sync's throughput at least 0.8x the floor's; on one and on two workers.
"""

from __future__ import annotations

import gc
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.measure import JSON_PARSERS, JSON_SERIALISERS, Budget, Report, fastest, fmt_ns, fmt_ratio

TITLE = "NodeSet sync over HTTP (gunicorn, wrk): hook server vs a floor app answering the same bytes"
ROOT = Path(__file__).resolve().parents[1]
SYNC_PATH = "/nodeset/sync"
SIZES = {"small": 10, "large": 1_000}  # pods
WORKERS = (1, 2)
P99_BUDGET = 1.5  # small sync: hook p99 / floor p99 at most
THROUGHPUT_BUDGET = 0.8  # 1,000-pod sync: hook requests/s / floor requests/s at least
APT_LOCK_WAIT_SECONDS = 120
START_SECONDS = 120  # a server's start on a loaded machine is slow, not broken: the suite waits for it
Popen = subprocess.Popen[bytes]

_WRK_SCRIPT = """
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
"""


# --- the floor app (gunicorn imports this module in its own process) -------------------------


def floor_app() -> Any:
    """Flask app: POST /nodeset/sync reads and parses the body and serialises the hook's answer to it.

    `BENCH_FLOOR_ANSWERS` names a JSON file mapping a request's byte length to the file holding the
    hook's answer to it and the JSON libraries to parse and serialise with (the requests of this
    suite differ in length).
    """
    from flask import Flask, Response, request

    gc.disable()  # parsed JSON holds no cycles: reference counting frees it, and no collection ever runs
    floors = {
        int(length): Floor(orjson.loads(Path(path).read_bytes()), JSON_PARSERS[parser], JSON_SERIALISERS[serialiser])
        for length, (path, parser, serialiser) in orjson.loads(
            Path(os.environ["BENCH_FLOOR_ANSWERS"]).read_bytes()
        ).items()
    }
    app = Flask("floor")

    @app.post(SYNC_PATH)
    def sync() -> Response:
        length = request.content_length or 0
        floor = floors[length]
        parsed = floor.parse(request.environ["wsgi.input"].read(length))
        response = Response(floor.serialise(floor.answer), 200, mimetype="application/json")
        response.call_on_close(lambda: parsed.clear())  # freed once the answer is sent, as the hook does
        return response

    return app


@dataclass(frozen=True)
class Floor:
    """What the floor app answers to one request, and with which JSON library it parses and serialises."""

    answer: Any
    parse: Callable[[bytes], Any]
    serialise: Callable[[Any], bytes]


# --- wrk ----------------------------------------------------------------------------------------


def ensure_wrk() -> str:
    """The path of wrk, installed with apt-get if it is missing; RuntimeError saying why when it cannot be.

    `apt-get install` fails on a machine whose package lists were never fetched or are stale, so the
    lists are refreshed and the install tried once more; a mirror snapshot whose Release file is past
    its Valid-Until date would make that refresh fail, so its date is not checked. Another apt run
    holding the dpkg lock (as on a machine shared by several sessions) is waited for, not failed on.
    """
    found = shutil.which("wrk")
    if found:
        return found
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        raise RuntimeError("wrk (the load generator) is not installed; install it as root: apt-get install wrk")
    print("make bench: installing wrk (the load generator) with apt-get", file=sys.stderr, flush=True)
    lock = f"DPkg::Lock::Timeout={APT_LOCK_WAIT_SECONDS}"
    install = ["apt-get", "install", "-y", "-q", "-o", lock, "wrk"]
    update = ["apt-get", "update", "-q", "-o", lock, "-o", "Acquire::Check-Valid-Until=false"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    failures = []
    for command in (install, update, install):
        done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if command is install and done.returncode == 0 and shutil.which("wrk"):
            return str(shutil.which("wrk"))
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-4:])
            failures.append(f"$ {' '.join(command)}  (exit {done.returncode})\n{tail}")
    reasons = "\n".join(failures)
    raise RuntimeError(f"wrk (the load generator) is not installed and apt-get could not install it:\n{reasons}")


@dataclass(frozen=True)
class Round:
    """One wrk run: latency percentiles in nanoseconds, requests per second."""

    p50: float
    p99: float
    throughput: float
    requests: int


def run_wrk(wrk: str, url: str, connections: int, seconds: float, body_file: str, script_file: str) -> Round:
    cmd = [wrk, f"-t{connections}", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency"]
    cmd += ["--timeout", "30s", "-s", script_file, url]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "BENCH_BODY": body_file}, check=True)
    text = out.stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    socket_errors = re.search(r"Socket errors: (.*)", text)
    if errors or socket_errors:
        raise RuntimeError(f"wrk saw failed requests on {url}:\n{text}")
    latency = {pct: _wrk_percentile(text, pct) for pct in ("50", "99")}
    requests = re.search(r"^\s*(\d+) requests in", text, re.MULTILINE)
    rate = re.search(r"^Requests/sec:\s*([0-9.]+)", text, re.MULTILINE)
    if not requests or not rate:
        raise RuntimeError(f"cannot read the request count from wrk's output:\n{text}")
    return Round(latency["50"], latency["99"], float(rate.group(1)), int(requests.group(1)))


def _wrk_percentile(text: str, pct: str) -> float:
    match = re.search(rf"^\s*{pct}(?:\.0+)?%\s+([0-9.]+)(us|ms|s)\s*$", text, re.MULTILINE)
    if not match:
        raise RuntimeError(f"cannot read the {pct}th percentile from wrk's output:\n{text}")
    return float(match.group(1)) * {"us": 1e3, "ms": 1e6, "s": 1e9}[match.group(2)]


# --- servers ------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_gunicorn(
    app: str, workers: int, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn with the hook server's settings (hooks/gunicorn_conf.py) serving `app`; the process and its URL."""
    port = _free_port()
    env = {
        **os.environ,
        "HOOKS_BIND": f"127.0.0.1:{port}",
        "HOOKS_WORKERS": str(workers),
        "HOOKS_LOG_LEVEL": "warning",
        **(extra_env or {}),
    }
    for name in ("PROMETHEUS_MULTIPROC_DIR", "HOOKS_ACCESS_LOG", "HOOKS_AUTH_TOKEN_FILE"):
        env.pop(name, None)
    gunicorn = Path(sys.executable).parent / "gunicorn"
    proc = subprocess.Popen(
        [str(gunicorn), "-c", "hooks/gunicorn_conf.py", app],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn serving {app} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/", timeout=1):
                pass
        except urllib.error.HTTPError:  # any HTTP answer (404 for "/") means it serves
            return proc, url
        except OSError:
            time.sleep(0.1)
        else:
            return proc, url
    stop(proc)
    raise RuntimeError(f"gunicorn serving {app} did not answer within {START_SECONDS} s")


def stop(proc: Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --- the suite ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    size: str
    workers: int
    hook: list[Round]
    floor: list[Round]

    def median(self, rounds: list[Round], field: str) -> float:
        return statistics.median(getattr(r, field) for r in rounds)

    def ratio(self, field: str) -> float:
        """Median over round pairs of hook/floor."""
        return statistics.median(
            getattr(h, field) / getattr(f, field) for h, f in zip(self.hook, self.floor, strict=True)
        )


def run(quick: bool = False) -> Report:
    wrk = ensure_wrk()
    from bench.nodeset_sync import build_request, wsgi_post
    from hooks.app import create_app

    app = create_app()
    with tempfile.TemporaryDirectory(prefix="slinky-bench-http-") as tmp:
        bodies: dict[str, str] = {}
        answers: dict[str, tuple[str, str, str]] = {}
        sizes: dict[str, tuple[int, int]] = {}
        libraries: dict[str, str] = {}
        for size, pods in SIZES.items():
            body = build_request(pods, app.test_client())
            answer = wsgi_post(app, SYNC_PATH, body)
            parser, serialiser = fastest(JSON_PARSERS, body), fastest(JSON_SERIALISERS, orjson.loads(answer))
            bodies[size] = _write(tmp, f"{size}.json", body)
            answers[str(len(body))] = (_write(tmp, f"{size}.answer.json", answer), parser, serialiser)
            sizes[size] = (len(body), len(answer))
            libraries[size] = f"{parser}+{serialiser}"
        answers_file = _write(tmp, "answers.json", orjson.dumps(answers))
        script = _write(tmp, "post.lua", _WRK_SCRIPT.encode())
        cases = [
            _measure(wrk, workers, size, bodies[size], script, answers_file, quick)
            for workers in WORKERS
            for size in SIZES
        ]
    return _report(cases, sizes, libraries, quick)


def _write(directory: str, name: str, data: bytes) -> str:
    path = Path(directory) / name
    path.write_bytes(data)
    return str(path)


def _measure(wrk: str, workers: int, size: str, body: str, script: str, answers: str, quick: bool) -> Case:
    """Alternating wrk rounds against both servers, each started for this case and stopped after it."""
    rounds, seconds = (1, 2.0) if quick else (7, 3.0) if size == "small" else (5, 6.0)
    servers = [
        start_gunicorn("hooks.app:create_app()", workers),
        start_gunicorn("bench.http_p99:floor_app()", workers, {"BENCH_FLOOR_ANSWERS": answers}),
    ]
    try:
        (_, hook_url), (_, floor_url) = servers

        def load(url: str, secs: float) -> Round:
            return run_wrk(wrk, url + SYNC_PATH, workers, secs, body, script)

        load(floor_url, 1)  # warm-up: imports, first requests, the hook's annotation verdicts
        load(hook_url, 1)
        hook: list[Round] = []
        floor: list[Round] = []
        for _ in range(rounds):
            floor.append(load(floor_url, seconds))
            hook.append(load(hook_url, seconds))
    finally:
        for proc, _ in servers:
            stop(proc)
    return Case(size, workers, hook, floor)


def _report(cases: list[Case], sizes: dict[str, tuple[int, int]], libraries: dict[str, str], quick: bool) -> Report:
    report = Report(
        title=TITLE,
        columns=["request", "workers", "server", "p50", "p99", "req/s", "p50 ratio", "p99 ratio", "req/s ratio"],
    )
    for case in cases:
        label = f"{SIZES[case.size]:,} pods ({sizes[case.size][0] / 1e6:.2f} MB)"
        for server, rounds in ((f"floor ({libraries[case.size]})", case.floor), ("hook", case.hook)):
            ratios = ["", "", ""]
            if server == "hook":
                ratios = [
                    fmt_ratio(case.ratio("p50")),
                    fmt_ratio(case.ratio("p99")),
                    fmt_ratio(case.ratio("throughput")),
                ]
            report.rows.append(
                [
                    label,
                    str(case.workers),
                    server,
                    fmt_ns(case.median(rounds, "p50")),
                    fmt_ns(case.median(rounds, "p99")),
                    f"{case.median(rounds, 'throughput'):.1f}",
                    *ratios,
                ]
            )
        if case.size == "small":
            name = f"HTTP small sync p99 on {case.workers} worker(s), hook/floor"
            report.budgets.append(Budget(name, case.ratio("p99"), P99_BUDGET))
        else:
            name = f"HTTP 1,000-pod sync throughput on {case.workers} worker(s), hook/floor"
            report.budgets.append(Budget(name, case.ratio("throughput"), THROUGHPUT_BUDGET, at_least=True))
    count = len(cases[0].hook)
    report.notes.append(
        f"wrk, connections = workers, {count} round(s) per server alternating floor/hook; figures are medians over "
        "rounds, ratios medians over round pairs."
    )
    report.notes.append(
        "floor = a Flask app under the same gunicorn settings: reads and parses the request, serialises the same "
        "answer (the fastest JSON library for each, collector off), frees the request after answering."
    )
    if quick:
        report.notes.append("--quick: one short round per server; not a measurement.")
    return report

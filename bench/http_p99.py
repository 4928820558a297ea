"""p99 over HTTP for a small NodeSet sync on one gunicorn worker, next to `/healthz` (docs/architecture.md §7).

gunicorn serves the app exactly as `make run` does (hooks/gunicorn_conf.py, `HOOKS_WORKERS=1`, a
free loopback port). The load generator runs in its own process with one connection, so there is
no queueing: every figure is the latency of one request. It is Debian's `wrk` (C, light enough to
leave the worker a core of its own on a 2-core machine; `make bench` installs it with apt when it
is missing); without wrk, `bench/loadgen.py` (a small Python client in a separate process) stands
in and the table says so. gunicorn's sync worker closes each connection after answering, so both
tools reconnect per request (wrk does not count the connect in its latency; loadgen does not either).

Rounds alternate peer and subject (healthz, sync, healthz, sync, ...) after a warm-up of each;
the table shows the median over rounds of each round's p50/p99 (and the range of the rounds'
p99s: on a shared 2-core machine another process's burst shows up in one round, not in all).
"""

from __future__ import annotations

import json
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
import urllib.request
from pathlib import Path

from bench.measure import Budget, Report, fmt_ns, fmt_ratio

TITLE = "p99 over HTTP, one gunicorn worker: small NodeSet sync vs /healthz"
ROOT = Path(__file__).resolve().parents[1]
SMALL_SYNC_PODS = 10
P99_BUDGET_MS = 5.0

_WRK_SCRIPT = """
local f = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_gunicorn(workers: int = 1) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn as `make run` starts it, on a free port; returns the process and its base URL."""
    port = _free_port()
    env = {**os.environ, "HOOKS_BIND": f"127.0.0.1:{port}", "HOOKS_WORKERS": str(workers), "HOOKS_LOG_LEVEL": "warning"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.pop("HOOKS_ACCESS_LOG", None)
    gunicorn = Path(sys.executable).parent / "gunicorn"
    proc = subprocess.Popen(
        [str(gunicorn), "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gunicorn exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as resp:
                if resp.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.1)
    stop(proc)
    raise RuntimeError("gunicorn did not answer /healthz within 30 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def small_sync_body() -> bytes:
    from bench.nodeset_sync import build_request
    from hooks.app import create_app

    return build_request(SMALL_SYNC_PODS, create_app().test_client())


# --- load generators: each returns {"p50": ns, "p99": ns, "requests": n, "errors": n} ----------


def run_wrk(url: str, seconds: float, body_file: str | None, script_file: str) -> dict[str, float]:
    cmd = ["wrk", "-t1", "-c1", f"-d{max(1, round(seconds))}s", "--latency", "--timeout", "5s"]
    env = dict(os.environ)
    if body_file is not None:
        cmd += ["-s", script_file]
        env["BENCH_BODY"] = body_file
    out = subprocess.run([*cmd, url], capture_output=True, text=True, env=env, check=True).stdout
    result: dict[str, float] = {}
    for pct in ("50", "99"):
        match = re.search(rf"^\s*{pct}(?:\.0+)?%\s+([0-9.]+)(us|ms|s)\s*$", out, re.MULTILINE)
        if not match:
            raise RuntimeError(f"cannot read the {pct}th percentile from wrk's output:\n{out}")
        result["p" + pct] = float(match.group(1)) * {"us": 1e3, "ms": 1e6, "s": 1e9}[match.group(2)]
    requests = re.search(r"^\s*(\d+) requests in", out, re.MULTILINE)
    result["requests"] = float(requests.group(1)) if requests else 0.0
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["errors"] = float(errors.group(1)) if errors else 0.0
    return result


def run_loadgen(url: str, seconds: float, body_file: str | None) -> dict[str, float]:
    cmd = [sys.executable, str(ROOT / "bench" / "loadgen.py"), url, str(seconds)]
    if body_file is not None:
        cmd.append(body_file)
    return json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)


def run(quick: bool = False) -> Report:
    body = small_sync_body()
    use_wrk = shutil.which("wrk") is not None
    rounds, seconds = (1, 2.0) if quick else (5, 3.0)
    with tempfile.TemporaryDirectory(prefix="slinky-bench-") as tmp:
        body_file = os.path.join(tmp, "sync.json")
        script_file = os.path.join(tmp, "post.lua")
        Path(body_file).write_bytes(body)
        Path(script_file).write_text(_WRK_SCRIPT)

        def load(url: str, secs: float, with_body: bool) -> dict[str, float]:
            if use_wrk:
                return run_wrk(url, secs, body_file if with_body else None, script_file)
            return run_loadgen(url, secs, body_file if with_body else None)

        proc, base = start_gunicorn(workers=1)
        try:
            load(base + "/healthz", 1, False)  # warm-up: imports, first requests, caches
            load(base + "/nodeset/sync", 1, True)
            peer: list[dict[str, float]] = []
            subject: list[dict[str, float]] = []
            for _ in range(rounds):
                peer.append(load(base + "/healthz", seconds, False))
                subject.append(load(base + "/nodeset/sync", seconds, True))
        finally:
            stop(proc)

    def med(results: list[dict[str, float]], key: str) -> float:
        return statistics.median(r[key] for r in results)

    errors = sum(r["errors"] for r in peer + subject)
    if errors:
        raise RuntimeError(f"{errors:.0f} requests did not answer 2xx during the HTTP benchmark")
    tool = "wrk -t1 -c1" if use_wrk else "bench/loadgen.py (wrk not installed)"

    def spread(results: list[dict[str, float]]) -> str:
        return f"{fmt_ns(min(r['p99'] for r in results))} - {fmt_ns(max(r['p99'] for r in results))}"

    report = Report(
        title=TITLE, columns=["route", "body", "p50", "p99", "p99 of rounds", "requests", "p50 ratio", "p99 ratio"]
    )
    report.rows.append(
        [
            "GET /healthz (peer)",
            "-",
            fmt_ns(med(peer, "p50")),
            fmt_ns(med(peer, "p99")),
            spread(peer),
            f"{sum(r['requests'] for r in peer):.0f}",
            "1.00x",
            "1.00x",
        ]
    )
    report.rows.append(
        [
            f"POST /nodeset/sync ({SMALL_SYNC_PODS} pods)",
            f"{len(body) / 1e3:.0f} kB",
            fmt_ns(med(subject, "p50")),
            fmt_ns(med(subject, "p99")),
            spread(subject),
            f"{sum(r['requests'] for r in subject):.0f}",
            fmt_ratio(med(subject, "p50") / med(peer, "p50")),
            fmt_ratio(med(subject, "p99") / med(peer, "p99")),
        ]
    )
    report.notes.append(
        f"load generator: {tool}, one connection, {rounds} round(s) of {seconds:g} s each, medians over rounds"
    )
    report.budgets.append(
        Budget("p99 of a small NodeSet sync on one gunicorn worker", med(subject, "p99") / 1e6, P99_BUDGET_MS, " ms")
    )
    return report

"""The hook server's memory under a long mixed load, behind gunicorn as deployed (issue 22).

The hook server once grew about 6 KB a request per worker, without bound, only behind gunicorn: a
pod capped at 512 MiB was OOM-killed after some 150,000 requests, and while it restarted the bridge's
admission webhooks (`failurePolicy: Fail`) refused every pod in managed namespaces. This suite sends
200,000 requests in a fixed mix and reads each worker's resident memory (VmRSS) after the first
10,000 and after the last, each once the server is idle; a worker whose two readings are more than
10 MB apart misses the budget.

Two servers, one after the other: `make run`'s settings (hooks/gunicorn_conf.py, a worker per core)
and the operator chart's defaults (the hook container's environment as the real helm renders it,
bearer token included: every request carries it).
The mix, per 1,000 requests: 700 small NodeSet syncs (examples/requests/nodeset-sync.json), 2
1,000-pod syncs (bench/nodeset_sync.py), 50 each of the bridge's mutating and validating admission
reviews, 50 each of Controller, RestApi and Token syncs (their examples), and 50 malformed requests
(invalid JSON, and a sync without its parent: 400). The malformed ones go to routes no other kind uses, so the
server's own counters (/metrics) show that every route answered only the status its kinds expect. The
load generator is wrk (two connections per worker), stopped once the server has answered the count.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.http_p99 import ensure_wrk, start_gunicorn, stop
from bench.measure import Budget, Report

TITLE = "Hook server memory: RSS of each worker after 10,000 and 200,000 mixed requests (gunicorn, wrk)"
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples" / "requests"
HELM = ROOT / ".cache" / "bin" / "helm"
REQUESTS = (10_000, 200_000)  # RSS read after each count
QUICK_REQUESTS = (2_000, 20_000)
DRIFT_BUDGET_MB = 10.0


@dataclass(frozen=True)
class Kind:
    """One kind of request in the mix: what is posted where, how often, and the status it must get."""

    name: str
    path: str
    body: bytes
    per_thousand: int
    status: int


def mix() -> list[Kind]:
    from bench.nodeset_sync import build_request
    from hooks.app import create_app

    def example(route: str) -> bytes:
        return (EXAMPLES / f"{route.strip('/').replace('/', '-')}.json").read_bytes()

    large = build_request(1_000, create_app().test_client())
    return [
        Kind("small NodeSet sync", "/nodeset/sync", example("/nodeset/sync"), 700, 200),
        Kind("1,000-pod NodeSet sync", "/nodeset/sync", large, 2, 200),
        Kind("admission (mutate)", "/bridge/admission/mutate", example("/bridge/admission/mutate"), 50, 200),
        Kind("admission (validate)", "/bridge/admission/validate", example("/bridge/admission/validate"), 50, 200),
        Kind("Controller sync", "/controller/sync", example("/controller/sync"), 50, 200),
        Kind("RestApi sync", "/restapi/sync", example("/restapi/sync"), 50, 200),
        Kind("Token sync", "/token/sync", example("/token/sync"), 48, 200),
        Kind("malformed: invalid JSON", "/accounting/sync", b'{"parent": ', 25, 400),
        Kind("malformed: no parent", "/loginset/sync", b"{}", 25, 400),
    ]


# A fixed cycle of 1,000 requests with each kind spread evenly over it, each wrk thread starting at
# another place in it. Answers are counted by the server (its /metrics), not by wrk.
_WRK_SCRIPT = r"""
local kinds, cycle = {}, {}
for line in io.lines(os.getenv("BENCH_MIX")) do
  local path, file, share = line:match("^(.-)\t(.-)\t(%d+)$")
  local f = assert(io.open(file, "rb")); local body = f:read("*a"); f:close()
  local headers = {["Content-Type"] = "application/json"}
  if os.getenv("BENCH_TOKEN") then headers["Authorization"] = "Bearer " .. os.getenv("BENCH_TOKEN") end
  local request = wrk.format("POST", path, headers, body)
  kinds[#kinds + 1] = {request = request, share = tonumber(share), sent = 0}
end
for slot = 0, 999 do
  local best, score = 1, -1
  for i, k in ipairs(kinds) do  -- the kind furthest behind its share at this slot
    local owed = k.share * (slot + 1) / 1000 - k.sent
    if owed > score then best, score = i, owed end
  end
  kinds[best].sent = kinds[best].sent + 1
  cycle[#cycle + 1] = kinds[best].request
end
local started = 0

function setup(thread)
  thread:set("offset", started * 397 % 1000)
  started = started + 1
end

function request()
  offset = offset % 1000 + 1
  return cycle[offset]
end
"""


@dataclass(frozen=True)
class Worker:
    pid: int
    rss_mb: tuple[float, ...]  # after each count of REQUESTS

    @property
    def growth_mb(self) -> float:
        return self.rss_mb[-1] - self.rss_mb[0]

    @property
    def drift_mb(self) -> float:
        """How far the last reading is from the first, either way."""
        return abs(self.growth_mb)


def run(quick: bool = False) -> Report:
    wrk = ensure_wrk()
    counts = QUICK_REQUESTS if quick else REQUESTS
    report = Report(TITLE, ["server", "worker", *[f"RSS after {n:,}" for n in counts], "growth"])
    with tempfile.TemporaryDirectory(prefix="slinky-bench-memory-") as tmp:
        kinds = mix()
        mix_file = _write_mix(Path(tmp), kinds)
        script = Path(tmp) / "mix.lua"
        script.write_text(_WRK_SCRIPT)
        for server, env in (("make run", {}), ("chart defaults", chart_environment(Path(tmp)))):
            workers = _measure(wrk, env, counts, mix_file, script, kinds)
            for worker in workers:
                rss = [f"{mb:.1f} MB" for mb in worker.rss_mb]
                report.rows.append([server, str(worker.pid), *rss, f"{worker.growth_mb:+.1f} MB"])
                report.budgets.append(
                    Budget(f"{server}: worker RSS drift, {counts[0]:,} -> {counts[-1]:,} requests",
                           worker.drift_mb, DRIFT_BUDGET_MB, unit=" MB")
                )  # fmt: skip
    report.notes.append(
        "mix per 1,000: " + ", ".join(f"{k.per_thousand} {k.name}" for k in kinds) + "; every status as expected"
    )
    return report


def chart_environment(tmp: Path) -> dict[str, str]:
    """The hook container's plain `env` values as the real helm renders the operator chart's defaults; the
    token file it names (authentication is on by default) is one written in `tmp`."""
    helm = str(HELM) if HELM.exists() else shutil.which("helm")
    if helm is None:
        raise RuntimeError(f"helm is needed to render the chart's defaults: `make helm` installs it at {HELM}")
    rendered = subprocess.run(
        [helm, "template", "slurm-operator", str(ROOT / "charts" / "slurm-operator"), "-n", "slinky",
         "--kube-version", "1.33.0", "--api-versions", "metacontroller.k8s.io/v1alpha1"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    for doc in yaml.safe_load_all(rendered):
        if doc and doc.get("kind") == "Deployment" and doc["metadata"]["name"].endswith("-hooks"):
            (container,) = [c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == "hooks"]
            env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
            env.pop("HOOKS_BIND")  # the bench binds a free loopback port
            if "HOOKS_AUTH_TOKEN_FILE" in env:
                token = tmp / "token"
                token.write_text(secrets.token_urlsafe(32))
                env["HOOKS_AUTH_TOKEN_FILE"] = str(token)
            return env
    raise RuntimeError("the operator chart rendered no hooks Deployment")


def _write_mix(tmp: Path, kinds: list[Kind]) -> Path:
    lines = []
    for i, kind in enumerate(kinds):
        body = tmp / f"kind{i}.json"
        body.write_bytes(kind.body)
        lines.append(f"{kind.path}\t{body}\t{kind.per_thousand}")
    assert sum(k.per_thousand for k in kinds) == 1_000
    path = tmp / "mix.tsv"
    path.write_text("\n".join(lines) + "\n")
    return path


def _measure(wrk: str, env: dict[str, str], counts: tuple[int, ...], mix_file: Path, script: Path,
             kinds: list[Kind]) -> list[Worker]:  # fmt: skip
    """Serve with `env`, send each count's requests in turn, and read every worker's RSS after each."""
    proc, url = start_gunicorn("hooks.app:create_app()", int(env.get("HOOKS_WORKERS", "0")) or _cpus(), env)
    try:
        pids = _workers(proc.pid)
        rss: dict[int, list[float]] = {pid: [] for pid in pids}
        for stops, count in enumerate(counts, start=1):
            _send(wrk, url, count, len(pids), mix_file, script, kinds, stops, env)
            _wait_idle(url)
            if _workers(proc.pid) != pids:
                raise RuntimeError(f"a worker was replaced during the run ({pids} -> {_workers(proc.pid)})")
            for pid in pids:
                rss[pid].append(_rss_mb(pid))
    finally:
        stop(proc)
    return [Worker(pid, tuple(values)) for pid, values in rss.items()]


def _send(
    wrk: str,
    url: str,
    until: int,
    workers: int,
    mix_file: Path,
    script: Path,
    kinds: list[Kind],
    stops: int,
    env: dict[str, str],
) -> None:
    """The mix (two connections per worker, one per wrk thread) until the server has answered `until`
    requests in all, every route with the status its kinds expect and no other (`stops`: wrk stopped so far,
    this time included; `env`: the server's, whose token it sends)."""
    threads = 2 * workers
    load_env = {**os.environ, "BENCH_MIX": str(mix_file)}
    if token_file := env.get("HOOKS_AUTH_TOKEN_FILE"):
        load_env["BENCH_TOKEN"] = Path(token_file).read_text()
    load = subprocess.Popen(
        [wrk, f"-t{threads}", f"-c{threads}", "-d3600s", "--timeout", "60s", "-s", str(script), url],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=load_env,
    )  # fmt: skip
    try:
        while sum(_answered(url).values()) < until:
            if load.poll() is not None:
                raise RuntimeError(f"wrk stopped early:\n{load.communicate()[0]}")
            time.sleep(0.5)
    finally:
        load.send_signal(signal.SIGINT)  # wrk prints its summary and exits
        out = load.communicate(timeout=60)[0]
    expected = {(k.path, str(k.status)) for k in kinds}
    wrong = {key: n for key, n in _answered(url).items() if n and key not in expected}
    # Stopping wrk cuts the requests it is sending (one per connection at most, each stop): the app
    # answers each 400 ("request body ended after ..."), to no one.
    cut = sum(n for (_, status), n in wrong.items() if status == "400")
    if cut > threads * stops or any(status != "400" for _, status in wrong) or "Socket errors" in out:
        raise RuntimeError(f"unexpected answers (route, status: count): {wrong}\n{out}")


def _wait_idle(url: str) -> None:
    """Until the server has answered what was in flight when wrk stopped: RSS read mid-request would be
    that request's, not the worker's."""
    last = -1.0
    while (total := sum(_answered(url).values())) != last:
        last = total
        time.sleep(1.0)


def _answered(url: str) -> dict[tuple[str, str], float]:
    """(route, status) -> requests answered, from the server's own counter over all its workers."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as answer:
        text = answer.read().decode()
    pattern = r'^slinky_hook_requests_total\{code="(\d+)",route="([^"]+)"\} ([0-9.e+]+)$'
    return {(route, code): float(n) for code, route, n in re.findall(pattern, text, re.MULTILINE)}


def _workers(master: int) -> list[int]:
    children = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return sorted(int(pid) for pid in children)


def _rss_mb(pid: int) -> float:
    match = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no VmRSS for worker {pid}")
    return int(match.group(1)) / 1024


def _cpus() -> int:
    return os.cpu_count() or 1

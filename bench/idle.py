"""slurm_sync and the hook server at idle (docs/architecture.md §7, issue 30): the requests a minute of idling
costs the API server and slurmrestd, and the memory each process holds.

Every peer is real and the suite's own: the API server lab (``hack/kube``, state under ``.cache/bench-kube``,
ports 16543 and 16479, its garbage collector's sweeps, which list every resource each second, turned off)
and the Slurm lab the bridge suite runs (``bench/bridge.py``: a copy of ``hack/slurm`` under
``.cache/bench-lab``). ``python -m slurm_sync`` runs as deployed (leader election on, every default timing:
a 2 s retry period, a 10 s poll), through a counting proxy in front of slurmrestd; the API server counts
its own requests (``apiserver_request_total`` on its ``/metrics``, summed over the resources slurm_sync's
chart grants it: the bench sends none of those while it counts).

* No cluster: slurm_sync leading in an empty namespace; Lease requests per minute (budget: 32, one
  renewal every 2 s and a little room).
* One Controller (the lab's Slurm), its RestApi, JWT key Secret and slurmctld pod, a NodeSet of two
  worker pods on the lab's n1 and n2 and their Node: once slurm_sync has settled (ready, no write for 25 s),
  API server requests per minute (budget: 34: the Lease's 30, and the watches' re-watches and what else a
  quiet pass might need) and slurmrestd requests per minute (budget: 12: two listings per 10 s pass); then
  its resident memory (budget: 63 MB, SchedMD's Go operator's idle RSS in the same set-up) and its
  proportional memory (PSS, reported).
* The hook server with two workers (``hooks/gunicorn_conf.py``), after 2,000 requests of a small cluster's
  mix (the memory suite's, without its 1,000-pod syncs): PSS of the master and both workers in all, shared
  pages counted once (budget: 120 MB).

Watches are counted when they end (as the API server counts them): over a window, their share is the
number of watches over their 4-8 minute span.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import http.client
import http.server
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client, config
from prometheus_client.parser import text_string_to_metric_families

from bench import bridge, hooks_memory
from bench.http_p99 import ensure_wrk, start_gunicorn, stop
from bench.measure import Budget, Report
from slinky_common import names
from slurm_sync.slurm.client import SlurmClient
from tests.crds.cases import example
from tests.kube.fixtures import CRD_FILES
from tests.kube.kubeapi import apply_crds, conditions, create_cr
from tests.slurm_sync.apiserverrig import cluster_objects

TITLE = "At idle: requests a minute to the API server and slurmrestd, memory of slurm_sync and the hook server"
REPO = Path(__file__).resolve().parents[1]
KUBE_HOME = REPO / ".cache" / "bench-kube"
KUBE_SETTINGS = {
    "KUBE_LAB_DIR": str(KUBE_HOME),
    "KUBE_LAB_PORT": "16543",
    "KUBE_LAB_ETCD_PORT": "16479",
    "KUBE_LAB_SERVER_ARGS": "--gc-interval=86400",
}
RBAC_RULES = REPO / "charts" / "slurm-operator" / "files" / "rbac" / "slurm-sync.yaml"
NAMESPACE = "bench-idle"
CLUSTER = "slurm"
WORKERS = {"worker-0": "n1", "worker-1": "n2"}
KUBE_NODE = "bench-node"
LEASE_PER_MINUTE = 32.0
API_PER_MINUTE = 34.0
SLURM_PER_MINUTE = 12.0
SYNC_RSS_MB = 63.0
HOOKS_PSS_MB = 120.0
HOOK_WORKERS = 2
HOOK_REQUESTS = 2_000
SETTLE_SECONDS = 25.0  # no write for this long (two passes and more): settled
START_TIMEOUT = 300.0
JSON = dict[str, Any]


@dataclasses.dataclass(frozen=True)
class Windows:
    lease: float
    idle: float


def run(quick: bool = False) -> Report:
    windows = Windows(30.0, 60.0) if quick else Windows(60.0, 180.0)
    report = Report(TITLE, ["figure", "measured", "note"])
    env = bridge.start_lab()
    try:
        with kube_lab() as kubeconfig:
            measure_slurm_sync(report, kubeconfig, env, windows)
    finally:
        bridge.stop_lab()
    measure_hooks(report)
    return report


# --- the labs -------------------------------------------------------------------------------------


@contextmanager
def kube_lab() -> Iterator[Path]:
    """The suite's own API server, up; its kubeconfig."""
    settings = {**os.environ, **KUBE_SETTINGS}
    script = REPO / "hack" / "kube"
    done = subprocess.run([str(script / "up.sh")], env=settings, cwd=REPO, capture_output=True, text=True)
    try:
        if done.returncode != 0:
            error = KUBE_HOME / "error"
            why = error.read_text().strip() if error.exists() else f"exit {done.returncode}"
            raise RuntimeError(f"the suite's API server did not start: {why}\n{done.stderr[-2000:]}")
        yield KUBE_HOME / "kubeconfig"
    finally:
        subprocess.run([str(script / "down.sh")], env=settings, cwd=REPO, capture_output=True, check=False)


class ApiServer:
    """The lab's API server as an administrator sees it: objects through the official client, and its own
    request counters."""

    def __init__(self, kubeconfig: Path, tmp: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        doc = yaml.safe_load(kubeconfig.read_text())
        ca = tmp / "ca.crt"
        ca.write_bytes(base64.b64decode(doc["clusters"][0]["cluster"]["certificate-authority-data"]))
        self._http = httpx.Client(
            base_url=doc["clusters"][0]["cluster"]["server"],
            verify=str(ca),
            headers={"Authorization": f"Bearer {doc['users'][0]['user']['token']}"},
            timeout=30,
        )
        self.resources = sync_resources()

    def requests(self) -> Counter[str]:
        """``apiserver_request_total`` so far, per "VERB resource", over the resources slurm_sync may touch."""
        counts: Counter[str] = Counter()
        for family in text_string_to_metric_families(self._http.get("/metrics").text):
            for sample in family.samples:
                labels = sample.labels
                if sample.name == "apiserver_request_total" and labels.get("resource") in self.resources:
                    counts[f"{labels['verb']} {labels['resource']}"] += int(sample.value)
        return counts

    def close(self) -> None:
        self._http.close()
        self.api.close()


def sync_resources() -> set[str]:
    """Every resource the operator chart lets slurm_sync touch (its RBAC rules file), without subresources."""
    rules = yaml.safe_load(RBAC_RULES.read_text())
    return {resource.split("/")[0] for group in rules.values() for rule in group for resource in rule["resources"]}


class SlurmCounter:
    """A proxy in front of slurmrestd that counts each request it relays, as "METHOD /path"."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.seen: list[str] = []
        counter = self

        class Relay(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def relay(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                counter.seen.append(f"{self.command} {self.path.partition('?')[0]}")
                upstream = http.client.HTTPConnection(host, int(port or 80), timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                upstream.request(self.command, self.path, body, headers)
                answer = upstream.getresponse()
                data = answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_DELETE = relay

            def log_message(self, *args: object) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Relay)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- slurm_sync -----------------------------------------------------------------------------------


@dataclasses.dataclass
class SyncProcess:
    process: subprocess.Popen[bytes]
    port: int

    def get(self, path: str) -> httpx.Response:
        return httpx.get(f"http://127.0.0.1:{self.port}{path}", timeout=10)

    def writes(self) -> float:
        total = 0.0
        for family in text_string_to_metric_families(self.get("/metrics").text):
            for sample in family.samples:
                if sample.name in ("slurm_sync_kube_writes_total", "slurm_sync_slurm_writes_total"):
                    total += sample.value
        return total

    def leading(self) -> bool:
        try:
            ready = self.get("/readyz")
        except httpx.HTTPError:
            return False
        return ready.status_code == 200 and ready.text.startswith("leader")


def start_slurm_sync(kubeconfig: Path, slurm_url: str, log: Path) -> SyncProcess:
    port = free_port()
    args = [
        *(sys.executable, "-m", "slurm_sync", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE),
        *("--slurm-url", slurm_url, "--lease-namespace", NAMESPACE, "--bind", f"127.0.0.1:{port}"),
    ]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(log.parent), "HOSTNAME": "bench-idle"}
    with log.open("wb") as out:
        process = subprocess.Popen(args, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return SyncProcess(process, port)


def measure_slurm_sync(report: Report, kubeconfig: Path, env: dict[str, str], windows: Windows) -> None:
    with tempfile.TemporaryDirectory(prefix="slinky-bench-idle-") as tmp:
        server, slurm = ApiServer(kubeconfig, Path(tmp)), SlurmCounter(env["SLURM_REST_URL"])
        sync = None
        try:
            install(server.api)
            sync = start_slurm_sync(kubeconfig, slurm.url, Path(tmp) / "slurm-sync.log")
            wait(sync.leading, "slurm_sync to lead", sync)
            time.sleep(5)  # its first renewals
            lease = counted(server, slurm, windows.lease)[0]
            make_cluster(server.api, env)
            settle(sync)
            just_after_a_pass(slurm)
            api, slurm_seen = counted(server, slurm, windows.idle)
            memory = process_memory(sync.process.pid)
        except Exception:
            log = Path(tmp) / "slurm-sync.log"
            print(f"slurm_sync's log:\n{log.read_text()[-4000:] if log.exists() else '(none)'}", file=sys.stderr)
            raise
        finally:
            if sync is not None:
                sync.process.send_signal(signal.SIGTERM)
                sync.process.wait(timeout=60)
            slurm.close()
            server.close()
    report_slurm_sync(report, lease, api, slurm_seen, memory, windows)


def counted(server: ApiServer, slurm: SlurmCounter, seconds: float) -> tuple[Counter[str], Counter[str]]:
    """The API server's requests and slurmrestd's over ``seconds`` of idling."""
    api_before, slurm_before = server.requests(), len(slurm.seen)
    time.sleep(seconds)
    api = server.requests()
    api.subtract(api_before)
    return +api, Counter(slurm.seen[slurm_before:])


def just_after_a_pass(slurm: SlurmCounter) -> None:
    """Returns a second after a pass read Slurm: a window of whole poll intervals from then holds as many
    passes, never one more at its edge."""
    seen = len(slurm.seen)
    wait(lambda: len(slurm.seen) > seen, "a pass")
    time.sleep(1.0)


def per_minute(counts: Counter[str], seconds: float) -> float:
    return sum(counts.values()) * 60 / seconds


def report_slurm_sync(
    report: Report, lease: Counter[str], api: Counter[str], slurm: Counter[str], memory: tuple[float, float],
    windows: Windows,
) -> None:  # fmt: skip
    leases = Counter({k: v for k, v in lease.items() if k.endswith(" leases")})
    rss, pss = memory
    figures = [
        ("no cluster: Lease requests a minute", per_minute(leases, windows.lease), LEASE_PER_MINUTE, "", lease),
        ("one Controller, 2-pod NodeSet: API requests a minute", per_minute(api, windows.idle), API_PER_MINUTE, "",
         api),
        ("one Controller, 2-pod NodeSet: slurmrestd requests a minute", per_minute(slurm, windows.idle),
         SLURM_PER_MINUTE, "", slurm),
        ("slurm_sync idle RSS", rss, SYNC_RSS_MB, " MB", Counter()),
    ]  # fmt: skip
    for name, value, limit, unit, counts in figures:
        detail = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        report.rows.append([name, f"{value:.1f}{unit}", detail])
        report.budgets.append(Budget(f"slurm_sync at idle: {name}", value, limit, unit))
    report.rows.append(["slurm_sync idle PSS", f"{pss:.1f} MB", "proportional: shared pages counted once"])
    report.notes.append(
        f"windows: {windows.lease:.0f} s leading with no cluster, {windows.idle:.0f} s with the cluster settled; "
        "API requests counted by the API server over the resources slurm_sync's chart grants it (a watch "
        "when it ends), slurmrestd's by a proxy in front of it."
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait(check: Callable[[], bool], what: str, sync: SyncProcess | None = None, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if sync is not None and sync.process.poll() is not None:
            raise RuntimeError(f"slurm_sync exited ({sync.process.returncode}) waiting for {what}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.5)


def settle(sync: SyncProcess) -> None:
    """Until slurm_sync leads, is ready and has written nothing for ``SETTLE_SECONDS``."""
    state = {"writes": -1.0, "since": time.monotonic()}

    def quiet() -> bool:
        writes, now = sync.writes(), time.monotonic()
        if writes != state["writes"] or not sync.leading():
            state.update(writes=writes, since=now)
        return now - state["since"] >= SETTLE_SECONDS

    wait(quiet, "slurm_sync to settle (ready, no write)", sync)


def process_memory(pid: int) -> tuple[float, float]:
    """(RSS, PSS) of a process, in MB."""
    return status_kb(pid, "VmRSS") / 1024, rollup_kb(pid, "Pss") / 1024


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def rollup_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


# --- the objects ------------------------------------------------------------------------------------


def install(api: Any) -> None:
    """Our CRDs, Established, and the suite's namespace."""
    for name in apply_crds(api, CRD_FILES):
        wait(functools.partial(established, api, name), f"CRD {name}")
    core: Any = client.CoreV1Api(api)  # the client sends dict bodies as they are
    core.create_namespace({"metadata": {"name": NAMESPACE}})


def established(api: Any, name: str) -> bool:
    return conditions(api, name).get("Established") == "True"


def make_cluster(api: Any, env: dict[str, str]) -> None:
    """The Controller of the lab's Slurm and what slurm_sync reads of it (module docstring)."""
    with SlurmClient(env["SLURM_REST_URL"], lambda: env["SLURM_REST_TOKEN"]) as slurm:
        slurmctld, cluster_name = slurm.ping().controllers[0].hostname, str(slurm.cluster)
    core: Any = client.CoreV1Api(api)  # the client sends dict bodies as they are
    key = base64.b64encode(Path(env["SLURM_JWT_KEY_FILE"]).read_bytes()).decode()
    core.create_namespaced_secret(NAMESPACE, {"metadata": {"name": "slurm-jwt"}, "data": {"jwt.key": key}})
    for obj in cluster_objects(NAMESPACE, CLUSTER, cluster_name):
        create_cr(api, obj, NAMESPACE)
    nodeset = example("NodeSet")
    nodeset["metadata"] = {"name": "worker", "namespace": NAMESPACE}
    nodeset["spec"]["controllerRef"] = {"name": CLUSTER}
    created = create_cr(api, nodeset, NAMESPACE)
    for plural, name in (("controllers", CLUSTER), ("nodesets", "worker")):
        synced(api, plural, name)
    core.create_node({"metadata": {"name": KUBE_NODE}})
    owner = {"apiVersion": names.API_VERSION, "kind": "NodeSet", "name": "worker", "uid": created["metadata"]["uid"],
             "controller": True}  # fmt: skip
    ready = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
    for pod, node in WORKERS.items():
        labels = {names.LABEL_CLUSTER: CLUSTER, names.LABEL_NODESET_POD_HOSTNAME: node}
        meta = {"name": pod, "labels": labels, "ownerReferences": [owner]}
        spec = {"hostname": node, "nodeName": KUBE_NODE, "containers": [{"name": "slurmd", "image": "slurmd:26.05"}]}
        core.create_namespaced_pod(NAMESPACE, {"metadata": meta, "spec": spec})
        core.patch_namespaced_pod_status(pod, NAMESPACE, ready)
    labels = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: CLUSTER}
    spec = {"hostname": slurmctld, "containers": [{"name": "slurmctld", "image": "slurmctld:26.05"}]}
    core.create_namespaced_pod(NAMESPACE, {"metadata": {"name": slurmctld, "labels": labels}, "spec": spec})


def synced(api: Any, plural: str, name: str) -> None:
    """A status condition, as the hooks' answers leave one through Metacontroller (there is none here):
    without it slurm_sync tells the object was never synced, with a Warning Event now and then."""
    condition = {"type": "Ready", "status": "True", "reason": "Bench", "message": "as a hook's answer leaves it"}
    custom: Any = client.CustomObjectsApi(api)  # the client sends dict bodies as they are
    custom.patch_namespaced_custom_object_status(
        names.GROUP, names.VERSION, NAMESPACE, plural, name, {"status": {"conditions": [condition]}}
    )


# --- the hook server --------------------------------------------------------------------------------


def measure_hooks(report: Report) -> None:
    """PSS of the hook server with two workers after a small cluster's requests."""
    wrk = ensure_wrk()
    kinds = small_cluster_mix()
    with tempfile.TemporaryDirectory(prefix="slinky-bench-idle-hooks-") as tmp:
        mix_file = hooks_memory._write_mix(Path(tmp), kinds)
        script = Path(tmp) / "mix.lua"
        script.write_text(hooks_memory._WRK_SCRIPT)
        proc, url = start_gunicorn("hooks.app:create_app()", HOOK_WORKERS, {})
        try:
            hooks_memory._send(wrk, url, HOOK_REQUESTS, HOOK_WORKERS, mix_file, script, kinds, 1, {})
            hooks_memory._wait_idle(url)
            pids = [proc.pid, *hooks_memory._workers(proc.pid)]
            pss = [rollup_kb(pid, "Pss") / 1024 for pid in pids]
            rss = [status_kb(pid, "VmRSS") / 1024 for pid in pids]
        finally:
            stop(proc)
    detail = (
        "master and workers: PSS "
        + ", ".join(f"{p:.1f}" for p in pss)
        + " MB; RSS "
        + ", ".join(f"{r:.1f}" for r in rss)
    )
    report.rows.append([f"hook server, {HOOK_WORKERS} workers: PSS in all", f"{sum(pss):.1f} MB", detail + " MB"])
    report.budgets.append(Budget(f"hook server at idle, {HOOK_WORKERS} workers: PSS in all", sum(pss), HOOKS_PSS_MB,
                                 " MB"))  # fmt: skip
    report.notes.append(
        f"hook server: {HOOK_REQUESTS:,} requests of a small cluster's mix first (per 1,000: "
        + ", ".join(f"{k.per_thousand} {k.name}" for k in kinds)
        + ")."
    )


def small_cluster_mix() -> list[hooks_memory.Kind]:
    """The memory suite's mix without its 1,000-pod syncs (their share goes to small NodeSet syncs)."""
    kinds = hooks_memory.mix()
    large = sum(k.per_thousand for k in kinds if k.name.startswith("1,000"))
    small = [k for k in kinds if not k.name.startswith("1,000")]
    return [dataclasses.replace(small[0], per_thousand=small[0].per_thousand + large), *small[1:]]

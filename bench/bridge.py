"""Bridge loop on the real Slurm lab: pod-to-binding latency and the cost of scheduling one pod
with 10 and with 2,000 Slurm jobs queued (docs/architecture.md §7, issue 6).

* Slurm: a real 26.05 lab of the suite's own, the real ``SlurmClient`` and ``BridgeLoop``. Every Slurm
  request and the bytes of every answer are counted at the client (httpx event hooks). The lab is
  ``hack/slurm``'s, run from a copy of its scripts under ``.cache/bench-lab`` (their state, ``.slurm-lab``,
  lives there) on a rootfs and ports of its own (``<SLURM_LAB_ROOTFS>-bench``, ports 169xx): started
  for the suite and stopped after it. Why not the checkout's lab: ``make test`` beside the bench starts
  and stops that one (and another checkout's ``up.sh`` takes it over), which would take Slurm away
  mid-suite; and the suite's 2,000 held jobs and placeholder jobs are no business of the tests' Slurm.
* Kubernetes: a minimal stateful apiserver in a child process (list pods and nodes, patch pods,
  ``pods/binding``, delete, create events), so ``time.process_time`` of this process is the loop's own CPU.
  Bindings are stamped with ``time.monotonic`` (one clock for both processes on Linux).
* Pods: the placeholder annotation is the pod hook's own answer (``hooks.bridge.pod.publish``) for
  a bare pod with ``partition`` from the DecoratorController setting and ``constraints: n1|n2``.
* Queued jobs: held single jobs (``sbatch --hold``), one record each in ``GET /jobs``; a held job
  *array* is one record there however many tasks it has, so it would not load the listing.

(a) latency: a pod appears in the apiserver, passes run back to back, the time until the fake
    apiserver receives the binding POST (Slurm's own start time included; no sleeps in the loop).
(b) cost per pod: the two passes that schedule a pod (the submitting pass, then, once Slurm shows
    the job RUNNING, the binding pass), Slurm requests and CPU time; the job index is fresh during
    them (``list_interval`` is not reached), so they contain no full job listing. The listing is
    measured on its own (the first pass of a loop) and amortised over ``--job-list-interval``.
"""

from __future__ import annotations

import gc
import http.client
import http.server
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from kubernetes import client as kclient

from bench import apistatus
from bench.measure import Budget, Report, fmt_ns, fmt_ratio
from hooks.bridge import pod as pod_hook
from hooks.contract import DecoratorRequest
from slinky_common import names

JSON = dict[str, Any]
TITLE = (
    "bridge loop on the real Slurm lab: pod-to-binding latency, cost per pod with 10 vs 2,000 jobs queued, "
    "a pass with 200 pending pods"
)
REPO = Path(__file__).resolve().parent.parent
NS = "bench-bridge"
LAB_HOME = REPO / ".cache" / "bench-lab"  # hack/slurm's scripts run from here: their .slurm-lab is the suite's
LAB_PORTS = {"SLURM_LAB_CTLD_PORT": "16917", "SLURM_LAB_REST_PORT": "16920", "SLURM_LAB_SLURMD_PORT": "16931"}
HELD_NAME = "bench-bridge-held"
QUEUES = (10, 2_000)
BUDGET_RATIO = 1.5
PENDING_PODS = 200
PENDING_BUDGET = 2.0  # a settled pass with PENDING_PODS pending pods, against the reads it cannot do without
LIST_INTERVAL = 30.0  # slurm_sync --job-list-interval default
SLURM_TIMEOUT = 120.0


# --- the fake apiserver (child process) ------------------------------------------------------


def _serve(port_out: Any) -> None:
    objects: dict[tuple[str, str], JSON] = {}  # ("pods", "ns/name") / ("nodes", name)
    bindings: list[JSON] = []
    events: set[str] = set()  # "ns/name" of the events created; their bodies are not needed
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, body: Any, code: int = 200) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _body(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(length) or b"{}")

        def do_GET(self) -> None:
            path = urlsplit(self.path).path
            with lock:
                if path == "/_bench/bindings":
                    return self._send(bindings)
                if path == "/api/v1/nodes":
                    return self._send(
                        {
                            "kind": "NodeList",
                            "apiVersion": "v1",
                            "metadata": {},
                            "items": [o for (k, _), o in sorted(objects.items()) if k == "nodes"],
                        }
                    )
                if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods", path):
                    items = [o for (k, key), o in sorted(objects.items()) if k == "pods" and key.startswith(m[1] + "/")]
                    return self._send({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})
                if m := re.fullmatch(r"/_bench/pods/([^/]+)/([^/]+)", path):
                    obj = objects.get(("pods", f"{m[1]}/{m[2]}"))
                    return self._send(obj or apistatus.not_found("pods", m[2]), 200 if obj else 404)
            self._send(apistatus.not_found(), 404)

        def do_POST(self) -> None:
            path, body = urlsplit(self.path).path, self._body()
            with lock:
                if path == "/_bench/objects":
                    meta = body["metadata"]
                    kind = "pods" if body.get("kind") == "Pod" else "nodes"
                    key = f"{meta['namespace']}/{meta['name']}" if kind == "pods" else meta["name"]
                    objects[(kind, key)] = body
                    return self._send({})
                if m := re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)/binding", path):
                    obj = objects.get(("pods", f"{m[1]}/{m[2]}"))
                    if obj is None:
                        return self._send(apistatus.not_found("pods", m[2]), 404)
                    if obj["spec"].get("nodeName"):
                        why = f"pod {m[2]} is already assigned to node {obj['spec']['nodeName']!r}"
                        return self._send(apistatus.conflict("pods/binding", m[2], why), 409)
                    obj["spec"]["nodeName"] = body["target"]["name"]
                    bindings.append({"pod": m[2], "node": body["target"]["name"], "at": time.monotonic()})
                    return self._send(apistatus.SUCCESS, 201)
                if m := re.fullmatch(r"/apis/events\.k8s\.io/v1/namespaces/([^/]+)/events", path):
                    return self._create_event(m[1], body)
            self._send(apistatus.not_found(), 404)

        def _create_event(self, namespace: str, event: JSON) -> None:
            """As the API server creates one: 201 with the object as created, 409 for a name already taken."""
            meta = event.setdefault("metadata", {})
            key = f"{namespace}/{meta.get('name')}"
            if key in events:
                return self._send(apistatus.already_exists("events.events.k8s.io", str(meta.get("name"))), 409)
            events.add(key)
            meta |= {
                "namespace": namespace,
                "uid": str(uuid.uuid4()),
                "resourceVersion": str(len(events)),
                "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            self._send(event, 201)

        def do_PATCH(self) -> None:
            path, body = urlsplit(self.path).path, self._body()
            with lock:
                m = re.fullmatch(r"/api/v1/namespaces/([^/]+)/pods/([^/]+)(/status)?", path)
                obj = objects.get(("pods", f"{m[1]}/{m[2]}")) if m else None
                if obj is None:
                    return self._send(apistatus.not_found("pods", m[2] if m else ""), 404)
                if m and m[3]:
                    _merge_status(obj, body.get("status") or {})
                meta, patch = obj["metadata"], body.get("metadata") or {}
                if "resourceVersion" in patch and patch["resourceVersion"] != meta["resourceVersion"]:
                    why = "the object has been modified; please apply your changes to the latest version and try again"
                    return self._send(apistatus.conflict("pods", meta["name"], why), 409)
                for field_name in ("labels", "annotations"):
                    current = meta.setdefault(field_name, {})
                    for key, value in (patch.get(field_name) or {}).items():
                        if value is None:
                            current.pop(key, None)
                        else:
                            current[key] = value
                if "finalizers" in patch:
                    meta["finalizers"] = patch["finalizers"]
                meta["resourceVersion"] = str(int(meta["resourceVersion"]) + 1)
                self._send(obj)

        def do_DELETE(self) -> None:
            path = urlsplit(self.path).path
            with lock:
                if m := re.fullmatch(r"/(?:_bench|api/v1/namespaces)/([^/]+)/pods/([^/]+)", path):
                    objects.pop(("pods", f"{m[1]}/{m[2]}"), None)
                    return self._send(apistatus.SUCCESS)
            self._send(apistatus.not_found(), 404)

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request: object, client_address: object) -> None:
            pass  # a client closing its keep-alive connection is not news

    server = Server(("127.0.0.1", 0), Handler)
    port_out.send(server.server_address[1])
    server.serve_forever()


def _merge_status(pod: JSON, status: JSON) -> None:
    """A pods/status patch as the API server merges it: conditions by type, other fields replaced."""
    current = pod.setdefault("status", {})
    for key, value in status.items():
        if key == "conditions":
            by_type = {c["type"]: c for c in current.get("conditions") or []}
            by_type.update({c["type"]: c for c in value})
            current["conditions"] = list(by_type.values())
        else:
            current[key] = value


class FakeApiserver:
    def __init__(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        self.port = parent.recv()
        self.url = f"http://127.0.0.1:{self.port}"
        self._http = httpx.Client(base_url=self.url, timeout=10)

    def add(self, obj: JSON) -> None:
        self._http.post("/_bench/objects", json=obj).raise_for_status()

    def pod(self, name: str) -> JSON | None:
        response = self._http.get(f"/_bench/pods/{NS}/{name}")
        return response.json() if response.status_code == 200 else None

    def remove(self, name: str) -> None:
        self._http.delete(f"/_bench/{NS}/pods/{name}")

    def bindings(self) -> dict[str, JSON]:
        return {b["pod"]: b for b in self._http.get("/_bench/bindings").json()}

    def close(self) -> None:
        self._http.close()
        self.process.terminate()
        self.process.join(5)


# --- objects --------------------------------------------------------------------------------


CONTROLLER = {
    "metadata": {
        "name": "slurm-bridge-pods",
        "annotations": {names.ANNOTATION_SETTING_PARTITION: "debug", names.ANNOTATION_SETTING_MCS_LABEL: ""},
    }
}


def bench_pod(name: str) -> JSON:
    """A managed bare pod with the placeholder job the pod hook publishes for it."""
    pod: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {names.LABEL_BRIDGE_MANAGED: "true"},
            "annotations": {names.SLURMJOB_PREFIX + "constraints": "n1|n2", names.SLURMJOB_PREFIX + "timelimit": "10"},
        },
        "spec": {"schedulerName": names.BRIDGE_SCHEDULER_NAME, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"},
    }
    published = pod_hook.publish(
        DecoratorRequest(controller=CONTROLLER, object=pod, attachments={}, related={}, finalizing=False)
    )
    if published.get(names.ANNOTATION_JOB_ERROR):
        raise RuntimeError(f"the pod hook publishes no job: {published[names.ANNOTATION_JOB_ERROR]}")
    pod["metadata"]["annotations"].update({k: v for k, v in published.items() if v is not None})
    return pod


def kube_node(name: str, slurm_name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {names.LABEL_BRIDGE_WORKER: "worker", names.LABEL_SLURM_NODE_NAME: slurm_name},
        },
        "spec": {},
    }


# --- the lab --------------------------------------------------------------------------------


def lab_script(name: str) -> str:
    """One of ``hack/slurm``'s scripts, as the suite's own lab runs it."""
    return str(LAB_HOME / "hack" / "slurm" / name)


def lab_settings() -> dict[str, str]:
    """The environment of the lab scripts: the suite's rootfs (beside the checkout's) and ports."""
    rootfs = os.environ.get("SLURM_LAB_ROOTFS") or "/var/cache/slinky-mc/slurm-sid"
    return {**os.environ, "SLURM_LAB_ROOTFS": f"{rootfs.rstrip('/')}-bench", **LAB_PORTS}


def _env() -> dict[str, str]:
    path = LAB_HOME / ".slurm-lab" / "env"
    out: dict[str, str] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        if m := re.match(r"export (\w+)='(.*)'$", line):
            out[m[1]] = m[2]
    return out


def _pings(env: dict[str, str]) -> bool:
    if "SLURM_REST_URL" not in env:
        return False
    try:
        response = httpx.get(
            f"{env['SLURM_REST_URL']}/slurm/{env.get('SLURM_REST_API_VERSION', 'v0.0.45')}/ping",
            headers={"X-SLURM-USER-TOKEN": env["SLURM_REST_TOKEN"]},
            timeout=5,
        )
        return response.status_code == 200 and '"responding"' in response.text
    except httpx.HTTPError:
        return False


def start_lab() -> dict[str, str]:
    """The suite's own lab, up (from the checkout's scripts, copied afresh); its settings."""
    for part in ("slurm", "lib"):
        shutil.copytree(REPO / "hack" / part, LAB_HOME / "hack" / part, dirs_exist_ok=True)
    done = subprocess.run([lab_script("up.sh")], env=lab_settings(), cwd=LAB_HOME, capture_output=True, text=True)
    if done.returncode != 0:
        error = LAB_HOME / ".slurm-lab" / "error"
        why = error.read_text().strip() if error.exists() else f"exit {done.returncode}"
        raise RuntimeError(f"the suite's Slurm lab did not start: {why}\n{done.stderr[-2000:]}")
    env = _env()
    _wait(lambda: _pings(env), "the suite's slurmrestd to answer", timeout=60)  # a loaded machine answers late
    return env


def stop_lab() -> None:
    subprocess.run([lab_script("down.sh")], env=lab_settings(), cwd=LAB_HOME, capture_output=True, check=False)


def lab(*argv: str, timeout: float = 300) -> str:
    return subprocess.run(
        [lab_script("exec.sh"), *argv], check=True, capture_output=True, text=True, timeout=timeout, cwd=LAB_HOME
    ).stdout


def queue_held(count: int) -> list[int]:
    out = lab(
        "sh", "-c", f"for i in $(seq {count}); do sbatch --hold -J {HELD_NAME} -p debug -o /dev/null --wrap true; done"
    )
    return [int(i) for i in re.findall(r"Submitted batch job (\d+)", out)]


def cancel(job_ids: list[int]) -> None:
    for start in range(0, len(job_ids), 500):
        subprocess.run(
            [lab_script("exec.sh"), "scancel", *map(str, job_ids[start : start + 500])],
            capture_output=True,
            cwd=LAB_HOME,
            timeout=120,
        )


# --- measuring ------------------------------------------------------------------------------


@dataclass
class PassCost:
    requests: int
    bytes: int
    cpu_ns: int
    wall_ns: int
    writes: int = 0  # to Kubernetes and Slurm


class Meter:
    """Counts the Slurm client's requests and answer bytes."""

    def __init__(self, http: httpx.Client) -> None:
        self.requests = 0
        self.bytes = 0
        http.event_hooks["request"].append(self._request)
        http.event_hooks["response"].append(self._response)

    def _request(self, request: httpx.Request) -> None:
        self.requests += 1

    def _response(self, response: httpx.Response) -> None:
        response.read()
        self.bytes += len(response.content)


class Phase:
    """One queue size: its own BridgeLoop (so its first pass is the full job listing)."""

    def __init__(self, env: dict[str, str], apiserver: FakeApiserver) -> None:
        from slurm_sync.bridge.kube import BridgeKube
        from slurm_sync.bridge.loop import BridgeLoop
        from slurm_sync.kube import Kube
        from slurm_sync.metrics import Metrics
        from slurm_sync.slurm.client import SlurmClient

        token = env["SLURM_REST_TOKEN"]
        self.client = SlurmClient(env["SLURM_REST_URL"], lambda: token, timeout=SLURM_TIMEOUT)
        self.meter = Meter(self.client._http)
        self.observer = SlurmClient(env["SLURM_REST_URL"], lambda: token, timeout=SLURM_TIMEOUT)  # not counted
        config = kclient.Configuration()
        config.host = apiserver.url
        self.kube_api = kclient.ApiClient(config)
        self.loop = BridgeLoop(self.client, BridgeKube(Kube(self.kube_api)), Metrics(), [NS], list_interval=3600.0)
        self.apiserver = apiserver
        self.jobs: list[int] = []

    def run_pass(self) -> PassCost:
        requests, received = self.meter.requests, self.meter.bytes
        gc.collect()
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        result = self.loop.run_pass()
        cpu, wall = time.process_time_ns() - cpu, time.perf_counter_ns() - wall
        if not result.ready:
            raise RuntimeError(f"bridge pass could not read Slurm or Kubernetes: {result.errors}")
        writes = result.kube_writes + result.slurm_writes
        return PassCost(self.meter.requests - requests, self.meter.bytes - received, cpu, wall, writes)

    def job_of(self, name: str) -> int | None:
        pod = self.apiserver.pod(name) or {}
        label = ((pod.get("metadata") or {}).get("labels") or {}).get(names.LABEL_SLURM_JOB_ID)
        return int(label) if label else None

    def done_with(self, name: str) -> None:
        """Out of the measurement: the pod leaves the apiserver, its job is cancelled."""
        job_id = self.job_of(name)
        self.apiserver.remove(name)
        if job_id is not None:
            self.observer.cancel_job(job_id)
            _wait(lambda: "RUNNING" not in self.observer.get_job(job_id).state, f"job {job_id} to end")

    def latency(self, name: str) -> tuple[float, int]:
        """Seconds from the pod appearing to its binding POST, passes run back to back."""
        self.apiserver.add(bench_pod(name))
        appeared = time.monotonic()
        passes = 0
        deadline = appeared + SLURM_TIMEOUT
        while name not in self.apiserver.bindings():
            if time.monotonic() > deadline:
                raise RuntimeError(f"pod {name} not bound within {SLURM_TIMEOUT:.0f} s")
            self.run_pass()
            passes += 1
        bound = self.apiserver.bindings()[name]["at"]
        self.done_with(name)
        return bound - appeared, passes

    def schedule_cost(self, name: str) -> tuple[PassCost, PassCost]:
        """The submitting pass and the binding pass of one pod (Slurm starts the job in between)."""
        self.apiserver.add(bench_pod(name))
        submit = self.run_pass()
        job_id = self.job_of(name)
        if job_id is None:
            raise RuntimeError(f"pod {name}: the submitting pass labelled no job")
        self.jobs.append(job_id)
        _wait(lambda: "RUNNING" in self.observer.get_job(job_id).state, f"job {job_id} RUNNING")
        bind = self.run_pass()
        if name not in self.apiserver.bindings():
            raise RuntimeError(f"pod {name}: the binding pass did not bind it")
        self.done_with(name)
        return submit, bind

    def listed_jobs(self) -> int:
        return len(self.observer.list_jobs().items)

    def close(self) -> None:
        self.client.close()
        self.observer.close()
        self.kube_api.close()


def _wait(check: Callable[[], bool], what: str, timeout: float = SLURM_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


# --- the suite ------------------------------------------------------------------------------


@dataclass
class Figures:
    queued: int
    listed: int
    listing: PassCost
    idle: PassCost
    latencies: list[float]
    passes: list[int]
    per_pod_requests: list[int]
    per_pod_cpu: list[int]
    per_pod_bytes: list[int]


def measure(env: dict[str, str], apiserver: FakeApiserver, queued: int, samples: int) -> Figures:
    """One queue size: ``queued`` held jobs in Slurm (cancelled after), a loop of its own."""
    held = queue_held(queued)
    phase = Phase(env, apiserver)
    try:
        listed = phase.listed_jobs()
        listing = phase.run_pass()  # the loop's first pass: the full job listing (its index)
        idle = phase.run_pass()
        latencies, passes = zip(*(phase.latency(f"lat-{queued}-{i}") for i in range(samples)), strict=True)
        costs = [phase.schedule_cost(f"cost-{queued}-{i}") for i in range(samples)]
        if phase.loop._listed_at is None or time.monotonic() - phase.loop._listed_at > phase.loop.list_interval:
            raise RuntimeError("the job index was re-listed during the measured passes")
        return Figures(
            queued,
            listed,
            listing,
            idle,
            list(latencies),
            list(passes),
            [s.requests + b.requests for s, b in costs],
            [s.cpu_ns + b.cpu_ns for s, b in costs],
            [s.bytes + b.bytes for s, b in costs],
        )
    finally:
        phase.close()
        cancel(held)


@dataclass
class Pending:
    pods: int
    settling: int  # passes until a pass wrote nothing
    passes: list[PassCost]  # settled passes
    floors: list[int]  # wall ns of the reads a pass cannot do without


def measure_pending(env: dict[str, str], apiserver: FakeApiserver, count: int, samples: int) -> Pending:
    """``count`` pods whose jobs pend (n1 and n2 drained): passes until one writes nothing (every pod labelled,
    each saying why it waits), then ``samples`` settled passes timed, each beside its floor: the pods and nodes
    listed through the same Kubernetes client and one whole job listing, which any pass that knows the state
    of these pods' jobs must read."""
    lab("scontrol", "update", "nodename=n1,n2", "state=drain", "reason=bench: pending pods")
    phase = Phase(env, apiserver)
    pods = [f"pend-{i}" for i in range(count)]
    try:
        for name in pods:
            apiserver.add(bench_pod(name))
        settling = 1
        while phase.run_pass().writes:
            settling += 1
            if settling > 20:
                raise RuntimeError(f"{count} pending pods: the bridge still writes after 20 passes")
        passes, floors = [], []
        for _ in range(samples):
            passes.append(phase.run_pass())
            floors.append(_floor_reads(phase))
        if any(phase.job_of(name) is None for name in pods):
            raise RuntimeError("a pending pod carries no job after the settling passes")
        return Pending(count, settling, passes, floors)
    finally:
        jobs = [j for j in (phase.job_of(name) for name in pods) if j is not None]
        for name in pods:
            apiserver.remove(name)
        cancel(jobs)
        lab("scontrol", "update", "nodename=n1,n2", "state=resume")
        phase.close()


def _floor_reads(phase: Phase) -> int:
    gc.collect()
    wall = time.perf_counter_ns()
    phase.loop.kube.list_pods(NS)
    phase.loop.kube.list_nodes()
    phase.observer.list_jobs()
    return time.perf_counter_ns() - wall


def run(quick: bool = False) -> Report:
    samples = 3 if quick else 7
    env = start_lab()
    try:
        return _report(*measure_both(env, samples), samples)
    finally:
        stop_lab()  # its jobs, held or placeholders, go with it


def measure_both(env: dict[str, str], samples: int) -> tuple[list[Figures], int, Pending]:
    """The pending pods, then both queue sizes, one after the other, and what a held array weighs in GET /jobs."""
    apiserver = FakeApiserver()
    try:
        for n in (1, 2):
            apiserver.add(kube_node(f"kn{n}", f"n{n}"))
        pending = measure_pending(env, apiserver, PENDING_PODS, samples)  # first: no queue of others beside it
        array_records = _array_records()
        return [measure(env, apiserver, queued, samples) for queued in QUEUES], array_records, pending
    finally:
        apiserver.close()


def _array_records() -> int:
    """How many GET /jobs records a held array of 100 tasks makes (it is why single jobs are queued)."""
    out = lab("sbatch", "--hold", "-J", HELD_NAME, "-p", "debug", "-o", "/dev/null", "--array=1-100", "--wrap", "true")
    job_id = int(re.findall(r"Submitted batch job (\d+)", out)[0])
    try:
        env = _env()
        body = httpx.get(
            f"{env['SLURM_REST_URL']}/slurm/v0.0.45/jobs/",
            headers={"X-SLURM-USER-TOKEN": env["SLURM_REST_TOKEN"]},
            timeout=30,
        ).json()
        return sum(
            1 for j in body["jobs"] if j.get("array_job_id", {}).get("number") == job_id or j["job_id"] == job_id
        )
    finally:
        cancel([job_id])


def _report(figures: list[Figures], array_records: int, pending: Pending, samples: int) -> Report:
    report = Report(TITLE, ["jobs queued", "in GET /jobs", "figure", "median", "min", "max"])
    by = {f.queued: f for f in figures}
    for f in figures:
        q = f"{f.queued:,}"
        listed = f"{f.listed:,}"
        s = [x * 1e9 for x in f.latencies]
        report.rows.append(
            [q, listed, "pod-to-binding latency", fmt_ns(statistics.median(s)), fmt_ns(min(s)), fmt_ns(max(s))]
        )
        report.rows.append(
            [
                q,
                listed,
                "  passes until bound",
                f"{statistics.median(f.passes):.0f}",
                str(min(f.passes)),
                str(max(f.passes)),
            ]
        )
        report.rows.append(
            [
                q,
                listed,
                "Slurm requests per pod",
                f"{statistics.median(f.per_pod_requests):.0f}",
                str(min(f.per_pod_requests)),
                str(max(f.per_pod_requests)),
            ]
        )
        report.rows.append(
            [
                q,
                listed,
                "CPU per pod (2 passes)",
                fmt_ns(statistics.median(f.per_pod_cpu)),
                fmt_ns(min(f.per_pod_cpu)),
                fmt_ns(max(f.per_pod_cpu)),
            ]
        )
        report.rows.append(
            [
                q,
                listed,
                "Slurm bytes per pod",
                f"{statistics.median(f.per_pod_bytes):,.0f}",
                f"{min(f.per_pod_bytes):,}",
                f"{max(f.per_pod_bytes):,}",
            ]
        )
        report.rows.append([q, listed, "idle pass: req / CPU", f"{f.idle.requests} / {fmt_ns(f.idle.cpu_ns)}", "", ""])
        report.rows.append(
            [
                q,
                listed,
                "job listing pass: req / bytes / CPU",
                f"{f.listing.requests} / {f.listing.bytes:,} / {fmt_ns(f.listing.cpu_ns)}",
                "",
                "",
            ]
        )
    small, large = by[QUEUES[0]], by[QUEUES[1]]
    req_ratio = statistics.median(large.per_pod_requests) / statistics.median(small.per_pod_requests)
    cpu_ratio = statistics.median(large.per_pod_cpu) / statistics.median(small.per_pod_cpu)
    list_ratio = large.listing.cpu_ns / max(small.listing.cpu_ns, 1)
    report.rows.append(["2,000/10", "", "Slurm requests per pod", fmt_ratio(req_ratio), "", ""])
    report.rows.append(["2,000/10", "", "CPU per pod", fmt_ratio(cpu_ratio), "", ""])
    report.rows.append(["2,000/10", "", "job listing CPU (amortised)", fmt_ratio(list_ratio), "", ""])
    report.budgets.append(Budget("bridge: Slurm requests per pod, 2,000 vs 10 jobs queued", req_ratio, BUDGET_RATIO))
    report.budgets.append(Budget("bridge: CPU per pod, 2,000 vs 10 jobs queued", cpu_ratio, BUDGET_RATIO))
    _pending_rows(report, pending)
    share = large.listing.cpu_ns / (LIST_INTERVAL * 1e9)
    report.notes += [
        f"latency: {samples} pods one after another, passes back to back (no sleeps), from the pod's appearance in the "
        "fake "
        "apiserver to the binding POST it receives; includes Slurm starting the EXTERNAL_JOB on n1|n2.",
        "cost per pod: the submitting pass + the binding pass (run once Slurm shows the job RUNNING): requests and "
        "bytes "
        "counted at the Slurm client, CPU = process_time of this process (the apiserver is a child process).",
        "those passes read each labelled job with one GET and Slurm's nodes with update_time; the full job listing is "
        "not in "
        "them (the index is fresh; the suite fails if it was re-listed), so the ratio is about per-pod cost only.",
        f"the full listing (the first pass of a loop; then every --job-list-interval, default {LIST_INTERVAL:.0f} s, "
        "skipped "
        "while update_time says nothing changed) grows with the jobs in Slurm: at 2,000 jobs it costs "
        f"{fmt_ns(large.listing.cpu_ns)} CPU and {large.listing.bytes / 1e6:.1f} MB once per interval, i.e. "
        f"{share * 100:.2f}% of one CPU, whatever the number of pods scheduled.",
        f"queued jobs are single held jobs (sbatch --hold): a held array of 100 tasks is {array_records} record(s) in "
        "GET /jobs, "
        "so an array would not load the listing.",
        "'in GET /jobs' counts every record slurmrestd lists (other users' jobs and jobs finished within MinJobAge "
        "included): what the full listing downloads.",
        *(
            [
                f"the {QUEUES[0]}-job case lists {small.listed:,} records: jobs that ended less than MinJobAge (300 s) "
                "ago, e.g. "
                "the held jobs of a previous run, are still listed and cannot be purged sooner; they weigh on its "
                "listing row, "
                "not on the per-pod figures (which never list)."
            ]
            if small.listed > 10 * QUEUES[0] + 100
            else []
        ),
        f"pending: {pending.pods} pods whose jobs pend (n1 and n2 drained), settled after {pending.settling} passes "
        "(every pod labelled and saying why it waits); a settled pass reads their jobs from one job listing (an "
        "unchanged one is a small answer), not one GET each. Its floor, measured beside each pass: the pods and "
        "nodes listed through the same Kubernetes client and one whole job listing.",
        "Slurm: the suite's own lab (hack/slurm's scripts from .cache/bench-lab, its own rootfs and ports), "
        "started for it and stopped after it.",
    ]
    return report


def _pending_rows(report: Report, pending: Pending) -> None:
    """A settled pass with PENDING_PODS pending pods: wall time against its floor, requests, writes."""
    walls = [c.wall_ns for c in pending.passes]
    ratio = statistics.median(walls) / statistics.median(pending.floors)
    label = f"{pending.pods} pending pods"
    report.rows.append(["", "", f"{label}: pass wall", fmt_ns(statistics.median(walls)), fmt_ns(min(walls)),
                        fmt_ns(max(walls))])  # fmt: skip
    report.rows.append(["", "", f"{label}: floor (reads) wall", fmt_ns(statistics.median(pending.floors)),
                        fmt_ns(min(pending.floors)), fmt_ns(max(pending.floors))])  # fmt: skip
    requests = [c.requests for c in pending.passes]
    report.rows.append(["", "", f"{label}: Slurm requests per pass", f"{statistics.median(requests):.0f}",
                        str(min(requests)), str(max(requests))])  # fmt: skip
    writes = [c.writes for c in pending.passes]
    report.rows.append(["", "", f"{label}: writes per pass", f"{statistics.median(writes):.0f}", str(min(writes)),
                        str(max(writes))])  # fmt: skip
    report.rows.append(["", "", f"{label}: pass / floor", fmt_ratio(ratio), "", ""])
    report.budgets.append(
        Budget(f"bridge: a pass with {pending.pods} pending pods vs its reads", ratio, PENDING_BUDGET)
    )


if __name__ == "__main__":  # pragma: no cover
    import sys

    from bench.measure import print_report

    print_report(run(quick="--quick" in sys.argv), sys.stdout)
    os._exit(0)

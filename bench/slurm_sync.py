"""slurm_sync poll cycle over 5,000 Slurm nodes: writes and CPU time (docs/architecture.md §7, issue 5).

One cluster: 5,000 Slurm nodes, 5,000 NodeSet worker pods over four NodeSets, 5,000 Kubernetes
Nodes and the slurmctld pod. The real ``OperatorLoop`` runs through the real Kubernetes client
(``slurm_sync.kube.Kube`` on the official client, real HTTP) and the real ``SlurmClient``:

* Kubernetes: a minimal stateful apiserver in a child process (list with equality label
  selectors, strategic-merge patches of pod metadata/conditions, merge patches of NodeSet
  annotations), serving objects shaped like the ones of bench/nodeset_sync.py (hook-created pods
  with last-applied annotation, managedFields, kubelet and SlurmNodeState conditions: ~15 kB
  each). Every write is recorded by the fake at the HTTP boundary and compared with the writes
  counted by ``Kube`` (so a write cannot hide). In a child process so that ``time.process_time``
  of this process is the loop's own CPU time, not the fake's.
* Slurm: ``httpx.MockTransport`` under the ``SlurmClient``, answering the v0.0.45 paths with
  slurmrestd 26.05-shaped JSON (``GET /nodes/`` with ``last_update``; 304 for an unchanged
  ``update_time``; ``GET /jobs/`` with one running job per busy node, "no job changes" for an
  unchanged ``update_time``; ``GET /ping/``; ``POST /node/{name}`` applied to its state).

The cluster is first settled (passes until one makes zero writes; must take at most 3 passes).
Then, interleaved, subject and floor samples:

* unchanged cycle: one ``run_pass`` with nothing changed on either side.
* floor: ``orjson.loads`` of the exact Kubernetes list responses the pass reads (pods, NodeSets,
  Nodes, slurmctld pods), GC paused: what any loop that re-lists must at least pay.
* peers: the unchanged Slurm poll alone (node watch + ping, through the client), and
  ``orjson.loads`` of the full 5,000-node Slurm listing (what a changed cycle must also parse).
* one node changed: an administrator drains one node with a reason; the pass must write only
  that node's pod (status conditions, drained mark) and its NodeSet's hook-input touch.
"""

from __future__ import annotations

import gc
import http.client
import http.server
import json
import multiprocessing
import re
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson

from bench.measure import Budget, Report, fmt_ns, fmt_ratio
from hooks import names

# The apiserver's merge of pod metadata and conditions, as the tests' fake does it.
from tests.slurm_sync.fakekube import merge_conditions, merge_metadata

JSON = dict[str, Any]

TITLE = "slurm_sync poll cycle, 5,000 Slurm nodes: Kubernetes writes and CPU vs floor"
NS = "slurm"
CLUSTER = "slurm"
NODESETS = (("gpu", 2_000), ("cpu", 1_500), ("mem", 1_000), ("io", 500))  # 5,000 pods
CONTROLLER_POD = "slurm-controller-0"
V = "/slurm/v0.0.45"
SETTLE_PASSES = 3
ADMIN_REASON = "maint: replace DIMM B2 (ticket 4711)"
FIRST_UPDATE = 1_780_000_000


# --- layout, shared by both sides -------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    index: int  # global, 0..4,999
    nodeset: str
    ordinal: int

    @property
    def pod(self) -> str:
        return f"{self.nodeset}-{self.ordinal}"

    @property
    def kube_node(self) -> str:
        return f"worker-{self.index:05d}"

    @property
    def busy(self) -> bool:  # as bench.nodeset_sync.observed_pod decides
        return self.index % 3 == 1

    @property
    def slurm_state(self) -> str:
        return ("ALLOCATED" if self.index % 2 else "MIXED") if self.busy else "IDLE"


def layout() -> list[Slot]:
    slots, index = [], 0
    for nodeset, count in NODESETS:
        for ordinal in range(count):
            slots.append(Slot(index, nodeset, ordinal))
            index += 1
    return slots


def nodeset_uid(nodeset: str) -> str:
    from bench.nodeset_sync import uid

    return uid("NodeSet", NS, nodeset)


# --- the Kubernetes side: objects ---------------------------------------------------------------


def build_kube_objects() -> dict[tuple[str, str, str], JSON]:
    """NodeSets and their pods as the hook creates them and the cluster observes them, Nodes, slurmctld."""
    from bench import nodeset_sync as ns_bench
    from hooks.app import create_app

    client = create_app().test_client()
    related = {f"Controller.{names.API_VERSION}": {f"{NS}/{CLUSTER}": ns_bench.controller_cr()}, "Secret.v1": {}}
    objects: dict[tuple[str, str, str], JSON] = {}
    slots = layout()
    for nodeset, count in NODESETS:
        uid = nodeset_uid(nodeset)

        def parent(status: JSON | None = None, nodeset: str = nodeset, uid: str = uid, count: int = count) -> JSON:
            obj = ns_bench.nodeset_parent(count, status)
            obj["metadata"] |= {"name": nodeset, "uid": uid}
            return obj

        first = ns_bench._post(client, {"controller": {}, "parent": parent(), "children": {}, "related": related})
        desired = {c["metadata"]["name"]: c for c in first["children"] if c["kind"] == "Pod"}
        objects[("nodesets", NS, nodeset)] = parent(first["status"])
        for slot in (s for s in slots if s.nodeset == nodeset):
            pod = ns_bench.observed_pod(desired[slot.pod], slot.index)
            meta = pod["metadata"]
            meta["ownerReferences"][0] |= {"name": nodeset, "uid": uid}
            meta["labels"]["controller-uid"] = uid
            pod["spec"]["nodeName"] = slot.kube_node
            objects[("pods", NS, slot.pod)] = pod
    for slot in slots:
        objects[("nodes", "", slot.kube_node)] = kube_node(slot)
    objects[("pods", NS, CONTROLLER_POD)] = controller_pod()
    return objects


def kube_node(slot: Slot) -> JSON:
    """A Kubernetes Node roughly as the kubelet reports it (without the image list)."""
    name, ip = slot.kube_node, f"172.18.{(slot.index >> 8) & 255}.{slot.index & 255}"
    conditions = [
        {
            "type": t,
            "status": s,
            "lastHeartbeatTime": "2025-06-02T09:05:00Z",
            "lastTransitionTime": "2025-06-02T09:00:00Z",
            "reason": r,
            "message": m,
        }
        for t, s, r, m in (
            ("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
        )
    ]
    resources = {
        "cpu": "64",
        "memory": "263856020Ki",
        "ephemeral-storage": "1966788624Ki",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    return {
        "metadata": {
            "name": name,
            "uid": f"node-uid-{slot.index:05d}",
            "resourceVersion": str(500000 + slot.index),
            "creationTimestamp": "2025-06-01T00:00:00Z",
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "beta.kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "gpu-8x",
                "topology.kubernetes.io/zone": f"zone-{slot.index % 4}",
                "topology.kubernetes.io/region": "region-1",
            },
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps({"csi.example.com": name}),
            },
        },
        "spec": {"podCIDR": f"10.{slot.index >> 8 & 255}.{slot.index & 255}.0/24", "providerID": f"metal://{name}"},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": conditions,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{slot.index:032x}",
                "systemUUID": f"{slot.index:08x}-0000-0000-0000-000000000000",
                "bootID": f"{slot.index:08x}-1111-1111-1111-111111111111",
                "kernelVersion": "6.8.0-45-generic",
                "osImage": "Ubuntu 24.04.1 LTS",
                "containerRuntimeVersion": "containerd://1.7.22",
                "kubeletVersion": "v1.33.1",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def controller_pod() -> JSON:
    labels = {names.LABEL_NAME: "slurmctld", names.LABEL_INSTANCE: CLUSTER, names.LABEL_ACTIVE_CONTROLLER: "true"}
    return {
        "metadata": {"name": CONTROLLER_POD, "namespace": NS, "resourceVersion": "42", "labels": labels},
        "spec": {"hostname": CONTROLLER_POD, "containers": [{"name": "slurmctld", "image": "slurmctld:26.05"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


# --- the Kubernetes side: a minimal stateful apiserver (runs in a child process) ----------------

_PATH = re.compile(
    r"^/(?:api/v1|apis/slinky\.slurm\.net/v1beta1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)


class FakeApiserver:
    """State and request handling; list answers are cached until the next write."""

    def __init__(self, objects: dict[tuple[str, str, str], JSON]) -> None:
        self.objects = objects
        self.writes: list[JSON] = []
        self.version = 1_000_000
        self._lists: dict[str, bytes] = {}

    def handle(self, method: str, target: str, content_type: str, body: bytes) -> tuple[int, bytes]:
        url = urlsplit(target)
        if url.path == "/_bench/writes":
            return 200, orjson.dumps(self.writes)
        match = _PATH.match(url.path)
        if not match:
            return 404, orjson.dumps({"kind": "Status", "code": 404})
        plural, ns, name = match["kind"], match["ns"], match["name"]
        if method == "GET" and name is None:
            if target not in self._lists:
                selector = parse_qs(url.query).get("labelSelector", [""])[0]
                wanted = dict(kv.split("=", 1) for kv in selector.split(",") if kv)
                items = [
                    o
                    for (p, n, _), o in self.objects.items()
                    if p == plural
                    and (ns is None or n == ns)
                    and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
                ]
                kind = "NodeSetList" if plural == "nodesets" else f"{plural[:-1].capitalize()}List"
                api = names.API_VERSION if plural == "nodesets" else "v1"
                listing = {
                    "kind": kind,
                    "apiVersion": api,
                    "metadata": {"resourceVersion": str(self.version)},
                    "items": items,
                }
                self._lists[target] = orjson.dumps(listing)
            return 200, self._lists[target]
        obj = self.objects.get((plural, ns or "", name or ""))
        if obj is None:
            return 404, orjson.dumps({"kind": "Status", "code": 404, "reason": "NotFound"})
        if method == "GET":
            return 200, orjson.dumps(obj)
        if method == "PATCH":
            patch = orjson.loads(body)
            self.writes.append({"method": method, "path": url.path, "content_type": content_type, "body": patch})
            merge_metadata(obj, patch.get("metadata") or {})
            if match["sub"] == "status":
                merge_conditions(obj, (patch.get("status") or {}).get("conditions") or [])
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            self._lists.clear()
            return 200, orjson.dumps(obj)
        return 405, orjson.dumps({"kind": "Status", "code": 405})


def _serve(conn: Any) -> None:
    """Child process: build the objects, serve them; send the port (or the error) to the parent."""
    try:
        state = FakeApiserver(build_kube_objects())
        lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                with lock:  # the loop's keep-alive connection and our raw GETs, one request at a time
                    status, data = state.handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client hanging up on a kept-alive connection is not news

        server = Server(("127.0.0.1", 0), Handler)
        conn.send(server.server_address[1])
    except BaseException as exc:
        conn.send(repr(exc))
        raise
    server.serve_forever()


class ApiserverProcess:
    def __init__(self) -> None:
        parent, child = multiprocessing.get_context("fork").Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        if not parent.poll(300):
            self.close()
            raise RuntimeError("the fake apiserver did not start within 300 s")
        port = parent.recv()
        if not isinstance(port, int):
            self.close()
            raise RuntimeError(f"the fake apiserver failed: {port}")
        self.url = f"http://127.0.0.1:{port}"
        self.port = port

    def get(self, target: str) -> bytes:
        """A raw GET on its own connection (for the floor's bytes and the write log)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            conn.request("GET", target)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"GET {target}: HTTP {response.status}")
            return data
        finally:
            conn.close()

    def writes(self) -> list[JSON]:
        return orjson.loads(self.get("/_bench/writes"))

    def close(self) -> None:
        self.process.terminate()
        self.process.join(10)


# --- the Slurm side: slurmrestd 26.05 (v0.0.45) behind httpx.MockTransport ----------------------


def slurm_meta() -> JSON:
    return {
        "plugin": {
            "type": "openapi/slurmctld",
            "name": "Slurm OpenAPI slurmctld",
            "data_parser": "data_parser/v0.0.45",
            "accounting_storage": "accounting_storage/slurmdbd",
        },
        "client": {"source": "[10.0.0.5]:40312(fd:9)", "user": "slurm", "group": "slurm"},
        "command": [],
        "slurm": {"version": {"major": "26", "micro": "5", "minor": "05"}, "release": "26.05.5", "cluster": CLUSTER},
    }


def no_val(number: int) -> JSON:
    return {"set": True, "infinite": False, "number": number}


def slurm_node(slot: Slot) -> JSON:
    """One entry of ``GET /slurm/v0.0.45/nodes/`` as slurmrestd 26.05 writes it."""
    comment = json.dumps(
        {
            "namespace": NS,
            "podName": slot.pod,
            "node": slot.kube_node,
            "nodeSetName": slot.nodeset,
            "nodeSetUID": nodeset_uid(slot.nodeset),
        },
        separators=(",", ":"),
    )
    alloc = {"ALLOCATED": 64, "MIXED": 24}.get(slot.slurm_state, 0)
    ip = f"10.{(slot.index >> 16) & 255}.{(slot.index >> 8) & 255}.{slot.index & 255}"
    return {
        "architecture": "x86_64",
        "burstbuffer_network_address": "",
        "boards": 1,
        "boot_time": no_val(FIRST_UPDATE - 3600),
        "cert_flags": [],
        "cluster_name": CLUSTER,
        "cores": 32,
        "specialized_cores": 0,
        "cpu_binding": 0,
        "cpu_load": 1250,
        "free_mem": no_val(201_334),
        "cpus": 64,
        "effective_cpus": 64,
        "specialized_cpus": "",
        "energy": {
            "average_watts": 0,
            "base_consumed_energy": 0,
            "consumed_energy": 0,
            "current_watts": no_val(0),
            "previous_consumed_energy": 0,
            "last_collected": 0,
        },
        "external_sensors": {},
        "extra": "",
        "power": {},
        "features": [slot.nodeset],
        "active_features": [slot.nodeset],
        "gpu_spec": "",
        "gres": "gpu:8",
        "gres_drained": "N/A",
        "gres_used": "gpu:0",
        "instance_id": "",
        "instance_type": "",
        "last_busy": no_val(FIRST_UPDATE - 60),
        "mcs_label": "",
        "specialized_memory": 0,
        "name": slot.pod,
        "next_state_after_reboot": ["INVALID"],
        "address": ip,
        "hostname": slot.pod,
        "state": [slot.slurm_state],
        "operating_system": "Linux 6.8.0-45-generic #45-Ubuntu SMP",
        "owner": "",
        "partitions": [slot.nodeset, "all"],
        "port": 6818,
        "real_memory": 257_000,
        "res_cores_per_gpu": 0,
        "comment": comment,
        "reason": "",
        "reason_changed_at": no_val(0),
        "reason_set_by_user": "",
        "resume_after": no_val(0),
        "reservation": "",
        "alloc_memory": alloc * 4000,
        "alloc_cpus": alloc,
        "alloc_idle_cpus": 64 - alloc,
        "tres_used": f"cpu={alloc}",
        "tres_weighted": 0.0,
        "slurmd_start_time": no_val(FIRST_UPDATE - 3500),
        "sockets": 2,
        "threads": 1,
        "temporary_disk": 0,
        "weight": 1,
        "tres": "cpu=64,mem=257000M,billing=64,gres/gpu=8",
        "topology": "",
        "tls_cert_last_renewal": no_val(0),
        "suspend_time": no_val(0),
        "version": "26.05.5",
    }


def slurm_job(slot: Slot) -> JSON:
    """The running job of a busy slot, as ``GET /slurm/v0.0.45/jobs/`` lists it (the fields slurm_sync reads)."""
    start = FIRST_UPDATE - 600
    return {
        "job_id": 1000 + slot.index,
        "name": "train",
        "job_state": ["RUNNING"],
        "state_reason": "None",
        "nodes": slot.pod,
        "batch_host": slot.pod,
        "partition": slot.nodeset,
        "user_name": "alice",
        "user_id": 1000,
        "admin_comment": "",
        "comment": "",
        "flags": [],
        "start_time": no_val(start),
        "time_limit": no_val(120 + slot.index % 60),
        "end_time": no_val(start + 60 * (120 + slot.index % 60)),
    }


def openapi_spec() -> JSON:
    """The parts of slurmrestd's ``GET /openapi/v3`` the client negotiates from."""
    versions = ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")
    schemas: JSON = {}
    for v in versions:
        schemas[f"{v}_update_node_msg"] = {
            "properties": {f: {} for f in ("state", "reason", "comment", "features", "features_act", "topology_str")}
        }
        schemas[f"{v}_job_desc_msg"] = {
            "properties": {"flags": {"type": "array", "items": {"$ref": f"#/components/schemas/{v}_flags"}}}
        }
        schemas[f"{v}_flags"] = {"type": "string", "enum": ["SPREAD_JOB", "EXTERNAL_JOB"]}
    paths = {f"/slurm/{v}/{p}": {"get": {}} for v in versions for p in ("ping/", "nodes/", "node/{node_name}", "jobs/")}
    return {"openapi": "3.0.3", "paths": paths, "components": {"schemas": schemas}}


@dataclass
class FakeSlurmrestd:
    nodes: dict[str, JSON]
    jobs: list[JSON] = field(default_factory=list)
    last_update: int = FIRST_UPDATE
    requests: Counter[str] = field(default_factory=Counter)
    updates: list[tuple[str, JSON]] = field(default_factory=list)
    _listing: bytes | None = None

    def listing(self) -> bytes:
        if self._listing is None:
            body = {
                "nodes": list(self.nodes.values()),
                "last_update": no_val(self.last_update),
                "meta": slurm_meta(),
                "errors": [],
                "warnings": [],
            }
            self._listing = orjson.dumps(body)
        return self._listing

    def changed(self) -> None:
        self.last_update += 1
        self._listing = None

    def admin_drain(self, name: str, reason: str) -> None:
        """``scontrol update nodename=… state=drain reason=…`` by root."""
        node = self.nodes[name]
        node["state"] = [*node["state"], "DRAIN"] if "DRAIN" not in node["state"] else node["state"]
        node |= {"reason": reason, "reason_set_by_user": "root", "reason_changed_at": no_val(self.last_update + 1)}
        self.changed()

    def handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.requests[f"{request.method} {path}"] += 1
        if path == "/openapi/v3":
            return httpx.Response(200, json=openapi_spec())
        if path == f"{V}/nodes/" and request.method == "GET":
            since = request.url.params.get("update_time")
            if since is not None and int(since) >= self.last_update:
                return httpx.Response(304)
            return httpx.Response(200, content=self.listing(), headers={"Content-Type": "application/json"})
        if path == f"{V}/jobs/" and request.method == "GET":
            since = request.url.params.get("update_time")
            if since is not None and int(since) >= FIRST_UPDATE:  # slurmrestd's "no job changes since"
                return httpx.Response(
                    200, json={"jobs": [], "last_update": no_val(0), "meta": slurm_meta(), "errors": [], "warnings": []}
                )
            return httpx.Response(
                200,
                json={
                    "jobs": self.jobs,
                    "last_update": no_val(FIRST_UPDATE),
                    "meta": slurm_meta(),
                    "errors": [],
                    "warnings": [],
                },
            )
        if path == f"{V}/ping/":
            pings = [
                {
                    "hostname": CONTROLLER_POD,
                    "pinged": "UP",
                    "responding": True,
                    "latency": 812,
                    "mode": "primary",
                    "primary": True,
                }
            ]
            return httpx.Response(200, json={"pings": pings, "meta": slurm_meta(), "errors": [], "warnings": []})
        if path.startswith(f"{V}/node/") and request.method == "POST":
            name = path.rsplit("/", 1)[1]
            update = orjson.loads(request.content)
            self.updates.append((name, update))
            node = self.nodes[name]
            for key in ("reason", "comment"):
                if key in update:
                    node[key] = update[key]
            for state in update.get("state") or []:
                if state == "DRAIN":
                    node["state"] = [*(s for s in node["state"] if s != "DRAIN"), "DRAIN"]
                elif state in ("UNDRAIN", "RESUME"):
                    node["state"] = [s for s in node["state"] if s != "DRAIN"]
                    node["reason"] = ""
            self.changed()
            return httpx.Response(200, json={"meta": slurm_meta(), "errors": [], "warnings": []})
        return httpx.Response(404, content=b"")


# --- measuring --------------------------------------------------------------------------------


@dataclass
class Sample:
    cpu_ns: float
    wall_ns: float


def sample(fn: Callable[[], object], paused: bool = False) -> tuple[Sample, object]:
    gc.collect()
    was = gc.isenabled()
    if paused:
        gc.disable()
    try:
        c0, w0 = time.process_time_ns(), time.perf_counter_ns()
        result = fn()
        c1, w1 = time.process_time_ns(), time.perf_counter_ns()
    finally:
        if was:
            gc.enable()
    return Sample(c1 - c0, w1 - w0), result


def median_cpu(samples: list[Sample]) -> float:
    return statistics.median(s.cpu_ns for s in samples)


def median_wall(samples: list[Sample]) -> float:
    return statistics.median(s.wall_ns for s in samples)


def _write_target(write: JSON) -> str:
    match = _PATH.match(write["path"])
    assert match is not None
    kind = {"pods": "pod", "nodesets": "nodeset"}.get(match["kind"], match["kind"])
    return f"{kind} {match['name']}" + ("/status" if match["sub"] else "")


def run(quick: bool = False) -> Report:
    from kubernetes import client as k8s

    from slurm_sync.kube import Kube
    from slurm_sync.metrics import Metrics
    from slurm_sync.operator.loop import OperatorLoop
    from slurm_sync.slurm.client import SlurmClient

    slots = layout()
    apiserver = ApiserverProcess()  # builds the Kubernetes objects in the child meanwhile
    try:
        slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in slots}, [slurm_job(s) for s in slots if s.busy])
        slurm = SlurmClient("http://slurmrestd.slurm.svc:6820", lambda: "bench-token")
        slurm._http.close()
        slurm._http = httpx.Client(base_url=slurm.base_url, transport=httpx.MockTransport(slurmd.handle))
        config = k8s.Configuration()
        config.host = apiserver.url
        metrics = Metrics()
        counted: Counter[tuple[str, str]] = Counter()

        def count(kind: str, verb: str) -> None:
            counted[(kind, verb)] += 1
            metrics.count_kube_write(kind, verb)

        loop = OperatorLoop(CLUSTER, NS, CLUSTER, slurm, Kube(k8s.ApiClient(config), count), metrics)

        def checked_pass() -> Any:
            result = loop.run_pass()
            if not result.ok:
                raise RuntimeError(f"pass failed: {result.errors}")
            return result

        # settle
        settle: list[tuple[int, int]] = []
        for _ in range(SETTLE_PASSES):
            result = checked_pass()
            settle.append((result.kube_writes, result.slurm_writes))
            if result.kube_writes == 0 and result.slurm_writes == 0:
                break
        else:
            raise RuntimeError(f"no quiet pass within {SETTLE_PASSES} passes: (kube, slurm) writes {settle}")
        writes_seen = len(apiserver.writes())

        # the floor's bytes: exactly what a pass lists
        lists = [
            apiserver.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={names.LABEL_CLUSTER}%3D{CLUSTER}"),
            apiserver.get(f"/apis/slinky.slurm.net/v1beta1/namespaces/{NS}/nodesets"),
            apiserver.get("/api/v1/nodes"),
            apiserver.get(
                f"/api/v1/namespaces/{NS}/pods?labelSelector={names.LABEL_INSTANCE}%3D{CLUSTER}"
                f"%2C{names.LABEL_NAME}%3Dslurmctld"
            ),
        ]
        slurm_listing = slurmd.listing()

        def floor() -> object:
            return [orjson.loads(b) for b in lists]

        watch = slurm.node_watch()
        watch.poll()

        def slurm_poll() -> object:
            return watch.poll(), slurm.ping()

        def slurm_parse() -> object:
            return orjson.loads(slurm_listing)

        # unchanged cycles, interleaved with the floor and peers
        rounds = 3 if quick else 7
        cycle: list[Sample] = []
        floors: list[Sample] = []
        polls: list[Sample] = []
        parses: list[Sample] = []
        unchanged_writes = 0
        slurm_requests: list[int] = []
        poll_requests: list[int] = []
        for _ in range(rounds):
            before = sum(slurmd.requests.values())
            s, result = sample(checked_pass)
            slurm_requests.append(sum(slurmd.requests.values()) - before)
            before = sum(slurmd.requests.values())
            polls.append(sample(slurm_poll)[0])
            poll_requests.append(sum(slurmd.requests.values()) - before)
            unchanged_writes += result.kube_writes + result.slurm_writes  # type: ignore[attr-defined]
            cycle.append(s)
            floors.append(sample(floor, paused=True)[0])
            parses.append(sample(slurm_parse, paused=True)[0])
        http_writes = apiserver.writes()
        unchanged_http = len(http_writes) - writes_seen
        writes_seen = len(http_writes)

        # one node changed per round: an administrator drains it
        changed: list[Sample] = []
        stray: list[str] = []
        targets: Counter[str] = Counter()
        per_change: list[int] = []
        after_quiet = 0
        example: list[str] = []
        changed_requests: list[int] = []
        picks = []  # one idle node in the middle of each NodeSet
        for nodeset, _count in NODESETS:
            mine = [s for s in slots if s.nodeset == nodeset and not s.busy]
            picks.append(mine[len(mine) // 2])
        for slot in picks:
            slurmd.admin_drain(slot.pod, ADMIN_REASON)
            counted_before = sum(counted.values())
            requests_before = sum(slurmd.requests.values())
            s, result = sample(checked_pass)
            changed.append(s)
            http_writes = apiserver.writes()
            new = http_writes[writes_seen:]
            writes_seen = len(http_writes)
            allowed = {
                f"pod {slot.pod}": "pod <pod> (metadata)",
                f"pod {slot.pod}/status": "pod <pod>/status",
                f"nodeset {slot.nodeset}": "nodeset <its NodeSet>",
            }
            for write in new:
                target = _write_target(write)
                if target in allowed:
                    targets[allowed[target]] += 1
                else:
                    stray.append(f"after draining {slot.pod}: {target}")
            if not example:
                example = [
                    f"{w['method']} {w['path']} ({w['content_type'].split('/')[-1]}) {orjson.dumps(w['body']).decode()}"
                    for w in new
                ]
            changed_requests.append(sum(slurmd.requests.values()) - requests_before)
            if len(new) != sum(counted.values()) - counted_before or len(new) != result.kube_writes:  # type: ignore[attr-defined]
                stray.append(f"write count mismatch: HTTP {len(new)}, Kube {sum(counted.values()) - counted_before}")
            per_change.append(len(new))
            after = checked_pass()  # the change is absorbed: quiet again
            after_quiet += after.kube_writes + after.slurm_writes
            pod = orjson.loads(apiserver.get(f"/api/v1/namespaces/{NS}/pods/{slot.pod}"))
            types = {c["type"]: c.get("message") for c in pod["status"]["conditions"]}
            if (
                types.get("SlurmNodeStateDrain") != ADMIN_REASON
                or pod["metadata"]["annotations"].get(names.ANNOTATION_DRAINED) != "true"
            ):
                stray.append(f"pod {slot.pod} does not show the drain: {types}")
            if slurmd.nodes[slot.pod]["reason"] != ADMIN_REASON or "DRAIN" not in slurmd.nodes[slot.pod]["state"]:
                stray.append(f"the administrator's drain on {slot.pod} was changed")
        writes_seen = len(apiserver.writes())
    finally:
        apiserver.close()

    floor_cpu, floor_wall = median_cpu(floors), median_wall(floors)
    report = Report(
        title=TITLE, columns=["measure", "k8s writes", "slurm req", "CPU p50", "wall p50", "CPU / floor", "samples"]
    )

    def row(label: str, writes: str, requests: str, samples: list[Sample], ratio: bool = True) -> None:
        cpu = median_cpu(samples)
        report.rows.append(
            [
                label,
                writes,
                requests,
                fmt_ns(cpu),
                fmt_ns(median_wall(samples)),
                fmt_ratio(cpu / floor_cpu) if ratio else "1.00x (floor)",
                str(len(samples)),
            ]
        )

    row("unchanged cycle (run_pass)", f"{unchanged_writes}", f"{statistics.median(slurm_requests):.0f}", cycle)
    row("floor: orjson.loads of the 4 k8s lists", "-", "-", floors, ratio=False)
    row("peer: unchanged Slurm poll (304 + ping)", "-", f"{statistics.median(poll_requests):.0f}", polls)
    row("peer: orjson.loads of the Slurm listing", "-", "-", parses)
    row(
        "one node drained by an admin (run_pass)",
        f"{statistics.median(per_change):.0f}",
        f"{statistics.median(changed_requests):.0f}",
        changed,
    )

    mb = sum(map(len, lists)) / 1e6
    report.notes.append(
        f"{len(slots):,} Slurm nodes, {len(slots):,} pods in {len(NODESETS)} NodeSets, {len(slots):,} k8s Nodes; "
        f"k8s lists per pass {mb:.1f} MB (pods {len(lists[0]) / 1e6:.1f} MB), full Slurm listing "
        f"{len(slurm_listing) / 1e6:.1f} MB."
    )
    report.notes.append(f"settled in {len(settle)} pass(es), (k8s, Slurm) writes per pass: {settle}.")
    report.notes.append(
        f"unchanged: writes seen by the fake apiserver over {rounds} cycles: {unchanged_http} (Kube-counted + Slurm: "
        f"{unchanged_writes}); "
        f"wall/floor {median_wall(cycle) / floor_wall:.2f}x."
    )
    report.notes.append(
        f"changed: {len(picks)} nodes (one per NodeSet) drained one at a time; writes per change: "
        + ", ".join(f"{t} x{n / len(picks):g}" for t, n in sorted(targets.items()))
        + f"; elsewhere: {len(stray)}; next pass after each: {after_quiet} writes."
    )
    report.notes.extend(f"  e.g. {line}" for line in example)
    for problem in stray[:5]:
        report.notes.append(f"STRAY: {problem}")
    report.notes.append(
        "CPU = time.process_time of this process (the fake apiserver runs in a child process); floor GC paused."
    )
    report.budgets.append(
        Budget("k8s + Slurm writes in unchanged cycles", float(unchanged_writes + unchanged_http), 0, unit="")
    )
    report.budgets.append(Budget("writes not for the changed node's pod or NodeSet", float(len(stray)), 0, unit=""))
    report.budgets.append(Budget("writes in the pass after each change", float(after_quiet), 0, unit=""))
    return report

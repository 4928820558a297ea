"""The two fakes of the slurm_sync bench (bench/slurm_sync.py) and the cluster they serve.

* A cluster of ``size`` Slurm nodes: as many NodeSet worker pods over four NodeSets (made by the real
  NodeSet hook and observed as the cluster leaves them: ~15 kB each), Kubernetes Nodes, the slurmctld
  pod, the JWT key Secret; Slurm nodes and one running job per busy node as slurmrestd 26.05 lists them.
* ``FakeApiserver``: a minimal stateful API server (lists with equality label selectors and
  ``limit``/``continue`` pages; watches ended at their ``timeoutSeconds``, bookmarked as the API server
  bookmarks them when the client allows it, replayed from a retained event log, and an ``Expired`` 410
  ERROR event before it; every error a ``metav1.Status`` with reason and message, bench/apistatus.py;
  strategic-merge patches of pod metadata and conditions, merge patches of NodeSet annotations; Events
  taken and logged, not kept as objects). It records every write to an object, and counts the requests and
  the bytes it sends per client (header ``X-Bench-Client``). It runs in a child process, with
  ``FakeSlurmrestd`` over HTTP beside it, so that the CPU time and memory of a process measured are its
  own.
* ``FakeSlurmrestd``: the v0.0.45 paths slurm_sync uses (``GET /nodes/`` with ``last_update``, 304 for
  an unchanged ``update_time``; ``GET /jobs/``; ``GET /ping/``; ``POST /node/{name}`` applied to its
  state), as an ``httpx.MockTransport`` handler; over HTTP, ``POST /_bench/touch`` makes its listing change.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import json
import multiprocessing
import queue
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson

from bench import apistatus
from slinky_common import names

# The apiserver's merge of pod metadata and conditions, as the tests' fake does it.
from tests.slurm_sync.fakekube import merge_conditions, merge_metadata

JSON = dict[str, Any]
NS = "slurm"
CLUSTER = "slurm"
CONTROLLER_POD = "slurm-controller-0"
JWT_SECRET = "slurm-jwt"
V = "/slurm/v0.0.45"
FIRST_UPDATE = 1_780_000_000
CLIENT_HEADER = "X-Bench-Client"
EVENT_LOG = 5_000  # watch events kept for watches that resume; an older resourceVersion gets 410
BOOKMARK_EVERY = 60.0  # seconds between the bookmarks of a watch that asked for them
BOOKMARK_BEFORE_END = 2.0  # and one this long before the watch's deadline


# --- layout, shared by both sides -------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    index: int  # global, 0..n-1
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


def nodesets(size: int) -> tuple[tuple[str, int], ...]:
    """Four NodeSets sharing ``size`` pods 40/30/20/10 %."""
    return tuple((name, size * share // 10) for name, share in (("gpu", 4), ("cpu", 3), ("mem", 2), ("io", 1)))


def layout(size: int) -> list[Slot]:
    slots, index = [], 0
    for nodeset, count in nodesets(size):
        for ordinal in range(count):
            slots.append(Slot(index, nodeset, ordinal))
            index += 1
    return slots


def nodeset_uid(nodeset: str) -> str:
    from bench.nodeset_sync import uid

    return uid("NodeSet", NS, nodeset)


# --- the Kubernetes side: objects ---------------------------------------------------------------


def build_kube_objects(size: int) -> dict[tuple[str, str, str], JSON]:
    """NodeSets and their pods as the hook creates them and the cluster observes them, Nodes, slurmctld,
    the JWT key Secret."""
    from bench import nodeset_sync as ns_bench
    from hooks.app import create_app

    client = create_app().test_client()
    related = {f"Controller.{names.API_VERSION}": {f"{NS}/{CLUSTER}": ns_bench.controller_cr()}, "Secret.v1": {}}
    objects: dict[tuple[str, str, str], JSON] = {}
    slots = layout(size)
    for nodeset, count in nodesets(size):
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
    key = base64.b64encode(b"bench-jwt-key-" + b"k" * 32).decode()
    objects[("secrets", NS, JWT_SECRET)] = {
        "metadata": {"name": JWT_SECRET, "namespace": NS, "resourceVersion": "7"},
        "data": {"jwt.key": key},
    }
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


# --- the Kubernetes side: a minimal stateful apiserver ------------------------------------------

_PATH = re.compile(
    r"^/(?:api/v1|apis/slinky\.slurm\.net/v1beta1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>[a-z]+)"
    r"(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)


def _labels_match(obj: JSON, wanted: dict[str, str]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in wanted.items())


@dataclass
class Watch:
    """One watch being served: what it selects, and the event lines still to send (None: end it)."""

    plural: str
    namespace: str | None
    wanted: dict[str, str]
    client: str
    bookmarks: bool = False  # allowWatchBookmarks: the client takes BOOKMARK events
    lines: queue.SimpleQueue[bytes | None] = field(default_factory=queue.SimpleQueue)

    def selects(self, plural: str, namespace: str, obj: JSON) -> bool:
        return (
            plural == self.plural
            and (self.namespace is None or namespace == self.namespace)
            and _labels_match(obj, self.wanted)
        )


@dataclass
class Event:
    version: int
    plural: str
    namespace: str
    obj: JSON
    line: bytes


class FakeApiserver:
    """State and request handling (callers hold ``lock``); list pages are cached until the next write."""

    def __init__(self, objects: dict[tuple[str, str, str], JSON]) -> None:
        self.objects = objects
        self.writes: list[JSON] = []
        self.posted: list[JSON] = []  # Kubernetes Events posted (taken, not kept as objects): path, body, when
        self.version = 1_000_000
        self.lock = threading.Lock()
        self.watches: list[Watch] = []
        self.events: list[Event] = []
        self.sent: Counter[str] = Counter()  # "<client> <kind>" -> requests, "<client> bytes" -> bytes
        self._pages: dict[str, bytes] = {}
        self._selected: dict[tuple[str, str | None, tuple[tuple[str, str], ...]], list[JSON]] = {}

    def count(self, client: str, kind: str, sent: int) -> None:
        self.sent[f"{client} {kind}"] += 1
        self.sent[f"{client} bytes"] += sent

    def handle(self, method: str, target: str, content_type: str, body: bytes) -> tuple[int, bytes] | Watch:
        url = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        if url.path == "/_bench/writes":
            return 200, orjson.dumps(self.writes)
        if url.path == "/_bench/events":
            return 200, orjson.dumps(self.posted)
        if url.path == "/_bench/sent":
            return 200, orjson.dumps(self.sent)
        if method == "POST" and url.path.startswith("/apis/events.k8s.io/"):
            self.posted.append({"path": url.path, "body": orjson.loads(body), "at": time.monotonic()})
            return 201, body  # an Event slurm_sync posts about what it did: taken, not kept as an object
        match = _PATH.match(url.path)
        if not match:
            return 404, orjson.dumps(apistatus.not_found())
        plural, ns, name = match["kind"], match["ns"], match["name"]
        wanted = dict(kv.split("=", 1) for kv in query.get("labelSelector", "").split(",") if kv)
        if method == "GET" and name is None and query.get("watch") in ("true", "True", "1"):
            return self._watch(plural, ns, wanted, query)
        if method == "GET" and name is None:
            if target not in self._pages:
                self._pages[target] = self._page(plural, ns, wanted, query)
            return 200, self._pages[target]
        obj = self.objects.get((plural, ns or "", name or ""))
        if obj is None:
            return 404, orjson.dumps(apistatus.not_found(plural, name or ""))
        if method == "GET":
            return 200, orjson.dumps(obj)
        if method == "PATCH":
            patch = orjson.loads(body)
            at = time.monotonic()  # CLOCK_MONOTONIC: the same in every process of the machine
            write = {"method": method, "path": url.path, "content_type": content_type, "body": patch, "at": at}
            self.writes.append(write)
            merge_metadata(obj, patch.get("metadata") or {})
            if match["sub"] == "status":
                merge_conditions(obj, (patch.get("status") or {}).get("conditions") or [])
            self._changed(plural, ns or "", obj)
            return 200, orjson.dumps(obj)
        return 405, orjson.dumps(apistatus.method_not_allowed())

    def _page(self, plural: str, ns: str | None, wanted: dict[str, str], query: dict[str, str]) -> bytes:
        selection = (plural, ns, tuple(sorted(wanted.items())))
        if selection not in self._selected:  # the pages of one listing slice one selection
            self._selected[selection] = [
                o
                for (p, n, _), o in sorted(self.objects.items())
                if p == plural and (ns is None or n == ns) and _labels_match(o, wanted)
            ]
        items = self._selected[selection]
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items)
        end = start + limit
        api, kind = _type_of(plural)
        meta = {"resourceVersion": str(self.version)} | ({"continue": str(end)} if end < len(items) else {})
        return orjson.dumps({"kind": f"{kind}List", "apiVersion": api, "metadata": meta, "items": items[start:end]})

    def _watch(self, plural: str, ns: str | None, wanted: dict[str, str], query: dict[str, str]) -> Watch:
        since = int(query.get("resourceVersion") or 0)
        watch = Watch(plural, ns, wanted, "", bookmarks=query.get("allowWatchBookmarks") in ("true", "True", "1"))
        if self.events and since < self.events[0].version - 1:  # as the watch cache: an ERROR event, then the end
            gone = apistatus.expired(since, self.events[0].version - 1)
            watch.lines.put(orjson.dumps({"type": "ERROR", "object": gone}) + b"\n")
            watch.lines.put(None)
            return watch
        for event in self.events:
            if event.version > since and watch.selects(event.plural, event.namespace, event.obj):
                watch.lines.put(event.line)
        self.watches.append(watch)
        return watch

    def bookmark(self, watch: Watch) -> None:
        """Queue a BOOKMARK at the current resourceVersion for ``watch`` (callers hold ``lock``: every event
        up to it is queued before it, so the client never resumes from beyond what it received)."""
        api, kind = _type_of(watch.plural)
        obj = {"kind": kind, "apiVersion": api, "metadata": {"resourceVersion": str(self.version)}}
        watch.lines.put(orjson.dumps({"type": "BOOKMARK", "object": obj}) + b"\n")

    def _changed(self, plural: str, ns: str, obj: JSON) -> None:
        self.version += 1
        obj["metadata"]["resourceVersion"] = str(self.version)
        self._pages.clear()
        self._selected.clear()
        line = orjson.dumps({"type": "MODIFIED", "object": obj}) + b"\n"
        self.events = [*self.events[-EVENT_LOG + 1 :], Event(self.version, plural, ns, obj, line)]
        for watch in self.watches:
            if watch.selects(plural, ns, obj):
                watch.lines.put(line)


def _type_of(plural: str) -> tuple[str, str]:
    """The apiVersion and kind of a collection's objects."""
    if plural == "nodesets":
        return names.API_VERSION, "NodeSet"
    return "v1", plural[:-1].capitalize()


def bookmark_times(started: float, deadline: float) -> list[float]:
    """When the API server sends a watch its bookmarks (the watch cache: roughly every minute, and once
    2 s before the watch's deadline, so that the client resumes it from a recent resourceVersion).
    A fake without them 410s a quiet watch resumed after many writes to other objects, which a real
    server, having bookmarked it, does not."""
    last = deadline - BOOKMARK_BEFORE_END
    times, at = [], started + BOOKMARK_EVERY
    while at < last:
        times.append(at)
        at += BOOKMARK_EVERY
    return [*times, last] if last > started else times


def _serve(conn: Any, size: int) -> None:
    """Child process: build the cluster, serve the API server and slurmrestd; send the ports (or the error)."""
    try:
        slots = layout(size)
        state = FakeApiserver(build_kube_objects(size))
        slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in slots}, [slurm_job(s) for s in slots if s.busy])
        kube_server = _Server(("127.0.0.1", 0), _kube_handler(state))
        slurm_server = _Server(("127.0.0.1", 0), _slurm_handler(slurmd))
        threading.Thread(target=slurm_server.serve_forever, daemon=True).start()
        conn.send((kube_server.server_address[1], slurm_server.server_address[1]))
    except BaseException as exc:
        conn.send(repr(exc))
        raise
    kube_server.serve_forever()


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client hanging up on a kept-alive connection (or a watch) is not news


def _kube_handler(state: FakeApiserver) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            client = self.headers.get(CLIENT_HEADER, "admin")
            with state.lock:
                answer = state.handle(self.command, self.path, self.headers.get("Content-Type", ""), body)
            if isinstance(answer, Watch):
                self._stream(answer, client)
                return
            status, data = answer
            with state.lock:
                state.count(client, _kind(self.command, self.path), len(data))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, watch: Watch, client: str) -> None:
            timeout = int(parse_qs(urlsplit(self.path).query).get("timeoutSeconds", ["300"])[-1])
            started = time.monotonic()
            deadline = started + timeout
            bookmarks = bookmark_times(started, deadline) if watch.bookmarks else []
            with state.lock:
                state.count(client, "watch", 0)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                while (left := deadline - time.monotonic()) > 0:
                    if bookmarks and time.monotonic() >= bookmarks[0]:
                        bookmarks.pop(0)
                        with state.lock:
                            state.bookmark(watch)
                    wait = min(left, 1.0, *(b - time.monotonic() for b in bookmarks[:1]))
                    try:
                        line = watch.lines.get(timeout=max(wait, 0.0))
                    except queue.Empty:
                        continue
                    if line is None:
                        break
                    self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
                    self.wfile.flush()
                    with state.lock:
                        state.sent[f"{client} bytes"] += len(line)
                self.wfile.write(b"0\r\n\r\n")
            finally:
                with state.lock:
                    if watch in state.watches:
                        state.watches.remove(watch)

        do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _kind(method: str, target: str) -> str:
    """list, get or the write's verb, for the request counts."""
    match = _PATH.match(urlsplit(target).path)
    if method == "GET":
        return "list" if match is not None and match["name"] is None else "get"
    return method.lower()


def _slurm_handler(slurmd: FakeSlurmrestd) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if self.path == "/_bench/touch":  # Slurm changed something: the next listing is whole again
                slurmd.changed()
                self.send_response(204)
                self.end_headers()
                return
            request = httpx.Request(
                self.command, f"http://slurmrestd{self.path}", headers=dict(self.headers),
                content=self.rfile.read(length) if length else b"",
            )  # fmt: skip
            response = slurmd.handle(request)
            data = response.read()
            self.send_response(response.status_code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def touch_slurm(slurm_url: str) -> None:
    """Slurm's node listing changes (its ``last_update``, not a node): the next poll reads it whole."""
    conn = http.client.HTTPConnection("127.0.0.1", urlsplit(slurm_url).port or 80, timeout=60)
    try:
        conn.request("POST", "/_bench/touch")
        if conn.getresponse().status != 204:
            raise RuntimeError("the fake slurmrestd did not take the touch")
    finally:
        conn.close()


class ServerProcess:
    """The fake API server and slurmrestd in a child process, for a cluster of ``size`` Slurm nodes."""

    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("fork")
        parent, child = context.Pipe()
        self.process = context.Process(target=_serve, args=(child, size), daemon=True)
        self.process.start()
        if not parent.poll(900):
            self.close()
            raise RuntimeError("the fake API server did not start within 900 s")
        ports = parent.recv()
        if not isinstance(ports, tuple):
            self.close()
            raise RuntimeError(f"the fake API server failed: {ports}")
        self.port, slurm_port = ports
        self.url = f"http://127.0.0.1:{self.port}"
        self.slurm_url = f"http://127.0.0.1:{slurm_port}"

    def request(self, method: str, target: str, body: JSON | None = None) -> bytes:
        """A raw request as the administrator, on its own connection (patches, the write log, counts)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            headers = {"Content-Type": "application/strategic-merge-patch+json"} if body is not None else {}
            conn.request(method, target, body=orjson.dumps(body) if body is not None else None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            if response.status != 200:
                raise RuntimeError(f"{method} {target}: HTTP {response.status}")
            return data
        finally:
            conn.close()

    def get(self, target: str) -> bytes:
        return self.request("GET", target)

    def writes(self) -> list[JSON]:
        return orjson.loads(self.get("/_bench/writes"))

    def events(self) -> list[JSON]:
        """The Events posted, in order (each with ``at``, as the writes)."""
        return orjson.loads(self.get("/_bench/events"))

    def sent(self) -> Counter[str]:
        return Counter(orjson.loads(self.get("/_bench/sent")))

    def close(self) -> None:
        self.process.terminate()
        self.process.join(10)


# --- the Slurm side: slurmrestd 26.05 (v0.0.45) ------------------------------------------------


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
    paths: dict[str, dict[str, Any]] = {
        f"/slurm/{v}/{p}": {"get": {}} for v in versions for p in ("ping/", "nodes/", "node/{node_name}", "jobs/")
    }
    return {"openapi": "3.0.3", "paths": paths, "components": {"schemas": schemas}}


@dataclass
class FakeSlurmrestd:
    nodes: dict[str, JSON]
    jobs: list[JSON] = field(default_factory=list)
    last_update: int = FIRST_UPDATE
    requests: Counter[str] = field(default_factory=Counter)
    updates: list[tuple[str, JSON]] = field(default_factory=list)
    drained_at: dict[str, float] = field(default_factory=dict)  # node -> perf_counter() of our DRAIN
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
        if path.startswith(f"{V}/node/") and request.method == "GET":
            name = path.rsplit("/", 1)[1]
            node = self.nodes.get(name)
            if node is None:  # slurmrestd's answer for a node slurmctld does not know
                error = {"error": "", "error_number": 0, "description": f"Failure to query node {name}"}
                return httpx.Response(200, json={"nodes": [], "meta": slurm_meta(), "errors": [error], "warnings": []})
            body = {"nodes": [node], "last_update": no_val(self.last_update), "meta": slurm_meta()}
            return httpx.Response(200, json={**body, "errors": [], "warnings": []})
        if path.startswith(f"{V}/node/") and request.method == "POST":
            name = path.rsplit("/", 1)[1]
            update = orjson.loads(request.content)
            self.updates.append((name, update))
            if "DRAIN" in (update.get("state") or []):
                self.drained_at.setdefault(name, time.perf_counter())
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

"""A fault-injecting HTTP proxy in front of the lab's real API server, for watch failures.

slurm_sync's client talks plain HTTP to the proxy; the proxy forwards each request to the API server
over TLS with the lab's token, and streams a watch's events line by line, so that a test can do to a
watch what networks and servers do: cut it mid-stream (``sever``), end it as the server does at its
timeout (``end_watches``), lose events (``swallow``), answer a watch from a too old resourceVersion
with the server's own ``410 Gone`` event (``expire_below``), fail listings (``refuse_lists``), and stop
answering altogether as a stopped (SIGSTOP) server does (``stalled``: requests and watch events are
held, not lost, until the block ends). Everything else is the real server's answer.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from kubernetes import client

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host", "authorization"})


@dataclass
class _Stream:
    """One watch being relayed: the client's socket and the upstream response."""

    client: socket.socket
    upstream: http.client.HTTPSConnection
    fate: str = ""  # "" relaying; "sever" or "end" once a test decided


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: dict[str, str]
    peer: tuple[str, int] = ("", 0)  # the client's end of the connection the request came on

    @property
    def watch(self) -> bool:
        return self.query.get("watch", "").lower() == "true"

    @property
    def listing(self) -> bool:
        """A GET of a collection that is not a watch (the path ends with a plural, not a name)."""
        return self.method == "GET" and not self.watch and self.path.rstrip("/").split("/")[-1] in _PLURALS


_PLURALS = frozenset({"pods", "nodes", "controllers", "restapis", "nodesets", "secrets", "persistentvolumeclaims"})


@dataclass
class ApiProxy:
    upstream: client.Configuration
    seen: list[Seen] = field(default_factory=list)
    swallowing: bool = False
    lists_refused: bool = False
    expired_below: int = 0
    _streams: list[_Stream] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _answering: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._answering.set()
        split = urlsplit(self.upstream.host)
        self._host, self._port = split.hostname or "127.0.0.1", split.port or 443
        self._tls = ssl.create_default_context(cafile=self.upstream.ssl_ca_cert)
        self._token = self.upstream.api_key.get("authorization") or self.upstream.api_key.get("BearerToken", "")
        if self._token and not self._token.startswith("Bearer "):
            self._token = f"Bearer {self._token}"
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        threading.Thread(target=self._server.serve_forever, name="api-proxy", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def api_client(self) -> client.ApiClient:
        """An official client whose every request goes through the proxy."""
        config = client.Configuration()
        config.host = self.url
        return client.ApiClient(config)

    def close(self) -> None:
        self._answering.set()
        self.sever()
        self._server.shutdown()
        self._server.server_close()

    # --- faults -----------------------------------------------------------------------------

    def sever(self) -> int:
        """Cut every watch being relayed, mid-stream (a reset: no end of the chunked body); how many."""
        return self._decide("sever")

    def end_watches(self) -> int:
        """End every watch being relayed as the server does at its timeout (a complete chunked body)."""
        return self._decide("end")

    @contextmanager
    def swallowing_events(self) -> Iterator[None]:
        """Events of the watches being relayed are dropped, not delivered, within the block."""
        self.swallowing = True
        try:
            yield
        finally:
            self.swallowing = False

    @contextmanager
    def stalled(self) -> Iterator[None]:
        """Within the block nothing is answered nor relayed, as from a stopped server: each request waits
        (its connection open) and each watch's next event too, until the block ends."""
        self._answering.clear()
        try:
            yield
        finally:
            self._answering.set()

    def expire_below(self, resource_version: int) -> None:
        """From now on a watch from an older resourceVersion than ``resource_version`` is answered as the
        server answers one whose events it no longer has: 200 and a single ERROR event with code 410."""
        self.expired_below = resource_version

    def watching(self) -> int:
        with self._lock:
            return sum(1 for s in self._streams if not s.fate)

    def _decide(self, fate: str) -> int:
        with self._lock:
            streams = [s for s in self._streams if not s.fate]
            for stream in streams:
                stream.fate = fate
        for stream in streams:  # wakes the relaying thread, blocked reading upstream
            _shut(stream.upstream.sock)
        return len(streams)

    # --- relaying ---------------------------------------------------------------------------

    def relay(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        seen = Seen(handler.command, split.path, query, handler.client_address[:2])
        self.seen.append(seen)
        self._answering.wait()
        if seen.watch and int(seen.query.get("resourceVersion") or 0) < self.expired_below:
            _answer_gone(handler, seen)
            return
        if seen.listing and self.lists_refused:
            _send(handler, 503, orjson.dumps({"kind": "Status", "code": 503, "message": "proxy: lists refused"}))
            return
        upstream = http.client.HTTPSConnection(self._host, self._port, context=self._tls, timeout=None)
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _HOP_BY_HOP}
        headers["Authorization"] = self._token
        upstream.request(handler.command, handler.path, body=body or None, headers=headers)
        response = upstream.getresponse()
        if seen.watch and response.status == 200:
            self._relay_stream(handler, upstream, response)
            return
        data = response.read()
        upstream.close()
        _send(handler, response.status, data, response.getheader("Content-Type") or "application/json")

    def _relay_stream(
        self, handler: BaseHTTPRequestHandler, upstream: http.client.HTTPSConnection, response: Any
    ) -> None:
        stream = _Stream(handler.connection, upstream)
        with self._lock:
            self._streams.append(stream)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        try:
            while not stream.fate:
                try:
                    line = response.readline()
                except (OSError, http.client.HTTPException):
                    break
                if not line:
                    break
                self._answering.wait()
                if not self.swallowing and not stream.fate:
                    _chunk(handler, line)
            if stream.fate == "sever":
                _reset(handler.connection)
                handler.close_connection = True
            else:
                handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
        except OSError:
            handler.close_connection = True
        finally:
            upstream.close()
            with self._lock:
                self._streams.remove(stream)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client cut off (a severed watch, a closed keep-alive connection) is what these tests do


def _handler(proxy: ApiProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            proxy.relay(self, self.rfile.read(length) if length else b"")

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def _send(handler: BaseHTTPRequestHandler, status: int, data: bytes, content_type: str = "application/json") -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _answer_gone(handler: BaseHTTPRequestHandler, seen: Seen) -> None:
    status = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {seen.query.get('resourceVersion')}",
        "reason": "Expired",
        "code": 410,
    }
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    _chunk(handler, orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


def _shut(sock: socket.socket | None) -> None:
    if sock is not None:
        with suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a dropped connection or a dying proxy does."""
    with suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    _shut(sock)

"""A fault-injecting HTTP proxy between slurm_sync and the lab's real slurmrestd.

Each request is forwarded unless the current fault answers it itself; the fault may rewrite the
request on its way (a bad token) and the real answer on its way back (an empty listing, another
cluster's name, a body cut short). Every request is recorded, with whether it reached Slurm, so a
test can tell which writes Slurm really received. Threads, because a delayed answer must not hold
up the next request.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol
from urllib.parse import parse_qsl, urlsplit

import httpx

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length", "host"})


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]
    body: bytes
    seq: int  # 0 for the first request of the current pass (see FaultProxy.begin_pass)

    @property
    def is_write(self) -> bool:
        return self.method in WRITE_METHODS

    @property
    def endpoint(self) -> str:
        """``/slurm/v0.0.45/job/12`` -> ``job/12``; ``/slurm/v0.0.45/nodes/`` -> ``nodes``."""
        parts = self.path.strip("/").split("/")
        return "/".join(parts[2:]) if parts[:1] == ["slurm"] else "/".join(parts)

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def with_header(self, name: str, value: str) -> Request:
        kept = tuple((k, v) for k, v in self.headers if k.lower() != name.lower())
        return replace(self, headers=(*kept, (name, value)))


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    content_type: str = "application/json"
    cut_at: int | None = None  # send the headers and this many body bytes, then reset the connection
    reset: bool = False  # reset the connection without answering


class Fault(Protocol):
    """What a fault does to one exchange; the defaults of ``Passthrough`` change nothing."""

    def request(self, request: Request) -> Request: ...

    def answer(self, request: Request) -> Reply | None: ...

    def reply(self, request: Request, reply: Reply) -> Reply: ...

    def release(self) -> None: ...


class Passthrough:
    """No fault: every request reaches Slurm and its answer comes back unchanged."""

    def request(self, request: Request) -> Request:
        return request

    def answer(self, request: Request) -> Reply | None:
        return None

    def reply(self, request: Request, reply: Reply) -> Reply:
        return reply

    def release(self) -> None:
        """Wake anything the fault holds back (a delayed answer) when it is cleared."""


@dataclass(frozen=True)
class Exchange:
    request: Request  # as slurm_sync sent it
    forwarded: bool  # it reached the real slurmrestd
    status: int | None  # what slurm_sync was answered (None: the connection was reset)
    fault: str


@dataclass
class FaultProxy:
    """Serves on 127.0.0.1 (a free port) and forwards to ``upstream``."""

    upstream: str
    timeout: float = 30.0
    exchanges: list[Exchange] = field(default_factory=list)
    _fault: Fault = field(default_factory=Passthrough)
    _fault_name: str = "none"
    _seq: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._client = httpx.Client(base_url=self.upstream.rstrip("/"), timeout=self.timeout)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self._server.block_on_close = False
        self._thread = threading.Thread(target=self._server.serve_forever, name="chaos-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self.clear()
        self._server.shutdown()
        self._server.server_close()
        self._client.close()

    # --- driving it -------------------------------------------------------------------------

    @contextmanager
    def injecting(self, name: str, fault: Fault) -> Iterator[None]:
        """``fault`` for the duration of the block; cleared (and its held answers released) after."""
        with self._lock:
            self._fault, self._fault_name = fault, name
        try:
            yield
        finally:
            self.clear()

    def clear(self) -> None:
        with self._lock:
            fault, self._fault, self._fault_name = self._fault, Passthrough(), "none"
        fault.release()

    def begin_pass(self) -> None:
        """The next request is the first of a pass (faults that strike mid-pass count from it)."""
        with self._lock:
            self._seq = 0

    # --- serving ----------------------------------------------------------------------------

    def _take(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes
              ) -> tuple[Request, Fault, str]:  # fmt: skip
        split = urlsplit(target)
        with self._lock:
            seq, self._seq = self._seq, self._seq + 1
            fault, name = self._fault, self._fault_name
        request = Request(method, split.path, tuple(parse_qsl(split.query)), tuple(headers), body, seq)
        return request, fault, name

    def serve(self, method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> Reply:
        sent, fault, name = self._take(method, target, headers, body)
        request = fault.request(sent)
        reply = fault.answer(request)
        forwarded = reply is None
        if reply is None:
            reply = fault.reply(request, self._forward(request))
        answered = None if reply.reset or reply.cut_at is not None else reply.status
        self.exchanges.append(Exchange(sent, forwarded, answered, name))
        return reply

    def _forward(self, request: Request) -> Reply:
        headers = {k: v for k, v in request.headers if k.lower() not in _HOP_BY_HOP}
        try:
            answer = self._client.request(request.method, request.path, params=list(request.query),
                                          headers=headers, content=request.body or None)  # fmt: skip
        except httpx.HTTPError as exc:  # the real slurmrestd did not answer: neither do we
            return Reply(502, f"chaos proxy: upstream {type(exc).__name__}".encode(), "text/plain")
        return Reply(answer.status_code, answer.content, answer.headers.get("content-type", "application/json"))

    def writes(self, *, forwarded: bool = True) -> list[Request]:
        """The writes slurm_sync sent (only those that reached Slurm, by default)."""
        return [e.request for e in self.exchanges if e.request.is_write and (e.forwarded or not forwarded)]


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as slurm_sync's pooled client expects

        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            reply = proxy.serve(self.command, self.path, list(self.headers.items()), body)
            if reply.reset:
                self._reset()
                return
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            try:
                if reply.cut_at is None:
                    self.wfile.write(reply.body)
                    return
                self.wfile.write(reply.body[: reply.cut_at])
                self.wfile.flush()
            except OSError:  # the client gave up (a delay beyond its timeout): nobody to answer
                self.close_connection = True
                return
            self._reset()

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        def _reset(self) -> None:
            """Close with RST (SO_LINGER 0), as a crashing peer does, not with an orderly FIN."""
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()  # the server's orderly shutdown(SHUT_WR) would send a FIN first
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler

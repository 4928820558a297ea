"""The hook server's gunicorn worker: gevent's, with every request read whole, on a deadline, before
the hook runs (docs/architecture.md §7).

A sync worker reads a request while it serves it, so as many slow clients as workers (one header
line every 2 s) would leave Metacontroller and the API server waiting until gunicorn's worker
timeout killed them all. Here each connection is a greenlet: a client that is slow to send costs
a greenlet (at most `worker_connections` per worker), never the worker, and the hooks, pure CPU
work, run one at a time between reads. The request line and headers must arrive within
HOOKS_READ_TIMEOUT (gunicorn's keep-alive wait, which also ends an idle kept-alive connection), and
the body within HOOKS_READ_TIMEOUT after them; late, the client gets 408 and the connection closes.
The hook never waits on the network, so the collector it pauses (hooks/gcpause.py) is never off
while a client dawdles.
"""

from __future__ import annotations

import contextlib
import io
import logging
from typing import Any

import gevent
from gunicorn.workers.ggevent import GeventWorker

from hooks import serve
from hooks.app import max_body_bytes

log = logging.getLogger("hooks")


class HookWorker(GeventWorker):
    """gevent worker whose requests reach the app with their body already in memory."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = serve.read_timeout()
        self.max_body = max_body_bytes()

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        body_read = self._body_read_in_time(req)
        if body_read is None:
            return _request_timeout(req, sock, addr, self.read_timeout)
        if not body_read:  # the client closed its side before its body was sent whole: no one to answer
            raise StopIteration
        sock.settimeout(self.cfg.timeout)  # a client that stops reading the answer is let go
        return bool(super().handle_request(listener_name, req, sock, addr))

    def _body_read_in_time(self, req: Any) -> bool | None:
        """Whether the body arrived whole; None when it did not within the read timeout."""
        with gevent.Timeout(self.read_timeout, False):
            return _read_body_ahead(req, self.max_body)
        return None


def _read_body_ahead(req: Any, limit: int) -> bool:
    """Replace the request's body stream with its bytes, up to one past `limit` (the app answers 413
    past it), unless announced larger than that (left unread for the app to refuse); False when the
    client closed its side before sending all its Content-Length announced."""
    length = _content_length(req)
    if length is not None and length > limit:
        return True
    data = req.body.read(limit + 1 if length is None else length)
    req.body = io.BytesIO(data)
    return length is None or len(data) == length


def _content_length(req: Any) -> int | None:
    for name, value in req.headers:
        if name == "CONTENT-LENGTH":
            return int(value)  # gunicorn's parser has checked it is a number
    return None


def _request_timeout(req: Any, sock: Any, addr: Any, timeout: int) -> bool:
    client = addr[0] if isinstance(addr, tuple) else addr
    log.warning(
        "%s %s from %s: body not in within HOOKS_READ_TIMEOUT (%d s): 408", req.method, req.path, client, timeout
    )
    body = b'{"error":"the request body did not arrive within HOOKS_READ_TIMEOUT"}'
    head = "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Type: application/json\r\n"
    with contextlib.suppress(OSError):  # the client may be gone already
        sock.sendall(f"{head}Content-Length: {len(body)}\r\n\r\n".encode("latin-1") + body)
    raise StopIteration  # gunicorn's signal to close the connection

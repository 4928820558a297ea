"""The hook server's gunicorn worker: gevent's, with a deadline on reading each request
(docs/architecture.md §7).

A sync worker reads a request while it serves it, so as many slow clients as workers (one header
line every 2 s) left Metacontroller and the API server waiting until gunicorn's worker timeout killed
them all. Here each connection is a greenlet: a client slow to send costs a greenlet (at most
`worker_connections` per worker), never the worker, and the hooks, pure CPU work, run one at a time
between reads. The request line and headers must arrive within HOOKS_READ_TIMEOUT (gunicorn's
keep-alive wait, which also ends an idle kept-alive connection), and the body within as long again
once they have: past it, reading the body raises TimeoutError, which the app answers with 408, and
the connection closes. The app reads the body itself, after checking the bearer token, and before it
pauses the collector (slinky_common/gcpause.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import gevent
from gunicorn.workers.ggevent import GeventWorker

from hooks import serve

T = TypeVar("T")


class HookWorker(GeventWorker):
    """gevent worker whose requests' bodies are read within HOOKS_READ_TIMEOUT."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = serve.read_timeout()

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        req.body = DeadlineBody(req.body, self.read_timeout)
        sock.settimeout(self.cfg.timeout)  # a client that stops reading the answer is let go
        return bool(super().handle_request(listener_name, req, sock, addr))


class DeadlineBody:
    """A request body (WSGI's `wsgi.input`) whose reads end in TimeoutError `seconds` after it was made.
    `failed` tells gunicorn not to read on to a next request on the connection."""

    def __init__(self, body: Any, seconds: float) -> None:
        self._body = body
        self._seconds = seconds
        self._deadline = time.monotonic() + seconds
        self.failed = False

    def _within(self, read: Callable[..., T], *args: Any) -> T:
        left = self._deadline - time.monotonic()
        try:
            if left <= 0:
                raise TimeoutError
            with gevent.Timeout(left, TimeoutError):
                return read(*args)
        except TimeoutError:
            self.failed = True
            raise TimeoutError(
                f"the request body did not arrive within HOOKS_READ_TIMEOUT ({self._seconds:g} s)"
            ) from None

    def read(self, size: int | None = None) -> bytes:
        return self._within(self._body.read, size)

    def readline(self, size: int | None = None) -> bytes:
        return self._within(self._body.readline, size)

    def readlines(self, hint: int | None = None) -> list[bytes]:
        return self._within(self._body.readlines, hint)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if line := self.readline():
            return line
        raise StopIteration

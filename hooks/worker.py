"""The hook server's gunicorn worker: gevent's, with an idle window before each request and deadlines on
reading it (docs/architecture.md §7).

A sync worker reads a request while it serves it, so as many slow clients as workers (one header
line every 2 s) left Metacontroller and the API server waiting until gunicorn's worker timeout killed
them all. Here each connection is a greenlet: a client slow to send costs a greenlet (at most
`worker_connections` per worker), never the worker, and the hooks, pure CPU work, run one at a time
between reads.

Reading a request has two clocks (`NextRequest`, gunicorn's `timeout_ctx`):

* Until its first byte arrives, a connection is idle, and waits up to gunicorn's `keepalive`
  (HOOKS_IDLE_TIMEOUT, 120 s): longer than the 90 s Go's http.Transport keeps an idle connection
  (Metacontroller's, the API server's webhook client), so the client is always the one to close it. A
  server closing first races the client's next request on it, which fails with "connection reset by
  peer". A connection's first request waits as long: Go puts a connection it dialled and then did not
  need among its idle ones. The cost: a silent connection holds its greenlet for the idle window.
* From the first byte, the request line and headers must arrive within HOOKS_READ_TIMEOUT, and the body
  within as long again once they have: past it, reading the body raises TimeoutError, which the app
  answers with 408, and the connection closes.

The first byte may already be off the socket, where waiting on the socket would never see it: read
ahead by gunicorn behind the last request (pipelined), or decrypted by TLS and not yet read. The request
has then started. So has it when the app left part of a body unread (a 401, a 413): gunicorn reads that
off within the read deadline. A kept-alive connection's wait ends within a second of the worker being
told to stop, so a graceful stop does not wait for idle connections. The app reads the body itself,
after checking the bearer token, and before it pauses the collector (slinky_common/gcpause.py).
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

import gevent
from gevent.socket import wait_read
from gunicorn.workers.ggevent import GeventWorker

from hooks import serve

T = TypeVar("T")
# How often an idle connection's wait looks whether the worker is stopping.
STOP_CHECK_SECONDS: Final = 1.0


class HookWorker(GeventWorker):
    """gevent worker whose connections wait HOOKS_IDLE_TIMEOUT for a request, then HOOKS_READ_TIMEOUT for it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read_timeout = serve.read_timeout()
        self._connections: dict[Any, Connection] = {}  # by the greenlet serving each

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        """Serve one connection, in its own greenlet, known meanwhile to `timeout_ctx` and `handle_request`."""
        greenlet = gevent.getcurrent()
        self._connections[greenlet] = Connection(client)
        try:
            super().handle(listener, client, addr)
        finally:
            del self._connections[greenlet]

    def timeout_ctx(self) -> NextRequest:
        """What gunicorn reads each next request line and headers of a connection within."""
        return NextRequest(
            self._connections.get(gevent.getcurrent()), self.cfg.keepalive, self.read_timeout, self.is_running
        )

    def is_running(self) -> bool:
        return bool(self.alive)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        body = DeadlineBody(req.body, self.read_timeout)
        req.body = body
        sock.settimeout(self.cfg.timeout)  # a client that stops reading the answer is let go
        served = bool(super().handle_request(listener_name, req, sock, addr))
        connection = self._connections.get(gevent.getcurrent())
        if connection is not None:
            connection.last_request = req
        if not body.failed:  # gunicorn reads off what is left within the next request's deadline, not this one
            req.body = body.unwrapped
        return served


class Connection:
    """A client connection, and the request gunicorn last read from it: its reader holds what the client
    sent beyond that request."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.last_request: Any = None

    def holds_unread_bytes(self) -> bool:
        """Whether bytes of the next request are off the socket already (so the socket shows nothing)."""
        return self._read_ahead() or self._decrypted_unread()

    def _read_ahead(self) -> bool:
        """gunicorn's read-ahead behind the last request. A reader of another shape (a gunicorn changed
        since) counts as holding bytes: the read deadline then applies at once, and nothing is dropped."""
        if self.last_request is None:
            return False  # a new connection's parser has read nothing
        buffer = getattr(getattr(self.last_request, "unreader", None), "buf", None)
        if not isinstance(buffer, io.BytesIO):
            return True
        with buffer.getbuffer() as held:
            return held.nbytes > 0

    def _decrypted_unread(self) -> bool:
        """TLS: plaintext decrypted from a record but not yet read (it leaves the socket not readable)."""
        pending = getattr(self.sock, "pending", None)
        return callable(pending) and pending() > 0

    def wait_for_bytes(self, seconds: float, running: Callable[[], bool]) -> bool:
        """Whether the client sends something within `seconds` (the end of the connection counts: gunicorn
        then reads it). A kept-alive connection stops waiting, within STOP_CHECK_SECONDS, once the worker
        stops running; a new one is waited for still (its client connected to send a request), until the
        worker's graceful timeout."""
        deadline = time.monotonic() + seconds
        while self.last_request is None or running():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                wait_read(self.sock.fileno(), timeout=min(left, STOP_CHECK_SECONDS))
            except TimeoutError:
                continue
            return True
        return False


class NextRequest:
    """gunicorn's `timeout_ctx`: entered before it reads a connection's next request line and headers.
    Waits up to `idle` seconds for the request to start (StopIteration, which gunicorn takes for "close
    the connection", if it does not), then gives the read `read` seconds (gevent.Timeout without an
    exception: gunicorn then finds no request and closes the connection)."""

    def __init__(self, connection: Connection | None, idle: float, read: float, running: Callable[[], bool]) -> None:
        self._connection = connection
        self._idle = idle
        self._running = running
        self._deadline = gevent.Timeout(read, False)

    def __enter__(self) -> None:
        if not self._started():
            raise StopIteration(f"no request within HOOKS_IDLE_TIMEOUT ({self._idle:g} s), or the worker stops")
        self._deadline.start()

    def __exit__(self, kind: Any, value: Any, traceback: Any) -> bool:
        self._deadline.close()
        return value is self._deadline  # the read deadline passed: gunicorn's `req` stays None

    def _started(self) -> bool:
        connection = self._connection
        if connection is None:  # not a connection `HookWorker.handle` serves: the read deadline alone
            return True
        return connection.holds_unread_bytes() or connection.wait_for_bytes(self._idle, self._running)


class DeadlineBody:
    """A request body (WSGI's `wsgi.input`) whose reads end in TimeoutError `seconds` after it was made.
    `failed` tells gunicorn not to read on to a next request on the connection."""

    def __init__(self, body: Any, seconds: float) -> None:
        self.unwrapped = body
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
        return self._within(self.unwrapped.read, size)

    def readline(self, size: int | None = None) -> bytes:
        return self._within(self.unwrapped.readline, size)

    def readlines(self, hint: int | None = None) -> list[bytes]:
        return self._within(self.unwrapped.readlines, hint)

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if line := self.readline():
            return line
        raise StopIteration

"""The hook server's gevent worker (hooks/worker.py): a request body read past HOOKS_READ_TIMEOUT raises
TimeoutError naming it and stops gunicorn reading on, and each request's body and socket get their deadlines;
a connection waits up to the idle timeout for its next request to start (bytes gunicorn or TLS already hold
count as started), then HOOKS_READ_TIMEOUT for its line and headers."""

from __future__ import annotations

import io
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any
from unittest import mock

import gevent
import gevent.socket
import pytest
from gunicorn.config import Config
from gunicorn.http.parser import RequestParser
from gunicorn.workers.ggevent import GeventWorker

from hooks import worker
from hooks.worker import DeadlineBody, HookWorker

TWO_REQUESTS = (
    b"POST /nodeset/sync HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
    b"POST /token/sync HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}"
)


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture()
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(worker, "time", SimpleNamespace(monotonic=fake))
    return fake


class SlowBody:
    """A body whose reads wait `seconds` (cooperatively, as a gevent socket does) before answering."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.calls = 0

    def read(self, size: int | None = None) -> bytes:
        self.calls += 1
        gevent.sleep(self.seconds)
        return b"late"


# --- DeadlineBody ----------------------------------------------------------------------------------


def test_reads_within_the_deadline_pass_through_with_their_sizes(clock: Clock) -> None:
    body = DeadlineBody(io.BytesIO(b'{"parent":\n{}}\nrest'), 10)
    assert body.read(3) == b'{"p'
    assert body.readline() == b'arent":\n'
    assert body.readline(1) == b"{"
    clock.now += 9.99
    assert body.readlines(None) == [b"}}\n", b"rest"]
    assert body.read() == b"" and body.failed is False


def test_iteration_yields_the_lines_until_the_end(clock: Clock) -> None:
    body = DeadlineBody(io.BytesIO(b"a\nb\nc"), 10)
    assert iter(body) is body
    assert list(body) == [b"a\n", b"b\n", b"c"]
    assert body.failed is False


def test_the_deadline_runs_from_when_the_body_was_made_not_from_each_read(clock: Clock) -> None:
    stream = io.BytesIO(b"0123456789")
    body = DeadlineBody(stream, 5)
    clock.now += 4
    assert body.read(2) == b"01"
    clock.now += 1
    with pytest.raises(TimeoutError) as raised:
        body.read(2)
    assert str(raised.value) == "the request body did not arrive within HOOKS_READ_TIMEOUT (5 s)"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
    assert body.failed is True and stream.tell() == 2  # past the deadline nothing more is read


@pytest.mark.parametrize("read", ["read", "readline", "readlines"])
def test_every_kind_of_read_past_the_deadline_fails_naming_the_setting(clock: Clock, read: str) -> None:
    body = DeadlineBody(io.BytesIO(b"x\n"), 2.5)
    clock.now += 3
    with pytest.raises(TimeoutError, match=r"^the request body did not arrive within HOOKS_READ_TIMEOUT \(2\.5 s\)$"):
        getattr(body, read)()
    assert body.failed is True


def test_iterating_past_the_deadline_fails_rather_than_ending_early(clock: Clock) -> None:
    body = DeadlineBody(io.BytesIO(b"a\nb\n"), 1)
    assert next(body) == b"a\n"
    clock.now += 1
    with pytest.raises(TimeoutError):
        next(body)


def test_a_read_still_waiting_at_the_deadline_is_cut_off() -> None:
    slow = SlowBody(seconds=60)
    body = DeadlineBody(slow, 0.05)
    with pytest.raises(TimeoutError, match=r"HOOKS_READ_TIMEOUT \(0\.05 s\)"):
        body.read(1024)
    assert slow.calls == 1 and body.failed is True


def test_a_read_is_given_only_what_is_left_of_the_deadline(clock: Clock) -> None:
    body = DeadlineBody(SlowBody(seconds=30), 60)
    clock.now += 59.95  # 0.05 s left of 60: the read's 30 s wait is cut off
    with pytest.raises(TimeoutError, match=r"\(60 s\)"):
        body.read()
    prompt = DeadlineBody(SlowBody(seconds=0), 60)
    clock.now += 59.95
    assert prompt.read() == b"late" and prompt.failed is False


def test_an_other_error_of_the_body_is_not_a_timeout(clock: Clock) -> None:
    broken = mock.Mock()
    broken.read.side_effect = ConnectionResetError("peer went away")
    body = DeadlineBody(broken, 10)
    with pytest.raises(ConnectionResetError, match="peer went away"):
        body.read(5)
    broken.read.assert_called_once_with(5)
    assert body.failed is False


def test_gunicorn_reads_on_to_the_next_request_only_if_the_body_did_not_time_out() -> None:
    parser = RequestParser(Config(), [TWO_REQUESTS], ("127.0.0.1", 40000))
    first = next(parser)
    first.body = DeadlineBody(first.body, 10)
    assert first.body.read() == b"{}"
    assert next(parser).path == "/token/sync"

    parser = RequestParser(Config(), [TWO_REQUESTS], ("127.0.0.1", 40000))
    first = next(parser)
    first.body = DeadlineBody(first.body, 0)
    with pytest.raises(TimeoutError):
        first.body.read()
    with pytest.raises(StopIteration):  # where the next request starts is unknown: the connection closes
        next(parser)


# --- HookWorker ------------------------------------------------------------------------------------


@contextmanager
def _worker(cfg: Config) -> Iterator[HookWorker]:
    hook_worker = HookWorker(0, os.getpid(), [], None, cfg.timeout, cfg, mock.Mock())
    try:
        yield hook_worker
    finally:
        hook_worker.tmp.close()


def test_the_worker_reads_its_timeout_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HOOKS_READ_TIMEOUT", raising=False)
    with _worker(Config()) as hook_worker:
        assert hook_worker.read_timeout == 10
    monkeypatch.setenv("HOOKS_READ_TIMEOUT", "3")
    with _worker(Config()) as hook_worker:
        assert hook_worker.read_timeout == 3


def test_a_worker_with_an_unusable_read_timeout_does_not_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKS_READ_TIMEOUT", "0")
    with pytest.raises(ValueError, match=r"^HOOKS_READ_TIMEOUT must be a positive whole number of seconds, got '0'$"):
        HookWorker(0, os.getpid(), [], None, 30, Config(), mock.Mock())


@pytest.mark.parametrize(("answered", "returned"), [(None, False), (True, True)])
def test_each_request_gets_a_deadline_on_its_body_and_a_timeout_on_its_socket(
    monkeypatch: pytest.MonkeyPatch, clock: Clock, answered: bool | None, returned: bool
) -> None:
    monkeypatch.setenv("HOOKS_READ_TIMEOUT", "4")
    cfg = Config()
    cfg.set("timeout", 17)
    seen: list[tuple[Any, ...]] = []

    def handled(self: GeventWorker, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool | None:
        seen.append((listener_name, req.body, sock.settimeout.call_args_list[:], addr))
        return answered

    monkeypatch.setattr(GeventWorker, "handle_request", handled)
    original = io.BytesIO(b"{}{}")
    req, sock = SimpleNamespace(body=original), mock.Mock()
    with _worker(cfg) as hook_worker:
        assert hook_worker.handle_request(("127.0.0.1", 8080), req, sock, ("10.0.0.1", 5)) is returned
    ((listener_name, body, timeouts, addr),) = seen
    assert (listener_name, addr) == (("127.0.0.1", 8080), ("10.0.0.1", 5))
    assert isinstance(body, DeadlineBody) and body.unwrapped is original
    assert body.read(2) == b"{}" and original.tell() == 2  # the request's own body, read through
    clock.now += 4  # on this worker's deadline, from when the request was handed over
    with pytest.raises(TimeoutError, match=r"\(4 s\)$"):
        body.read(2)
    assert timeouts == [mock.call(17)]  # set before the request is served
    # Served, the request has its own body back: gunicorn reads off what the app left within the next
    # request's deadline, not this spent one (which would close a connection idle past it).
    assert req.body is original


def test_a_body_that_timed_out_stays_failed_so_gunicorn_closes_the_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    def times_out(self: GeventWorker, listener_name: Any, req: Any, sock: Any, addr: Any) -> None:
        with pytest.raises(TimeoutError):
            req.body.read()

    monkeypatch.setattr(GeventWorker, "handle_request", times_out)
    monkeypatch.setenv("HOOKS_READ_TIMEOUT", "1")
    req = SimpleNamespace(body=SlowBody(seconds=60))
    with _worker(Config()) as hook_worker:
        hook_worker.read_timeout = 0.05  # type: ignore[assignment]
        hook_worker.handle_request(("127.0.0.1", 8080), req, mock.Mock(), ("10.0.0.1", 5))
    assert isinstance(req.body, DeadlineBody) and req.body.failed


# --- the idle window and the read deadline ---------------------------------------------------------


@pytest.fixture()
def pair() -> Iterator[tuple[Any, Any]]:
    """A connection's two ends, gevent sockets: the server's and the client's."""
    server, client = gevent.socket.socketpair()
    with server, client:
        yield server, client


def _later(seconds: float, call: Callable[[], object]) -> None:
    """`call` in `seconds` from now: gevent's timers count from the loop's last look at the clock."""
    gevent.get_hub().loop.update_now()
    gevent.spawn_later(seconds, call)


def _running() -> bool:
    return True


def _stopped() -> bool:
    return False


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_window(pair: tuple[Any, Any]) -> None:
    server, _ = pair
    started = time.monotonic()
    idle = worker.NextRequest(worker.Connection(server), 0.3, 10, _running)
    with pytest.raises(StopIteration, match=r"^no request within HOOKS_IDLE_TIMEOUT \(0\.3 s\)"), idle:
        pytest.fail("entered without a request")
    assert time.monotonic() - started >= 0.3


def test_the_read_deadline_starts_with_the_first_byte_not_with_the_wait(pair: tuple[Any, Any]) -> None:
    """Idle longer than the read deadline, then a first byte: the read is given the read deadline from there."""
    server, client = pair
    _later(0.4, lambda: client.sendall(b"P"))
    read: list[bytes] = []
    started = time.monotonic()
    with worker.NextRequest(worker.Connection(server), 5, 0.2, _running):
        read.append(server.recv(10))
        gevent.sleep(5)  # the rest of the request never comes
        pytest.fail("the read deadline did not cut the read off")
    assert read == [b"P"]  # the deadline passed quietly: gunicorn finds no request and closes
    assert 0.4 + 0.2 <= time.monotonic() - started < 5


def test_a_connection_the_client_closes_while_idle_is_read_at_once(pair: tuple[Any, Any]) -> None:
    server, client = pair
    client.close()
    started = time.monotonic()
    with worker.NextRequest(worker.Connection(server), 5, 5, _running):
        assert server.recv(10) == b""  # gunicorn's NoMoreData: it closes its end
    assert time.monotonic() - started < 5


def test_a_request_pipelined_behind_the_last_is_read_without_waiting(pair: tuple[Any, Any]) -> None:
    """The second request is off the socket already, in gunicorn's reader: waiting on the socket would drop it."""
    server, client = pair
    client.sendall(TWO_REQUESTS)
    parser = RequestParser(Config(), server, ("127.0.0.1", 40000))
    connection = worker.Connection(server)
    first = next(parser)
    assert first.body.read() == b"{}"
    connection.last_request = first
    assert connection.holds_unread_bytes()
    started = time.monotonic()
    with worker.NextRequest(connection, 5, 5, _running):
        second = next(parser)
    assert second.path == "/token/sync" and time.monotonic() - started < 5
    connection.last_request = second
    assert second.body.read() == b"{}" and not connection.holds_unread_bytes()


def test_plaintext_tls_has_decrypted_and_not_handed_out_counts_as_a_started_request() -> None:
    """A TLS record held more than gunicorn's read took: the rest leaves the socket unreadable (gevent's
    SSLSocket.pending(), as the standard library's; test_gunicorn_conf.py has the real one)."""
    assert worker.Connection(SimpleNamespace(pending=lambda: 40)).holds_unread_bytes()
    assert not worker.Connection(SimpleNamespace(pending=lambda: 0)).holds_unread_bytes()


def test_a_reader_gunicorn_changed_the_shape_of_counts_as_holding_bytes(pair: tuple[Any, Any]) -> None:
    """Better the read deadline at once (gunicorn's keepalive as it was) than a pipelined request dropped."""
    server, _ = pair
    connection = worker.Connection(server)
    assert not connection.holds_unread_bytes()  # a new connection's reader holds nothing yet
    connection.last_request = SimpleNamespace(unreader=SimpleNamespace(buffered=b"GET"))
    assert connection.holds_unread_bytes()


def test_a_kept_alive_connection_stops_waiting_when_the_worker_stops(
    pair: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """So a graceful stop does not wait out idle connections; a new one is still waited for (its client
    connected to send a request)."""
    monkeypatch.setattr(worker, "STOP_CHECK_SECONDS", 0.05)
    server, _ = pair
    running = [True]
    _later(0.2, running.clear)
    kept = worker.Connection(server)
    kept.last_request = SimpleNamespace(unreader=SimpleNamespace(buf=io.BytesIO()))
    started = time.monotonic()
    assert kept.wait_for_bytes(30, lambda: bool(running)) is False
    assert time.monotonic() - started < 5
    started = time.monotonic()
    assert worker.Connection(server).wait_for_bytes(0.3, _stopped) is False
    assert time.monotonic() - started >= 0.3


def test_the_worker_waits_its_keepalive_then_its_read_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    """gunicorn's `keepalive` is the idle window (hooks/gunicorn_conf.py sets it from HOOKS_IDLE_TIMEOUT)."""
    monkeypatch.setenv("HOOKS_READ_TIMEOUT", "7")
    cfg = Config()
    cfg.set("keepalive", 120)
    contexts: list[worker.NextRequest] = []

    def handle(self: HookWorker, listener: Any, client: Any, addr: Any) -> None:
        contexts.append(self.timeout_ctx())

    monkeypatch.setattr(GeventWorker, "handle", handle)
    client = mock.Mock()
    with _worker(cfg) as hook_worker:
        hook_worker.handle(mock.Mock(), client, ("10.0.0.1", 5))
        (context,) = contexts
        assert context._connection is not None and context._connection.sock is client
        assert (context._idle, context._deadline.seconds) == (120, 7)
        assert hook_worker._connections == {}  # forgotten once served
        outside = hook_worker.timeout_ctx()  # not a connection it serves: the read deadline alone
    assert outside._connection is None
    with outside:
        pass

"""The hook server as users run it: `make run` (gunicorn, several workers) on a real socket."""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path
from typing import BinaryIO

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hooks.routes import route_table

pytestmark = pytest.mark.gunicorn  # each test starts the real hook server (make unit leaves them out)

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_healthy(
    url: str, proc: subprocess.Popen, timeout: float = 30.0, verify: ssl.SSLContext | bool = True
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode}: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(url + "/healthz", timeout=1, verify=verify).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url}/healthz did not answer within {timeout}s")


@pytest.fixture(scope="module")
def make_run() -> Iterator[tuple[str, subprocess.Popen]]:
    """`make run` exactly as README says, on a free port, two workers."""
    port = _free_port()
    env = {**os.environ, "HOOKS_BIND": f"127.0.0.1:{port}", "HOOKS_WORKERS": "2"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_make_run_serves_health_and_rejects_empty_request(make_run):
    url, _ = make_run
    assert httpx.get(url + "/healthz").status_code == 200
    resp = httpx.post(url + "/nodeset/sync", content=b"{}")
    assert resp.status_code == 400
    assert resp.json() == {"error": "parent is missing"}


def test_every_route_answers_something_other_than_404(make_run):
    url, _ = make_run
    with httpx.Client(base_url=url) as client:
        codes = {r.path: client.post(r.path, content=b"{}").status_code for r in route_table()}
    assert all(code != 404 for code in codes.values()), codes


def _count_400(client: httpx.Client, route: str) -> float:
    prefix = f'slinky_hook_requests_total{{code="400",route="{route}"}}'
    lines = [x for x in client.get("/metrics").text.splitlines() if x.startswith(prefix)]
    return float(lines[0].split()[-1]) if lines else 0.0


def test_metrics_aggregate_all_workers(make_run):
    url, _ = make_run
    with httpx.Client(base_url=url) as client:
        before = _count_400(client, "/restapi/sync")
        for _ in range(20):  # new connections land on either worker
            httpx.post(url + "/restapi/sync", content=b"{}")
        assert _count_400(client, "/restapi/sync") == before + 20


def test_ctrl_c_stops_make_run(make_run):
    url, proc = make_run
    os.killpg(proc.pid, signal.SIGINT)
    assert proc.wait(timeout=20) is not None
    with pytest.raises(httpx.TransportError):
        httpx.get(url + "/healthz", timeout=1)


def _start(env_extra: dict[str, str]) -> tuple[str, subprocess.Popen]:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env.update({"HOOKS_BIND": f"127.0.0.1:{port}", "HOOKS_WORKERS": "1", **env_extra})
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    return f"http://127.0.0.1:{port}", proc


def _refused_start(env_extra: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """`make run` that should stop at start: the process once it ended (killed after 60 s) and its output."""
    _, proc = _start(env_extra)
    try:
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc, output


def test_an_empty_auth_token_file_stops_the_server_at_start(tmp_path):
    """Not "authentication off": gunicorn exits and says why, and nothing is served."""
    token = tmp_path / "token"
    token.write_text("")
    proc, output = _refused_start({"HOOKS_AUTH_TOKEN_FILE": str(token)})
    assert proc.returncode != 0 and "HOOKS_AUTH_TOKEN_FILE" in output and "is empty" in output, output[-2000:]


def test_make_run_on_a_busy_port_says_which_setting_to_change():
    """gunicorn alone retries five times and ends with "Can't connect to (...)", naming no setting."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        busy = f"127.0.0.1:{held.getsockname()[1]}"
        proc, output = _refused_start({"HOOKS_BIND": busy})
    assert proc.returncode != 0 and f"HOOKS_BIND={busy}: cannot listen there" in output, output[-2000:]
    assert "Retrying" not in output, "refused before gunicorn's own retries"


def test_a_body_over_the_limit_gets_413_from_gunicorn():
    url, proc = _start({"HOOKS_MAX_BODY_BYTES": "4096"})
    try:
        _wait_healthy(url, proc)
        too_big = httpx.post(url + "/nodeset/sync", content=b" " * 5000)
        streamed = httpx.post(url + "/nodeset/sync", content=iter([b" " * 3000, b" " * 3000]))  # chunked
        small = httpx.post(url + "/nodeset/sync", content=b"{}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert too_big.status_code == 413 and "HOOKS_MAX_BODY_BYTES" in too_big.json()["error"]
    assert streamed.status_code == 413
    assert small.status_code == 400


def _serve_and_stop(
    env: dict[str, str], requests: list[tuple[str, str, bytes | None]]
) -> tuple[list[httpx.Response], str]:
    """gunicorn as the charts run it (two workers, access log on) with a HOME it cannot write;
    sends ``requests`` (method, path, body), stops it with SIGTERM and returns what it printed."""
    port = _free_port()
    env = {
        **os.environ,
        "HOOKS_BIND": f"127.0.0.1:{port}",
        "HOOKS_WORKERS": "2",
        "HOOKS_ACCESS_LOG": "-",
        "HOME": "/nonexistent",
        **env,
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        answers = [httpx.request(method, url + path, content=body) for method, path, body in requests]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    return answers, out


def test_every_line_both_gunicorn_and_access_is_json_and_no_control_socket() -> None:
    answers, out = _serve_and_stop({}, [("POST", "/nodeset/sync", b"{}"), ("GET", "/readyz", None)])
    assert [a.status_code for a in answers] == [400, 200]
    lines = [json.loads(line) for line in out.splitlines()]  # raises on any line that is not JSON
    messages = [line["message"] for line in lines]
    assert any(m.startswith("Starting gunicorn") for m in messages), messages
    assert any(m.startswith("Booting worker") for m in messages), messages
    access = [line for line in lines if line["logger"] == "gunicorn.access"]
    by_route = {(a["method"], a["route"], a["status"]) for a in access}
    assert {("POST", "/nodeset/sync", 400), ("GET", "/readyz", 200)} <= by_route
    assert all(isinstance(a["duration_ms"], float) and a["duration_ms"] >= 0 for a in access)
    assert not [line for line in lines if line["level"] in ("error", "critical")], lines
    assert "control" not in out.lower()


def test_text_format_for_terminals() -> None:
    answers, out = _serve_and_stop({"HOOKS_LOG_FORMAT": "text"}, [("POST", "/token/sync", b"{}")])
    assert answers[0].status_code == 400
    assert not any(line.startswith("{") for line in out.splitlines())
    assert any(
        "gunicorn.access: POST /token/sync 400" in line and "duration_ms=" in line for line in out.splitlines()
    ), out


def test_metrics_lists_every_family_before_the_first_hook_request() -> None:
    (metrics,), _ = _serve_and_stop({}, [("GET", "/metrics", None)])
    for family in ("slinky_hook_requests_total", "slinky_hook_request_duration_seconds"):
        for route in route_table():
            assert any(
                line.startswith(family) and f'route="{route.path}"' in line for line in metrics.text.splitlines()
            ), (family, route.path)


class _SlowClient(threading.Thread):
    """A client that sends a request a piece at a time (its headers a line at a time, or its body a
    byte at a time) every `pause` seconds, or stalls after `stall_after` pieces, and records what the
    server answered, if anything."""

    def __init__(self, url: str, *, slow: str, pieces: int, pause: float, stall_after: int | None = None) -> None:
        super().__init__(daemon=True)
        host, port = url.removeprefix("http://").split(":")
        self.address = (host, int(port))
        self.slow, self.pieces, self.pause, self.stall_after = slow, pieces, pause, stall_after
        self.answer = b""
        self.sent_all = threading.Event()

    def _pieces(self) -> list[bytes]:
        if self.slow == "headers":
            head = [b"POST /nodeset/sync HTTP/1.1\r\n", b"Host: x\r\n"]
            head += [f"X-Slow-{i}: {i}\r\n".encode() for i in range(self.pieces)]
            return [*head, b"Content-Length: 2\r\n\r\n{}"]
        head = f"POST /nodeset/sync HTTP/1.1\r\nHost: x\r\nContent-Length: {self.pieces}\r\n\r\n".encode()
        return [head, *[b" "] * self.pieces]

    def run(self) -> None:
        with socket.create_connection(self.address) as sock:
            try:
                for piece in self._pieces()[: self.stall_after]:
                    sock.sendall(piece)
                    time.sleep(self.pause)
                self.sent_all.set()
                sock.settimeout(30)
                while chunk := sock.recv(65536):
                    self.answer += chunk
            except OSError:  # the server closed the connection
                pass


def _answered_while_sending(url: str, slow: list[_SlowClient]) -> int:
    """How many of a stream of small NodeSet syncs were answered before any slow client had sent its whole
    request (an answer that comes back after that does not count)."""
    body = (ROOT / "examples" / "requests" / "nodeset-sync.json").read_bytes()
    answered = 0
    while not any(client.sent_all.is_set() for client in slow):
        assert httpx.post(url + "/nodeset/sync", content=body, timeout=60).status_code == 200
        answered += not any(client.sent_all.is_set() for client in slow)
    return answered


def test_slow_clients_cannot_take_the_hooks_away():
    """As many slow-header and as many slow-body clients as workers, plus one, each taking 4 s to send
    its request: other hook requests are answered while they are all still sending (with sync workers, each
    slow client held a worker until it was done, and nothing was answered before the first had sent all).
    An ordering, not a time limit: how fast the answers come is `make bench`'s business."""
    url, proc = _start({"HOOKS_WORKERS": "2"})
    try:
        _wait_healthy(url, proc)
        slow = [
            _SlowClient(url, slow=kind, pieces=16, pause=0.25) for kind in ("headers", "body") for _ in range(2 + 1)
        ]
        for client in slow:
            client.start()
        time.sleep(0.5)  # every slow client has connected and is sending
        answered = _answered_while_sending(url, slow)
        for client in slow:
            client.join(timeout=30)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert answered > 10, answered
    assert all(c.answer.startswith(b"HTTP/1.1 400") for c in slow), [c.answer[:40] for c in slow]


def test_a_request_not_sent_within_the_read_timeout_is_cut_off():
    """HOOKS_READ_TIMEOUT bounds the line and headers once they start, and then the body: late headers close
    the connection, a late body gets 408; the server goes on answering. A connection that has sent nothing is
    idle, not late (HOOKS_IDLE_TIMEOUT): it is served when it sends, three read timeouts later."""
    url, proc = _start({"HOOKS_READ_TIMEOUT": "1"})
    try:
        _wait_healthy(url, proc)
        with _connect(url) as silent, silent.makefile("rb") as answers:
            connected = time.monotonic()
            late = [_SlowClient(url, slow=kind, pieces=10, pause=0.1, stall_after=3) for kind in ("headers", "body")]
            for client in late:
                client.start()
            for client in late:
                client.join(timeout=30)
            after = httpx.post(url + "/nodeset/sync", content=b"{}")
            time.sleep(max(0.0, connected + 3 - time.monotonic()))
            idle = _get(silent, answers, "/healthz")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    headers, body = late
    assert headers.answer == b""  # closed before the request was complete: nothing to answer
    assert body.answer.startswith(b"HTTP/1.1 408") and b"HOOKS_READ_TIMEOUT" in body.answer, body.answer
    assert after.status_code == 400
    assert idle == b"HTTP/1.1 200 OK", idle


def test_a_dead_workers_counts_are_kept_and_its_metric_files_removed(tmp_path):
    """Each dead worker left two 64 KiB files behind, every one read by each scrape; its counts now move
    into one archive file per type, so the totals stay whole."""
    url, proc = _start({"HOOKS_WORKERS": "2", "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})
    try:
        _wait_healthy(url, proc)
        with httpx.Client(base_url=url) as client:
            for _ in range(20):
                httpx.post(url + "/restapi/sync", content=b"{}")  # new connections land on either worker
            before = _count_400(client, "/restapi/sync")
            for _ in range(3):  # the arbiter replaces each killed worker
                victim = _gunicorn_workers(proc.pid)[0]
                os.kill(victim, signal.SIGKILL)
                _wait_replaced(proc.pid, victim)
            after = _count_400(client, "/restapi/sync")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert before == after == 20
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len([n for n in names if n.startswith(("counter_", "histogram_"))]) <= 2 * 2 + 2, names  # live + archive
    assert "counter_archive.db" in names and "histogram_archive.db" in names


def _gunicorn_workers(make_pid: int) -> list[int]:
    """The worker processes of the gunicorn that `make run` (process group `make_pid`) started."""
    out = subprocess.run(["pgrep", "-g", str(make_pid), "-f", "gunicorn"], capture_output=True, text=True).stdout
    pids = {int(p) for p in out.split()}
    return sorted(p for p in pids if _parent(p) in pids)


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except FileNotFoundError:  # gone meanwhile
        return 0


def _wait_replaced(make_pid: int, dead: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        workers = _gunicorn_workers(make_pid)
        if dead not in workers and len(workers) == 2:
            return
        time.sleep(0.1)
    raise AssertionError(f"worker {dead} was not replaced")


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _answer(answers: BinaryIO) -> bytes:
    """The status line of the next answer on a connection, its body read off so the connection can carry
    the next one; what the socket said instead if the server had closed it."""
    try:
        status = answers.readline()
        length = 0
        while (line := answers.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            length = int(value) if name.strip().lower() == b"content-length" else length
        answers.read(length)
    except OSError as err:
        return f"{type(err).__name__}: {err}".encode()
    return status.rstrip() or b"closed by the server"


def _get(sock: socket.socket, answers: BinaryIO, path: str) -> bytes:
    """One GET on an open connection: its answer's status line (see `_answer`)."""
    try:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: hooks\r\n\r\n".encode())
    except OSError as err:
        return f"{type(err).__name__}: {err}".encode()
    return _answer(answers)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as the bridge's hook server gets from cert-manager."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "slinky-hooks")])
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def _hooks_env(**settings: str) -> dict[str, str]:
    """The environment with none of the hook server's settings but `settings`: their defaults otherwise."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKS_") and k != "PROMETHEUS_MULTIPROC_DIR"}
    return {**env, **settings}


@contextmanager
def _charts_server(scheme: str, directory: Path) -> Iterator[Callable[[], socket.socket]]:
    """gunicorn as the charts run it, with the default settings (one worker), over TLS for "https" (as the
    bridge's admission hooks are); yields a function opening a connection to it."""
    port = _free_port()
    args: list[str] = []
    tls: ssl.SSLContext | None = None
    if scheme == "https":
        cert, key = _self_signed(directory)
        args = [f"--certfile={cert}", f"--keyfile={key}"]
        tls = ssl.create_default_context(cafile=str(cert))
    proc = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "hooks/gunicorn_conf.py", *args, "hooks.app:create_app()"],
        cwd=ROOT,
        env=_hooks_env(HOOKS_BIND=f"127.0.0.1:{port}", HOOKS_WORKERS="1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )

    def connect() -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        return tls.wrap_socket(sock, server_hostname="127.0.0.1") if tls else sock

    try:
        _wait_healthy(f"{scheme}://127.0.0.1:{port}", proc, verify=tls or True)
        yield connect
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_kept_alive_connection_outlasts_the_idle_time_go_clients_keep_one(scheme: str, tmp_path: Path) -> None:
    """Go's http.Transport (Metacontroller's, the API server's webhook client) reuses a connection idle up to
    90 s: the server closing one sooner races the client's next request ("connection reset by peer").
    With the default settings, a second request 12 s after the first, on the same connection, is answered
    (the server closed it after 10 s, HOOKS_READ_TIMEOUT, before HOOKS_IDLE_TIMEOUT)."""
    with _charts_server(scheme, tmp_path) as connect, connect() as sock, sock.makefile("rb") as answers:
        first = _get(sock, answers, "/healthz")
        time.sleep(12)  # past the 10 s the server used to keep an idle connection
        second = _get(sock, answers, "/healthz")
    assert first == b"HTTP/1.1 200 OK", first
    assert second == b"HTTP/1.1 200 OK", second


def _padded_get(path: str, size: int) -> bytes:
    """A GET of exactly `size` bytes (headers padded)."""
    head = f"GET {path} HTTP/1.1\r\nHost: hooks\r\n".encode()
    room = size - len(head) - len(b"X-Pad-1: \r\nX-Pad-2: \r\n\r\n")
    return head + b"X-Pad-1: " + b"a" * (room // 2) + b"\r\nX-Pad-2: " + b"a" * (room - room // 2) + b"\r\n\r\n"


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_requests_sent_before_their_answers_are_all_answered(scheme: str, tmp_path: Path) -> None:
    """Bytes of the next request may already be off the socket, where waiting on it would never see them:
    two small requests in one packet leave the second in gunicorn's read-ahead; over TLS a first request
    of exactly gunicorn's read (8192 bytes) leaves the second decrypted in TLS, the socket silent."""
    small = b"GET /healthz HTTP/1.1\r\nHost: hooks\r\n\r\n"
    read_sized = _padded_get("/healthz", 8192)
    assert len(read_sized) == 8192
    with _charts_server(scheme, tmp_path) as connect, connect() as sock, sock.makefile("rb") as answers:
        sock.sendall(small + small)
        read_ahead = [_answer(answers), _answer(answers)]
        sock.sendall(read_sized + small)
        decrypted = [_answer(answers), _answer(answers)]
    assert read_ahead == [b"HTTP/1.1 200 OK"] * 2, read_ahead
    assert decrypted == [b"HTTP/1.1 200 OK"] * 2, decrypted


# A bad setting through gunicorn as the charts and the image run it: one line naming it.
BAD_SETTINGS = [
    ("HOOKS_WORKERS", "abc", "HOOKS_WORKERS must be a positive whole number, got 'abc'"),
    ("HOOKS_LOG_LEVEL", "LOUD", "HOOKS_LOG_LEVEL must be one of debug, info, warning, error, critical, got 'LOUD'"),
    ("HOOKS_IDLE_TIMEOUT", "2m", "HOOKS_IDLE_TIMEOUT must be a positive whole number of seconds, got '2m'"),
]


@pytest.mark.parametrize(("env", "value", "line"), BAD_SETTINGS, ids=[f"{e}={v}" for e, v, _ in BAD_SETTINGS])
def test_a_bad_setting_stops_gunicorn_with_one_line_naming_it(env: str, value: str, line: str) -> None:
    result = subprocess.run(
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "hooks/gunicorn_conf.py", "hooks.app:create_app()"],
        cwd=ROOT,
        env=_hooks_env(**{env: value}),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (result.returncode, result.stdout, result.stderr) == (1, "", f"slinky-hooks: {line}\n")


def test_a_bad_setting_stops_slinky_hooks_before_it_starts_gunicorn() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from hooks.serve import main; main(sys.argv[1:])"],
        cwd=ROOT,
        env=_hooks_env(HOOKS_WORKERS="abc"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = "slinky-hooks: HOOKS_WORKERS must be a positive whole number, got 'abc'\n"
    assert (result.returncode, result.stdout, result.stderr) == (1, "", line)

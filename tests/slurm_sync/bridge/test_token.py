"""The bridge's token from a Secret read through the Kubernetes API (``--token-secret``), against the fake
API server: a missing Secret, a missing key, an empty or unreadable value are each one SlurmNoToken naming the
setting, the Secret and what is wrong, and nothing reaches Slurm; a rotated token is picked up once the read
bound has passed, never sooner; a failed read is tried again soon, not on every request; on the real Slurm, the
bridge's pass runs once the Secret holds a token."""

from __future__ import annotations

import base64
import io
import logging
import time

import pytest
from pytest_httpserver import HTTPServer

from slinky_common import logs
from slurm_sync import __main__ as cli
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.bridge.token import REFRESH_SECONDS, RETRY_SECONDS, SecretToken, parse_secret_ref
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmNoToken
from tests.fixtures.slurm import SlurmLab
from tests.slurm_sync.bridgekube import BridgeFake
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import api_client, refused_url

NS, NAME, KEY = "slurm", "slurm-bridge-token", "auth-token"
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/{NAME}"
WHERE = f"--token-secret {NS}/{NAME}"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def secret(data: dict[str, bytes] | None) -> dict:
    body: dict = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": NAME, "namespace": NS}}
    if data is not None:
        body["data"] = {k: base64.b64encode(v).decode() for k, v in data.items()}
    return body


def served(httpserver: HTTPServer, data: dict[str, bytes] | None = None, present: bool = True) -> FakeKube:
    kube = FakeKube()
    if present:
        kube.add("secrets", secret(data))
    kube.install(httpserver)
    return kube


def source(httpserver: HTTPServer, clock: Clock | None = None) -> SecretToken:
    return SecretToken(Kube(api_client(httpserver.url_for("/"))), NS, NAME, KEY, clock=clock or Clock())


def reads(httpserver: HTTPServer) -> int:
    return sum(1 for request, _ in httpserver.log if request.path == SECRET_PATH)


def test_the_token_is_read_from_the_secret_and_trimmed(httpserver: HTTPServer) -> None:
    served(httpserver, {KEY: b"SLURM_JWT=eyJ.first.sig\n"})
    assert source(httpserver)() == "eyJ.first.sig"
    assert reads(httpserver) == 1


def test_a_missing_secret_is_named_and_nothing_reaches_slurm(httpserver: HTTPServer) -> None:
    served(httpserver, present=False)
    tokens = source(httpserver)
    with pytest.raises(SlurmNoToken, match=rf"^{WHERE}: no such Secret \(a Token CR writes it: kubectl get tokens -n"):
        tokens()
    # The Slurm client asks for the token before it connects: the same error, no request (the URL refuses).
    with SlurmClient(refused_url(), tokens, timeout=1.0) as slurm, pytest.raises(SlurmNoToken, match="no such Secret"):
        slurm.list_nodes()


def test_a_secret_without_the_key_is_named(httpserver: HTTPServer) -> None:
    served(httpserver, {"SLURM_JWT": b"eyJ.other.key"})
    with pytest.raises(SlurmNoToken, match=rf"^{WHERE}: the Secret has no key 'auth-token'$"):
        source(httpserver)()


def test_a_secret_without_data_is_a_missing_key(httpserver: HTTPServer) -> None:
    served(httpserver, None)
    with pytest.raises(SlurmNoToken, match="has no key 'auth-token'"):
        source(httpserver)()


@pytest.mark.parametrize("value", [b"", b"  \n", b"SLURM_JWT=\n"])
def test_an_empty_value_holds_no_token(httpserver: HTTPServer, value: bytes) -> None:
    served(httpserver, {KEY: value})
    with pytest.raises(SlurmNoToken, match=rf"^{WHERE}: key 'auth-token' holds no token$"):
        source(httpserver)()


def test_a_value_that_is_not_text_is_named(httpserver: HTTPServer) -> None:
    served(httpserver, {KEY: b"\xff\xfe\x00"})
    with pytest.raises(SlurmNoToken, match="key 'auth-token' is not UTF-8 text"):
        source(httpserver)()


def test_a_refused_read_names_the_answer(httpserver: HTTPServer) -> None:
    forbidden = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "secrets is forbidden"}
    httpserver.expect_request(SECRET_PATH).respond_with_json(forbidden, status=403)
    with pytest.raises(SlurmNoToken, match=rf"(?i)^{WHERE}: cannot read it: HTTP 403 Forbidden$"):
        source(httpserver)()


def test_an_unreachable_api_server_is_no_token() -> None:
    tokens = SecretToken(Kube(api_client(refused_url())), NS, NAME, KEY)
    with pytest.raises(SlurmNoToken, match=rf"^{WHERE}: cannot read it: MaxRetryError"):
        tokens()


def test_a_rotated_token_is_picked_up_once_the_bound_has_passed(httpserver: HTTPServer) -> None:
    kube = served(httpserver, {KEY: b"eyJ.first.sig"})
    clock = Clock()
    tokens = source(httpserver, clock)
    assert tokens() == "eyJ.first.sig"
    kube.add("secrets", secret({KEY: b"eyJ.second.sig"}))  # the Token CR re-issued it
    clock.now += REFRESH_SECONDS - 0.5
    assert [tokens() for _ in range(20)] == ["eyJ.first.sig"] * 20
    assert reads(httpserver) == 1, "one read serves every request within the bound"
    clock.now += 1.0
    assert tokens() == "eyJ.second.sig"
    assert reads(httpserver) == 2


def test_a_secret_that_goes_away_stops_the_token_at_the_next_read(httpserver: HTTPServer) -> None:
    kube = served(httpserver, {KEY: b"eyJ.first.sig"})
    clock = Clock()
    tokens = source(httpserver, clock)
    assert tokens() == "eyJ.first.sig"
    del kube.objects[("secrets", NS, NAME)]
    clock.now += REFRESH_SECONDS
    with pytest.raises(SlurmNoToken, match="no such Secret"):
        tokens()


def test_a_failed_read_is_tried_again_after_a_second_and_the_secret_may_come_later(httpserver: HTTPServer) -> None:
    kube = served(httpserver, present=False)
    clock = Clock()
    tokens = source(httpserver, clock)
    for _ in range(5):  # the requests of one pass: one read, the same answer
        with pytest.raises(SlurmNoToken, match="no such Secret"):
            tokens()
    assert reads(httpserver) == 1
    kube.add("secrets", secret({KEY: b"eyJ.issued.sig"}))  # the Token CR issued it
    clock.now += RETRY_SECONDS
    assert tokens() == "eyJ.issued.sig"
    assert reads(httpserver) == 2


def test_the_token_read_is_never_logged(httpserver: HTTPServer) -> None:
    served(httpserver, {KEY: b"eyJhbGciOiJIUzI1NiJ9.eyJzdW4iOiJzbHVybSJ9.c2lnbmF0dXJl"})
    token = source(httpserver)()
    stream = io.StringIO()
    logs.configure("DEBUG", stream)
    try:
        logging.getLogger("slurm_sync.test").info("sent %s", token)
    finally:
        logging.getLogger().handlers.clear()
    assert token not in stream.getvalue() and "<redacted>" in stream.getvalue()


@pytest.mark.parametrize("text", ["slurm", "/name", "slurm/", "a/b/c", ""])
def test_a_secret_reference_must_be_namespace_slash_name(text: str) -> None:
    with pytest.raises(ValueError, match="is not NAMESPACE/NAME"):
        parse_secret_ref(text)
    args = cli.parse_args(["--mode", "bridge", "--slurm-url", "http://x", "--token-secret", text or " "])
    with pytest.raises(SystemExit, match=r"--token-secret \(or SLURM_SYNC_TOKEN_SECRET\): .* is not NAMESPACE/NAME"):
        cli.bridge_tokens(args, Kube(api_client(refused_url())))


def test_the_command_line_builds_the_secret_source(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = Kube(api_client(refused_url()))
    monkeypatch.setenv("SLURM_SYNC_TOKEN_SECRET", "slurm/slurm-bridge-token")
    args = cli.parse_args(["--mode", "bridge", "--slurm-url", "http://x"])
    tokens = cli.bridge_tokens(args, kube)
    assert isinstance(tokens, SecretToken)
    assert (tokens.namespace, tokens.name, tokens.key, tokens.kube) == (NS, NAME, "auth-token", kube)
    assert cli.token_origin(args) == tokens.origin == "--token-secret slurm/slurm-bridge-token (key 'auth-token')"
    monkeypatch.setenv("SLURM_SYNC_TOKEN_SECRET_KEY", "SLURM_JWT")
    assert cli.bridge_tokens(cli.parse_args(["--slurm-url", "http://x"]), kube).key == "SLURM_JWT"  # type: ignore[attr-defined]
    both = cli.parse_args(["--slurm-url", "http://x", "--token-file", "/t"])
    with pytest.raises(SystemExit, match="--token-secret and --token-file both name the bridge's token"):
        cli.bridge_tokens(both, kube)


def test_the_bridge_pass_and_readiness_name_a_missing_secret(httpserver: HTTPServer) -> None:
    """As for --token-file (tests/slurm_sync/test_main_bad_input.py), through the whole service."""
    BridgeFake().install(httpserver)
    kube, metrics = Kube(api_client(httpserver.url_for("/"))), Metrics()
    args = cli.parse_args(
        ["--mode", "bridge", "--slurm-url", refused_url(), "--token-secret", f"{NS}/{NAME}", "--slurm-timeout", "1"]
    )
    loop = cli.bridge_loop(args, kube, metrics)
    assert isinstance(loop, BridgeLoop) and isinstance(loop.kube, BridgeKube)
    service = Service(Config(mode="bridge"), kube, metrics, loop)
    try:
        assert not service.run_pass()
        ready, why = service.health.ready()
        assert not ready and f"{WHERE}: no such Secret" in why, why
        assert "Connection refused" not in why, "nothing was sent to Slurm"
    finally:
        service.close()


def test_the_bridge_pass_runs_once_the_token_cr_has_written_the_secret(
    slurm_lab: SlurmLab, httpserver: HTTPServer
) -> None:
    """On the real Slurm: no Secret yet (the Token CR has not issued it), the pass fails naming it and sends
    Slurm nothing; once it holds the token (a second later at most: RETRY_SECONDS), the pass is ok."""
    kube_fake = BridgeFake()
    kube_fake.install(httpserver)
    kube, metrics = Kube(api_client(httpserver.url_for("/"))), Metrics()
    args = cli.parse_args(["--mode", "bridge", "--slurm-url", slurm_lab.rest_url, "--token-secret", f"{NS}/{NAME}"])
    service = Service(Config(mode="bridge"), kube, metrics, cli.bridge_loop(args, kube, metrics))
    try:
        assert not service.run_pass()
        ready, why = service.health.ready()
        assert not ready and f"{WHERE}: no such Secret" in why, why
        kube_fake.add("secrets", secret({KEY: slurm_lab.token.encode()}))
        time.sleep(RETRY_SECONDS)
        assert service.run_pass()
        assert service.health.ready() == (True, "ok")
    finally:
        service.close()

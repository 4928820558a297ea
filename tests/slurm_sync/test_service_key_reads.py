"""When the service reads a Controller's JWT key Secret (issue 30; docs/architecture.md §4.8): for the first
token, then only when the next token is due (a fifth of its lifetime before the last expires) or after a
pass that could not read Slurm (slurmctld may have a new key), never on every pass. Each GET of the Secret
is counted at a fake API server; the cluster's pass is a stand-in that takes a token as every Slurm request
does and says whether Slurm answered."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.loop import OperatorLoop, PassResult
from slurm_sync.service import Config, Service
from tests.slurm_sync.fakekube import FakeKube
from tests.slurm_sync.kubefixtures import NS, api_client, controller_cr, restapi_cr

KEY, NEW_KEY = b"k" * 32, b"n" * 32
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/good-jwt"


@dataclass
class Scene:
    kube: FakeKube
    service: Service
    key_reads: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)  # the token each pass took
    slurm_answers: bool = True

    def passes(self, count: int = 1) -> int:
        """Make ``count`` passes; the Secret reads they made."""
        before = len(self.key_reads)
        for _ in range(count):
            self.service.run_pass()
        return len(self.key_reads) - before

    def rotate(self, key: bytes, version: str) -> None:
        secret = self.kube.get("secrets", NS, "good-jwt")
        secret["data"]["jwt.key"] = base64.b64encode(key).decode()
        secret["metadata"]["resourceVersion"] = version

    def later(self, seconds: float) -> None:
        """The token source's clock moves on (the only clock that says when a token is due)."""
        (handle,) = self.service.clusters.handles.values()
        handle.tokens._clock = lambda: time.time() + seconds


@pytest.fixture
def scene(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scene]:
    kube = FakeKube()
    kube.add("controllers", controller_cr("good"))
    kube.add("restapis", restapi_cr("good", "good", "2026-01-01T00:00:00Z"))
    secret = {"metadata": {"name": "good-jwt", "namespace": NS}, "data": {"jwt.key": base64.b64encode(KEY).decode()}}
    kube.add("secrets", secret)
    reads: list[str] = []

    def counted(request: Request) -> Response:
        if request.path == SECRET_PATH:
            reads.append(request.method)
        return kube.handle(request)

    httpserver.expect_request(SECRET_PATH).respond_with_handler(counted)
    kube.install(httpserver)
    service = Service(
        Config(namespaces=(NS,), slurm_url="http://127.0.0.1:9", token_lifetime=300),
        Kube(api_client(httpserver.url_for("/"))),
        Metrics(),
    )
    scene = Scene(kube, service, reads)

    def stand_in_pass(loop: OperatorLoop) -> PassResult:
        scene.tokens.append(loop.slurm._token())
        return PassResult(scene.slurm_answers, (), 0, 0, cluster=loop.name)

    monkeypatch.setattr(OperatorLoop, "run_pass", stand_in_pass)
    yield scene
    service.close()


def test_the_key_is_read_for_the_first_token_and_not_again_while_it_serves(scene: Scene) -> None:
    assert scene.passes() == 1
    assert scene.passes(30) == 0, "five idle minutes at the default poll, not one read"
    assert len(set(scene.tokens)) == 1


def test_the_key_is_read_again_when_the_next_token_is_due(scene: Scene) -> None:
    scene.passes(2)
    scene.later(200)
    assert scene.passes() == 0
    scene.later(241)  # four fifths of the 300 s lifetime
    scene.rotate(NEW_KEY, "2")
    assert scene.passes() == 1
    assert scene.tokens[-1] != scene.tokens[0], "minted anew, from the new key"
    assert scene.passes(3) == 0


def test_a_pass_that_could_not_read_slurm_has_the_key_read_again(scene: Scene) -> None:
    scene.passes()
    scene.slurm_answers = False  # slurmctld refused the token: it may have a new key
    assert scene.passes() == 0, "the pass that fails took the token it had"
    scene.rotate(NEW_KEY, "2")
    scene.slurm_answers = True
    assert scene.passes() == 1 and scene.tokens[-1] != scene.tokens[0]
    assert scene.passes(3) == 0


def test_a_key_that_could_not_be_read_is_read_at_every_pass_until_it_can(scene: Scene) -> None:
    scene.rotate(b"", "2")
    assert scene.passes(3) == 3 and scene.tokens == []
    assert not scene.service.health.ready()[0]
    scene.rotate(KEY, "3")
    assert scene.passes() == 1 and len(scene.tokens) == 1
    assert scene.passes(2) == 0

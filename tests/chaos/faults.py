"""The fault kinds of the chaos suite: each one a way slurmrestd (or what stands before it) can
answer wrongly, applied by the proxy, or something done to the lab itself (slurmctld stopped).

A kind is built per test from its ``Target`` (the Slurm node that runs the test's job, the lab's
JWT key), so "the listing lacks one node" drops the node that matters.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import jwt
import orjson

from tests.chaos.lab import slurmctld_stopped
from tests.chaos.proxy import Passthrough, Reply, Request
from tests.fixtures.slurm import SlurmLab

JSON = dict[str, Any]
TOKEN_HEADER = "X-SLURM-USER-TOKEN"
OTHER_CLUSTER = "elsewhere"


@dataclass(frozen=True)
class Target:
    busy_node: str  # the Slurm node running the test's job
    jwt_key: bytes  # the lab's HS256 key (an expired token must be otherwise valid)


def _edit_json(reply: Reply, edit: Callable[[JSON], None]) -> Reply:
    """``reply`` with its JSON object body changed by ``edit`` (other bodies pass unchanged)."""
    try:
        body = orjson.loads(reply.body)
    except orjson.JSONDecodeError:
        return reply
    if not isinstance(body, dict):
        return reply
    edit(body)
    return Reply(reply.status, orjson.dumps(body), reply.content_type)


class Listing(Passthrough):
    """A well-formed 200 listing (``nodes`` or ``jobs``, no ``errors``) keeping only some items.

    ``update_time`` is dropped on the way so Slurm answers with its full listing and its real
    ``last_update``: the lie is only in the items."""

    def __init__(self, listing: str, keep: Callable[[JSON], bool] = lambda _item: False) -> None:
        self.listing = listing
        self.keep = keep

    def _hits(self, request: Request) -> bool:
        return request.method == "GET" and request.endpoint == self.listing

    def request(self, request: Request) -> Request:
        if not self._hits(request):
            return request
        return replace(request, query=tuple(kv for kv in request.query if kv[0] != "update_time"))

    def reply(self, request: Request, reply: Reply) -> Reply:
        if not self._hits(request) or reply.status != 200:
            return reply
        return _edit_json(reply, self._keep_only)

    def _keep_only(self, body: JSON) -> None:
        body[self.listing] = [item for item in body.get(self.listing) or [] if self.keep(item)]


class NodesGone(Listing):
    """Every node answer agrees on a lie: the node listing is empty (as ``Listing``) and each
    ``GET node/<name>`` gets Slurm's own not-found, the real slurmrestd's answer about a name no node
    has, asked on the way and named back. Only the job listing still tells the truth."""

    GHOST = "-chaos-gone"  # appended to the asked name: a node name the lab does not have

    def __init__(self) -> None:
        super().__init__("nodes")

    @staticmethod
    def _asks_node(request: Request) -> bool:
        head, _, name = request.endpoint.partition("/")
        return request.method == "GET" and head == "node" and bool(name)

    def request(self, request: Request) -> Request:
        if not self._asks_node(request):
            return super().request(request)
        return replace(request, path=request.path + self.GHOST)

    def reply(self, request: Request, reply: Reply) -> Reply:
        if not self._asks_node(request):
            return super().reply(request, reply)
        ghost = request.endpoint.partition("/")[2]
        return Reply(reply.status, reply.body.replace(ghost.encode(), ghost[: -len(self.GHOST)].encode()),
                     reply.content_type)  # fmt: skip


class EmptyJobAnswer(Passthrough):
    """``GET job/<id>`` answered ``200 {"jobs": []}`` with no error (Slurm says 404 + 2017 when it is gone)."""

    def reply(self, request: Request, reply: Reply) -> Reply:
        head, _, job_id = request.endpoint.partition("/")
        if request.method != "GET" or head != "job" or not job_id.isdigit():
            return reply
        return _edit_json(reply, lambda body: body.update(jobs=[], errors=[]))


class Canned(Passthrough):
    """Every request (or every write) answered by the proxy itself; Slurm never sees it."""

    def __init__(self, status: int, body: bytes, content_type: str, writes_only: bool = False) -> None:
        self.canned = Reply(status, body, content_type)
        self.writes_only = writes_only

    def answer(self, request: Request) -> Reply | None:
        return self.canned if request.is_write or not self.writes_only else None


class Truncated(Passthrough):
    """Slurm's real answer, cut in half, with a Content-Length that matches the cut body."""

    def reply(self, request: Request, reply: Reply) -> Reply:
        return Reply(reply.status, reply.body[: len(reply.body) // 2], reply.content_type)


class ErrorsIn200(Passthrough):
    """Slurm's real 200 answer, data intact, plus an ``errors`` entry (as slurmrestd reports a
    failure it could not turn into a status)."""

    ERROR: ClassVar[dict[str, object]] = {
        "description": "chaos: injected failure",
        "error_number": -1,
        "error": "Unspecified error",
        "source": "chaos",
    }

    def reply(self, request: Request, reply: Reply) -> Reply:
        if reply.status != 200:
            return reply
        return _edit_json(reply, lambda body: body.update(errors=[*(body.get("errors") or []), self.ERROR]))


class ResetMidPass(Passthrough):
    """The first request of a pass goes through; every later one reaches Slurm but its answer
    is cut off by a connection reset (a crashing slurmrestd or a dropped load balancer)."""

    def reply(self, request: Request, reply: Reply) -> Reply:
        if request.seq == 0:
            return reply
        return Reply(reply.status, reply.body, reply.content_type, cut_at=len(reply.body) // 2)


class Delay(Passthrough):
    """Hold every request ``seconds`` (beyond the client's timeout) before forwarding it."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._cleared = threading.Event()

    def answer(self, request: Request) -> Reply | None:
        self._cleared.wait(self.seconds)
        return None

    def release(self) -> None:
        self._cleared.set()


class Token(Passthrough):
    """Replace slurm_sync's JWT with ``forge(original claims)`` on the way to the real slurmrestd."""

    def __init__(self, forge: Callable[[JSON], str]) -> None:
        self.forge = forge

    def request(self, request: Request) -> Request:
        token = request.header(TOKEN_HEADER)
        if not token:
            return request
        claims = jwt.decode(token, options={"verify_signature": False})
        return request.with_header(TOKEN_HEADER, self.forge(claims))


def wrong_key(claims: JSON) -> str:
    return jwt.encode(claims, os.urandom(32), algorithm="HS256")


def expired(key: bytes) -> Callable[[JSON], str]:
    def forge(claims: JSON) -> str:
        now = int(time.time())
        return jwt.encode({**claims, "iat": now - 3600, "exp": now - 60}, key, algorithm="HS256")

    return forge


class OtherCluster(Passthrough):
    """Every answer says it comes from another cluster (``meta.slurm.cluster``)."""

    def reply(self, request: Request, reply: Reply) -> Reply:
        def rename(body: JSON) -> None:
            meta = body.get("meta")
            if isinstance(meta, dict) and isinstance(meta.get("slurm"), dict):
                meta["slurm"]["cluster"] = OTHER_CLUSTER

        return _edit_json(reply, rename)


Outage = Callable[[SlurmLab], AbstractContextManager[None]]


def no_outage(_lab: SlurmLab) -> AbstractContextManager[None]:
    return nullcontext()


@dataclass(frozen=True)
class FaultKind:
    name: str
    make: Callable[[Target], Passthrough]
    passes: int = 2  # passes while the fault lasts (a failing request costs retries, a slow one timeouts)
    outage: Outage = no_outage  # done to the lab itself for the duration
    foreign: bool = False  # the answers come from another cluster: any Slurm write is wrong
    spares: frozenset[str] = frozenset()  # sides that never ask what the fault touches (they stay ready)

    def __str__(self) -> str:
        return self.name

    @property
    def blinds(self) -> bool:
        """The truth cannot be read from Slurm while the fault lasts (the lab itself is down)."""
        return self.outage is not no_outage


HTML_500 = b"<html><head><title>500 Internal Server Error</title></head><body><h1>Oops</h1></body></html>"
HTML_502 = b"<html><head><title>502 Bad Gateway</title></head><body><h1>502 Bad Gateway</h1></body></html>"
# slurm_sync's client timeout in the chaos rigs, and how long the delay fault holds a request
CLIENT_TIMEOUT = 0.5
DELAY = CLIENT_TIMEOUT + 0.5
# Passes under a well-formed lie. slurm_sync confirms an absence on any later pass (no waiting) in
# the chaos rigs, so a rule that confirmed a lie would have two chances to act on it.
LIES = 3
CONFIRM_SECONDS = 0.0
NO_JOBS = frozenset({"operator"})  # the operator side reads no job


def _missing_busy_node(target: Target) -> Passthrough:
    return Listing("nodes", keep=lambda node: node.get("name") != target.busy_node)


KINDS: tuple[FaultKind, ...] = (
    FaultKind("empty-node-listing", lambda t: Listing("nodes"), passes=LIES),
    FaultKind("node-listing-missing-busy-node", _missing_busy_node, passes=LIES),
    FaultKind("empty-job-answer", lambda t: EmptyJobAnswer(), passes=LIES, spares=NO_JOBS),
    FaultKind("empty-job-list", lambda t: Listing("jobs"), passes=LIES, spares=NO_JOBS),
    FaultKind("garbage-200", lambda t: Canned(200, b"\x00\x17chaos{not json", "application/json")),
    FaultKind("truncated-json", lambda t: Truncated()),
    FaultKind("html-500", lambda t: Canned(500, HTML_500, "text/html")),
    FaultKind("http-502", lambda t: Canned(502, HTML_502, "text/html")),
    FaultKind("http-503", lambda t: Canned(503, b"Service Unavailable", "text/plain")),
    FaultKind("errors-in-200", lambda t: ErrorsIn200()),
    FaultKind("connection-reset-mid-pass", lambda t: ResetMidPass()),
    FaultKind("delay-beyond-timeout", lambda t: Delay(DELAY), passes=1),
    FaultKind("jwt-wrong-key", lambda t: Token(wrong_key)),
    FaultKind("jwt-expired", lambda t: Token(expired(t.jwt_key))),
    FaultKind("slurmctld-down", lambda t: Passthrough(), passes=1, outage=slurmctld_stopped),
    FaultKind("other-cluster", lambda t: OtherCluster(), foreign=True),
    FaultKind("writes-503", lambda t: Canned(503, b"Service Unavailable", "text/plain", writes_only=True)),
)

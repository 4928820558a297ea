"""A fault-injecting httpx transport for tests: requests go to the real slurmrestd unless a rule
answers them instead (a well-formed wrong answer, say). Used only to inject what the real Slurm
would never say; everything else is the real peer's answer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import orjson

Rule = Callable[[httpx.Request], httpx.Response | None]


@dataclass
class Injector(httpx.BaseTransport):
    """Forwards to ``inner`` (the real network) unless one of ``rules`` answers; logs every request."""

    inner: httpx.BaseTransport = field(default_factory=httpx.HTTPTransport)
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str]] = field(default_factory=list)  # (method, path) of every request

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.log.append((request.method, request.url.path))
        for rule in self.rules:
            answer = rule(request)
            if answer is not None:
                return answer
        return self.inner.handle_request(request)

    def writes(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p in self.log if m != "GET"]


def answer(method: str, path_suffix: str, status: int, body: dict) -> Rule:
    """Answer requests whose path ends with ``path_suffix`` with ``body`` (JSON)."""

    def rule(request: httpx.Request) -> httpx.Response | None:
        if request.method != method or not request.url.path.endswith(path_suffix):
            return None
        return httpx.Response(status, content=orjson.dumps(body), headers={"Content-Type": "application/json"})

    return rule


def rename_cluster(name: str) -> Rule:
    """Every answer of the real slurmrestd, with ``meta.slurm.cluster`` replaced: a slurmrestd of another cluster."""
    real = httpx.HTTPTransport()

    def rule(request: httpx.Request) -> httpx.Response | None:
        response = real.handle_request(request)
        response.read()
        try:
            body = orjson.loads(response.content)
        except orjson.JSONDecodeError:
            return response
        if isinstance(body, dict) and isinstance(body.get("meta"), dict):
            body["meta"].setdefault("slurm", {})["cluster"] = name
        return httpx.Response(
            response.status_code, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
        )

    return rule


def slurm_meta(cluster: str) -> dict:
    return {
        "slurm": {"version": {"major": "26", "minor": "05", "micro": "5"}, "release": "26.05.5", "cluster": cluster}
    }

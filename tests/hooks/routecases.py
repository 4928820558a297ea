"""Sample requests for every route and ways to break them, shared by the route tests and the nesting tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from hooks.app import create_app
from hooks.routes import route_table


def broken(body: Any, path: tuple, wrong: Any) -> Any:
    body = orjson.loads(orjson.dumps(body))
    *parents, last = path
    target = body
    for step in parents:
        target = target[step]
    if wrong is REMOVE:
        del target[last]
    else:
        target[last] = wrong
    return body


def post(route: str, body: Any):
    return APP.test_client().post(route, data=orjson.dumps(body), content_type="application/json")


def nested(depth: int, leaf: Any) -> orjson.Fragment:
    """`leaf` inside `depth` levels of lists and objects, alternating, as JSON text (orjson writes only 254)."""
    opens = "".join('{"a":' if level % 2 else "[" for level in range(depth))
    closes = "".join("}" if level % 2 else "]" for level in reversed(range(depth)))
    return orjson.Fragment(opens + orjson.dumps(leaf).decode() + closes)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests"
ROUTES = [r.path for r in route_table()]
APP = create_app()
REMOVE = object()


def sample(route: str) -> Any:
    """The route's example request; a finalize route no manifest calls (it answers 501) has none and
    takes its kind's sync request, the same shape, so its request check is fuzzed too."""
    path = EXAMPLES / (route.strip("/").replace("/", "-") + ".json")
    if not path.exists() and route.endswith("/finalize"):
        path = EXAMPLES / (route.removesuffix("/finalize").strip("/").replace("/", "-") + "-sync.json")
    return orjson.loads(path.read_bytes())


SAMPLES = {route: sample(route) for route in ROUTES}

"""The hook server: a Flask application factory serving every route of docs/architecture.md §3.

Each POST route parses its request strictly (400 naming the field), runs a pure handler, checks
the response (500 if Metacontroller would misread it) and answers strict JSON. Nothing here does
network I/O; hooks are pure functions of the request.

The hook routes are a WSGI layer in front of Flask (`HookRoutes`), answered with werkzeug's
request and response alone: Flask's request context, routing and signals cost as much as the
NodeSet hook itself for a small request (docs/architecture.md §7). Flask serves the rest (health,
readiness, metrics, 404s). A hook path answers POST, lists its methods to OPTIONS and answers any
other method 405, as a Flask route of it would.

With `HOOKS_AUTH_TOKEN_FILE` set, every POST route demands `Authorization: Bearer <token>` with the
file's content (Metacontroller >= 4.16 sends it from a Secret: `authorization` or
`endpointConfigs`). The file is read on each request so a rotated Secret takes effect without a
restart; if it cannot be read, hooks answer 503 rather than run unauthenticated, and `/readyz` is 503
naming the file. Health and metrics stay open for probes and scrapers. The variable set but empty,
or naming an empty file at start, is a configuration error: the server refuses to start rather than
run without authentication.

A request body larger than `HOOKS_MAX_BODY_BYTES` (default 256 MiB: a 10,000-pod NodeSet sync
request, with its Nodes in DaemonSet mode, is about 200 MB) is answered 413 from its
Content-Length, or as soon as a streamed body passes the limit, without reading it whole.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flask import Flask, Response
from werkzeug.exceptions import HTTPException, InternalServerError, MethodNotAllowed
from werkzeug.wrappers import Request

from hooks import applied, contract, metrics, serve
from hooks.routes import Handler, Route, route_table
from slinky_common.errors import BadHookRequest
from slinky_common.gcpause import collector_paused

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("hooks")
_CHUNK_BYTES = 1 << 20  # a streamed (chunked) body is read in pieces of this size


def create_app(handlers: dict[str, Handler] | None = None) -> Flask:
    """Build the app; `handlers` overrides the route -> handler table (tests use it).

    Raises ValueError for a configuration it must not serve with (see the module docstring).
    """
    _check_auth_config()
    app = Flask("hooks")
    app.config["HOOKS_MAX_BODY_BYTES"] = max_body_bytes()
    routes = route_table(handlers)
    metrics.declare(route.path for route in routes)
    app.add_url_rule("/healthz", endpoint="healthz", view_func=lambda: _json(200, {"status": "ok"}))
    app.add_url_rule("/readyz", endpoint="readyz", view_func=_readiness)
    app.add_url_rule("/metrics", endpoint="metrics", view_func=_metrics_view)
    app.register_error_handler(HTTPException, lambda err: _error(err.code or 500, err.description or err.name))
    app.wsgi_app = HookRoutes(app.wsgi_app, routes, app.config["HOOKS_MAX_BODY_BYTES"])  # type: ignore[method-assign]
    return app


class HookRoutes:
    """The hook routes as WSGI, in front of the Flask app that answers every other path."""

    def __init__(self, flask_app: WSGIApplication, routes: Iterable[Route], max_body: int) -> None:
        self._flask_app = flask_app
        self._routes = {route.path: route for route in routes}
        self.max_body = max_body

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        route = self._routes.get(environ.get("PATH_INFO", ""))
        if route is None:
            return self._flask_app(environ, start_response)
        request = Request(environ, populate_request=False)  # no environ <-> request cycle
        try:
            response = self._respond(route, request)
        except Exception:  # as Flask would: logged, and a 500 naming no detail
            log.exception("Exception on %s [%s]", request.path, request.method)
            response = _error(500, InternalServerError.description)
        return response(environ, start_response)

    def _respond(self, route: Route, request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(headers={"Allow": "OPTIONS, POST"})
        if request.method != "POST":
            return _error(405, MethodNotAllowed.description)
        started = time.perf_counter()
        denied = _unauthorized(request)
        response = denied if denied is not None else self._answer_body(route, request)
        metrics.observe(route.path, response.status_code, time.perf_counter() - started)
        return response

    def _answer_body(self, route: Route, request: Request) -> Response:
        try:
            body = _read_body(request, self.max_body)
        except TimeoutError as err:  # the gevent worker's read deadline (hooks/worker.py)
            return _error(408, str(err))
        if body is None:
            return _error(413, f"request body is larger than HOOKS_MAX_BODY_BYTES ({self.max_body} bytes)")
        if request.content_length is not None and len(body) < request.content_length:
            return _error(400, f"request body ended after {len(body)} of its {request.content_length} bytes")
        with collector_paused():  # the parsed request is freed inside, before the answer is sent
            return _answer(route, body)


def max_body_bytes() -> int:
    """HOOKS_MAX_BODY_BYTES; SettingError (a ValueError) naming it unless a positive whole number."""
    return serve.MAX_BODY_BYTES.value()


def _check_auth_config() -> None:
    """HOOKS_AUTH_TOKEN_FILE set but empty, or naming an empty file, would mean "no authentication":
    SettingError (a ValueError) saying so (hooks/serve.py)."""
    serve.AUTH_TOKEN_FILE.value()


def _auth_token() -> tuple[bytes | None, str]:
    """The bearer token HOOKS_AUTH_TOKEN_FILE holds (None when no file is configured), or "" and why it
    cannot be used: the file is read on every request, so a rotated Secret takes effect at once."""
    path = serve.AUTH_TOKEN_FILE.raw()
    if not path:
        return None, ""
    try:
        with open(path, "rb") as f:
            token = f.read().strip()
    except OSError as err:
        return b"", f"HOOKS_AUTH_TOKEN_FILE {path}: cannot read it: {err.strerror}"
    return token, "" if token else f"HOOKS_AUTH_TOKEN_FILE {path} is empty"


def _readiness() -> Response:
    """Not ready while the hooks could only answer 503: the token file named but unusable."""
    _, problem = _auth_token()
    if problem:
        return _json(503, {"status": "not ready", "reason": problem})
    return _json(200, {"status": "ready"})


def _unauthorized(request: Request) -> Response | None:
    """None when the request may proceed: no token configured, or the right bearer token sent (the
    scheme's case does not matter, RFC 9110 §11.1)."""
    token, problem = _auth_token()
    if token is None:
        return None
    if problem:
        log.error("%s; every hook answers 503 until it can be used", problem)
        return _error(503, "the hook server cannot read its authentication token; see its log")
    scheme, _, credentials = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(credentials.strip().encode(), token):
        return None
    response = _error(401, "missing or wrong bearer token")
    response.headers["WWW-Authenticate"] = 'Bearer realm="slinky-hooks"'
    return response


def _answer(route: Route, body: bytes) -> Response:
    # A failure on the shaped decode (hooks/requestjson.py) is computed again from the strict parse:
    # an integer beyond 64 bits, read exactly there, can fail where the strict parse's float does not.
    loads = [route.load] if route.load is contract.load_json_object else [route.load, contract.load_json_object]
    for attempt, load in enumerate(loads, start=1):
        try:
            return _computed(route, load(body))
        except BadHookRequest as err:
            return _error(400, str(err))
        except RecursionError:  # only input can nest that deep: the parsers accept ~1,000 levels
            return _error(400, f"the request nests deeper than {route.path} can walk (Python's recursion limit)")
        except Exception as exc:  # any failure must reach Metacontroller as an error, never as a 200
            if attempt == len(loads):
                log.exception("hook %s failed", route.path)
            else:  # rare, and a sign of a shaped-decode difference worth knowing of
                log.warning("hook %s: %r on the shaped decode; computing again from the strict parse", route.path, exc)
    return _error(500, f"{route.path} failed while computing the response; see the hook server log")


def _computed(route: Route, data: contract.JSON) -> Response:
    """The answer to a request's JSON data; raises BadHookRequest for a malformed one."""
    parsed = route.parse(data, route.kind)
    if route.handler is None:
        return _error(501, f"{route.path} is not implemented yet")
    return _json(200, route.check(route.handler(parsed)))


def _read_body(request: Request, limit: int) -> bytes | None:
    """The body, or None when it is larger than `limit`: judged from Content-Length before reading, or
    after reading one byte past the limit of a streamed body.

    A body with a Content-Length is read from the server's input in one call of exactly that size
    (werkzeug's stream would allocate a buffer of `limit` bytes and copy the body twice more).
    """
    length = request.content_length
    if length is not None:
        return None if length > limit else request.environ["wsgi.input"].read(length)
    chunks: list[bytes] = []
    size = 0
    while size <= limit and (chunk := request.stream.read(min(_CHUNK_BYTES, limit + 1 - size))):
        chunks.append(chunk)
        size += len(chunk)
    return None if size > limit else b"".join(chunks)


def _metrics_view() -> Response:
    body, content_type = metrics.exposition()
    return Response(body, 200, content_type=content_type)


def _error(code: int, message: str) -> Response:
    return _json(code, {"error": message})


def _json(code: int, body: contract.JSON) -> Response:
    return Response(applied.serialise(body), code, mimetype="application/json")

"""The versioned slurmrestd client.

One ``SlurmClient`` per Slurm cluster. It asks the server which REST data-parser versions it
serves (``GET /openapi/v3``) and speaks the newest one we also know, so the same code runs
against Slurm 25.05 (v0.0.43) up to 26.05 (v0.0.45).

Safety rules, because slurm_sync acts on what it reads (docs/architecture.md §4):

* Every failure raises; nothing ever returns an empty result in place of an error. A 200 whose
  body lists ``errors`` is an error; an unreadable body is ``SlurmUnavailable``.
* Only requests that are safe to repeat are retried (GETs, and node updates that set a fixed
  state). A job submit is never retried: a lost answer does not mean a lost job.
* The JWT comes from a provider callable on every request (so it can be refreshed) and never
  reaches a log record, an exception or a repr.
* Every answer names the cluster that served it (``meta.slurm.cluster``). A client bound to a
  cluster (given, or pinned by the first answer naming one) refuses an answer from any other, or
  one naming none, with ``SlurmWrongCluster``, and verifies the cluster with a ping before a write
  unless the last answer already did: one cluster's intents never reach another's slurmctld.
* "Not found" is only Slurm's own per-object answer: ``GET job/<id>`` answering 200 without the
  job, or a listing lacking an object, is no proof that it is gone.
* Under leader election every request but a GET waits on ``write_budget`` (the seconds the replica's
  Lease still covers): none is sent once it runs out, and each is sent with a timeout that ends by
  then, so a replica that lost the Lease never writes beside the new leader (docs/architecture.md §8).
"""

from __future__ import annotations

import datetime
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final, Generic, Literal, TypeVar
from urllib.parse import quote

import httpx
import jwt
import msgspec
import orjson

from slinky_common.decode import shaped
from slurm_sync.inflight import InFlight
from slurm_sync.shapes import Body, Decode, record
from slurm_sync.slurm.errors import (
    ESLURM_INVALID_NODE_NAME,
    ESLURM_PROTOCOL_AUTHENTICATION,
    ESLURM_RESERVATION_INVALID,
    NOT_FOUND_NUMBERS,
    SlurmErrorDetail,
    SlurmMalformed,
    SlurmNotFound,
    SlurmNotLeader,
    SlurmRejected,
    SlurmUnavailable,
    SlurmUnsupported,
    SlurmWrongCluster,
    is_transport_number,
)
from slurm_sync.slurm.items import ItemMemo
from slurm_sync.slurm.types import (
    JOB_FIELDS,
    JSON,
    NODE_FIELDS,
    Job,
    Listing,
    Node,
    NodeLayout,
    NodeUpdate,
    PingResult,
    Reservation,
    SubmitResult,
    listed,
    no_val_number,
    object_list,
    object_of,
    parse_job,
    parse_node,
    parse_node_layout,
    parse_ping,
    parse_reservation,
    parse_submit,
)

log = logging.getLogger(__name__)

# Newest first: the order of preference.
SUPPORTED_VERSIONS: Final = ("v0.0.45", "v0.0.44", "v0.0.43")
_PATH_VERSION: Final = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")
_REDACTED: Final = "<redacted>"
_OWN_BUFFER: Final = (
    1 << 20
)  # a smaller answer is copied into bytes (hashable, immutable); a larger one is decoded in place

TokenProvider = Callable[[], str]
WriteBudget = Callable[[], float]  # seconds a write may still take; 0 or less: none may be sent
K = TypeVar("K")
T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with exponential backoff and full jitter (spreads out many clients)."""

    attempts: int = 3
    base_delay: float = 0.2
    max_delay: float = 3.0

    def delay(self, retry: int, jitter: float) -> float:
        """Seconds to wait before retry number ``retry`` (0-based); ``jitter`` in [0, 1)."""
        return jitter * min(self.max_delay, self.base_delay * 2**retry)


@dataclass(frozen=True)
class ApiInfo:
    """What negotiation learned: the version we speak and what it can do."""

    version: str
    offered: tuple[str, ...]
    node_update_fields: frozenset[str]
    job_flags: frozenset[str]
    job_layout: bool = False  # GET resources/<job> (v0.0.44+, Slurm 25.11+): a job's cores and GRES per node


def choose_version(offered: Iterable[str], known: Sequence[str] = SUPPORTED_VERSIONS) -> str:
    """The first of ``known`` (newest first) that the server offers."""
    offered = set(offered)
    for version in known:
        if version in offered:
            return version
    raise SlurmUnsupported(
        f"slurmrestd offers REST versions {', '.join(sorted(offered)) or '(none)'}; "
        f"this client speaks {', '.join(known)}"
    )


def parse_openapi(spec: JSON, known: Sequence[str] = SUPPORTED_VERSIONS) -> ApiInfo:
    """Negotiate from the server's OpenAPI document: its paths name the versions it serves."""
    paths = spec.get("paths")
    if not isinstance(paths, Mapping):
        raise SlurmMalformed("GET /openapi/v3: no 'paths' object")
    offered = tuple(sorted({m.group(1) for p in paths if (m := _PATH_VERSION.match(p))}))
    version = choose_version(offered, known)
    schemas = (spec.get("components") or {}).get("schemas") or {}
    return ApiInfo(
        version=version,
        offered=offered,
        node_update_fields=frozenset(_schema_properties(schemas, f"{version}_update_node_msg")),
        job_flags=frozenset(_enum(schemas, f"{version}_job_desc_msg", "flags")),
        job_layout=f"/slurm/{version}/resources/{{job_id}}" in paths,
    )


def _schema_properties(schemas: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    schema = schemas.get(name)
    return (schema.get("properties") or {}) if isinstance(schema, Mapping) else {}


def _enum(schemas: Mapping[str, Any], name: str, field: str) -> list[str]:
    prop = _schema_properties(schemas, name).get(field) or {}
    items = prop.get("items") or {}
    if "$ref" in items:
        items = schemas.get(items["$ref"].rsplit("/", 1)[-1]) or {}
    return list(items.get("enum") or [])


class SlurmClient:
    """A slurmrestd client for one cluster (thread-safe for concurrent calls)."""

    def __init__(
        self,
        base_url: str,
        token: TokenProvider,
        *,
        user_name: str | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy = RetryPolicy(),
        versions: Sequence[str] = SUPPORTED_VERSIONS,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        cluster: str | None = None,
        transport: httpx.BaseTransport | None = None,
        write_budget: WriteBudget | None = None,
        token_origin: str = "",
    ) -> None:
        """``cluster``: the Slurm cluster this client serves (None: the first answer naming one pins
        it). ``transport``: httpx's, to put a proxy in between (tests inject faults there).
        ``write_budget``: the leader's fence (None: every write may be sent). ``token_origin``: where
        the token comes from, for the message when slurmrestd refuses it (a setting and its file, a Secret)."""
        self.base_url = base_url.rstrip("/")
        self._cluster = cluster
        self._node_items = ItemMemo(_decode_node, parse_node, "nodes")  # a listing's unchanged nodes: not parsed
        self._job_items = ItemMemo(_decode_job, parse_job, "jobs")
        self._verified = False  # the last answer came from our cluster
        self._token = token
        self._user_name = user_name
        self._retry = retry
        self._versions = tuple(versions)
        self._sleep = sleep
        self._jitter = jitter
        self._api: ApiInfo | None = None
        self._write_budget = write_budget
        self._token_origin = token_origin
        self.calls = InFlight()  # requests sent and not answered yet (readiness names one that hangs)
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            transport=transport,
        )

    def __repr__(self) -> str:
        version = self._api.version if self._api else "not negotiated"
        return f"SlurmClient({self.base_url!r}, {version})"

    @property
    def cluster(self) -> str | None:
        """The cluster this client serves (given, or pinned by the first answer that named one)."""
        return self._cluster

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SlurmClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- version negotiation ----------------------------------------------------------------

    @property
    def api(self) -> ApiInfo:
        """The negotiated API (negotiates on first use)."""
        return self._api or self.negotiate()

    def negotiate(self) -> ApiInfo:
        """Ask the server again which versions it serves (it may have been upgraded)."""
        self._api = parse_openapi(self._call("GET", "/openapi/v3", retry=True) or {}, self._versions)
        log.info("slurmrestd %s: speaking %s (offered %s)", self.base_url, self._api.version, self._api.offered)
        return self._api

    def _path(self, *parts: str | int) -> str:
        return f"/slurm/{self.api.version}/" + "/".join(quote(str(p), safe="") for p in parts)

    # --- ping -------------------------------------------------------------------------------

    def ping(self) -> PingResult:
        """Each slurmctld's answer, and the Slurm version (``meta.slurm.version``)."""
        return parse_ping(self._get(self._path("ping", "")))

    # --- nodes ------------------------------------------------------------------------------

    def list_nodes(self, since: int | None = None) -> Listing[Node]:
        """All nodes, or (with ``since`` = a previous ``last_update``) ``unchanged`` when Slurm
        saw no node change since then. Slurm never sends a partial list: any change gives all."""
        return self._listing(self._path("nodes", ""), "nodes", self._node_items, since, _decode_nodes)

    def get_node(self, name: str) -> Node:
        """One node; ``SlurmNotFound`` only on Slurm's own answer that it has no such node."""
        return self._get_one("node", "nodes", name, parse_node, lambda n: n.name, _says_no_such_node)

    def update_node(self, name: str, update: NodeUpdate) -> None:
        """Apply ``update``; retried on outages only when repeating it cannot hurt."""
        body = update.body()
        unsupported = set(body) - self.api.node_update_fields
        if unsupported:
            raise SlurmUnsupported(f"REST {self.api.version} cannot update node field(s) {sorted(unsupported)}")
        self._call("POST", self._path("node", name), body=body, retry=update.idempotent)

    def delete_node(self, name: str) -> None:
        """Delete a dynamic node's record (``SlurmNotFound`` when Slurm has no such node). slurmctld does
        not advance the node listing's ``last_update`` for a deletion: a caller that keeps an incremental
        listing lists it whole afterwards (docs/architecture.md §4.2)."""
        self._call("DELETE", self._path("node", name), retry=False)

    def create_node(self, node_conf: str) -> None:
        """Register a node from a slurm.conf ``NodeName=...`` line (``POST new/node``, Slurm >= 25.11;
        the cluster needs room for dynamic nodes, ``MaxNodeCount``). Not retried: a lost answer
        may still have created it; the next listing tells."""
        self._call("POST", self._path("new", "node", ""), body={"node_conf": node_conf}, retry=False)

    def partition_names(self) -> frozenset[str]:
        """Every partition Slurm has (to check an external node's partitions before registering it)."""
        body = self._get(self._path("partitions", ""))
        return frozenset(_partition_name(p) for p in object_list(body, "partitions", "partitions"))

    # --- jobs -------------------------------------------------------------------------------

    def list_jobs(self, since: int | None = None) -> Listing[Job]:
        """All jobs Slurm still holds; ``since`` works as for ``list_nodes``."""
        return self._listing(self._path("jobs", ""), "jobs", self._job_items, since, _decode_jobs)

    def get_job(self, job_id: int) -> Job:
        """One job; ``SlurmNotFound`` only on Slurm's not-found error (404 with error 2017)."""
        for job in map(parse_job, object_list(self._get(self._path("job", job_id)), "jobs", "job")):
            if job.job_id == job_id:
                return job
        # slurmrestd answers a missing job with 404 and error 2017; a 200 without it proves nothing
        raise SlurmMalformed(f"GET job/{job_id}: HTTP 200 without job {job_id} (not proof that it is gone)", status=200)

    def job_layout(self, job_id: int) -> tuple[NodeLayout, ...]:
        """Which cores and GRES devices a running job holds on each of its nodes (``GET resources/<job>``)."""
        if not self.api.job_layout:
            raise SlurmUnsupported(
                f"REST {self.api.version} does not report a job's resources per node (GET resources/<job>, "
                "Slurm 25.11 and newer)"
            )
        body = self._get(self._path("resources", job_id))
        return tuple(parse_node_layout(n) for n in object_list(body, "nodes", f"resources of job {job_id}"))

    def submit_job(self, job: Mapping[str, Any], script: str | None = None) -> SubmitResult:
        """Submit once (never retried: after a timeout the job may exist; look it up)."""
        body: dict[str, Any] = {"job": dict(job)}
        if script is not None:
            body["script"] = script
        return parse_submit(self._call("POST", self._path("job", "submit"), body=body, retry=False) or {})

    def submit_external_job(self, job: Mapping[str, Any]) -> SubmitResult:
        """A script-less ``EXTERNAL_JOB`` placeholder (Slurm >= 25.05), as slurm-bridge submits."""
        if "script" in job:
            raise ValueError("an external job has no script; Slurm rejects one that does")
        if "EXTERNAL_JOB" not in self.api.job_flags:
            raise SlurmUnsupported(f"REST {self.api.version} has no EXTERNAL_JOB job flag")
        flags = list(job.get("flags") or [])
        if "EXTERNAL_JOB" not in flags:
            flags.append("EXTERNAL_JOB")
        return self.submit_job({**job, "flags": flags})

    def update_job(self, job_id: int, changes: Mapping[str, Any]) -> None:
        body = self._call("POST", self._path("job", job_id), body=dict(changes), retry=False) or {}
        # slurmrestd sends "results": null when every job was updated
        for result in object_list(body, "results", "job update") if body.get("results") else []:
            code = result.get("error_code") or 0
            if code:
                detail = SlurmErrorDetail(str(result.get("error", "")), code, str(result.get("why", "")), "")
                raise _rejected(f"POST job/{job_id}", 200, (detail,))

    def cancel_job(self, job_id: int, signal: str | None = None) -> None:
        """scancel (optionally with a signal); ``SlurmNotFound`` if Slurm does not know the job."""
        params = {"signal": signal} if signal else None
        body = self._call("DELETE", self._path("job", job_id), params=params, retry=False) or {}
        details = []
        for status in object_list(body, "status", "job cancel") if body.get("status") else []:
            error = status.get("error") or {}
            if isinstance(error, Mapping) and error.get("code"):
                details.append(SlurmErrorDetail(str(error.get("string", "")), error["code"], "", ""))
        if details:
            raise _rejected(f"DELETE job/{job_id}", 200, tuple(details))

    # --- reservations -----------------------------------------------------------------------

    def list_reservations(self, since: int | None = None) -> Listing[Reservation]:
        return self._listing(
            self._path("reservations", ""), "reservations", _parsed(parse_reservation, "reservations"), since
        )

    def get_reservation(self, name: str) -> Reservation:
        """One reservation; ``SlurmNotFound`` only on Slurm's own answer that it has none of that name."""
        return self._get_one("reservation", "reservations", name, parse_reservation, lambda r: r.name,
                             _says_no_such_reservation)  # fmt: skip

    def create_reservation(self, reservation: Mapping[str, Any]) -> None:
        """Create or update one reservation (a ``reservation_desc_msg``)."""
        self._call("POST", self._path("reservation"), body=dict(reservation), retry=False)

    def update_reservation(self, name: str, changes: Mapping[str, Any]) -> None:
        """Change fields of an existing reservation (slurmrestd's POST reservation updates by name)."""
        self._call("POST", self._path("reservation"), body={**changes, "name": name}, retry=False)

    def delete_reservation(self, name: str) -> None:
        self._call("DELETE", self._path("reservation", name), retry=False)

    # --- watches ----------------------------------------------------------------------------

    def node_watch(self) -> ListingWatch[str, Node]:
        return ListingWatch(self.list_nodes, lambda node: node.name)

    def job_watch(self) -> ListingWatch[int, Job]:
        return ListingWatch(self.list_jobs, lambda job: job.job_id)

    # --- plumbing ---------------------------------------------------------------------------

    def _get(self, path: str) -> JSON:
        body = self._call("GET", path, retry=True)
        if body is None:
            raise SlurmMalformed(f"GET {path}: HTTP 304 without update_time")
        return body

    def _get_one(
        self,
        kind: str,
        plural: str,
        name: str,
        parse: Callable[[JSON], T],
        name_of: Callable[[T], str],
        says_missing: Callable[[SlurmRejected, str], bool],
    ) -> T:
        """GET <kind>/<name>: ``SlurmNotFound`` only when ``says_missing`` recognises Slurm's own
        not-found answer; a 200 that lacks the object is malformed, never proof that it is gone."""
        try:
            body = self._get(self._path(kind, name))
        except SlurmRejected as exc:
            if says_missing(exc, name):
                raise SlurmNotFound(
                    f"GET {kind}/{name}: Slurm has no {kind} {name!r}", status=exc.status, errors=exc.errors
                ) from None
            raise
        for item in map(parse, object_list(body, plural, kind)):
            if name_of(item) == name:
                return item
        raise SlurmMalformed(
            f"GET {kind}/{name}: HTTP 200 without {kind} {name!r} (not proof that it is gone)", status=200
        )

    def _listing(
        self,
        path: str,
        key: str,
        parse: Callable[[list[Any]], tuple[T, ...]],
        since: int | None,
        decode: Decode | None = None,
    ) -> Listing[T]:
        params = {"update_time": since} if since is not None else None
        body = self._call("GET", path, params=params, retry=True, decode=decode or _decode)
        if body is None:  # 304: nothing changed (nodes)
            if since is None:  # "unchanged" since nothing: no listing at all (never an empty one)
                raise SlurmMalformed(f"GET {path}: HTTP 304 without update_time")
            return Listing((), since, unchanged=True)
        items = listed(body, key)
        last_update = no_val_number(body, "last_update", key)
        if since is not None and not items and not last_update:  # jobs say "no change" this way
            return Listing((), since, unchanged=True)
        return Listing(parse(items), last_update, unchanged=False)

    def _call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        retry: bool,
        decode: Decode | None = None,
    ) -> JSON | None:
        """One logical request: the parsed body (``decode``: how, the whole answer by default), or None for
        304 Not Modified."""
        if method != "GET" and self._cluster is not None and not self._verified:
            self.ping()  # which cluster answers here? (raises SlurmWrongCluster before any write)
        attempts = self._retry.attempts if retry else 1
        with self.calls.call(f"{method} {path}"):  # in flight across its tries: a hung peer stays named
            for attempt in range(attempts):
                try:
                    return self._once(method, path, params, body, decode or _decode)
                except SlurmUnavailable as exc:
                    if not exc.retryable or attempt + 1 >= attempts:
                        raise
                    delay = self._retry.delay(attempt, self._jitter())
                    log.warning("%s (retry %d/%d in %.2fs)", exc, attempt + 1, attempts - 1, delay)
                    self._sleep(delay)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _once(self, method: str, path: str, params: Mapping[str, Any] | None, body: Any, decode: Decode) -> JSON | None:
        token = self._token()
        headers = {"X-SLURM-USER-TOKEN": token, "Accept": "application/json"}
        if self._user_name:
            headers["X-SLURM-USER-NAME"] = self._user_name
        content = None
        if body is not None:
            content = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        where = f"{method} {self.base_url}{path}"
        timeout = self._write_timeout(method, where)
        try:
            status, answer = self._exchange(method, path, params, content, headers, timeout)
        except httpx.TimeoutException as exc:
            raise SlurmUnavailable(f"{where}: timed out ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise SlurmUnavailable(_redact(f"{where}: {type(exc).__name__}: {exc}", token)) from None
        body = None if status == 304 else decode(answer)  # once: a node listing can be tens of MB
        try:
            if path.startswith("/slurm"):  # Slurm's answers (the OpenAPI document names no cluster)
                self._check_cluster(where, status, body)
            return interpret(where, status, answer, token, body)
        except SlurmRejected as exc:
            if refuses_token(exc):
                raise type(exc)(f"{exc}; {token_refusal(token, self._token_origin)}", status=exc.status,
                                errors=exc.errors) from None  # fmt: skip
            raise
        except SlurmUnavailable as exc:
            if exc.status == 404:
                self._api = None  # our version's paths are gone: negotiate again on the next call
            raise

    def _exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        content: bytes | None,
        headers: dict[str, str],
        timeout: Any,
    ) -> tuple[int, bytearray]:
        """The answer's status and body, read into a buffer of our own. httpx's response keeps the body it
        reads in a reference cycle (with its stream), freed only by the collector, which a pass pauses: a
        20,000-node listing (some 40 MB) per pass would pile up until it runs; and it joins the chunks
        into a second copy (docs/architecture.md §7)."""
        request = self._http.build_request(
            method, path, params=params, content=content, headers=headers, timeout=timeout
        )
        response = self._http.send(request, stream=True)  # what httpx's stream() does, without its name:
        try:  # tests/charts/rbac.py reads every `.stream(` call as a Kubernetes watch
            answer = bytearray()
            for chunk in response.iter_bytes():
                answer += chunk
            return response.status_code, answer
        finally:
            response.close()

    def _write_timeout(self, method: str, where: str) -> httpx.Timeout | Any:
        """The client's own timeout, or for a write under leader election one that ends when the
        Lease stops covering us; ``SlurmNotLeader`` (nothing sent) once it has."""
        if method == "GET" or self._write_budget is None:
            return httpx.USE_CLIENT_DEFAULT
        left = self._write_budget()
        if left <= 0:
            raise SlurmNotLeader(f"{where}: not sent: this replica does not hold the lease")
        own = self._http.timeout
        return httpx.Timeout(
            connect=min(own.connect or left, left),
            read=min(own.read or left, left),
            write=min(own.write or left, left),
            pool=min(own.pool or left, left),
        )

    def _check_cluster(self, where: str, status: int, body: JSON | None) -> None:
        """Refuse an answer of another cluster (or, once bound, one naming none); pin the first name.
        ``body``: the decoded answer, None for a 304 or an answer that is not a JSON object."""
        self._verified = False
        if status == 304:
            return  # no body: "nothing changed" since an answer that was checked
        if body is None:
            return  # not slurmrestd's JSON: interpret() turns it into an error
        named = answer_cluster(body)
        if named is None and self._cluster is not None and status == 200:
            raise SlurmWrongCluster(
                f"{where}: the answer names no Slurm cluster; expected {self._cluster!r}", status=status
            )
        if named is None:
            return  # an error answer without meta: an error anyway
        if self._cluster is None:
            self._cluster = named
            log.info("slurmrestd %s serves Slurm cluster %r", self.base_url, named)
        if named.casefold() != self._cluster.casefold():  # slurmctld lowercases ClusterName
            raise SlurmWrongCluster(
                f"{where}: slurmrestd serves Slurm cluster {named!r}, not {self._cluster!r}; nothing is written there",
                status=status,
            )
        self._verified = True


def refuses_token(exc: SlurmRejected) -> bool:
    """slurmrestd (401) or slurmctld (Slurm's protocol authentication error, 1007) refused our token."""
    return exc.status == 401 or ESLURM_PROTOCOL_AUTHENTICATION in exc.numbers


def token_refusal(token: str, origin: str, now: float | None = None) -> str:
    """What can be told of a refused token from the token itself (its claims, read without the key): it
    expired, or it was current, so the key that signed it or its user is not Slurm's. A wrong key and an
    expired token get the same answer from Slurm."""
    origin = f"the token from {origin}" if origin else "the token"
    try:
        claims = jwt.decode(token, options={"verify_signature": False})
    except jwt.InvalidTokenError as exc:
        return f"slurmrestd refused {origin}: it is not a JWT ({exc})"
    expires = claims.get("exp")
    if not isinstance(expires, (int, float)):
        return f"slurmrestd refused {origin} (it has no expiry): wrong key or user?"
    at = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    if expires <= (time.time() if now is None else now):
        return f"{origin} expired at {at}"
    user = claims.get("sun") or claims.get("username") or "?"
    return f"slurmrestd refused {origin} (user {user!r}, valid until {at}): wrong key or user?"


def answer_cluster(body: JSON) -> str | None:
    """``meta.slurm.cluster`` of an answer, or None when it names none."""
    meta = body.get("meta")
    slurm = meta.get("slurm") if isinstance(meta, Mapping) else None
    name = slurm.get("cluster") if isinstance(slurm, Mapping) else None
    return name if isinstance(name, str) and name else None


def _says_no_such_node(exc: SlurmRejected, name: str) -> bool:
    """slurmrestd's answer for a node slurmctld does not know: HTTP 200 with one error, number 0,
    "Failure to query node <name>" (slurmctld answered with no record; a failure to reach it carries
    a communication error number instead), or Slurm's invalid-node-name error."""
    if ESLURM_INVALID_NODE_NAME in exc.numbers:
        return True
    return (
        exc.status == 200
        and len(exc.errors) == 1
        and exc.errors[0].number == 0
        and exc.errors[0].description == f"Failure to query node {name}"
    )


def _says_no_such_reservation(exc: SlurmRejected, name: str) -> bool:
    """slurmrestd 26.05's answers for a reservation slurmctld does not have: HTTP 422, one error
    "Unable to find reservation <name>" (while others exist), or HTTP 200, one error number 0 "Unable
    to query reservations" from slurm_load_reservations() (slurmctld answered and has none at all; a
    failure to reach it carries a communication error number instead); or Slurm's invalid-reservation error."""
    if ESLURM_RESERVATION_INVALID in exc.numbers:
        return True
    if len(exc.errors) != 1:
        return False
    error = exc.errors[0]
    if exc.status == 422 and error.description == f"Unable to find reservation {name}":
        return True
    return (
        exc.status == 200
        and error.number == 0
        and error.description == "Unable to query reservations"
        and error.source == "slurm_load_reservations()"
    )


def _partition_name(partition: JSON) -> str:
    name = partition.get("name")
    if not isinstance(name, str) or not name:
        raise SlurmMalformed(f"partition without a name: {dict(partition)!r:.200}")
    return name


def interpret(
    where: str, status: int, content: Body, token: str = "", body: JSON | Literal[False] | None = False
) -> JSON | None:
    """Turn one HTTP answer into a body, None (304) or the right exception. ``body``: ``content``
    already decoded by the caller (False: decode it here)."""
    if status == 304:
        return None
    if body is False:
        body = _decode(content)
    errors = _errors(where, body) if body is not None else ()
    for line in _warnings(body):
        log.debug("%s: slurm warning: %s", where, line)
    if any(is_transport_number(e.number) for e in errors):
        raise SlurmUnavailable(f"{where}: HTTP {status}: {_describe(errors)}", status=status)
    if status >= 500 and not errors:
        raise SlurmUnavailable(f"{where}: HTTP {status}: {_excerpt(content, token)}", status=status)
    if status == 404 and body is None:
        raise SlurmUnavailable(
            f"{where}: HTTP 404: endpoint not served (slurmrestd changed versions?); will renegotiate",
            status=status,
            retryable=False,
        )
    if status == 404 and all(e.number is None for e in errors):
        # JSON, but not Slurm saying what is missing (a proxy, a half-started slurmrestd): a
        # "not found" here would read as "job gone" and delete pods, so it is "unknown"
        raise SlurmUnavailable(
            f"{where}: HTTP 404 without a Slurm error number: {_excerpt(content, token)}",
            status=status,
            retryable=False,
        )
    if status >= 400 or errors:
        raise _rejected(where, status, errors, _excerpt(content, token))
    if status != 200:
        raise SlurmUnavailable(f"{where}: unexpected HTTP {status}", status=status, retryable=False)
    if body is None:
        raise SlurmMalformed(f"{where}: HTTP 200 body is not a JSON object: {_excerpt(content, token)}", status=status)
    return body


def _rejected(where: str, status: int, errors: tuple[SlurmErrorDetail, ...], fallback: str = "") -> SlurmRejected:
    numbers = {e.number for e in errors}
    kind = SlurmNotFound if numbers & NOT_FOUND_NUMBERS else SlurmRejected  # Slurm's word only, never the status
    return kind(f"{where}: HTTP {status}: {_describe(errors) or fallback}", status=status, errors=errors)


def _decode(content: Body) -> JSON | None:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        return None
    return body if isinstance(body, dict) else None


def listing_decoder(key: str) -> Decode:
    """A listing's answer with each object of ``key`` left as its JSON text (``msgspec.Raw``: decoded only when
    it changed, slurm_sync/slurm/items.py), and the answer's ``last_update``, ``meta``, ``errors`` and
    ``warnings`` (slurm_sync/shapes.py)."""
    return shaped(record("listing", ("last_update", "meta", "errors", "warnings"), **{key: list[msgspec.Raw]}), _decode)


def _parsed(parse: Callable[[JSON], T], what: str) -> Callable[[list[Any]], tuple[T, ...]]:
    """A listing decoded whole: each of its objects parsed."""
    return lambda items: tuple(parse(object_of(item, f"{what}[{index}]")) for index, item in enumerate(items))


def item_decoder(key: str, fields: tuple[str, ...]) -> Decode:
    """One object of a listing (valid JSON: the listing was) decoded with only ``fields`` (what its parser
    reads; a 20,000-node listing's nodes decoded whole would cost some 130 MB at once); one that is not an
    object is decoded as it is, for the parser's verdict."""
    return shaped(record(key, fields), orjson.loads)


_decode_nodes = listing_decoder("nodes")
_decode_jobs = listing_decoder("jobs")
_decode_node = item_decoder("node", NODE_FIELDS)
_decode_job = item_decoder("job", JOB_FIELDS)


def _errors(where: str, body: JSON) -> tuple[SlurmErrorDetail, ...]:
    raw = body.get("errors") or []
    if not isinstance(raw, list) or not all(isinstance(e, Mapping) for e in raw):
        raise SlurmMalformed(f"{where}: 'errors' is not a list of objects")
    return tuple(
        SlurmErrorDetail(
            error=str(e.get("error", "")),
            number=e["error_number"] if isinstance(e.get("error_number"), int) else None,
            description=str(e.get("description", "")),
            source=str(e.get("source", "")),
        )
        for e in raw
    )


def _warnings(body: JSON | None) -> list[str]:
    raw = (body or {}).get("warnings") or []
    if not isinstance(raw, list):
        return []
    return [str(w.get("description", w)) if isinstance(w, Mapping) else str(w) for w in raw]


def _describe(errors: tuple[SlurmErrorDetail, ...]) -> str:
    return "; ".join(map(str, errors))


def _excerpt(content: Body, token: str, limit: int = 200) -> str:
    text = content[:limit].decode("utf-8", "replace").strip() or "(empty body)"
    return _redact(text, token)


def _redact(text: str, token: str) -> str:
    return text.replace(token, _REDACTED) if token else text


@dataclass(frozen=True)
class Snapshot(Generic[K, T]):
    """A complete, consistent view, plus what differs from the previous poll."""

    items: Mapping[K, T]
    last_update: int | None
    changed: frozenset[K]  # new, or different from the previous view
    removed: frozenset[K]  # in the previous view, gone now


class ListingWatch(Generic[K, T]):
    """Polls a listing cheaply: after the first full listing it passes Slurm's ``last_update``
    back as ``update_time``, so an unchanged cluster answers with an empty 304/no-change reply,
    and each poll still yields the complete picture and the keys that changed.

    A failed poll raises and keeps the previous view, so the next poll starts from it. An
    "unchanged" answer before there is a view is not a listing: it raises (``SlurmMalformed``)
    instead of becoming an empty, authoritative one. A view its reader found wrong is listed
    whole again (``relist``): "nothing changed since" would keep a wrong view until Slurm changes.
    """

    def __init__(self, fetch: Callable[[int | None], Listing[T]], key: Callable[[T], K]) -> None:
        self._fetch = fetch
        self._key = key
        self._last: Snapshot[K, T] | None = None
        self._whole = False  # the next poll asks for the whole listing, not what changed since

    def relist(self) -> None:
        """The next poll lists everything (no ``update_time``): the view is suspect (built from an
        answer a later one contradicted), so "not modified since" is no answer about it."""
        self._whole = True

    def poll(self, guard: Callable[[Mapping[K, T], Mapping[K, T]], None] | None = None) -> Snapshot[K, T]:
        """``guard(previous items, new items)`` may refuse a new listing by raising (a SlurmError):
        then the previous view stays, as after a failed poll."""
        previous = self._last
        listing = self._fetch(previous.last_update if previous and not self._whole else None)
        self._whole = False  # asked: a guard that finds this answer suspect asks again (relist)
        if listing.unchanged and previous is None:
            raise SlurmMalformed("an 'unchanged' answer with no previous view to be unchanged from")
        if listing.unchanged and previous is not None:
            snapshot = Snapshot(previous.items, previous.last_update, frozenset(), frozenset())
        else:
            items = {self._key(item): item for item in listing.items}
            old: Mapping[K, T] = previous.items if previous else {}
            if guard is not None:
                guard(old, items)
            snapshot = Snapshot(
                items=MappingProxyType(items),
                last_update=listing.last_update,
                changed=frozenset(k for k, v in items.items() if (was := old.get(k)) is not v and was != v),
                removed=frozenset(old.keys() - items.keys()),
            )
        self._last = snapshot
        return snapshot

"""Typed results of the Slurm REST client, and their strict parsers.

The parsers read the fields this project uses from slurmrestd's JSON (data parser
v0.0.43-v0.0.45 share them) and refuse anything wrongly shaped with ``SlurmMalformed``: a
listing we cannot read must never look like an empty cluster. Optional fields that are absent
get neutral defaults; present-but-wrong fields are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from slinky_common import slurmstate
from slurm_sync.slurm.errors import SlurmMalformed

JSON = Mapping[str, Any]
T = TypeVar("T")


# --- field readers ------------------------------------------------------------------------


def _field(obj: JSON, key: str, kind: type | tuple[type, ...], default: Any, what: str) -> Any:
    value = obj.get(key, default)
    # bool is an int in Python; slurmrestd never sends one where a number belongs
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SlurmMalformed(f"{what}: field {key!r} is {type(value).__name__}, expected {_kind_name(kind)}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return "/".join(k.__name__ for k in kinds)


def _str(obj: JSON, key: str, what: str) -> str:
    return _field(obj, key, str, "", what)


def _required_str(obj: JSON, key: str, what: str) -> str:
    if key not in obj:
        raise SlurmMalformed(f"{what}: field {key!r} is missing")
    return _str(obj, key, what)


def _opt_int(obj: JSON, key: str, what: str) -> int | None:
    return _field(obj, key, (int, type(None)), None, what)


def _words(obj: JSON, key: str, what: str, *, required: bool = False) -> tuple[str, ...]:
    """A list of strings; Slurm sends CSV fields as lists, older parsers as one string."""
    if required and key not in obj:
        raise SlurmMalformed(f"{what}: field {key!r} is missing")
    value = _field(obj, key, (list, str), [], what)
    if isinstance(value, str):
        return tuple(part for part in value.split(",") if part)
    if not all(isinstance(item, str) for item in value):
        raise SlurmMalformed(f"{what}: field {key!r} holds a non-string")
    return tuple(value)


def no_val_number(obj: JSON, key: str, what: str) -> int | None:
    """Slurm's ``{set, infinite, number}`` struct (or a bare int): None when unset or infinite."""
    value = _field(obj, key, (dict, int, type(None)), None, what)
    if value is None or isinstance(value, int):
        return value
    number = value.get("number", 0)
    if not isinstance(number, int) or isinstance(number, bool):
        raise SlurmMalformed(f"{what}: field {key!r}.number is not an integer")
    return number if value.get("set", False) and not value.get("infinite", False) else None


def object_of(value: Any, what: str) -> JSON:
    if not isinstance(value, Mapping):
        raise SlurmMalformed(f"{what} is {type(value).__name__}, expected an object")
    return value


def listed(body: JSON, key: str, what: str = "") -> list[Any]:
    """A required list (the body of every listing), its items as they are."""
    what = what or key
    if key not in body:
        raise SlurmMalformed(f"{what}: field {key!r} is missing")
    return list(_field(body, key, list, None, what))


def object_list(body: JSON, key: str, what: str) -> list[JSON]:
    """A required list of objects."""
    return [object_of(item, f"{what}[{index}]") for index, item in enumerate(listed(body, key, what))]


# --- version and ping ---------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


def parse_slurm_version(body: JSON) -> SlurmVersion:
    """``meta.slurm.version`` of any response."""
    meta = object_of(body.get("meta", {}), "meta")
    version = object_of(object_of(meta.get("slurm", {}), "meta.slurm").get("version", {}), "meta.slurm.version")
    try:
        return SlurmVersion(*(int(version[part]) for part in ("major", "minor", "micro")))
    except (KeyError, TypeError, ValueError):
        raise SlurmMalformed(f"meta.slurm.version is not a version: {dict(version)!r}") from None


@dataclass(frozen=True)
class ControllerPing:
    hostname: str
    responding: bool
    primary: bool
    latency_us: int | None
    # "primary"/"backup" where the parser reports it (v0.0.43, v0.0.44); v0.0.45 dropped it
    mode: str | None

    @property
    def pinged(self) -> str:
        return "UP" if self.responding else "DOWN"


@dataclass(frozen=True)
class PingResult:
    controllers: tuple[ControllerPing, ...]
    slurm_version: SlurmVersion

    @property
    def responding(self) -> tuple[ControllerPing, ...]:
        return tuple(c for c in self.controllers if c.responding)


def parse_ping(body: JSON) -> PingResult:
    controllers = []
    for item in object_list(body, "pings", "ping"):
        responding = _field(item, "responding", bool, None, "ping")
        mode = _field(item, "mode", (str, type(None)), None, "ping")
        controllers.append(
            ControllerPing(
                hostname=_str(item, "hostname", "ping"),
                responding=responding,
                primary=_field(item, "primary", bool, False, "ping"),
                latency_us=_opt_int(item, "latency", "ping"),
                mode=mode or None,
            )
        )
    return PingResult(tuple(controllers), parse_slurm_version(body))


# --- nodes --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    name: str
    state: frozenset[str]
    reason: str
    reason_set_by_user: str
    comment: str
    features: tuple[str, ...]
    active_features: tuple[str, ...]
    cpus: int | None
    real_memory: int | None
    alloc_cpus: int | None
    alloc_memory: int | None
    partitions: tuple[str, ...]
    address: str
    hostname: str
    topology: str
    reservation: str = ""  # the reservation the node is in now (slurmrestd's `reservation`)

    @property
    def base_state(self) -> str | None:
        return slurmstate.base_state(self.state)

    @property
    def flags(self) -> frozenset[str]:
        """State words other than the base state (DRAIN, NOT_RESPONDING, ...)."""
        return self.state - set(slurmstate.BASE_STATES)

    @property
    def busy(self) -> bool:
        return slurmstate.is_busy(self.state)

    @property
    def drained(self) -> bool:
        return slurmstate.is_drained(self.state)

    @property
    def draining(self) -> bool:
        return slurmstate.is_draining(self.state)


# Every field parse_node reads: a node listing is decoded into these alone (slurm_sync/slurm/client.py), and
# tests/slurm_sync/test_shapes.py holds parse_node to them.
NODE_FIELDS = (
    "name", "state", "reason", "reason_set_by_user", "comment", "features", "active_features", "cpus", "real_memory",
    "alloc_cpus", "alloc_memory", "partitions", "address", "hostname", "topology", "reservation",
)  # fmt: skip


def parse_node(obj: JSON) -> Node:
    what = f"node {obj.get('name')!r}"
    return Node(
        name=_required_str(obj, "name", what),
        state=slurmstate.normalize(_words(obj, "state", what, required=True)),
        reason=_str(obj, "reason", what),
        reason_set_by_user=_str(obj, "reason_set_by_user", what),
        comment=_str(obj, "comment", what),
        features=_words(obj, "features", what),
        active_features=_words(obj, "active_features", what),
        cpus=_opt_int(obj, "cpus", what),
        real_memory=_opt_int(obj, "real_memory", what),
        alloc_cpus=_opt_int(obj, "alloc_cpus", what),
        alloc_memory=_opt_int(obj, "alloc_memory", what),
        partitions=_words(obj, "partitions", what),
        address=_str(obj, "address", what),
        hostname=_str(obj, "hostname", what),
        topology=_str(obj, "topology", what),
        reservation=_str(obj, "reservation", what),
    )


@dataclass(frozen=True)
class NodeUpdate:
    """A ``POST node/{name}`` body; None leaves a field as it is."""

    state: tuple[str, ...] = ()
    reason: str | None = None
    comment: str | None = None
    features: tuple[str, ...] | None = None
    features_act: tuple[str, ...] | None = None
    topology_str: str | None = None

    # Setting these converges on one result however often it is sent; RESUME, IDLE or a
    # power/reboot request may fail or act twice when repeated, so those are never retried.
    IDEMPOTENT_STATES = frozenset({"DRAIN", "UNDRAIN", "DOWN", "FAIL"})

    @property
    def idempotent(self) -> bool:
        return set(self.state) <= self.IDEMPOTENT_STATES

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if self.state:
            body["state"] = list(self.state)
        for key in ("reason", "comment", "topology_str"):
            if getattr(self, key) is not None:
                body[key] = getattr(self, key)
        for key in ("features", "features_act"):
            if getattr(self, key) is not None:
                body[key] = list(getattr(self, key))
        return body


# --- jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    job_id: int
    name: str
    state: frozenset[str]
    state_reason: str
    nodes: str  # Slurm hostlist expression, e.g. "n[1-3]"; empty while pending
    batch_host: str
    partition: str
    user_name: str
    user_id: int | None
    admin_comment: str
    comment: str
    flags: frozenset[str]
    start_time: int | None
    time_limit_minutes: int | None  # None: unlimited or not set
    end_time: int | None = None  # a running job's expected end (Slurm: start + limit, a year on when unlimited)
    required_nodes: str = ""  # hostlist the job asked for by name (`-w`); empty when none

    @property
    def external(self) -> bool:
        return "EXTERNAL_JOB" in self.flags


# Every field parse_job reads (as NODE_FIELDS for a job listing).
JOB_FIELDS = (
    "job_id", "name", "job_state", "state_reason", "nodes", "batch_host", "partition", "user_name", "user_id",
    "admin_comment", "comment", "flags", "start_time", "time_limit", "end_time", "required_nodes",
)  # fmt: skip


def parse_job(obj: JSON) -> Job:
    what = f"job {obj.get('job_id')!r}"
    job_id = _field(obj, "job_id", int, None, what)
    return Job(
        job_id=job_id,
        name=_str(obj, "name", what),
        state=frozenset(_words(obj, "job_state", what, required=True)),
        state_reason=_str(obj, "state_reason", what),
        nodes=_str(obj, "nodes", what),
        batch_host=_str(obj, "batch_host", what),
        partition=_str(obj, "partition", what),
        user_name=_str(obj, "user_name", what),
        user_id=_opt_int(obj, "user_id", what),
        admin_comment=_str(obj, "admin_comment", what),
        comment=_str(obj, "comment", what),
        flags=frozenset(_words(obj, "flags", what)),
        start_time=no_val_number(obj, "start_time", what),
        time_limit_minutes=no_val_number(obj, "time_limit", what),
        end_time=no_val_number(obj, "end_time", what),
        required_nodes=_str(obj, "required_nodes", what),
    )


@dataclass(frozen=True)
class GresLayout:
    """One kind of generic resource Slurm allocated to a job on a node (``gpu``, type ``gpu.nvidia.com``)."""

    name: str
    type: str
    count: int | None
    index: str  # Slurm's index list, e.g. "1-2" or "0,3"; "" when the GRES has no devices (no File=)


@dataclass(frozen=True)
class NodeLayout:
    """What a job holds on one node (``GET resources/<job>``): abstract cores and GRES devices."""

    node: str
    sockets: int | None
    cores_per_socket: int | None
    core_bitmap: str  # hex, bit i = Slurm's abstract core i of the node ("0xC": cores 2 and 3)
    gres: tuple[GresLayout, ...]


def parse_node_layout(obj: JSON) -> NodeLayout:
    what = f"resource layout of node {obj.get('node')!r}"
    gres = [object_of(g, f"{what}: gres") for g in _field(obj, "gres", list, [], what)]
    return NodeLayout(
        node=_required_str(obj, "node", what),
        sockets=_opt_int(obj, "sockets_per_node", what),
        cores_per_socket=_opt_int(obj, "cores_per_socket", what),
        core_bitmap=_str(obj, "core_bitmap", what),
        gres=tuple(
            GresLayout(
                _required_str(g, "name", what),
                _str(g, "type", what),
                _opt_int(g, "count", what),
                _str(g, "index", what),
            )
            for g in gres
        ),
    )


@dataclass(frozen=True)
class SubmitResult:
    job_id: int
    user_message: str


def parse_submit(body: JSON) -> SubmitResult:
    return SubmitResult(
        job_id=_field(body, "job_id", int, None, "submit response"),
        user_message=_str(body, "job_submit_user_msg", "submit response"),
    )


# --- reservations -------------------------------------------------------------------------


@dataclass(frozen=True)
class Reservation:
    name: str
    node_list: str
    flags: frozenset[str]
    start_time: int | None
    end_time: int | None
    users: str
    accounts: str
    partition: str
    comment: str = ""  # create-time `comment`; REST v0.0.45 does not list it back (then "")


def parse_reservation(obj: JSON) -> Reservation:
    what = f"reservation {obj.get('name')!r}"
    return Reservation(
        name=_required_str(obj, "name", what),
        node_list=_str(obj, "node_list", what),
        flags=frozenset(_words(obj, "flags", what)),
        start_time=no_val_number(obj, "start_time", what),
        end_time=no_val_number(obj, "end_time", what),
        users=_str(obj, "users", what),
        accounts=_str(obj, "accounts", what),
        partition=_str(obj, "partition", what),
        comment=_str(obj, "comment", what),
    )


# --- listings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing(Generic[T]):
    """One listing call. ``unchanged`` means Slurm said nothing changed since ``update_time``
    (then ``items`` is empty and says nothing about the cluster)."""

    items: tuple[T, ...]
    last_update: int | None
    unchanged: bool

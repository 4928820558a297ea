"""Which Slurm clusters to sync, where their slurmrestd is, and a token to talk to it.

One cluster per ``Controller``. Its slurmrestd is the Service of its oldest ``RestApi`` (as
Slinky's operator picks it); a URL override serves runs outside the cluster. Each cluster's client
is bound to the Controller's Slurm cluster name (as the Controller hook writes it into slurm.conf),
so a slurmrestd of another cluster, an override shared by several Controllers say, is refused. The token is our
own short-lived HS256 JWT minted from the cluster's JWT key, so nothing long-lived is stored.
"""

from __future__ import annotations

import binascii
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import jwt

from slinky_common import fields, wellknown
from slinky_common.errors import BadHookRequest, InvalidSpec
from slinky_common.logs import register_secret
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.deletion import DEFAULT_GRACE
from slurm_sync.operator.loop import FULL_REPLAN_INTERVAL, OperatorLoop
from slurm_sync.slurm.client import SlurmClient, WriteBudget
from slurm_sync.slurm.errors import SlurmNoToken

log = logging.getLogger(__name__)

JSON = Mapping[str, Any]


@dataclass(frozen=True)
class ClusterRef:
    namespace: str
    controller: str
    url: str
    key_secret: str
    key_name: str
    cluster_name: str = ""  # the Slurm ClusterName the Controller's slurm.conf carries
    uid: str = ""  # the Controller's uid (for Events about it)

    @property
    def name(self) -> str:
        return f"{self.namespace}/{self.controller}"


def restapi_url(restapi: str, namespace: str) -> str:
    return f"http://{wellknown.restapi_service(restapi)}.{namespace}:{wellknown.SLURMRESTD_PORT}"


def _meta(obj: JSON) -> JSON:
    return obj.get("metadata") or {}


def first_restapi(controller: JSON, restapis: Iterable[JSON]) -> str | None:
    """The oldest RestApi of the controller (ties by name), as Slinky's client map chooses."""
    ns, name = _meta(controller).get("namespace"), _meta(controller).get("name")
    mine = [
        r for r in restapis
        if _meta(r).get("namespace") == ns and ((r.get("spec") or {}).get("controllerRef") or {}).get("name") == name
    ]  # fmt: skip
    mine.sort(key=lambda r: (str(_meta(r).get("creationTimestamp") or ""), str(_meta(r).get("name"))))
    return str(_meta(mine[0]).get("name")) if mine else None


def plan_clusters(
    controllers: Iterable[JSON], restapis: Iterable[JSON], url_override: str | None
) -> tuple[list[ClusterRef], list[str]]:
    """Every Controller we can reach, and why the others are skipped."""
    restapis = list(restapis)
    refs, problems = [], []
    for controller in controllers:
        meta = _meta(controller)
        where = f"Controller {meta.get('namespace')}/{meta.get('name')}"
        restapi = first_restapi(controller, restapis)
        try:
            cluster_name = wellknown.cluster_name(dict(controller))
        except (BadHookRequest, KeyError, TypeError) as exc:
            problems.append(f"{where}: cannot tell its Slurm cluster name ({exc}); nothing is synced for it")
            continue
        try:
            key = fields.jwt_key_ref(fields.spec_of(dict(controller)))
        except InvalidSpec as exc:
            problems.append(f"{where}: {exc}; cannot mint a token")
            continue
        if key is None:
            problems.append(f"{where}: no jwtKeyRef, cannot mint a token")
        elif url_override is None and restapi is None:
            problems.append(f"{where}: no RestApi, no slurmrestd to talk to")
        else:
            url = url_override or restapi_url(str(restapi), str(meta["namespace"]))
            namespace, name, uid = str(meta["namespace"]), str(meta["name"]), str(meta.get("uid") or "")
            refs.append(ClusterRef(namespace, name, url, key.name, key.key, cluster_name, uid))
    return refs, problems


class TokenSource:
    """A JWT for ``user``, re-minted a fifth of its lifetime before expiry or when the key changes."""

    def __init__(self, user: str, lifetime: int, clock: Callable[[], float] = time.time) -> None:
        self.user = user
        self.lifetime = lifetime
        self._clock = clock
        self._lock = threading.Lock()
        self._key: bytes | None = None
        self._version = ""
        self._token: str | None = None
        self._refresh_at = 0.0

    def set_key(self, key: bytes, version: str) -> None:
        with self._lock:
            if key != self._key or version != self._version:
                self._key, self._version, self._token = key, version, None

    def due(self) -> bool:
        """Whether the next call mints a token (none yet, or a fifth of its lifetime left): when the key is
        worth reading again."""
        with self._lock:
            return self._key is None or self._token is None or self._clock() >= self._refresh_at

    def __call__(self) -> str:
        with self._lock:
            if self._key is None:
                raise SlurmNoToken("no JWT key loaded yet")
            now = self._clock()
            if self._token is None or now >= self._refresh_at:
                issued = int(now)
                claims = {"iat": issued, "exp": issued + self.lifetime, "sun": self.user}
                self._token = jwt.encode(claims, self._key, algorithm="HS256")
                register_secret(self._token)
                self._refresh_at = issued + self.lifetime * 4 / 5
            return self._token


class KeyUnusable(Exception):
    """The cluster's JWT key Secret was read, but holds no key we can sign with (the message says why)."""


@dataclass
class ClusterHandle:
    ref: ClusterRef
    tokens: TokenSource
    client: SlurmClient
    loop: OperatorLoop
    key_problem: str = ""  # why the last pass could not use the JWT key ("" when it could): said once
    slurm_read: bool = False  # the last pass read Slurm with the key it had (so that key is still good)

    def close(self) -> None:
        """Once no pass of it runs: its loop's write workers, then its Slurm client."""
        self.loop.close()
        self.client.close()


class Clusters:
    """The live set of clusters: one client, token source and loop each."""

    def __init__(
        self,
        kube: Kube,
        metrics: Metrics,
        user: str,
        lifetime: int,
        slurm_timeout: float,
        propagated_conditions: tuple[str, ...] = (),
        absence_confirm_seconds: float = 5.0,
        deletion_grace: float = DEFAULT_GRACE,
        write_budget: WriteBudget | None = None,
        full_replan_interval: float = FULL_REPLAN_INTERVAL,
    ) -> None:
        """``write_budget``: the leader's fence, for every Slurm client (docs/architecture.md §8)."""
        self.kube = kube
        self.write_budget = write_budget
        self.full_replan_interval = full_replan_interval
        self.absence_confirm_seconds = absence_confirm_seconds
        self.deletion_grace = deletion_grace
        self.propagated_conditions = propagated_conditions
        self.metrics = metrics
        self.user = user
        self.lifetime = lifetime
        self.slurm_timeout = slurm_timeout
        self.handles: dict[str, ClusterHandle] = {}

    def update(self, refs: Iterable[ClusterRef], retire: Callable[[ClusterHandle], None] | None = None) -> None:
        """Add new clusters, drop gone ones, rebuild those whose URL or key reference changed. ``retire``
        gets each handle dropped (the service closes its client once the pass using it has ended);
        without it, its client is closed at once."""
        wanted = {ref.name: ref for ref in refs}
        for name in list(self.handles):
            if name not in wanted or self.handles[name].ref != wanted[name]:
                handle = self.handles.pop(name)
                if retire is None:
                    handle.close()
                else:
                    retire(handle)
                log.info("cluster %s: removed", name)
        for name, ref in wanted.items():
            if name not in self.handles:
                tokens = TokenSource(self.user, self.lifetime)
                client = SlurmClient(
                    ref.url,
                    tokens,
                    timeout=self.slurm_timeout,
                    cluster=ref.cluster_name,
                    write_budget=self.write_budget,
                    token_origin=f"JWT key Secret {ref.namespace}/{ref.key_secret} (key {ref.key_name!r})",
                )
                loop = OperatorLoop(
                    name,
                    ref.namespace,
                    ref.controller,
                    client,
                    self.kube,
                    self.metrics,
                    propagated_conditions=self.propagated_conditions,
                    absence_confirm_seconds=self.absence_confirm_seconds,
                    deletion_grace=self.deletion_grace,
                    full_replan_interval=self.full_replan_interval,
                )
                self.handles[name] = ClusterHandle(ref, tokens, client, loop)
                log.info("cluster %s: slurmrestd at %s, Slurm cluster %r", name, ref.url, ref.cluster_name)

    def load_key(self, handle: ClusterHandle) -> None:
        """Read the JWT key when a token is to be minted from it (the first, then one a fifth of its lifetime
        before the last expires) and after a pass that could not read Slurm (slurmctld may have a new key); a
        new resourceVersion re-mints the token. Not every pass, and not from a watch (docs/architecture.md
        §4.8 says why). ``KeyUnusable`` when the Secret lacks the key or the key is empty."""
        if handle.slurm_read and not handle.tokens.due():
            return
        ref = handle.ref
        where = f"JWT key Secret {ref.namespace}/{ref.key_secret}"
        try:
            secret = self.kube.read_secret_key(ref.namespace, ref.key_secret, ref.key_name)
        except KeyError:
            raise KeyUnusable(f"{where} has no key {ref.key_name!r}") from None
        except binascii.Error as exc:
            raise KeyUnusable(f"{where}: key {ref.key_name!r} is not base64 ({exc})") from None
        if not secret.data:
            raise KeyUnusable(
                f"{where}: key {ref.key_name!r} is empty; slurmctld's JWT key (jwt_hs256.key) belongs there"
            )
        handle.tokens.set_key(secret.data, secret.resource_version)

    def close(self) -> None:
        for handle in self.handles.values():
            handle.close()
        self.handles.clear()

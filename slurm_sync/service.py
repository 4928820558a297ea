"""The slurm_sync service: discover clusters, run a pass over each, serve health and metrics.

A failing cluster never stops the others: each pass is isolated, and its outcome feeds
readiness, which is false before the first successful pass and while any cluster cannot be read,
is served by a slurmrestd of another Slurm cluster, or has a write Slurm refuses or fails (so an
operator sees at once that drains are on hold); ``/readyz`` names each failing cluster and why. A
wrong cluster is also a Warning Event on the Controller. The bridge's users' mistakes (an unknown
partition, an unmapped Slurm node) are logged and counted (slurm_sync_bridge_user_errors_total), not
unready.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.events import Events, controller_ref
from slurm_sync.kube import Kube, describe_error
from slurm_sync.metrics import Metrics
from slurm_sync.operator.deletion import DEFAULT_GRACE
from slurm_sync.operator.discovery import ClusterHandle, Clusters, plan_clusters
from slurm_sync.operator.loop import FULL_REPLAN_INTERVAL, PassResult, Tally, release_retained_claims
from slurm_sync.operator.view import read_nodeset
from slurm_sync.slurm.client import WriteBudget
from slurm_sync.wake import Wakeup, run_passes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    namespaces: tuple[str, ...] = ()  # the namespaces to watch; empty: every namespace
    poll_interval: float = 10.0
    slurm_url: str | None = None
    token_user: str = "slurm"
    token_lifetime: int = 300
    slurm_timeout: float = 10.0
    bind: str = "127.0.0.1:8081"
    mode: str = "operator"  # operator | bridge | both
    # Node condition types whose True conditions explain a cordon in the drain reason (Slinky's flag)
    propagated_node_conditions: tuple[str, ...] = ()
    # A Slurm node is absent once Slurm's not-found answer holds on a later pass this much later
    absence_confirm_seconds: float = 5.0
    # Jobs pending in a deleting NodeSet's partition are cancelled on purpose this long after it is reported
    nodeset_deletion_grace: float = DEFAULT_GRACE
    # Every pod is planned again this often, changed or not (a safety net under planning what changed)
    full_replan_interval: float = FULL_REPLAN_INTERVAL

    @property
    def operator(self) -> bool:
        return self.mode in ("operator", "both")


Outcome = tuple[bool, bool, str]  # (ready, ok, why not ready)


class Health:
    """Readiness: a successful pass happened, and no cluster is failing now (each with its reason)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._passed = False
        self._failing: dict[str, str] = {}

    def record(self, failing: Mapping[str, str]) -> None:
        """``failing``: name -> why (may be "")."""
        with self._lock:
            self._failing = dict(failing)
            self._passed = self._passed or not self._failing

    def ready(self) -> tuple[bool, str]:
        with self._lock:
            failing = "; ".join(f"{name}: {why}" if why else name for name, why in sorted(self._failing.items()))
            if not self._passed:
                return False, "no successful pass yet" + (f"; failing: {failing}" if failing else "")
            if self._failing:
                return False, f"failing: {failing}"
            return True, "ok"


class Readiness(Protocol):
    def ready(self) -> tuple[bool, str]: ...


class Service:
    """All of slurm_sync's work and the state it keeps; under leader election, one per term of
    leadership (slurm_sync/replica.py), so nothing outlives a term."""

    def __init__(
        self,
        config: Config,
        kube: Kube,
        metrics: Metrics,
        bridge: BridgeLoop | None = None,
        write_budget: WriteBudget | None = None,
        wakeup: Wakeup | None = None,
    ) -> None:
        self.config = config
        self.wakeup = wakeup or Wakeup()  # set by the watches (slurm_sync/cache.py) when Kubernetes changes
        self.kube = kube
        self.metrics = metrics
        self.bridge = bridge
        self.health = Health()
        self.clusters = Clusters(
            kube,
            metrics,
            config.token_user,
            config.token_lifetime,
            config.slurm_timeout,
            config.propagated_node_conditions,
            config.absence_confirm_seconds,
            config.nodeset_deletion_grace,
            write_budget,
            config.full_replan_interval,
        )
        self.events = Events(kube)

    def run_pass(self) -> bool:
        """One pass over every cluster and the bridge; True only if every one did all it meant to.

        Readiness is narrower: only what could not be read (Slurm, Kubernetes) makes us unready;
        a refused write or a user's mistake is logged and counted, and fails `--once`.
        """
        outcomes = self._operator_pass() if self.config.operator else {}
        if self.bridge is not None:
            outcomes["bridge"] = self._bridge_pass(self.bridge)
        self.health.record({name: why for name, (ready, _, why) in outcomes.items() if not ready})
        return all(ok for _, ok, _ in outcomes.values())

    def _bridge_pass(self, bridge: BridgeLoop) -> Outcome:
        """(ready, ok, why) of one bridge pass."""
        try:
            result = bridge.run_pass()
        except Exception:  # a bug must not stop the operator side
            log.exception("bridge: pass crashed")
            return False, False, "pass crashed"
        level = logging.INFO if result.ok else logging.WARNING
        outcome = "ok" if result.ok else "failed" if not result.ready else f"done with {len(result.errors)} problem(s)"
        log.log(
            level,
            "bridge: pass %s (kube writes %d, slurm writes %d)%s",
            outcome,
            result.kube_writes,
            result.slurm_writes,
            "; " + "; ".join(result.errors) if result.errors else "",
        )
        return result.ready, result.ok, "; ".join(result.unready)

    def _operator_pass(self) -> dict[str, Outcome]:
        """(ready, ok, why) per cluster (or for "discovery" when the clusters cannot be listed)."""
        try:
            controllers = self._list_custom("controllers")
            restapis = self._list_custom("restapis")
        except Exception as exc:  # an ApiException, or the apiserver unreachable (MaxRetryError) ...
            log.error("discovery failed: %s", describe_error(exc))
            return {"discovery": (False, False, describe_error(exc))}
        refs, problems = plan_clusters(controllers, restapis, self.config.slurm_url)
        for problem in problems:
            log.warning("skipping %s", problem)
        self.clusters.update(refs)
        outcomes = {name: self._sync_one(handle) for name, handle in sorted(self.clusters.handles.items())}
        outcomes.update(self._release_orphaned_claims())
        return outcomes

    def _list_custom(self, plural: str) -> list[dict]:
        """Our CRs of one kind in the watched namespaces (one cluster-wide list when watching all)."""
        if not self.config.namespaces:
            return self.kube.list_custom(plural, None)
        return [obj for namespace in self.config.namespaces for obj in self.kube.list_custom(plural, namespace)]

    def _release_orphaned_claims(self) -> dict[str, Outcome]:
        """Retained PVCs of deleted NodeSets whose Controller is gone (no cluster pass covers them)."""
        try:
            nodesets = [read_nodeset(o) for o in self._list_custom("nodesets")]
        except Exception as exc:  # as in discovery: nothing is known, nothing is released
            log.error("listing nodesets failed: %s", describe_error(exc))
            return {"nodesets": (False, False, f"list nodesets: {describe_error(exc)}")}
        covered = {(h.ref.namespace, h.ref.controller) for h in self.clusters.handles.values()}
        tally = Tally()
        try:
            for nodeset in nodesets:
                if nodeset.releases_claims and (nodeset.namespace, nodeset.controller) not in covered:
                    release_retained_claims(self.kube, nodeset, tally, self.events)
        except Exception:  # a bug or a lost apiserver must not stop the loop
            log.exception("releasing claims of orphaned nodesets crashed")
            return {"nodesets": (False, False, "releasing claims crashed")}
        return {"orphaned nodesets": (True, False, "")} if tally.errors else {}

    def _sync_one(self, handle: ClusterHandle) -> Outcome:
        """(ready, ok, why) of one cluster's pass."""
        name = handle.ref.name
        try:
            self.clusters.load_key(handle)
        except Exception as exc:  # the Secret unreadable (or the apiserver unreachable): no pass
            log.error("cluster %s: JWT key Secret %s: %s", name, handle.ref.key_secret, describe_error(exc))
            return False, False, f"JWT key Secret {handle.ref.key_secret}: {describe_error(exc)}"
        try:
            result = handle.loop.run_pass()
        except Exception:  # one cluster's bug must not stop the others
            log.exception("cluster %s: pass crashed", name)
            return False, False, "pass crashed"
        level = logging.INFO if result.ok else logging.WARNING
        log.log(
            level,
            "cluster %s: pass %s (kube writes %d, slurm writes %d)%s",
            name,
            "ok" if result.ok else "failed",
            result.kube_writes,
            result.slurm_writes,
            "; " + "; ".join(result.errors) if result.errors else "",
        )
        self._report_wrong_cluster(handle, result)
        self._report_unreachable(handle, result)
        return result.ready, result.ok, f"Slurm cluster {handle.ref.cluster_name}: " + "; ".join(result.unready)

    def _report_wrong_cluster(self, handle: ClusterHandle, result: PassResult) -> None:
        """A Warning Event on the Controller while its slurmrestd serves another Slurm cluster."""
        if result.wrong_cluster is None:
            return
        ref = handle.ref
        controller = controller_ref(ref.namespace, ref.controller, ref.uid)
        self.events.warn(controller, "WrongSlurmCluster", result.wrong_cluster)

    def _report_unreachable(self, handle: ClusterHandle, result: PassResult) -> None:
        """A Warning Event on the Controller while its Slurm cannot be read (wrong cluster: see above)."""
        if result.slurm_ok or result.wrong_cluster is not None:
            return
        ref = handle.ref
        controller = controller_ref(ref.namespace, ref.controller, ref.uid)
        self.events.warn(
            controller,
            "SlurmUnreadable",
            f"slurm_sync cannot read Slurm cluster {ref.cluster_name}: {'; '.join(result.unready)}. Nothing "
            "that depends on Slurm's state is written until it answers; check the RestApi pod, slurmctld "
            "and the JWT key.",
            "Read",
        )

    def run_forever(self, stop: threading.Event) -> None:
        """Pass after pass until ``stop``, each at most the poll interval after the last and sooner when
        the watches see a change (slurm_sync/wake.py); nothing a pass raises ends the service (it stays
        unready)."""
        run_passes(self._run_pass_guarded, self.wakeup, self.config.poll_interval, stop)

    def _run_pass_guarded(self) -> None:
        try:
            self.run_pass()
        except Exception:
            log.exception("pass crashed")
            self.health.record({"pass": "crashed"})

    def close(self) -> None:
        self.clusters.close()
        if self.bridge is not None:
            self.bridge.slurm.close()


def health_server(bind: str, health: Readiness, metrics: Metrics) -> ThreadingHTTPServer:
    """``/healthz``, ``/readyz`` and ``/metrics`` on ``host:port`` (serve_forever in a thread)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif self.path == "/readyz":
                ok, why = health.ready()
                self._send(200 if ok else 503, why.encode() + b"\n", "text/plain")
            elif self.path == "/metrics":
                self._send(200, generate_latest(metrics.registry), CONTENT_TYPE_LATEST)
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("health %s", format % args)

    host, _, port = bind.rpartition(":")
    return ThreadingHTTPServer((host.strip("[]") or "127.0.0.1", int(port)), Handler)

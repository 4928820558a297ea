"""The slurm_sync service: discover clusters, run a pass over each, serve health and metrics.

A failing cluster never stops the others, nor delays them: each cluster's passes, and the bridge's,
run on a worker of their own (slurm_sync/runner.py). Their outcomes feed readiness, which is false
before the first successful pass and while any cluster cannot be read, is served by a slurmrestd of
another Slurm cluster, or has a write Slurm refuses or fails (so an operator sees at once that drains
are on hold); and, without waiting for a pass to end, while a call to slurmrestd or the API server has
waited ``HUNG_AFTER`` seconds for its answer or a pass runs past its next start (slurm_sync/inflight.py).
``/readyz`` names each failing cluster and why. A wrong cluster is also a Warning Event on the
Controller. The bridge's users' mistakes (an unknown partition, an unmapped Slurm node) are logged and
counted (slurm_sync_bridge_user_errors_total), not unready.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from kubernetes.client.exceptions import ApiException
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from slurm_sync.bridge.loop import BridgeLoop
from slurm_sync.events import Events, controller_ref
from slurm_sync.kube import Kube, describe_error
from slurm_sync.metrics import Metrics
from slurm_sync.operator import unsynced
from slurm_sync.operator.deletion import DEFAULT_GRACE
from slurm_sync.operator.discovery import ClusterHandle, Clusters, KeyUnusable, plan_clusters
from slurm_sync.operator.loop import FULL_REPLAN_INTERVAL, PassResult, release_retained_claims
from slurm_sync.operator.steps import Tally
from slurm_sync.operator.view import NodeSetView, read_nodeset
from slurm_sync.runner import Outcome, Runner, overdue_after
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
    # A read of the API server at each pass (Kube.heartbeat), so that readiness names one that stopped
    # answering while every read is a watch's; off under leader election, whose Lease renewals are that check
    kube_heartbeat: bool = True

    @property
    def operator(self) -> bool:
        return self.mode in ("operator", "both")


class Health:
    """Readiness: a successful pass happened, and nothing is failing now (each with its reason): what the
    last pass recorded, and what ``live`` finds failing at the time of asking (the workers' parts; ``passed``:
    each of them has had a successful pass)."""

    def __init__(self, live: Callable[[], Mapping[str, str]] = dict, passed: Callable[[], bool] = lambda: True) -> None:
        self._lock = threading.Lock()
        self._passed = False
        self._failing: dict[str, str] = {}
        self._live = live
        self._parts_passed = passed

    def record(self, failing: Mapping[str, str]) -> None:
        """``failing``: name -> why (may be "")."""
        with self._lock:
            self._failing = dict(failing)
            self._passed = self._passed or not self._failing

    def ready(self) -> tuple[bool, str]:
        live, parts_passed = self._live(), self._parts_passed()
        with self._lock:
            parts = {**self._failing, **live}
            failing = "; ".join(f"{name}: {why}" if why else name for name, why in sorted(parts.items()))
            if not (self._passed and parts_passed):
                return False, "no successful pass yet" + (f"; failing: {failing}" if failing else "")
            if parts:
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
        self.health = Health(self._failing_now, lambda: all(runner.passed for runner in self._runners()))
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
        # Each cluster's handle and its worker. Replaced whole by the loop's thread, never changed in place:
        # readiness (the health server's threads) reads it at any time.
        self._clusters: dict[str, tuple[ClusterHandle, Runner]] = {}
        # Workers of clusters dropped or rebuilt by discovery whose last pass may still run (waited for at
        # close; no successor starts before it ends; their NodeSets are not "orphaned" meanwhile).
        self._retiring: list[tuple[ClusterHandle, Runner]] = []
        self._bridge = Runner("bridge", partial(self._bridge_pass, bridge), bridge.slurm.calls) if bridge else None
        # The objects last told as never synced by Metacontroller (slurm_sync/operator/unsynced.py).
        self._unsynced: frozenset[str] = frozenset()
        self._loop_started: float | None = None  # when the loop's own part of the pass (discovery) started

    def run_pass(self, wait: bool = True) -> bool:
        """One pass over every cluster and the bridge, each on its worker; True only if every one did all it
        meant to. ``wait`` False (the service's loop): the workers' passes are started, not waited for, and
        report to readiness when they end; a worker still in a pass runs another right after it.

        Readiness is narrower: only what could not be read (Slurm, Kubernetes) makes us unready;
        a refused write or a user's mistake is logged and counted, and fails `--once`.
        """
        self._loop_started = time.monotonic()
        try:
            outcomes = self._heartbeat() | (self._operator_pass() if self.config.operator else {})
        finally:
            self._loop_started = None
        self.health.record({name: why for name, (ready, _, why) in outcomes.items() if not ready})
        started = [runner.request() for runner in self._runners()]
        ended = [future.result() for future in started] if wait else []
        return all(ok for _, ok, _ in [*outcomes.values(), *ended])

    def _heartbeat(self) -> dict[str, Outcome]:
        """(ready, ok, why) of "kubernetes" when the API server does not answer the pass's heartbeat (any
        answer, an error status too, says it is there: what it refuses, the watches' reads name)."""
        if not self.config.kube_heartbeat:
            return {}
        try:
            self.kube.heartbeat()
        except ApiException:
            return {}
        except Exception as exc:  # the apiserver unreachable, a timeout
            log.error("kubernetes: the API server does not answer: %s", describe_error(exc))
            return {"kubernetes": (False, False, describe_error(exc))}
        return {}

    def _runners(self) -> list[Runner]:
        return [runner for _, runner in self._clusters.values()] + ([self._bridge] if self._bridge else [])

    def _failing_now(self) -> dict[str, str]:
        """What fails at the time of asking: each worker's problem (a call in flight too long, a pass past
        its time, its last pass's reason), the loop's own part (discovery) past its time, and a Kubernetes
        call in flight too long."""
        overdue = overdue_after(self.config.poll_interval)
        failing = {runner.name: runner.problem(overdue) for runner in self._runners()}
        started = self._loop_started
        if started is not None and (running := time.monotonic() - started) > overdue:
            failing["discovery"] = f"running for {running:.0f} s"
        failing["kubernetes"] = self.kube.calls.hung()
        return {name: why for name, why in failing.items() if why}

    def _retire(self, handle: ClusterHandle) -> None:
        """A handle discovery dropped: its worker starts no pass, and its client is closed once the pass
        running now has ended (closed under it, the pass would fail half way, "pass crashed")."""
        entry = self._clusters.get(handle.ref.name)
        if entry is None or entry[0] is not handle:  # no worker ever ran it
            handle.close()
            return
        self._retiring.append(entry)
        entry[1].close(wait=False, then=handle.close)

    def _sync_runners(self) -> None:
        """A worker for each cluster handle (a new one for a handle built anew, starting once the one it
        replaces has ended its pass); none for a cluster gone (retired by ``Clusters.update``)."""
        self._retiring = [(handle, runner) for handle, runner in self._retiring if runner.busy]
        clusters = {}
        for name, handle in self.clusters.handles.items():
            entry = self._clusters.get(name)
            if entry is None or entry[0] is not handle:
                before = [runner for old, runner in self._retiring if old.ref.name == name]  # the last retired
                after = before[-1] if before else None
                entry = (handle, Runner(name, partial(self._sync_one, handle), handle.client.calls, after=after))
            clusters[name] = entry
        self._clusters = clusters

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
        if result.follow_up is not None:
            self.wakeup.set_after(result.follow_up)
        return result.ready, result.ok, "; ".join(result.unready)

    def _operator_pass(self) -> dict[str, Outcome]:
        """Discovery (its clusters' workers made or dropped) and what no cluster's pass covers: (ready, ok,
        why) of "discovery" when the clusters cannot be listed, of "nodesets" for orphaned NodeSets."""
        try:
            controllers = self._list_custom("controllers")
            restapis = self._list_custom("restapis")
        except Exception as exc:  # an ApiException, or the apiserver unreachable (MaxRetryError) ...
            log.error("discovery failed: %s", describe_error(exc))
            return {"discovery": (False, False, describe_error(exc))}
        refs, problems = plan_clusters(controllers, restapis, self.config.slurm_url)
        for problem in problems:
            log.warning("skipping %s", problem)
        self.clusters.update(refs, self._retire)
        self._sync_runners()
        return self._nodeset_chores(controllers)

    def _nodeset_chores(self, controllers: list[dict]) -> dict[str, Outcome]:
        """What needs every NodeSet, not a cluster's: objects Metacontroller never synced (told), retained
        PVCs of NodeSets whose Controller is gone (released)."""
        try:
            nodesets = self._list_custom("nodesets")
            views = [read_nodeset(o) for o in nodesets]
        except Exception as exc:  # as in discovery: nothing is known, nothing is released
            log.error("listing nodesets failed: %s", describe_error(exc))
            return {"nodesets": (False, False, f"list nodesets: {describe_error(exc)}")}
        now = int(time.time())
        found = [*unsynced.unsynced("Controller", controllers, now), *unsynced.unsynced("NodeSet", nodesets, now)]
        self._unsynced = unsynced.tell(self.events, found, self._unsynced)
        return self._release_orphaned_claims(views)

    def _list_custom(self, plural: str) -> list[dict]:
        """Our CRs of one kind in the watched namespaces (one cluster-wide list when watching all)."""
        if not self.config.namespaces:
            return self.kube.list_custom(plural, None)
        return [obj for namespace in self.config.namespaces for obj in self.kube.list_custom(plural, namespace)]

    def _release_orphaned_claims(self, nodesets: list[NodeSetView]) -> dict[str, Outcome]:
        """Retained PVCs of deleted NodeSets whose Controller is gone (no cluster pass covers them)."""
        handles = [*self.clusters.handles.values(), *(h for h, runner in self._retiring if runner.busy)]
        covered = {(h.ref.namespace, h.ref.controller) for h in handles}  # a retiring pass may still release them
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
        except Exception as exc:  # the Secret unreadable or unusable (or the apiserver unreachable): no pass
            why = (
                str(exc)
                if isinstance(exc, KeyUnusable)
                else f"JWT key Secret {handle.ref.key_secret}: {describe_error(exc)}"
            )
            level = logging.DEBUG if why == handle.key_problem else logging.ERROR  # said once while it lasts
            log.log(level, "cluster %s: %s; nothing is synced for it", name, why)
            handle.key_problem = why
            return False, False, why
        handle.key_problem = ""
        handle.slurm_read = False
        try:
            result = handle.loop.run_pass()
        except Exception:  # one cluster's bug must not stop the others
            log.exception("cluster %s: pass crashed", name)
            return False, False, "pass crashed"
        handle.slurm_read = result.slurm_ok
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
        if result.follow_up is not None:
            self.wakeup.set_after(result.follow_up)
        self._report_wrong_cluster(handle, result)
        self._report_unreachable(handle, result)
        return result.ready, result.ok, f"Slurm cluster {handle.ref.cluster_name}: " + "; ".join(result.unready)

    def _report_wrong_cluster(self, handle: ClusterHandle, result: PassResult) -> None:
        """A Warning Event on the Controller while its slurmrestd serves another Slurm cluster."""
        if result.wrong_cluster is None:
            return
        ref = handle.ref
        controller = controller_ref(ref.namespace, ref.controller, ref.uid)
        handle.loop.events.warn(controller, "WrongSlurmCluster", result.wrong_cluster)

    def _report_unreachable(self, handle: ClusterHandle, result: PassResult) -> None:
        """A Warning Event on the Controller while its Slurm cannot be read (wrong cluster: see above)."""
        if result.slurm_ok or result.wrong_cluster is not None:
            return
        ref = handle.ref
        controller = controller_ref(ref.namespace, ref.controller, ref.uid)
        handle.loop.events.warn(  # the cluster's own (passes of clusters run side by side)
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
            self.run_pass(wait=False)
        except Exception:
            log.exception("pass crashed")
            self.health.record({"pass": "crashed"})

    def close(self) -> None:
        """After the passes running now end (a term's writes end before its Lease is released)."""
        for runner in [*self._runners(), *(runner for _, runner in self._retiring)]:
            runner.close(wait=True)
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

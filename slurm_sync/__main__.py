"""``python -m slurm_sync``: every setting is a flag, with an environment variable as its default."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import overload

from kubernetes import client, config

from hooks import names
from slurm_sync import logs
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop, token_file
from slurm_sync.cache import IDLE_SECONDS, CachedKube, KubeCache
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.operator.deletion import DEFAULT_GRACE
from slurm_sync.operator.discovery import TokenSource
from slurm_sync.operator.loop import FULL_REPLAN_INTERVAL
from slurm_sync.service import Config, Service, health_server
from slurm_sync.slurm.client import SlurmClient
from slurm_sync.wake import Wakeup

log = logging.getLogger("slurm_sync")
ENV_PREFIX = "SLURM_SYNC_"


@overload
def _env(name: str, default: str) -> str: ...
@overload
def _env(name: str, default: None = None) -> str | None: ...
def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


class _HelpWithEnv(argparse.ArgumentDefaultsHelpFormatter):
    """--help names each flag's environment variable (SLURM_SYNC_<FLAG>) and its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action) or ""
        if not action.option_strings or action.dest == "help":
            return text
        return f"{text} [env {ENV_PREFIX}{action.dest.upper()}]".lstrip()


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="slurm-sync",
        description="Keep Slurm and Kubernetes in step (Slinky operator side).",
        formatter_class=_HelpWithEnv,
    )
    p.add_argument(
        "--namespace", default=_env("NAMESPACE", ""), help="comma-separated namespaces to watch (empty: all)"
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        default=float(_env("POLL_INTERVAL", "10")),
        help="seconds between passes at the latest (a change Kubernetes reports starts one at once)",
    )
    p.add_argument(
        "--full-replan-interval",
        type=float,
        default=float(_env("FULL_REPLAN_INTERVAL", str(FULL_REPLAN_INTERVAL))),
        help="seconds between passes that plan every pod again, whether or not anything changed",
    )
    p.add_argument(
        "--slurm-url", default=_env("SLURM_URL"), help="slurmrestd URL for every cluster (running outside the cluster)"
    )
    p.add_argument("--token-user", default=_env("TOKEN_USER", "slurm"), help="Slurm user in the minted JWT")
    p.add_argument(
        "--token-lifetime", type=int, default=int(_env("TOKEN_LIFETIME", "300")), help="JWT lifetime in seconds"
    )
    p.add_argument(
        "--slurm-timeout", type=float, default=float(_env("SLURM_TIMEOUT", "10")), help="slurmrestd request timeout"
    )
    p.add_argument("--bind", default=_env("BIND", "127.0.0.1:8081"), help="host:port for /healthz, /readyz, /metrics")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"), help="DEBUG, INFO, WARNING, ERROR")
    p.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=_env("LOG_FORMAT", "json"),
        help="json lines, or text for a terminal",
    )
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")),
        help="also $KUBECONFIG; unset: in-cluster, else ~/.kube/config",
    )
    p.add_argument(
        "--mode",
        choices=("operator", "bridge", "both"),
        default=_env("MODE", "operator"),
        help="operator: Slinky operator side; bridge: slurm-bridge loop against --slurm-url; both",
    )
    p.add_argument(
        "--token-file", default=_env("TOKEN_FILE"), help="bridge: file holding the Slurm JWT (read on every request)"
    )
    p.add_argument(
        "--jwt-key-file", default=_env("JWT_KEY_FILE"), help="bridge: HS256 key to mint tokens for --token-user"
    )
    p.add_argument(
        "--managed-namespaces",
        default=_env("MANAGED_NAMESPACES", "slurm-bridge"),
        help="bridge: comma-separated namespaces whose pods Slurm schedules",
    )
    p.add_argument(
        "--scheduler-name",
        default=_env("SCHEDULER_NAME", names.BRIDGE_SCHEDULER_NAME),
        help="bridge: pods with this schedulerName are ours; also the managed-node taint value",
    )
    p.add_argument(
        "--job-list-interval",
        type=float,
        default=float(_env("JOB_LIST_INTERVAL", "30")),
        help="bridge: seconds between full job listings (orphan jobs; adoption after a crash)",
    )
    p.add_argument(
        "--propagated-node-conditions",
        default=_env("PROPAGATED_NODE_CONDITIONS", ""),
        help="comma-separated Node condition types whose True conditions become the drain reason of a cordoned Node",
    )
    p.add_argument(
        "--absence-confirm-seconds",
        type=float,
        default=float(_env("ABSENCE_CONFIRM_SECONDS", "5")),
        help="a Slurm node or job is gone only when Slurm's not-found answer holds on a later pass this much later",
    )
    p.add_argument(
        "--nodeset-deletion-grace",
        type=float,
        default=float(_env("NODESET_DELETION_GRACE", str(DEFAULT_GRACE))),
        help="seconds jobs pending in a deleting NodeSet's partition get before they are cancelled on purpose",
    )
    p.add_argument(
        "--cluster-name",
        default=_env("CLUSTER_NAME"),
        help="bridge: the Slurm cluster --slurm-url must serve (default: the first answer's, then pinned)",
    )
    p.add_argument(
        "--once",
        action="store_true",
        default=_env("ONCE", "") == "1",
        help="one pass, then exit (0 = every cluster ok)",
    )
    return p.parse_args(argv)


def kube_client(kubeconfig: str | None) -> client.ApiClient:
    """Standard loading: an explicit kubeconfig, else in-cluster, else the default kubeconfig; then
    one request to prove the API server answers. Either failing exits with one line saying what to
    fix rather than a traceback."""
    try:
        if kubeconfig:
            api = config.new_client_from_config(config_file=kubeconfig)
        else:
            try:
                config.load_incluster_config()
                api = client.ApiClient()
            except config.ConfigException:
                api = config.new_client_from_config()
    except (config.ConfigException, OSError) as err:
        where = kubeconfig or "~/.kube/config (no in-cluster service account either)"
        raise SystemExit(
            f"slurm-sync: cannot load a Kubernetes configuration from {where}: {err}; "
            "set --kubeconfig (or SLURM_SYNC_KUBECONFIG / KUBECONFIG), or run in a pod"
        ) from None
    check_api(api)
    return api


def check_api(api: client.ApiClient) -> None:
    """Ask the API server its version once at start, so a wrong address or credential is one line
    naming what to fix, not a stream of retries; after the start, failures are per pass."""
    urllib3_log = logging.getLogger("urllib3.connectionpool")
    level = urllib3_log.level
    urllib3_log.setLevel(logging.ERROR)  # its retry warnings would repeat the one line below
    try:
        client.VersionApi(api).get_code(_request_timeout=10)
    except Exception as err:  # any failure here means the same: that API server cannot be used
        raise SystemExit(
            f"slurm-sync: cannot reach the Kubernetes API at {api.configuration.host}: "
            f"{type(err).__name__}: {_first_line(err)}; check --kubeconfig (or SLURM_SYNC_KUBECONFIG / "
            "KUBECONFIG), its server address and credentials, and that the API server runs"
        ) from None
    finally:
        urllib3_log.setLevel(level)


def _first_line(err: Exception) -> str:
    return (str(err).strip().splitlines() or [""])[0][:300]


def kube_reader(api: client.ApiClient, metrics: Metrics, wakeup: Wakeup, args: argparse.Namespace) -> Kube:
    """One pass (--once) lists what it reads; the service watches it (docs/architecture.md §4.8), and a
    collection no pass read for a while (its cluster went away) stops being watched."""
    if args.once:
        return Kube(api, metrics.count_kube_write)
    cache = KubeCache(wakeup.set, idle_seconds=max(IDLE_SECONDS, 3 * args.poll_interval))
    return CachedKube(api, metrics.count_kube_write, cache=cache)


def bridge_loop(args: argparse.Namespace, kube: Kube, metrics: Metrics) -> BridgeLoop:
    """The bridge talks to one Slurm: --slurm-url with --token-file, or a key to mint tokens from."""
    if not args.slurm_url:
        raise SystemExit("--mode bridge needs --slurm-url")
    if args.token_file:
        tokens = token_file(args.token_file)
    elif args.jwt_key_file:
        source = TokenSource(args.token_user, args.token_lifetime)
        with open(args.jwt_key_file, "rb") as handle:
            source.set_key(handle.read(), "file")
        tokens = source
    else:
        raise SystemExit("--mode bridge needs --token-file or --jwt-key-file")
    namespaces = [n.strip() for n in args.managed_namespaces.split(",") if n.strip()]
    slurm = SlurmClient(args.slurm_url, tokens, timeout=args.slurm_timeout, cluster=args.cluster_name or None)
    return BridgeLoop(
        slurm,
        BridgeKube(kube, metrics.count_kube_write),
        metrics,
        namespaces,
        args.scheduler_name,
        args.job_list_interval,
        absence_confirm_seconds=args.absence_confirm_seconds,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level, kind=args.log_format)
    metrics = Metrics()
    cfg = Config(
        namespaces=tuple(n.strip() for n in args.namespace.split(",") if n.strip()),
        poll_interval=args.poll_interval,
        slurm_url=args.slurm_url or None,
        token_user=args.token_user,
        token_lifetime=args.token_lifetime,
        slurm_timeout=args.slurm_timeout,
        bind=args.bind,
        mode=args.mode,
        propagated_node_conditions=tuple(t.strip() for t in args.propagated_node_conditions.split(",") if t.strip()),
        absence_confirm_seconds=args.absence_confirm_seconds,
        nodeset_deletion_grace=args.nodeset_deletion_grace,
        full_replan_interval=args.full_replan_interval,
    )
    wakeup = Wakeup()
    kube = kube_reader(kube_client(args.kubeconfig), metrics, wakeup, args)
    bridge = bridge_loop(args, kube, metrics) if args.mode in ("bridge", "both") else None
    service = Service(cfg, kube, metrics, bridge, wakeup)
    try:
        if args.once:
            return 0 if service.run_pass() else 1
        server = health_server(cfg.bind, service.health, metrics)
        threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        log.info("serving health and metrics on %s; polling every %ss", cfg.bind, cfg.poll_interval)
        service.run_forever(stop)
        server.shutdown()
        return 0
    finally:
        service.close()
        if isinstance(kube, CachedKube):
            kube.cache.close()


if __name__ == "__main__":
    sys.exit(main())

"""``python -m slurm_sync``: every setting is a flag, with an environment variable as its default."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import urllib.parse
from collections.abc import Callable, Sequence
from http.server import ThreadingHTTPServer
from typing import Final, NoReturn, TypeVar, overload

from kubernetes import client, config

from slinky_common import logs, names
from slurm_sync.bridge.kube import BridgeKube
from slurm_sync.bridge.loop import BridgeLoop, token_file
from slurm_sync.bridge.token import DEFAULT_KEY, REFRESH_SECONDS, SecretToken, parse_secret_ref
from slurm_sync.cache import IDLE_SECONDS, CachedKube, KubeCache
from slurm_sync.kube import Kube
from slurm_sync.kubeapi import Discovery
from slurm_sync.leader import (
    LEASE_DURATION,
    RENEW_DEADLINE,
    RETRY_PERIOD,
    SERVICE_ACCOUNT_NAMESPACE,
    Fence,
    LeaseElector,
    LeaseSettings,
    fence_writes,
    new_identity,
    own_namespace,
)
from slurm_sync.metrics import Metrics
from slurm_sync.operator.deletion import DEFAULT_GRACE
from slurm_sync.operator.discovery import TokenSource
from slurm_sync.operator.loop import FULL_REPLAN_INTERVAL
from slurm_sync.replica import Replica
from slurm_sync.service import Config, Readiness, Service, health_server
from slurm_sync.slurm.client import SlurmClient, TokenProvider, WriteBudget
from slurm_sync.throttle import DEFAULT_BURST, DEFAULT_QPS, TokenBucket
from slurm_sync.wake import Wakeup

log = logging.getLogger("slurm_sync")
ENV_PREFIX = "SLURM_SYNC_"
MODES: Final = ("operator", "bridge", "both")
LOG_LEVELS: Final = tuple(level.upper() for level in logs.LEVELS)
T = TypeVar("T")


@overload
def _env(name: str, default: str) -> str: ...
@overload
def _env(name: str, default: None = None) -> str | None: ...
def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


class Refused(SystemExit):
    """A bad flag or environment value: exit status 2 (argparse's for a bad command line) once the line
    saying why is on stderr. The line is the exception's text too, for a caller that catches it."""

    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.code = 2  # the interpreter prints a message of its own for any code but a number


def _refuse(line: str) -> NoReturn:
    print(line, file=sys.stderr)
    raise Refused(line)


def _env_parsed(name: str, default: T, parse: Callable[[str], T], expected: str) -> T:
    """SLURM_SYNC_<name> parsed, or `default` when unset. A value `parse` refuses (ValueError) is one line
    naming the variable: argparse checks a flag's value, never its default."""
    value = _env(name)
    if value is None:
        return default
    try:
        return parse(value)
    except ValueError:
        _refuse(f"slurm-sync: {ENV_PREFIX}{name}={value!r}: expected {expected}")


def _env_number(name: str, default: float) -> float:
    return _env_parsed(name, float(default), float, "a number")


def _env_whole(name: str, default: int) -> int:
    return _env_parsed(name, int(default), int, "a whole number")


def _env_choice(name: str, default: str, choices: Sequence[str], *, any_case: bool = False) -> str:
    """One of `choices` (upper-cased first with `any_case`, as --log-level is)."""

    def parse(value: str) -> str:
        word = value.upper() if any_case else value
        if word not in choices:
            raise ValueError(value)
        return word

    return _env_parsed(name, default, parse, "one of " + ", ".join(choices))


def _boolean(value: str) -> bool:
    word = value.strip().lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    raise ValueError(value)


def _env_bool(name: str, default: bool) -> bool:
    return _env_parsed(name, default, _boolean, "true or false")


class _OneLineParser(argparse.ArgumentParser):
    """argparse whose errors are one line naming the flag: its usage block, printed first, buries it."""

    def error(self, message: str) -> NoReturn:
        _refuse(f"{self.prog}: {message} (see --help)")


class _HelpWithEnv(argparse.ArgumentDefaultsHelpFormatter):
    """--help names each flag's environment variable (SLURM_SYNC_<FLAG>) and its default."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = super()._get_help_string(action) or ""
        if not action.option_strings or action.dest == "help":
            return text
        return f"{text} [env {ENV_PREFIX}{action.dest.upper()}]".lstrip()


def parser() -> argparse.ArgumentParser:
    """Every flag, each with its environment variable's value (checked here) as its default."""
    p = _OneLineParser(
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
        default=_env_number("POLL_INTERVAL", 10.0),
        help="seconds between passes at the latest (a change Kubernetes reports starts one at once)",
    )
    p.add_argument(
        "--full-replan-interval",
        type=float,
        default=_env_number("FULL_REPLAN_INTERVAL", FULL_REPLAN_INTERVAL),
        help="seconds between passes that plan every pod again, whether or not anything changed",
    )
    p.add_argument(
        "--slurm-url", default=_env("SLURM_URL"), help="slurmrestd URL for every cluster (running outside the cluster)"
    )
    p.add_argument("--token-user", default=_env("TOKEN_USER", "slurm"), help="Slurm user in the minted JWT")
    p.add_argument(
        "--token-lifetime", type=int, default=_env_whole("TOKEN_LIFETIME", 300), help="JWT lifetime in seconds"
    )
    p.add_argument(
        "--slurm-timeout", type=float, default=_env_number("SLURM_TIMEOUT", 10.0), help="slurmrestd request timeout"
    )
    p.add_argument("--bind", default=_env("BIND", "127.0.0.1:8081"), help="host:port for /healthz, /readyz, /metrics")
    p.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        default=_env_choice("LOG_LEVEL", "INFO", LOG_LEVELS, any_case=True),
        help=", ".join(LOG_LEVELS) + " (any case)",
    )
    p.add_argument(
        "--log-format",
        choices=logs.FORMATS,
        default=_env_choice("LOG_FORMAT", "json", logs.FORMATS),
        help="json lines, or text for a terminal",
    )
    p.add_argument(
        "--kubeconfig",
        default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")),
        help="also $KUBECONFIG; unset: in-cluster, else ~/.kube/config",
    )
    p.add_argument(
        "--kube-api-qps",
        type=float,
        default=_env_number("KUBE_API_QPS", DEFAULT_QPS),
        help="requests a second to the Kubernetes API once a burst is spent (0: no limit; docs/operations.md)",
    )
    p.add_argument(
        "--kube-api-burst",
        type=int,
        default=_env_whole("KUBE_API_BURST", DEFAULT_BURST),
        help="requests to the Kubernetes API that may go at once before --kube-api-qps paces them",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        default=_env_choice("MODE", "operator", MODES),
        help="operator: Slinky operator side; bridge: slurm-bridge loop against --slurm-url; both",
    )
    p.add_argument(
        "--token-file", default=_env("TOKEN_FILE"), help="bridge: file holding the Slurm JWT (read on every request)"
    )
    p.add_argument(
        "--token-secret",
        default=_env("TOKEN_SECRET"),
        help="bridge: NAMESPACE/NAME of a Secret holding the Slurm JWT, read through the Kubernetes API (at most "
        f"every {REFRESH_SECONDS:g} s: rotation), e.g. one a Token CR writes in the Slurm cluster's namespace",
    )
    p.add_argument(
        "--token-secret-key", default=_env("TOKEN_SECRET_KEY", DEFAULT_KEY), help="bridge: the key of --token-secret"
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
        default=_env_number("JOB_LIST_INTERVAL", 30.0),
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
        default=_env_number("ABSENCE_CONFIRM_SECONDS", 5.0),
        help="a Slurm node or job is gone only when Slurm's not-found answer holds on a later pass this much later",
    )
    p.add_argument(
        "--nodeset-deletion-grace",
        type=float,
        default=_env_number("NODESET_DELETION_GRACE", DEFAULT_GRACE),
        help="seconds jobs pending in a deleting NodeSet's partition get before they are cancelled on purpose",
    )
    p.add_argument(
        "--cluster-name",
        default=_env("CLUSTER_NAME"),
        help="bridge: the Slurm cluster --slurm-url must serve (default: the first answer's, then pinned)",
    )
    p.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=_env_bool("LEADER_ELECT", True),
        help="campaign for a Lease and write only while holding it (replicas: one leads, the others stand by); "
        "--no-leader-elect only where a single replica runs",
    )
    p.add_argument("--lease-name", default=_env("LEASE_NAME"), help="the Lease's name; unset: slurm-sync-<mode>")
    p.add_argument(
        "--lease-namespace",
        default=_env("LEASE_NAMESPACE"),
        help="the Lease's namespace; unset: the pod's own (its service account's namespace file)",
    )
    p.add_argument(
        "--lease-duration",
        type=float,
        default=_env_number("LEASE_DURATION", LEASE_DURATION),
        help="seconds a standby waits, after the leader's last renew it saw, before taking the Lease over",
    )
    p.add_argument(
        "--renew-deadline",
        type=float,
        default=_env_number("RENEW_DEADLINE", RENEW_DEADLINE),
        help="seconds after its last successful renew at which a leader stops writing (less than --lease-duration)",
    )
    p.add_argument(
        "--retry-period",
        type=float,
        default=_env_number("RETRY_PERIOD", RETRY_PERIOD),
        help="seconds between tries to acquire or renew the Lease",
    )
    p.add_argument(
        "--once",
        action="store_true",
        default=_env_bool("ONCE", False),
        help="one pass, then exit (0 = every cluster ok); under leader election only after taking the Lease",
    )
    return p


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = parser()
    args = p.parse_args(argv)
    if args.kube_api_qps < 0 or args.kube_api_burst < 1:
        p.error(
            f"--kube-api-qps must be 0 (no limit) or more and --kube-api-burst at least 1, got "
            f"{args.kube_api_qps:g} and {args.kube_api_burst}"
        )
    if args.slurm_url and not _http_url(args.slurm_url):
        p.error(f"--slurm-url (or {ENV_PREFIX}SLURM_URL) must be an http:// or https:// URL, got {args.slurm_url!r}")
    return args


def _http_url(url: str) -> bool:
    """An absolute http(s) URL with a host: anything else fails only at the first request otherwise."""
    parts = urllib.parse.urlsplit(url)
    return parts.scheme in ("http", "https") and bool(parts.hostname)


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
    except Exception as err:  # a missing file, or one that is not a kubeconfig (YAML, binary: any error)
        where = kubeconfig or "~/.kube/config (no in-cluster service account either)"
        raise SystemExit(
            f"slurm-sync: cannot load a Kubernetes configuration from {where}: {type(err).__name__}: "
            f"{_first_line(err)}; set --kubeconfig (or SLURM_SYNC_KUBECONFIG / KUBECONFIG), or run in a pod"
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
        Discovery(api).get_code(_request_timeout=10)
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
    throttle = TokenBucket(args.kube_api_qps, args.kube_api_burst)  # every request waits its turn, then the fence
    if args.once:
        return Kube(api, metrics.count_kube_write, throttle)
    cache = KubeCache(wakeup.set, idle_seconds=max(IDLE_SECONDS, 3 * args.poll_interval))
    return CachedKube(api, metrics.count_kube_write, throttle, cache=cache)


def bridge_tokens(args: argparse.Namespace, kube: Kube | None = None) -> TokenProvider:
    """The bridge talks to one Slurm: --slurm-url with --token-secret (read through ``kube``), --token-file,
    or a key to mint tokens from. Checked once at start, so a missing setting stops a standby too, not only
    its first term. The token's Secret or file is read again while running (it may be rotated, or appear
    later); its problems are the pass's."""
    if not args.slurm_url:
        raise SystemExit("--mode bridge needs --slurm-url")
    if args.token_secret:
        if args.token_file:
            raise SystemExit("slurm-sync: --token-secret and --token-file both name the bridge's token: set one")
        try:
            namespace, name = parse_secret_ref(args.token_secret)
        except ValueError as err:
            raise SystemExit(f"slurm-sync: --token-secret (or {ENV_PREFIX}TOKEN_SECRET): {err}") from None
        if kube is None:
            raise ValueError("--token-secret is read through the Kubernetes API: pass the Kube")
        return SecretToken(kube, namespace, name, args.token_secret_key)
    if args.token_file:
        return token_file(args.token_file)
    if not args.jwt_key_file:
        raise SystemExit("--mode bridge needs --token-secret, --token-file or --jwt-key-file")
    try:
        with open(args.jwt_key_file, "rb") as handle:
            key = handle.read()
    except OSError as err:
        raise SystemExit(f"slurm-sync: --jwt-key-file {args.jwt_key_file}: cannot read it: {err.strerror}") from None
    if not key:
        raise SystemExit(f"slurm-sync: --jwt-key-file {args.jwt_key_file} is empty: slurmctld's JWT key belongs there")
    source = TokenSource(args.token_user, args.token_lifetime)
    source.set_key(key, "file")
    return source


def token_origin(args: argparse.Namespace) -> str:
    """Where the bridge's token comes from, for the message when slurmrestd refuses it."""
    if args.token_secret:
        return f"--token-secret {args.token_secret.strip()} (key {args.token_secret_key!r})"
    return f"--token-file {args.token_file}" if args.token_file else f"--jwt-key-file {args.jwt_key_file}"


def bridge_loop(
    args: argparse.Namespace,
    kube: Kube,
    metrics: Metrics,
    tokens: TokenProvider | None = None,
    write_budget: WriteBudget | None = None,
) -> BridgeLoop:
    """A new bridge loop (one per term of leadership: it keeps no state across terms)."""
    namespaces = [n.strip() for n in args.managed_namespaces.split(",") if n.strip()]
    slurm = SlurmClient(
        args.slurm_url,
        tokens or bridge_tokens(args, kube),
        timeout=args.slurm_timeout,
        cluster=args.cluster_name or None,
        write_budget=write_budget,
        token_origin=token_origin(args),
    )
    return BridgeLoop(
        slurm,
        BridgeKube(kube, metrics.count_kube_write),
        metrics,
        namespaces,
        args.scheduler_name,
        args.job_list_interval,
        absence_confirm_seconds=args.absence_confirm_seconds,
    )


def lease_settings(args: argparse.Namespace) -> LeaseSettings:
    """The Lease to campaign for; one line naming the fix when its namespace is unknown or its
    timings cannot fence (docs/architecture.md §8)."""
    namespace = args.lease_namespace or own_namespace()
    if not namespace:
        raise SystemExit(
            f"slurm-sync: the Lease's namespace is unknown: set --lease-namespace (or {ENV_PREFIX}LEASE_NAMESPACE, "
            f"the charts set it from the pod's namespace), or run in a pod ({SERVICE_ACCOUNT_NAMESPACE} is missing); "
            "--no-leader-elect runs a single replica without a Lease"
        )
    settings = LeaseSettings(
        namespace=namespace,
        name=args.lease_name or f"slurm-sync-{args.mode}",
        identity=new_identity(),
        lease_duration=args.lease_duration,
        renew_deadline=args.renew_deadline,
        retry_period=args.retry_period,
    )
    problem = settings.problem()
    if problem:
        raise SystemExit(f"slurm-sync: {problem}")
    return settings


def _on_signal(handler: Callable[[], None]) -> None:
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: handler())


def _serve_health(bind: str, readiness: Readiness, metrics: Metrics) -> ThreadingHTTPServer:
    """The health and metrics server; a --bind that cannot be listened on is one line naming the setting."""
    try:
        server = health_server(bind, readiness, metrics)
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "it is not host:port"
        raise SystemExit(
            f"slurm-sync: --bind {bind} (or {ENV_PREFIX}BIND): cannot listen there: {why}; another process may hold "
            "that port, or choose another"
        ) from None
    threading.Thread(target=server.serve_forever, daemon=True, name="health").start()
    return server


def run_alone(args: argparse.Namespace, cfg: Config, service: Service, metrics: Metrics) -> int:
    """--no-leader-elect: this process writes whenever it runs (one replica only)."""
    metrics.leader.set(1)
    try:
        if args.once:
            return 0 if service.run_pass() else 1
        server = _serve_health(cfg.bind, service.health, metrics)
        stop = threading.Event()
        _on_signal(stop.set)
        log.info("serving health and metrics on %s; polling every %ss", cfg.bind, cfg.poll_interval)
        service.run_forever(stop)
        server.shutdown()
        return 0
    finally:
        service.close()


def run_elected(cfg: Config, replica: Replica) -> int:
    """Campaign in one thread, lead (or stand by) in this one; on SIGTERM end the term first, then
    release the Lease, so a standby takes over at its next try."""
    server = _serve_health(cfg.bind, replica, replica.metrics)
    stop_campaign = threading.Event()
    campaign = threading.Thread(target=replica.elector.run, args=(stop_campaign,), name="lease", daemon=True)
    _on_signal(replica.stop)
    campaign.start()
    log.info(
        "serving health and metrics on %s; polling every %ss while leading; campaigning for lease %s as %s",
        cfg.bind,
        cfg.poll_interval,
        replica.elector.settings.where,
        replica.identity,
    )
    try:
        replica.run()
    finally:
        stop_campaign.set()
        campaign.join()
        server.shutdown()
    return 0


def service_config(args: argparse.Namespace) -> Config:
    """The service's settings from the flags; the per-pass API server heartbeat only without leader election
    (the Lease renewals are that check)."""
    return Config(
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
        kube_heartbeat=not args.leader_elect,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level, kind=args.log_format)
    metrics = Metrics()
    cfg = service_config(args)
    api = kube_client(args.kubeconfig)
    settings = lease_settings(args) if args.leader_elect else None
    fence = Fence(settings.renew_deadline) if settings else None
    lease_api = client.ApiClient(api.configuration) if fence else None  # the Lease itself is never fenced
    if fence:
        fence_writes(api, fence)
    budget = fence.remaining if fence else None
    wakeup = Wakeup()  # the cache outlives terms: it mirrors Kubernetes and holds no decision
    kube = kube_reader(api, metrics, wakeup, args)
    tokens = bridge_tokens(args, kube) if args.mode in ("bridge", "both") else None

    def build() -> Service:
        bridge = bridge_loop(args, kube, metrics, tokens, budget) if tokens else None
        return Service(cfg, kube, metrics, bridge, budget, wakeup)

    try:
        if settings is None or fence is None or lease_api is None:
            return run_alone(args, cfg, build(), metrics)
        with lease_api:
            replica = Replica(LeaseElector(lease_api, settings, fence), build, metrics)
            if args.once:
                return replica.run_once(settings.lease_duration + settings.renew_deadline)
            return run_elected(cfg, replica)
    finally:
        if isinstance(kube, CachedKube):
            kube.cache.close()


if __name__ == "__main__":
    sys.exit(main())

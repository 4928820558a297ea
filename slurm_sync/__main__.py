"""``python -m slurm_sync``: every setting is a flag, with an environment variable as its default."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence

from kubernetes import client, config

from slurm_sync import logs
from slurm_sync.kube import Kube
from slurm_sync.metrics import Metrics
from slurm_sync.service import Config, Service, health_server

log = logging.getLogger("slurm_sync")
ENV_PREFIX = "SLURM_SYNC_"


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(ENV_PREFIX + name, default)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m slurm_sync", description="Keep Slurm and Kubernetes in step (Slinky operator side).")
    p.add_argument("--namespace", default=_env("NAMESPACE"), help="watch one namespace (env SLURM_SYNC_NAMESPACE; default: all)")
    p.add_argument("--poll-interval", type=float, default=float(_env("POLL_INTERVAL", "10")), help="seconds between passes")
    p.add_argument("--slurm-url", default=_env("SLURM_URL"), help="slurmrestd URL for every cluster (running outside the cluster)")
    p.add_argument("--token-user", default=_env("TOKEN_USER", "slurm"), help="Slurm user in the minted JWT")
    p.add_argument("--token-lifetime", type=int, default=int(_env("TOKEN_LIFETIME", "300")), help="JWT lifetime in seconds")
    p.add_argument("--slurm-timeout", type=float, default=float(_env("SLURM_TIMEOUT", "10")), help="slurmrestd request timeout")
    p.add_argument("--bind", default=_env("BIND", "127.0.0.1:8081"), help="host:port for /healthz, /readyz, /metrics")
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    p.add_argument("--kubeconfig", default=_env("KUBECONFIG", os.environ.get("KUBECONFIG")), help="default: in-cluster, else ~/.kube/config")
    p.add_argument("--once", action="store_true", default=_env("ONCE", "") == "1", help="one pass, then exit (0 = every cluster ok)")
    return p.parse_args(argv)


def kube_client(kubeconfig: str | None) -> client.ApiClient:
    """Standard loading: an explicit kubeconfig, else in-cluster, else the default kubeconfig."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        config.load_incluster_config()
        return client.ApiClient()
    except config.ConfigException:
        return config.new_client_from_config()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logs.configure(args.log_level)
    metrics = Metrics()
    cfg = Config(
        namespace=args.namespace or None,
        poll_interval=args.poll_interval,
        slurm_url=args.slurm_url or None,
        token_user=args.token_user,
        token_lifetime=args.token_lifetime,
        slurm_timeout=args.slurm_timeout,
        bind=args.bind,
    )
    service = Service(cfg, Kube(kube_client(args.kubeconfig), metrics.count_kube_write), metrics)
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


if __name__ == "__main__":
    sys.exit(main())

"""Prometheus metrics of the hook server: request counts and latency per route.

Under gunicorn with several workers each worker is a process, so the metrics use
prometheus_client's multiprocess mode when `PROMETHEUS_MULTIPROC_DIR` is set (the gunicorn
config sets it up); `/metrics` then aggregates every worker. Every route's series exist from the
start (`declare`), so a scraper sees each family, and a rate over it, before the first request.
"""

import os
from collections.abc import Iterable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest, multiprocess

REQUESTS = Counter("slinky_hook_requests_total", "Hook requests by route and HTTP status.", ["route", "code"])
LATENCY = Histogram(
    "slinky_hook_request_duration_seconds",
    "Time to answer a hook request, by route.",
    ["route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


# The answers of the hook contract (docs/architecture.md §3) a route's counters start with, at zero.
DECLARED_CODES = ("200", "400", "500")


def declare(routes: Iterable[str]) -> None:
    """Create every route's series at zero: multiprocess mode shows a family only once it has one."""
    for route in routes:
        LATENCY.labels(route=route)
        for code in DECLARED_CODES:
            REQUESTS.labels(route=route, code=code)


def observe(route: str, code: int, seconds: float) -> None:
    REQUESTS.labels(route=route, code=str(code)).inc()
    LATENCY.labels(route=route).observe(seconds)


def exposition() -> tuple[bytes, str]:
    """The text exposition format, aggregated over all workers when running multiprocess."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return generate_latest(registry), CONTENT_TYPE_LATEST
    from prometheus_client import REGISTRY

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST

"""The hook server's Prometheus metrics (hooks/metrics.py): declared series start at zero, observations count
per route and code, and the exposition is this process's registry or, multiprocess, every worker's files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from hooks import metrics

ROOT = Path(__file__).resolve().parents[2]
COUNT = "slinky_hook_requests_total"
SECONDS = "slinky_hook_request_duration_seconds"


def _sample(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def _samples(text: bytes, route: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of `route` in an exposition, by name and its other labels."""
    return {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "route"))): s.value
        for family in text_string_to_metric_families(text.decode())
        for s in family.samples
        if s.labels.get("route") == route and not s.name.endswith("_created")
    }


def test_declare_creates_each_routes_series_at_zero_for_the_contracts_codes() -> None:
    routes = ["/test-metrics/declared-a", "/test-metrics/declared-b"]
    assert _sample(COUNT, route=routes[0], code="200") is None
    metrics.declare(iter(routes))  # any iterable, read once
    for route in routes:
        assert [_sample(COUNT, route=route, code=code) for code in ("200", "400", "500")] == [0.0, 0.0, 0.0]
        assert _sample(f"{SECONDS}_count", route=route) == 0.0
        assert _sample(f"{SECONDS}_bucket", route=route, le="+Inf") == 0.0
    assert _sample(COUNT, route=routes[0], code="501") is None  # other codes appear when first answered
    assert metrics.DECLARED_CODES == ("200", "400", "500")


def test_declaring_again_keeps_the_counts() -> None:
    route = "/test-metrics/redeclared"
    metrics.declare([route])
    metrics.observe(route, 200, 0.01)
    metrics.declare([route])
    assert _sample(COUNT, route=route, code="200") == 1.0


def test_observe_counts_by_route_and_code_and_times_by_route() -> None:
    route = "/test-metrics/observed"
    metrics.observe(route, 400, 0.003)
    metrics.observe(route, 400, 0.2)
    metrics.observe(route, 408, 20.0)
    assert _sample(COUNT, route=route, code="400") == 2.0
    assert _sample(COUNT, route=route, code="408") == 1.0
    assert _sample(COUNT, route=route, code="200") is None  # not declared
    buckets = {le: _sample(f"{SECONDS}_bucket", route=route, le=le) for le in ("0.0025", "0.005", "0.25", "10.0")}
    assert buckets == {"0.0025": 0.0, "0.005": 1.0, "0.25": 2.0, "10.0": 2.0}
    assert _sample(f"{SECONDS}_bucket", route=route, le="+Inf") == 3.0
    assert _sample(f"{SECONDS}_count", route=route) == 3.0
    assert _sample(f"{SECONDS}_sum", route=route) == pytest.approx(20.203)


def test_the_exposition_of_a_single_process_is_its_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    route = "/test-metrics/exposed"
    metrics.declare([route])
    metrics.observe(route, 500, 0.001)
    body, content_type = metrics.exposition()
    assert content_type == CONTENT_TYPE_LATEST
    samples = _samples(body, route)
    assert samples[(COUNT, (("code", "500"),))] == 1.0
    assert samples[(COUNT, (("code", "200"),))] == 0.0
    assert samples[(f"{SECONDS}_count", ())] == 1.0
    assert samples[(f"{SECONDS}_bucket", (("le", "0.001"),))] == 1.0


def test_multiprocess_exposition_adds_up_every_workers_files_and_only_those(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each worker is a process writing its own files; `/metrics`, served by any one of them, sums them all."""
    worker = (
        "import sys; from hooks import metrics; metrics.declare(['/w']); "
        "[metrics.observe('/w', int(code), 0.02) for code in sys.argv[1:]]"
    )
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for codes in (["400", "400"], ["400", "200"]):
        subprocess.run([sys.executable, "-c", worker, *codes], cwd=ROOT, env=env, check=True)
    metrics.observe("/w", 400, 0.02)  # this process's registry is not a worker's file: not counted
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    body, content_type = metrics.exposition()
    assert content_type == CONTENT_TYPE_LATEST
    samples = _samples(body, "/w")
    counts = {dict(labels)["code"]: value for (name, labels), value in samples.items() if name == COUNT}
    assert counts == {"200": 1.0, "400": 3.0, "500": 0.0}
    assert samples[(f"{SECONDS}_count", ())] == 4.0
    assert samples[(f"{SECONDS}_bucket", (("le", "0.01"),))] == 0.0
    assert samples[(f"{SECONDS}_bucket", (("le", "0.025"),))] == 4.0


def test_an_empty_multiprocess_directory_exposes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    metrics.observe("/test-metrics/not-a-worker", 200, 0.1)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    assert metrics.exposition() == (b"", CONTENT_TYPE_LATEST)

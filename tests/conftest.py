"""Shared pytest setup: the real-Slurm fixture lives in tests/fixtures/slurm.py (a second slurmctld beside it in
tests/fixtures/secondcluster.py), the real Kubernetes API server's in tests/kube/plugin.py and its CRD fixtures
in tests/kube/fixtures.py, the chaos suite's summary line in tests/chaos/summary.py."""

import functools

import pytest

from hooks import loginset

pytest_plugins = [
    "tests.fixtures.slurm",
    "tests.fixtures.secondcluster",
    "tests.kube.plugin",
    "tests.kube.fixtures",
    "tests.cluster.plugin",
    "tests.chaos.summary",
]

_generate_host_keys = loginset.generate_host_keys


@functools.cache
def _one_set_of_host_keys() -> tuple[tuple[str, bytes], ...]:
    return tuple(_generate_host_keys().items())


@pytest.fixture(autouse=True)
def _host_keys_made_once(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A LoginSet's first sync makes SSH host keys (RSA-4096: 0.3 s); where the keys are not the subject, every
    sync gets one real set made once per run. A test of key generation itself is marked `host_keys`."""
    if request.node.get_closest_marker("host_keys") is None:
        monkeypatch.setattr(loginset, "generate_host_keys", lambda: dict(_one_set_of_host_keys()))

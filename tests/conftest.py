"""Shared pytest setup: the real-Slurm fixture lives in tests/fixtures/slurm.py, the real Kubernetes
API server's in tests/kube/plugin.py, the chaos suite's summary line in tests/chaos/summary.py."""

pytest_plugins = ["tests.fixtures.slurm", "tests.kube.plugin", "tests.cluster.plugin", "tests.chaos.summary"]

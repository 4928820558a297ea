"""Shared pytest setup: the real-Slurm fixture lives in tests/fixtures/slurm.py, the real Kubernetes
API server's in tests/kube/plugin.py."""

pytest_plugins = ["tests.fixtures.slurm", "tests.kube.plugin"]

"""Shared pytest setup: the real-Slurm fixture lives in tests/fixtures/slurm.py."""

pytest_plugins = ["tests.fixtures.slurm"]

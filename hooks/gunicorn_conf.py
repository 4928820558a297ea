"""gunicorn settings for the hook server; every knob is an environment variable.

Hooks are CPU-bound pure functions, so sync workers (one per core by default) are the fastest
choice. The timeout sits well above Metacontroller's default 10 s webhook timeout.
"""

import multiprocessing
import os
import tempfile

bind = os.environ.get("HOOKS_BIND", "127.0.0.1:8080")
workers = int(os.environ.get("HOOKS_WORKERS", multiprocessing.cpu_count()))
worker_class = "sync"
timeout = int(os.environ.get("HOOKS_TIMEOUT", "30"))
graceful_timeout = 10
# Access logging costs about half the throughput; opt in with HOOKS_ACCESS_LOG=- (stdout) or a path.
accesslog = os.environ.get("HOOKS_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("HOOKS_LOG_LEVEL", "info")

# Aggregate Prometheus metrics across workers (see hooks/metrics.py); must be set before workers import it.
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="slinky-hooks-metrics-")


def child_exit(server, worker):  # noqa: ARG001 - gunicorn's hook signature
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

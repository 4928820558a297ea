"""gunicorn settings for the hook server; every knob is an environment variable.

Hooks are CPU-bound pure functions, so sync workers (one per core by default) are the fastest
choice. The timeout sits well above Metacontroller's default 10 s webhook timeout. Logs (gunicorn's
own lines too) are JSON lines, or text with HOOKS_LOG_FORMAT=text (hooks/logs.py). Nothing is
written outside /tmp (and PROMETHEUS_MULTIPROC_DIR when the environment names one), so the server
runs on a read-only root filesystem.
"""

import multiprocessing
import os
import tempfile

from hooks import logs

bind = os.environ.get("HOOKS_BIND", "127.0.0.1:8080")
workers = int(os.environ.get("HOOKS_WORKERS", multiprocessing.cpu_count()))
worker_class = "sync"
timeout = int(os.environ.get("HOOKS_TIMEOUT", "30"))
graceful_timeout = 10
# Access logging costs about half the throughput; opt in with HOOKS_ACCESS_LOG=- (stdout) or a path.
accesslog = os.environ.get("HOOKS_ACCESS_LOG") or None
errorlog = "-"
loglevel = os.environ.get("HOOKS_LOG_LEVEL", "info")
logger_class = logs.GunicornLogger
# The hook code's own loggers (hooks.*) write through the root logger, in the same format.
logs.configure(loglevel, kind=os.environ.get("HOOKS_LOG_FORMAT", "json"))
# gunicorn's control socket (for gunicornc) lives under $HOME by default, which a read-only root
# cannot hold and which several servers on one machine would share: off unless
# HOOKS_CONTROL_SOCKET names a path for it.
control_socket_disable = not os.environ.get("HOOKS_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = os.environ["HOOKS_CONTROL_SOCKET"]

# Aggregate Prometheus metrics across workers (see hooks/metrics.py); must be set before workers import it.
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="slinky-hooks-metrics-")


def child_exit(server, worker):  # noqa: ARG001 - gunicorn's hook signature
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

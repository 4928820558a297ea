"""gunicorn settings for the hook server; every knob is an environment variable (hooks/serve.py
lists them with their defaults; `slinky-hooks --help` prints them).

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
from hooks.serve import setting

bind = setting("HOOKS_BIND")
workers = int(setting("HOOKS_WORKERS") or multiprocessing.cpu_count())
worker_class = "sync"
timeout = int(setting("HOOKS_TIMEOUT"))
graceful_timeout = 10
# Access logging costs about half the throughput; opt in with HOOKS_ACCESS_LOG=- (stdout) or a path.
accesslog = setting("HOOKS_ACCESS_LOG") or None
errorlog = "-"
loglevel = setting("HOOKS_LOG_LEVEL")
logger_class = logs.GunicornLogger
# The hook code's own loggers (hooks.*) write through the root logger, in the same format.
logs.configure(loglevel, kind=setting("HOOKS_LOG_FORMAT"))
# gunicorn's control socket (for gunicornc) lives under $HOME by default, which a read-only root
# cannot hold and which several servers on one machine would share: off unless
# HOOKS_CONTROL_SOCKET names a path for it.
control_socket_disable = not setting("HOOKS_CONTROL_SOCKET")
if not control_socket_disable:
    control_socket = setting("HOOKS_CONTROL_SOCKET")

# Aggregate Prometheus metrics across workers (see hooks/metrics.py); must be set before workers import it.
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="slinky-hooks-metrics-")


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)

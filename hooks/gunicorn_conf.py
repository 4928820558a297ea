"""gunicorn settings for the hook server; every knob is an environment variable (hooks/serve.py
lists them with their defaults and parsers; `slinky-hooks --help` prints them). A bad one stops gunicorn
here with one line naming it, before anything starts.

Hooks are CPU-bound pure functions (one worker per core by default). The workers are gevent's
(hooks/worker.py): a slow or stalled client costs a greenlet, not a worker. A connection waits up to
HOOKS_IDLE_TIMEOUT for its next request (longer than Go clients keep one idle); once a request starts,
its line and headers must arrive within HOOKS_READ_TIMEOUT and its body within as long again. The worker
timeout sits well above Metacontroller's default 10 s webhook timeout. Logs (gunicorn's own lines too)
are JSON lines, or text with HOOKS_LOG_FORMAT=text (slinky_common/logs.py). Nothing is written outside
/tmp (and PROMETHEUS_MULTIPROC_DIR when the environment names one), so the server runs on a read-only
root filesystem.
"""

import ctypes
import multiprocessing
import os
import tempfile

from hooks import gunicorn_logger, serve
from slinky_common import logs

serve.check_settings()  # SystemExit("slinky-hooks: HOOKS_... must be ..."): gunicorn prints that line alone
bind = serve.BIND.value()
workers = serve.WORKERS.value() or multiprocessing.cpu_count()
worker_class = "hooks.worker.HookWorker"
worker_connections = serve.MAX_CONNECTIONS.value()
timeout = serve.TIMEOUT.value()
# How long a connection may wait for its next request, its first too (hooks/worker.py then gives the
# request's line and headers HOOKS_READ_TIMEOUT); above the 90 s Go's http.Transport keeps a connection idle.
keepalive = serve.IDLE_TIMEOUT.value()
graceful_timeout = 10
# Access logging costs about half the throughput; opt in with HOOKS_ACCESS_LOG=- (stdout) or a path.
accesslog = serve.ACCESS_LOG.value()
errorlog = "-"
loglevel = serve.LOG_LEVEL.value()
logger_class = gunicorn_logger.GunicornLogger
# The hook code's own loggers (hooks.*) write through the root logger, in the same format.
logs.configure(loglevel, kind=serve.LOG_FORMAT.value())
# gunicorn's control socket (for gunicornc) would live under $HOME, which a read-only root cannot hold
# and several servers on one machine would share: off unless HOOKS_CONTROL_SOCKET names a path.
control_socket_disable = serve.CONTROL_SOCKET.value() is None
if not control_socket_disable:
    control_socket = serve.CONTROL_SOCKET.value()
# Aggregate Prometheus metrics across workers (hooks/metrics.py); set before the workers import it.
if workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="slinky-hooks-metrics-")


# glibc's mallopt parameter for the size from which a block gets its own mapping (malloc.h).
M_MMAP_THRESHOLD = -3
LARGE_BLOCK_BYTES = 1 << 20


def on_starting(server):
    """A HOOKS_BIND that cannot be listened on is one line naming it (`make run` beside another server)."""
    problem = serve.bind_problem(bind)
    if problem:
        server.log.error(problem)
        raise SystemExit(1)


def post_fork(server, worker):
    return_large_blocks_to_the_system()


def return_large_blocks_to_the_system() -> None:
    """Give every block of 1 MiB or more its own mapping, unmapped when freed. By default glibc raises
    that threshold to the size of each large block freed (up to 32 MiB), so a worker serves the next
    request body from its heap, where what a 1,000-pod sync leaves holes that stay resident: RSS then
    swings by tens of MB around live memory (bench/hooks_memory.py). Not glibc (musl): nothing to set."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except AttributeError:
        return
    mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK_BYTES)


def child_exit(server, worker):
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        retire_worker_metrics(worker.pid, os.environ["PROMETHEUS_MULTIPROC_DIR"])


def retire_worker_metrics(pid: int, directory: str) -> None:
    """Fold a dead worker's counters and histograms into one archive file per type and remove its own,
    so the totals stay whole while files of dead workers do not pile up (64 KiB each, every one read by
    each scrape). Only the arbiter runs this; prometheus_client is imported here, never before the
    workers fork, so their metrics are multiprocess ones."""
    from prometheus_client import multiprocess
    from prometheus_client.mmap_dict import MmapedDict

    multiprocess.mark_process_dead(pid, directory)
    for kind in ("counter", "histogram"):
        dead = os.path.join(directory, f"{kind}_{pid}.db")
        if not os.path.exists(dead):
            continue
        archive = MmapedDict(os.path.join(directory, f"{kind}_archive.db"))
        try:
            for key, value, timestamp, _ in MmapedDict.read_all_values_from_file(dead):
                archive.write_value(key, archive.read_value(key)[0] + value, timestamp)
        finally:
            archive.close()
        os.remove(dead)

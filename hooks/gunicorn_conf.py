"""gunicorn settings for the hook server; every knob is an environment variable (hooks/serve.py
lists them with their defaults; `slinky-hooks --help` prints them).

Hooks are CPU-bound pure functions (one worker per core by default). The workers are gevent's
(hooks/worker.py): a slow or stalled client costs a greenlet, not a worker; its headers must arrive
within HOOKS_READ_TIMEOUT and its body within as long again. The worker timeout sits well above
Metacontroller's default 10 s webhook timeout. Logs (gunicorn's
own lines too) are JSON lines, or text with HOOKS_LOG_FORMAT=text (slinky_common/logs.py). Nothing is
written outside /tmp (and PROMETHEUS_MULTIPROC_DIR when the environment names one), so the server
runs on a read-only root filesystem.
"""

import ctypes
import multiprocessing
import os
import tempfile

from hooks import gunicorn_logger
from hooks.serve import bind_problem, read_timeout, setting
from slinky_common import logs

bind = setting("HOOKS_BIND")
workers = int(setting("HOOKS_WORKERS") or multiprocessing.cpu_count())
worker_class = "hooks.worker.HookWorker"
worker_connections = int(setting("HOOKS_MAX_CONNECTIONS"))
timeout = int(setting("HOOKS_TIMEOUT"))
# gunicorn's gevent worker waits this long for a request's headers, the first on a connection too,
# and closes a kept-alive connection idle for as long.
keepalive = read_timeout()
graceful_timeout = 10
# Access logging costs about half the throughput; opt in with HOOKS_ACCESS_LOG=- (stdout) or a path.
accesslog = setting("HOOKS_ACCESS_LOG") or None
errorlog = "-"
loglevel = setting("HOOKS_LOG_LEVEL")
logger_class = gunicorn_logger.GunicornLogger
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


# glibc's mallopt parameter for the size from which a block gets its own mapping (malloc.h).
M_MMAP_THRESHOLD = -3
LARGE_BLOCK_BYTES = 1 << 20


def on_starting(server):
    """A HOOKS_BIND that cannot be listened on is one line naming it (`make run` beside another server)."""
    problem = bind_problem(bind)
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

"""The logfile sidecar: each daemon writes its log to a FIFO that this native sidecar copies to its own
output, so `kubectl logs -c logfile` shows the daemon's log, as in Slinky."""

from __future__ import annotations

from hooks.podtemplate import merge_container
from slinky_common.jsontypes import JSON

LOG_DIR = "/var/log/slurm"
LOGFILE_IMAGE = "docker.io/library/alpine:latest"
# Makes the log FIFO a daemon writes to and copies it to stdout (so `kubectl logs -c logfile`
# shows the daemon's log); a trapped TERM ends the wait at once instead of after the grace period.
LOGFILE_SCRIPT = """\
trap 'exit 0' TERM INT
if [ ! -p "$SOCKET" ]; then rm -f "$SOCKET"; mkfifo -m 0777 "$SOCKET"; fi
while true; do cat "$SOCKET" & wait $!; done
"""


def logfile_sidecar(log_file: str, override: JSON | None) -> JSON:
    """The native sidecar that turns a daemon's log file (a FIFO) into container output."""
    base = {
        "name": "logfile",
        "image": LOGFILE_IMAGE,
        "restartPolicy": "Always",
        "command": ["sh", "-c", LOGFILE_SCRIPT],
        "env": [{"name": "SOCKET", "value": log_file}],
        "volumeMounts": [{"name": "slurm-logfile", "mountPath": LOG_DIR}],
    }
    return merge_container(base, override)

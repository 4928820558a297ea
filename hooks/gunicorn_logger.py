"""gunicorn's own lines (start, workers, errors, one access line per request) in the log format both
processes share (slinky_common/logs.py); apart from it so that slurm_sync never imports gunicorn."""

from __future__ import annotations

import os
from typing import Any

from gunicorn import glogging

from slinky_common.logs import formatter


class GunicornLogger(glogging.Logger):
    """gunicorn's logger in our format: its own lines (start, workers, errors) and one access line
    per request with route, status and duration. Set as `logger_class` in hooks/gunicorn_conf.py,
    which also configures the root logger the hook code writes to."""

    def setup(self, cfg: Any) -> None:
        super().setup(cfg)
        fmt = formatter(os.environ.get("HOOKS_LOG_FORMAT") or "json")
        for handler in self.error_log.handlers + self.access_log.handlers:
            handler.setFormatter(fmt)

    def access(self, resp: Any, req: Any, environ: dict[str, Any], request_time: Any) -> None:
        if not self.access_log_enabled:
            return
        status = resp.status.split(None, 1)[0] if isinstance(resp.status, str) else resp.status
        fields = {
            "method": environ.get("REQUEST_METHOD"),
            "route": environ.get("PATH_INFO"),
            "status": int(status),
            "duration_ms": round(request_time.total_seconds() * 1000, 3),
            "remote": environ.get("REMOTE_ADDR", "-"),
        }
        self.access_log.info("%s %s %s", fields["method"], fields["route"], fields["status"], extra=fields)

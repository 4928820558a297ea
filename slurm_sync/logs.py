"""slurm_sync's logs use the one format of both processes, defined in hooks/logs.py (JSON lines,
secrets and anything shaped like a JWT redacted); slurm_sync modules import it from here."""

from hooks.logs import FORMATS, JsonFormatter, configure, redact, register_secret

__all__ = ["FORMATS", "JsonFormatter", "configure", "redact", "register_secret"]

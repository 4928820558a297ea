"""slurm_sync: polls slurmrestd, writes Slurm's truth onto Kubernetes, carries out hook intents.

Imported first in its process (``python -m slurm_sync``), the package keeps two of its libraries from
loading what slurm_sync never runs, 5 MB of its memory (docs/architecture.md §7, issue 30): the kubernetes
package's ``__init__`` imports every subpackage (dynamic, stream, informer, leaderelection: jsonschema,
websocket-client ...), and httpx's imports its command line (click, pygments). The parts slurm_sync uses
(``kubernetes.client``, ``.config``, ``.watch``; httpx's client) import as they always do; a process that
imported either library before keeps it whole.
"""

import importlib.util
import sys


def _lean_imports() -> None:
    if "kubernetes" not in sys.modules and (spec := importlib.util.find_spec("kubernetes")) is not None:
        sys.modules["kubernetes"] = importlib.util.module_from_spec(spec)  # its subpackages, not its __init__
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"


_lean_imports()

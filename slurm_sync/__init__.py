"""slurm_sync: polls slurmrestd, writes Slurm's truth onto Kubernetes, carries out hook intents.

Imported first in its process (``python -m slurm_sync``), the package keeps three of its libraries from
loading what slurm_sync never runs, 14 MB of its memory (docs/architecture.md §7, issue 30): the kubernetes
package's ``__init__`` imports every subpackage (dynamic, stream, informer, leaderelection: jsonschema,
websocket-client ...), httpx's imports its command line (click, pygments), and PyJWT binds ``cryptography``
(9 MB of OpenSSL bindings) for the RSA, EC and EdDSA keys it may be given, where slurm_sync only signs and
reads HS256 tokens, which PyJWT computes with the standard library's ``hmac`` (PyJWT without its optional
``crypto`` extra, a configuration it supports). The parts slurm_sync uses (``kubernetes.client``,
``.config``, ``.watch``; httpx's client; PyJWT) import as they always do, ``cryptography`` stays importable
by anything else, and a process that imported one of these libraries before keeps it whole.
"""

import importlib
import importlib.util
import sys


def _lean_imports() -> None:
    if "kubernetes" not in sys.modules and (spec := importlib.util.find_spec("kubernetes")) is not None:
        sys.modules["kubernetes"] = importlib.util.module_from_spec(spec)  # its subpackages, not its __init__
    if "httpx" not in sys.modules:
        sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]  # None: "not importable"
    if "jwt" not in sys.modules and "cryptography" not in sys.modules:
        sys.modules["cryptography"] = None  # type: ignore[assignment]  # PyJWT's probe: "not installed"
        try:
            importlib.import_module("jwt")
        finally:
            del sys.modules["cryptography"]


_lean_imports()

"""The bridge's Slurm JWT from a Secret read through the Kubernetes API (``--token-secret NAMESPACE/NAME``).

Why not a mounted file: the token is made by a ``Token`` CR, which writes its Secret in its own namespace,
the Slurm cluster's (the JWT key it signs with is there, and must not be copied anywhere else: it mints
tokens for any user). A pod can mount only Secrets of its own namespace, so the bridge's slurm_sync, in
another namespace, reads that one Secret through the API server (its chart grants ``get`` on that name only).

Why a bounded read and not a watch: the Slurm client asks for the token on every request; the Secret is
read again only once ``REFRESH_SECONDS`` have passed since the last read (a failed read is tried again after
``RETRY_SECONDS``, so that the calls of one pass do not each wait for a dead API server). A ``Token`` CR
re-issues its token a fifth of its lifetime before it expires (3 minutes with the default 15m), far more
than 10 s, so the token sent is never one the Secret no longer holds for long enough to have expired; the
kubelet takes up to a minute or more to refresh a mounted Secret. The read needs ``get`` on one named
Secret, nothing else; a watch would need ``list`` and ``watch`` too, and a thread and a cache for one object.

Every failure is ``SlurmNoToken`` naming the setting, the Secret and what is wrong with it (absent,
unreadable, no such key, empty), as ``--token-file`` does for its file; nothing is sent to Slurm then.
"""

from __future__ import annotations

import binascii
import threading
import time
from collections.abc import Callable

from kubernetes.client.exceptions import ApiException

from slinky_common.logs import register_secret
from slurm_sync.kube import Kube, describe_error, is_not_found
from slurm_sync.slurm.errors import SlurmNoToken

REFRESH_SECONDS = 10.0  # a token read is served this long, then the Secret is read again (rotation)
RETRY_SECONDS = 1.0  # a failed read is served (as its SlurmNoToken) this long before the next try
DEFAULT_KEY = "auth-token"  # Slinky's slurm-bridge chart: sharedConfig.slurmJwtSecretKey


def parse_secret_ref(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME`` as (namespace, name); ValueError for anything else."""
    namespace, slash, name = text.strip().partition("/")
    if not slash or not namespace or not name or "/" in name:
        raise ValueError(f"{text!r} is not NAMESPACE/NAME")
    return namespace, name


class SecretToken:
    """A ``TokenProvider``: the JWT in key ``key`` of Secret ``namespace/name``, read as the module says."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        key: str = DEFAULT_KEY,
        *,
        refresh_seconds: float = REFRESH_SECONDS,
        retry_seconds: float = RETRY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.namespace, self.name, self.key = namespace, name, key
        self.refresh_seconds, self.retry_seconds = refresh_seconds, retry_seconds
        self._clock = clock
        self._lock = threading.Lock()  # one read at a time: concurrent callers share its outcome
        self._token: str | None = None
        self._problem: SlurmNoToken | None = None
        self._until = 0.0  # the last outcome (token or problem) is served until then
        self.reads = 0  # Secret reads made (for tests and debugging)

    @property
    def origin(self) -> str:
        """Where the token comes from, for messages (the setting, the Secret and its key)."""
        return f"--token-secret {self.namespace}/{self.name} (key {self.key!r})"

    def __call__(self) -> str:
        with self._lock:
            if self._clock() >= self._until:
                started = self._clock()
                try:
                    self._token, self._problem = self._read(), None
                    self._until = started + self.refresh_seconds
                except SlurmNoToken as exc:
                    self._token, self._problem = None, exc
                    self._until = self._clock() + self.retry_seconds
            if self._token is None:
                raise SlurmNoToken(str(self._problem))
            return self._token

    def _read(self) -> str:
        where = f"--token-secret {self.namespace}/{self.name}"
        self.reads += 1
        try:
            secret = self.kube.read_secret_key(self.namespace, self.name, self.key)
        except KeyError:
            raise SlurmNoToken(f"{where}: the Secret has no key {self.key!r}") from None
        except binascii.Error as exc:
            raise SlurmNoToken(f"{where}: key {self.key!r} is not base64 ({exc})") from None
        except ApiException as exc:
            if is_not_found(exc):
                raise SlurmNoToken(
                    f"{where}: no such Secret (a Token CR writes it: kubectl get tokens -n {self.namespace})"
                ) from None
            raise SlurmNoToken(f"{where}: cannot read it: {describe_error(exc)}") from None
        except Exception as exc:  # the API server unreachable, a timeout: no token known
            raise SlurmNoToken(f"{where}: cannot read it: {describe_error(exc)}") from None
        try:
            token = secret.data.decode("utf-8").strip().removeprefix("SLURM_JWT=").strip()
        except UnicodeDecodeError:
            raise SlurmNoToken(f"{where}: key {self.key!r} is not UTF-8 text") from None
        if not token:
            raise SlurmNoToken(f"{where}: key {self.key!r} holds no token")
        register_secret(token)
        return token

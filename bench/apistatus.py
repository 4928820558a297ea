"""The ``metav1.Status`` the bench's fake API servers answer with, shaped as a real API server writes it.

Why: the kubernetes client reads a Status's ``reason`` and ``message`` (its watch loop formats an ERROR
event's as ``obj['reason']``, ``obj['message']``), and slurm_sync reads ``reason`` to tell the API
server's own NotFound from any 404. A fake that leaves them out makes the client fail where a real
server never would: a 410 event without ``reason`` raised ``KeyError`` in the client, broke the watch
and failed the slurm_sync suite (issue 22).
"""

from __future__ import annotations

from typing import Any

JSON = dict[str, Any]
SUCCESS: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}


def status(code: int, reason: str, message: str, *, name: str = "", kind: str = "") -> JSON:
    """A failure Status: ``reason`` is one of the API server's StatusReasons (NotFound, Conflict,
    AlreadyExists, MethodNotAllowed, Expired ...), ``details`` present when it is about one object."""
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    body["reason"] = reason
    if name or kind:
        body["details"] = {"name": name, "kind": kind}
    body["code"] = code
    return body


def not_found(kind: str = "", name: str = "") -> JSON:
    """404 for an object that does not exist, or for a path the server does not serve (no kind)."""
    if not kind:
        return status(404, "NotFound", "the server could not find the requested resource")
    return status(404, "NotFound", f'{kind} "{name}" not found', name=name, kind=kind)


def conflict(kind: str, name: str, why: str) -> JSON:
    """409 Conflict: a write made from an older resourceVersion, or a binding of a pod already bound."""
    return status(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": {why}', name=name, kind=kind)


def already_exists(kind: str, name: str) -> JSON:
    return status(409, "AlreadyExists", f'{kind} "{name}" already exists', name=name, kind=kind)


def method_not_allowed() -> JSON:
    return status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def expired(since: int, oldest: int) -> JSON:
    """410 for a watch from a resourceVersion older than the server's event window: the watch cache's
    wording (reason Expired; etcd's compaction answers the same reason)."""
    return status(410, "Expired", f"too old resource version: {since} ({oldest})")

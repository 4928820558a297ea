"""The error of a malformed hook request, apart from hooks/contract.py so that modules contract imports
(hooks/applied.py) raise it too; the hook server answers it with 400 (docs/architecture.md §3)."""

from __future__ import annotations


class BadHookRequest(ValueError):
    """The request is not a valid hook request; the message names the field (answered with 400)."""

"""The errors of a malformed request or spec, shared so that every reader of a spec (the hooks and
slurm_sync) raises the same classes and every `except` catches them; the hook server answers both with
400 or, for InvalidSpec, a status condition (docs/architecture.md §3)."""

from __future__ import annotations


class BadHookRequest(ValueError):
    """The request is not a valid hook request; the message names the field (answered with 400)."""


class InvalidSpec(BadHookRequest):
    """A spec value (ours or a related CR's) the CRD schema let through but no child can be built from.

    A subclass of BadHookRequest, so a hook that does not handle it still answers 400; the hooks
    wrapped in `reports_invalid_spec` answer with a status condition instead.
    """

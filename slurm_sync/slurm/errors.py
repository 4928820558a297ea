"""Errors the Slurm REST client raises.

Two families matter to callers, because they mean opposite things for safety:

* ``SlurmUnavailable``: we learned nothing (connect error, timeout, 5xx, a body we cannot
  read). Callers fail closed: mark nothing, delete nothing, try again later.
* ``SlurmRejected``: Slurm understood the request and said no (4xx, or a 200 whose body lists
  ``errors``). Retrying the same request will not help.

No message here ever carries the JWT: it is never formatted in, and body excerpts are redacted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# Slurm error numbers (slurm/slurm_errno.h) the client interprets.
ESLURM_PROTOCOL_AUTHENTICATION: Final = 1007  # slurmctld refused the token (a wrong key, an expired token)
ESLURM_INVALID_JOB_ID: Final = 2017
ESLURM_INVALID_NODE_NAME: Final = 2018
ESLURM_ALREADY_DONE: Final = 2021
ESLURM_RESERVATION_INVALID: Final = 2053
NOT_FOUND_NUMBERS: Final = frozenset({ESLURM_INVALID_JOB_ID, ESLURM_INVALID_NODE_NAME, ESLURM_RESERVATION_INVALID})


def is_transport_number(number: int | None) -> bool:
    """Errors about reaching slurmctld, not about the request: protocol (1000s except the
    authentication error 1007), slurmctld communication (1800s) and socket (5000s) errors."""
    if number is None:
        return False
    return (
        (1000 <= number < 1100 and number != ESLURM_PROTOCOL_AUTHENTICATION)
        or 1800 <= number < 1900
        or 5000 <= number < 5100
    )


@dataclass(frozen=True)
class SlurmErrorDetail:
    """One entry of slurmrestd's ``errors`` list."""

    error: str
    number: int | None
    description: str
    source: str

    def __str__(self) -> str:
        text = self.description or self.error or "unknown error"
        if self.error and self.description and self.error != self.description:
            text = f"{self.description} ({self.error})"
        return f"{text} [slurm error {self.number}]" if self.number is not None else text


class SlurmError(Exception):
    """Base of everything the client raises."""


class SlurmUnavailable(SlurmError):
    """Slurm could not be asked, or its answer could not be trusted."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.status = status
        self.retryable = retryable


class SlurmMalformed(SlurmUnavailable):
    """The body was not JSON, or not the shape slurmrestd documents (not worth retrying)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, status=status, retryable=False)


class SlurmWrongCluster(SlurmUnavailable):
    """The answer came from another Slurm cluster than the one this client serves (or named none
    while one is expected): nothing it says applies to our cluster, and nothing may be written."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message, status=status, retryable=False)


class SlurmSuspect(SlurmUnavailable):
    """A well-formed answer that contradicts what Slurm said before (a listing that suddenly lacks
    many objects it had): treated as a fault until Slurm confirms it object by object."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class SlurmNotLeader(SlurmUnavailable):
    """A write not sent because this replica does not hold the Lease (docs/architecture.md §8):
    another replica may be the leader, so it is never retried here."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class SlurmNoToken(SlurmUnavailable):
    """No token to send (its file unreadable or empty, no JWT key yet): nothing was sent."""

    def __init__(self, message: str) -> None:
        super().__init__(message, retryable=False)


class SlurmRejected(SlurmError):
    """Slurm refused the request; ``errors`` holds its own explanation."""

    def __init__(self, message: str, *, status: int, errors: tuple[SlurmErrorDetail, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.errors = errors

    @property
    def numbers(self) -> frozenset[int]:
        return frozenset(e.number for e in self.errors if e.number is not None)


class SlurmNotFound(SlurmRejected):
    """The named node, job or reservation does not exist (as far as Slurm knows right now)."""


class SlurmUnsupported(SlurmError):
    """The server speaks no REST version we know, or lacks a field this call needs."""

"""The errors of the Slurm REST client (slurm_sync/slurm/errors.py): which mean "we learned nothing" (fail
closed) and which mean "Slurm said no", and how Slurm's own error entries read."""

from __future__ import annotations

import pytest

from slurm_sync.slurm.errors import (
    ESLURM_INVALID_NODE_NAME,
    ESLURM_PROTOCOL_AUTHENTICATION,
    SlurmErrorDetail,
    SlurmMalformed,
    SlurmNotFound,
    SlurmNotLeader,
    SlurmNoToken,
    SlurmRejected,
    SlurmSuspect,
    SlurmUnavailable,
    SlurmWrongCluster,
    is_transport_number,
)


@pytest.mark.parametrize("kind", [SlurmMalformed, SlurmWrongCluster, SlurmSuspect, SlurmNotLeader, SlurmNoToken])
def test_every_answer_we_cannot_trust_is_unavailable_so_callers_fail_closed(kind: type) -> None:
    assert issubclass(kind, SlurmUnavailable) and not issubclass(kind, SlurmRejected)


def test_not_found_is_slurms_explicit_answer_a_rejection_with_its_numbers() -> None:
    gone = SlurmNotFound(
        "no such node", status=404, errors=(SlurmErrorDetail("Invalid node name", ESLURM_INVALID_NODE_NAME, "", "x"),)
    )
    assert isinstance(gone, SlurmRejected) and not isinstance(gone, SlurmUnavailable)
    assert gone.numbers == frozenset({ESLURM_INVALID_NODE_NAME})


@pytest.mark.parametrize(
    ("number", "transport"),
    [(None, False), (1000, True), (ESLURM_PROTOCOL_AUTHENTICATION, False), (1800, True), (5004, True), (2017, False)],
)
def test_transport_numbers_are_about_reaching_slurmctld_not_the_request(number: int | None, transport: bool) -> None:
    assert is_transport_number(number) is transport


def test_an_error_entry_reads_as_its_description_error_and_number() -> None:
    assert (
        str(SlurmErrorDetail("ESLURM_X", 2018, "Invalid node name", ""))
        == "Invalid node name (ESLURM_X) [slurm error 2018]"
    )
    assert str(SlurmErrorDetail("", None, "", "")) == "unknown error"
    assert str(SlurmErrorDetail("same", None, "same", "")) == "same"

"""Absence is proven, never inferred (slurm_sync/proof.py): a not-found answer about that very object on two
passes far enough apart, and a listing that suddenly lacks many objects a fault until each is proven gone."""

from __future__ import annotations

import pytest

from slurm_sync.proof import PROBES_PER_PASS, AbsenceProof, refuse_unproven_loss, sudden_loss
from slurm_sync.slurm.errors import SlurmNotFound, SlurmSuspect, SlurmUnavailable


def test_absence_needs_a_second_not_found_on_a_later_pass_and_old_enough() -> None:
    now = [0.0]
    proof: AbsenceProof[str] = AbsenceProof(5.0, lambda: now[0])
    proof.next_pass()
    assert not proof.not_found("n1")
    now[0] = 10.0
    assert not proof.not_found("n1")  # old enough, but the same pass
    proof.next_pass()
    assert proof.not_found("n1")
    proof.not_found("n2")
    proof.next_pass()
    now[0] = 14.0
    assert not proof.not_found("n2")  # a later pass, but too young
    now[0] = 15.0
    assert proof.not_found("n2")


def test_finding_the_object_in_between_starts_over() -> None:
    now = [0.0]
    proof: AbsenceProof[str] = AbsenceProof(5.0, lambda: now[0])
    proof.not_found("n1")
    proof.next_pass()
    now[0] = 6.0
    proof.found("n1")
    assert not proof.not_found("n1")
    proof.next_pass()
    now[0] = 12.0
    assert proof.not_found("n1")


def test_an_ordinary_loss_is_no_fault_but_many_or_all_at_once_is() -> None:
    before = [f"n{i}" for i in range(20)]
    assert sudden_loss(before, before[1:]) == frozenset()  # one of 20
    assert sudden_loss(before, before[3:]) == frozenset(before[:3])  # SUDDEN_LOSS_MIN
    assert sudden_loss(["a", "b"], []) == frozenset({"a", "b"})  # an empty listing after a non-empty one
    assert sudden_loss(["a", "b", "c", "d"], ["b", "c", "d"]) == frozenset({"a"})  # a quarter
    assert sudden_loss(before, before[3:], expected=before[:3]) == frozenset()  # we deleted them ourselves


def test_a_lost_object_slurm_still_has_proves_the_listing_wrong() -> None:
    def ask(key: str) -> object:
        if key == "b":
            return {"name": "b"}
        raise SlurmNotFound("gone", status=404)

    gone: set[str] = set()
    with pytest.raises(SlurmSuspect, match="yet Slurm still has node b"):
        refuse_unproven_loss(frozenset({"a", "b", "c"}), 10, gone, ask, "node")


def test_a_loss_is_accepted_only_once_slurm_said_gone_about_each_object() -> None:
    lost = frozenset(f"n{i:03}" for i in range(PROBES_PER_PASS + 5))
    asked: list[str] = []

    def ask(key: str) -> object:
        asked.append(key)
        raise SlurmNotFound("gone", status=404)

    gone: set[str] = set()
    with pytest.raises(SlurmSuspect, match="5 not yet confirmed gone"):
        refuse_unproven_loss(lost, 40, gone, ask, "node")
    assert len(asked) == PROBES_PER_PASS  # bounded questions per pass
    refuse_unproven_loss(lost, 40, gone, ask, "node")  # the rest, on the next pass: proven
    assert gone == set() and sorted(asked) == sorted(lost)


def test_an_error_while_asking_proves_nothing() -> None:
    def ask(key: str) -> object:
        raise SlurmUnavailable("timed out")

    gone: set[str] = set()
    with pytest.raises(SlurmUnavailable):
        refuse_unproven_loss(frozenset({"a"}), 1, gone, ask, "node")
    assert gone == set()


def test_absence_evidence_is_due_when_old_enough_to_confirm() -> None:
    now = [100.0]
    proof: AbsenceProof[str] = AbsenceProof(5.0, lambda: now[0])
    assert proof.due() is None
    proof.next_pass()
    proof.not_found("a")
    now[0] = 102.0
    proof.not_found("b")
    assert proof.due() == 3.0  # "a", the older, first
    now[0] = 105.5
    assert proof.due() == 1.5  # "a" is old enough (it waits only for a pass); "b" not yet
    now[0] = 107.0
    assert proof.due() is None

"""Slurm's hostlist notation (slurm_sync/hostlist.py), as job node lists and reservations write it."""

from __future__ import annotations

import pytest

from slurm_sync.hostlist import expand_hostlist


def test_hostlists_expand() -> None:
    assert expand_hostlist("n[1-2],gpu[08-10,3]x") == ["n1", "n2", "gpu08x", "gpu09x", "gpu10x", "gpu3x"]


def test_zero_padding_nested_ranges_and_blanks() -> None:
    assert expand_hostlist("n[098-101]") == ["n098", "n099", "n100", "n101"]
    assert expand_hostlist("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert expand_hostlist(" a , ,b ") == ["a", "b"]
    assert expand_hostlist("") == []


@pytest.mark.parametrize("text", ["n[1-2", "n1-2]", "n[a-b]", "n[1-]"])
def test_an_unreadable_hostlist_is_refused_not_guessed(text: str) -> None:
    with pytest.raises(ValueError, match="unreadable hostlist"):
        expand_hostlist(text)

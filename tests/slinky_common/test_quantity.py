"""Strict Kubernetes quantities (slinky_common/quantity.py): exact values, slurm-bridge's rounding, Slurm's
bounds, and anything that is not a quantity reported, never read as 0."""

from __future__ import annotations

from fractions import Fraction

import pytest

from slinky_common import quantity
from slinky_common.quantity import BadQuantity, OutOfRange


@pytest.mark.parametrize(
    ("text", "exact"),
    [("200m", Fraction(1, 5)), ("1Gi", 2**30), ("1e3", 1000), ("1.5", Fraction(3, 2)), (2, 2), ("1E", 10**18)],
)
def test_exact_values_of_every_notation(text: object, exact: Fraction | int) -> None:
    assert quantity.parse(text) == exact


@pytest.mark.parametrize("text", ["", "1GB", "one", "1 Gi", None, True, [1], "--1"])
def test_what_is_not_a_quantity_is_refused_not_read_as_zero(text: object) -> None:
    with pytest.raises(BadQuantity, match="is not a Kubernetes quantity"):
        quantity.parse(text)


def test_rounding_as_slurm_bridge_rounds() -> None:
    assert quantity.cpus(quantity.parse("200m")) == 1
    assert quantity.cpus(quantity.parse("2")) == 2
    assert quantity.mebibytes(quantity.parse("1Gi")) == 1024
    assert quantity.mebibytes(quantity.parse("1Mi")) == 1
    assert quantity.mebibytes(quantity.parse("1500k")) == 1  # 1,500,000 bytes: 1 whole MiB
    assert quantity.count(quantity.parse("2")) == 2


def test_more_than_slurm_can_hold_is_out_of_range() -> None:
    with pytest.raises(OutOfRange, match="CPUs"):
        quantity.cpus(quantity.parse(str(quantity.MAX_CPUS + 1)))
    assert quantity.cpus(quantity.parse(str(quantity.MAX_CPUS))) == quantity.MAX_CPUS
    with pytest.raises(OutOfRange):
        quantity.parse("1e31")


@pytest.mark.parametrize("read", [quantity.cpus, quantity.mebibytes, quantity.count])
def test_a_negative_amount_is_out_of_range_not_passed_to_slurm(read) -> None:
    """Slurm's fields are unsigned (a negative memory_per_node sets the per-CPU flag bit): refused, named."""
    with pytest.raises(OutOfRange, match=r"^-\d+ \w+ is negative; Slurm holds 0 to \d+$"):
        read(quantity.parse("-1Gi"))
    assert read(quantity.parse("0")) == 0


def test_a_huge_exponent_is_refused_and_a_tiny_one_is_one_nano() -> None:
    """Refused from its text alone: building 10**2000000000 exactly would take minutes (the test's timeout)."""
    with pytest.raises(OutOfRange):
        quantity.parse("1e2000000000")
    assert quantity.parse("1e-40") == quantity.NANO  # below 1n: the least non-zero quantity Kubernetes keeps

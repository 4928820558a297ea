"""Strict Kubernetes resource quantities, rounded the way slurm-bridge rounds them.

Unlike the lenient parser the NodeSet hook uses for its own pod templates, a user's annotation
that is not a quantity must be reported, never read as 0: a malformed `mem-per-node` has to stop
the job, not submit one without a memory limit.
"""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?")
_SUFFIX = {
    None: Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
    "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip
MIB = 2**20


class BadQuantity(ValueError):
    """Not a Kubernetes quantity."""


def parse(text: object) -> Fraction:
    """The exact value of a quantity ('200m', '1Gi', '1e3'); BadQuantity for anything else, of any type."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return Fraction(text)
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise BadQuantity(f"{text!r} is not a Kubernetes quantity")
    number = Fraction(match.group(1))
    if match.group(2) is not None:
        return number * Fraction(10) ** int(match.group(2))
    return number * _SUFFIX[match.group(3)]


def value(quantity: Fraction) -> int:
    """Quantity.Value(): the integer value rounded up ('200m' -> 1)."""
    return -(-quantity.numerator // quantity.denominator)


def mebibytes(quantity: Fraction) -> int:
    """Bytes as whole MiB, rounded down after Value() rounds up ('1Gi' -> 1024, '1Mi' -> 1)."""
    return value(quantity) // MIB

"""Strict Kubernetes resource quantities, rounded the way slurm-bridge rounds them, within Slurm's bounds.

Unlike the lenient parser the NodeSet hook uses for its own pod templates, a user's annotation
that is not a quantity must be reported, never read as 0: a malformed `mem-per-node` has to stop
the job, not submit one without a memory limit. So must a quantity the API server accepts but
Slurm cannot hold (`cpu: "1e20"`): slurmrestd would truncate it, or the job could not be written.
"""

from __future__ import annotations

import re
import reprlib
from decimal import Decimal
from fractions import Fraction
from typing import Final

_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:[eE]([+-]?[0-9]{1,10})|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?"
)
_SUFFIX = {
    None: Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18), "Ki": Fraction(2**10), "Mi": Fraction(2**20),
    "Gi": Fraction(2**30), "Ti": Fraction(2**40), "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}  # fmt: skip
MIB = 2**20
NANO = Fraction(1, 10**9)
# Slurm's widest values for the fields quantities reach (slurm.h; slurmrestd's OpenAPI):
MAX_CPUS: Final = 0xFFFD  # cpus_per_task, a node's CPUs: uint16_t; 0xFFFE, 0xFFFF mean unset, infinite
MAX_MEBIBYTES: Final = 2**63 - 1  # memory_per_node, real_memory (MB): int64; Slurm's top bit means per CPU
MAX_COUNT: Final = 2**63 - 1  # a gres count in tres_per_node: TRES counts are int64
# Beyond 10**30 no quantity fits any bound above even times 2**60 (Ei); such text is refused before an
# exact value is built (`1e2000000000` would take minutes), and a non-zero value below 10**-30 is 1n,
# the least Kubernetes keeps of a non-zero quantity.
_MAX_MAGNITUDE = 30


class BadQuantity(ValueError):
    """Not a Kubernetes quantity, or one Slurm cannot hold."""


class OutOfRange(BadQuantity):
    """A quantity larger than the Slurm field it becomes can hold; the message names the bound."""


def parse(text: object) -> Fraction:
    """The exact value of a quantity ('200m', '1Gi', '1e3'); BadQuantity for anything else, of any type,
    OutOfRange beyond 10**30."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = str(text)  # a JSON number: its text, so that 1e300 is bounded like "1e300"
    match = _QUANTITY.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        raise BadQuantity(f"{reprlib.repr(text)} is not a Kubernetes quantity")
    number, exponent = Decimal(match.group(1)), int(match.group(2) or 0)
    if number and number.adjusted() + exponent > _MAX_MAGNITUDE:
        raise OutOfRange(f"{reprlib.repr(text)} is larger than any amount Slurm can hold")
    if number and number.adjusted() + exponent < -_MAX_MAGNITUDE:
        return NANO if number > 0 else -NANO
    scale = Fraction(10) ** exponent if match.group(2) is not None else _SUFFIX[match.group(3)]
    return Fraction(number) * scale


def value(quantity: Fraction) -> int:
    """Quantity.Value(): the integer value rounded up ('200m' -> 1)."""
    return -(-quantity.numerator // quantity.denominator)


def cpus(quantity: Fraction) -> int:
    """Whole CPUs, rounded up ('200m' -> 1); OutOfRange beyond MAX_CPUS."""
    return _at_most(value(quantity), MAX_CPUS, "CPUs")


def mebibytes(quantity: Fraction) -> int:
    """Bytes as whole MiB, rounded down after Value() rounds up ('1Gi' -> 1024, '1Mi' -> 1); OutOfRange
    beyond MAX_MEBIBYTES."""
    return _at_most(value(quantity) // MIB, MAX_MEBIBYTES, "MiB")


def count(quantity: Fraction) -> int:
    """A device count, rounded up; OutOfRange beyond MAX_COUNT."""
    return _at_most(value(quantity), MAX_COUNT, "devices")


def _at_most(number: int, bound: int, unit: str) -> int:
    """`number` when Slurm can hold it: not negative (Slurm's fields are unsigned; a negative memory sets the
    per-CPU flag bit), at most `bound`."""
    if number < 0:
        raise OutOfRange(f"{number} {unit} is negative; Slurm holds 0 to {bound}")
    if number > bound:
        raise OutOfRange(f"{number} {unit} is more than Slurm can hold (at most {bound})")
    return number

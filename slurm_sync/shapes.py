"""Large JSON answers decoded into only what slurm_sync reads (docs/architecture.md §7).

A 20,000-node Slurm listing is some 40 MB of JSON, a page of 500 pods some 7 MB; decoded whole into
Python objects they cost several times that at once, mostly fields no decision reads (a Slurm node's
seventy fields, a pod's containers and volumes, a Node's images). msgspec decodes an answer against a
shape (``record``) and skips what the shape leaves out without building it, so the peak is the
answer's bytes and the fields read. The result is what the strict decoder gives without those fields.

The decoder is the one the hook server uses (slinky_common/decode.py `shaped`): an answer the shape does not fit
(another type where the shape says object or list, not JSON) is decoded again by the strict decoder,
whose verdict stands; so is one that is not valid UTF-8 (the decoder does not check the text it
skips) or nests past the recursion limit. Corners judged differently, which neither slurmrestd nor an
API server sends (tests/slurm_sync/test_shapes.py pins them): an integer beyond 64 bits in a
field read is read exactly (orjson makes it a float); a number beyond the double range in the text
skipped is not refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypedDict

Body = bytes | bytearray  # an answer's bytes (slurm_sync/slurm/client.py reads into a buffer of its own)
Decode = Callable[[Body], Any]


def record(name: str, fields: Iterable[str], **typed: Any) -> Any:
    """The type of a JSON object of which only ``fields`` (any JSON) and ``typed`` (their types) are kept."""
    return TypedDict(name, {**dict.fromkeys(fields, Any), **typed}, total=False)  # type: ignore[operator]

"""Slurm's hostlist notation (``n[1-3,07],gpu5``), read by both loops: job node lists, reservations."""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand_hostlist(text: str) -> list[str]:
    """Slurm's hostlist (``n[1-3,07],gpu5``) as names, in order."""
    hosts: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(text + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            if part := text[start:index].strip():
                hosts.extend(_expand_one(part))
            start = index + 1
        if depth < 0:
            break
    if depth:
        raise ValueError(f"unreadable hostlist {text!r}: unbalanced brackets")
    return hosts


def _expand_one(part: str) -> list[str]:
    if "[" not in part:
        return [part]
    prefix, _, rest = part.partition("[")
    ranges, _, suffix = rest.partition("]")
    out: list[str] = []
    for item in ranges.split(","):
        match = _RANGE.match(item.strip())
        if not match:
            raise ValueError(f"unreadable hostlist {part!r}")
        low, high = match.group(1), match.group(2) or match.group(1)
        out.extend(f"{prefix}{n:0{len(low)}d}" for n in range(int(low), int(high) + 1))
    return [name + tail for name in out for tail in _expand_one(suffix)] if suffix else out

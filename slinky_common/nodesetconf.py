"""What a NodeSet contributes to slurm.conf (its NodeSet and partition lines, its gres names), and the
checks that keep a user's value on one line of it.

slurm.conf is line oriented: a newline (or a trailing `\\` continuation) in any value a user controls
would smuggle in extra directives, so each such value is checked here and refused with InvalidSpec
naming its field. slurm_sync reads a NodeSet's partition the same way the Controller hook writes it,
so both agree on which partition is whose, and on a NodeSet neither can read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slinky_common import fields, gres, names
from slinky_common.errors import InvalidSpec

# A Slurm name: letters, digits and `._-`; nothing that slurm.conf would split on (spaces, `=`,
# `,`, `#`, parentheses) or read as a new line.
_WORD = re.compile(r"[A-Za-z0-9_.-]+")
# One `State=<value>` partition option (Slurm reads option names case-insensitively).
_STATE_OPTION = re.compile(r"(?i)(?:^|(?<=\s))State=(?:\"[^\"]*\"|\S*)")


@dataclass(frozen=True)
class NodeSetConf:
    """One NodeSet as slurm.conf sees it: its feature name, partition options if enabled, its gres names."""

    name: str
    partition: str | None = None
    gres_types: tuple[str, ...] = ()


def nodeset_conf(nodeset: Mapping[str, Any], where: str) -> NodeSetConf:
    """A NodeSet's slurm.conf identity: the pod hostname prefix (trimmed of `-`) or its name.

    A NodeSet being deleted keeps its lines (its finalize waits for its jobs) but its partition
    takes no new job: State=names.PARTITION_STATE_DELETING replaces any State= the user gave.
    """
    spec = nodeset.get("spec") or {}
    template_spec = (spec.get("template") or {}).get("spec") or {}
    hostname = template_spec.get("hostname")
    if hostname:
        name = check_word(str(hostname).strip("-"), f"{where} spec.template.spec.hostname")
    else:
        name = check_word(nodeset["metadata"]["name"], f"{where} metadata.name")
    types = _nodeset_gres_types(spec, template_spec, where)
    partition = spec.get("partition") or {}
    if not partition.get("enabled"):
        return NodeSetConf(name, gres_types=types)
    config = partition.get("config") or ""
    if not isinstance(config, str):
        raise InvalidSpec(f"{where} spec.partition.config must be a string")
    config = check_line(config.strip(), f"{where} spec.partition.config")
    if (nodeset.get("metadata") or {}).get("deletionTimestamp"):
        config = deleting_partition(config)
    return NodeSetConf(name, config, types)


def _nodeset_gres_types(spec: Mapping[str, Any], template_spec: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """The gres names the NodeSet's slurmd register (its extraConf `Gres=`, else its GPUs)."""
    extra = spec.get("extraConf") or ""
    if not isinstance(extra, str):
        raise InvalidSpec(f"{where} spec.extraConf must be a string")
    explicit = parse_extra_conf(extra).get("Gres")
    slurmd = fields.container_override(dict(spec), "slurmd", f"{where} spec")
    value = gres.node_gres(explicit, slurmd, dict(template_spec), where)
    return gres.gres_types(value, f"{where} gres") if value else ()


def deleting_partition(config: str) -> str:
    """Partition options with every `State=` option replaced by the state that refuses new jobs."""
    kept = _STATE_OPTION.sub(" ", config).split()
    return " ".join([*kept, f"State={names.PARTITION_STATE_DELETING}"])


def check_line(value: str, where: str) -> str:
    """Several `Key=Value` options meant for one line: spaces are fine, line breaks are not."""
    if any(c in value for c in "\r\n\0"):
        raise InvalidSpec(f"{where} must be a single line (no line break or NUL)")
    return value


def check_word(value: Any, where: str) -> str:
    """A Slurm name (cluster, NodeSet, file name): no separators slurm.conf would split on."""
    if not isinstance(value, str) or not _WORD.fullmatch(value):
        raise InvalidSpec(f"{where} must be a non-empty name of letters, digits, '.', '_' or '-', got {value!r}")
    return value


def check_extra_conf(value: Any, where: str) -> str:
    """Free-form lines, but no stray line breaks and no continuation swallowing our next line."""
    if not isinstance(value, str):
        raise InvalidSpec(f"{where} must be a string")
    if "\r" in value or "\x00" in value:
        raise InvalidSpec(f"{where} must not contain carriage returns or NUL")
    if value.rstrip("\n").endswith("\\"):
        raise InvalidSpec(f"{where} must not end with a '\\' line continuation")
    return value


def parse_extra_conf(extra_conf: str) -> dict[str, list[str]]:
    """`Key=Value` tokens by capitalised key; a malformed string counts as empty (as Slinky)."""
    items: dict[str, list[str]] = {}
    for token in extra_conf.split():
        key, sep, value = token.partition("=")
        if not sep or not key:
            return {}
        items.setdefault(key[:1].upper() + key[1:], []).append(value)
    return items

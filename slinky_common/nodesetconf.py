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
# Pods one NodeSet may have, elastic or not: one sync builds every pod in one response (10,000 pods is about 30 MB
# and half a second; larger pools are split across NodeSets).
MAX_REPLICAS = 10_000
MAX_ORDINAL_PADDING = 10  # an int32 ordinal has at most 10 digits
DEFAULT_SUSPEND_TIME = 600
DEFAULT_RESUME_TIMEOUT = 600
# Slurm keeps a partition's ResumeTimeout in 16 bits, 65535 meaning "infinite": a larger value stops slurmctld.
MAX_RESUME_TIMEOUT = 65534
# The node options an elastic NodeSet's extraConf may give its slurm.conf NodeName lines (lower case; Slurm reads
# option names so), and what their values may hold: a key a NodeName line does not take, a `#` (a comment to the end
# of the line) or a quote would break slurm.conf for the whole cluster, not only this NodeSet's slurmd.
ELASTIC_NODE_OPTIONS = frozenset(
    {
        "boards", "corespeccount", "corespersocket", "cpus", "cpuspeclist", "feature", "features", "gres",
        "memspeclimit", "realmemory", "sockets", "socketsperboard", "threadspercore", "tmpdisk", "topology", "weight",
    }
)  # fmt: skip
_ELASTIC_OPTION_VALUE = re.compile(r"[A-Za-z0-9_.,:/+-]+")
# One `State=<value>` partition option (Slurm reads option names case-insensitively).
_STATE_OPTION = re.compile(r"(?i)(?:^|(?<=\s))State=(?:\"[^\"]*\"|\S*)")


@dataclass(frozen=True)
class Elastic:
    """spec.elastic (docs/architecture.md §4.9): Slurm's power saving sizes the NodeSet between the two bounds."""

    min_replicas: int
    max_replicas: int
    suspend_time: int  # seconds idle before Slurm powers a node down
    resume_timeout: int  # seconds a powered-up node's pod has to register


@dataclass(frozen=True)
class ElasticNodes:
    """What slurm.conf says of an elastic NodeSet's nodes: the always-on ordinals below minReplicas and the
    on-demand ones Slurm powers up and down (hostlists, None when there are none), the node options every pod's
    slurmd registers with (so a powered-down node is scheduled with the size its pod will have), and the times."""

    always_on: str | None
    on_demand: str | None
    options: str
    elastic: Elastic


@dataclass(frozen=True)
class NodeSetConf:
    """One NodeSet as slurm.conf sees it: its feature name, partition options if enabled, its gres names, and
    its powered-down nodes when it is elastic."""

    name: str
    partition: str | None = None
    gres_types: tuple[str, ...] = ()
    elastic: ElasticNodes | None = None


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
    extra = spec.get("extraConf") or ""
    if not isinstance(extra, str):
        raise InvalidSpec(f"{where} spec.extraConf must be a string")
    slurmd = fields.container_override(dict(spec), "slurmd", f"{where} spec")
    node_gres = gres.node_gres(parse_extra_conf(extra).get("Gres"), slurmd, dict(template_spec), where)
    types = gres.gres_types(node_gres, f"{where} gres") if node_gres else ()
    partition = spec.get("partition") or {}
    if not partition.get("enabled"):
        return NodeSetConf(name, gres_types=types)
    config = partition.get("config") or ""
    if not isinstance(config, str):
        raise InvalidSpec(f"{where} spec.partition.config must be a string")
    config = check_line(config.strip(), f"{where} spec.partition.config")
    if (nodeset.get("metadata") or {}).get("deletionTimestamp"):
        config = deleting_partition(config)
    elastic = read_elastic(spec, f"{where} spec")
    if elastic is None:
        return NodeSetConf(name, config, types)
    items = node_conf(name, extra, slurmd, template_spec, where)
    return NodeSetConf(name, config, types, _elastic_nodes(nodeset, elastic, items, where))


def read_elastic(spec: Mapping[str, Any], where: str = "spec") -> Elastic | None:
    """spec.elastic with its defaults, None when absent; InvalidSpec naming the field when unusable (`where`:
    the spec's own name in the message, "spec" or "related NodeSet 'gpu' spec")."""
    raw = spec.get("elastic")
    if raw is None:
        return None
    at = f"{where}.elastic"
    if not isinstance(raw, dict):
        raise InvalidSpec(f"{at} must be an object")
    maximum = fields.opt_int(raw, "maxReplicas", 0, at, minimum=1, maximum=MAX_REPLICAS)
    if "maxReplicas" not in raw:
        raise InvalidSpec(f"{at}.maxReplicas is required")
    minimum = fields.opt_int(raw, "minReplicas", 0, at, maximum=maximum)
    return Elastic(
        min_replicas=minimum,
        max_replicas=maximum,
        suspend_time=fields.opt_int(raw, "suspendTime", DEFAULT_SUSPEND_TIME, at, minimum=1),
        resume_timeout=fields.opt_int(
            raw, "resumeTimeout", DEFAULT_RESUME_TIMEOUT, at, minimum=1, maximum=MAX_RESUME_TIMEOUT
        ),
    )


def _elastic_nodes(nodeset: Mapping[str, Any], elastic: Elastic, items: Mapping[str, str], where: str) -> ElasticNodes:
    """`items`: the options its slurmd register with (`node_conf`), which its slurm.conf lines carry."""
    prefix, padding = _hostname_parts(nodeset, where)
    always_on = _hostlist(prefix, padding, 0, elastic.min_replicas)
    on_demand = _hostlist(prefix, padding, elastic.min_replicas, elastic.max_replicas)
    _check_elastic_options(items, f"{where} spec.extraConf")
    options = " ".join(f"{key}={value}" for key, value in sorted(items.items()))
    return ElasticNodes(always_on, on_demand, options, elastic)


def _check_elastic_options(items: Mapping[str, str], where: str) -> None:
    """The options of an elastic NodeSet's slurm.conf lines: known NodeName keys with plain values, and the node's
    size. Its slurmd is not a dynamic node and detects nothing itself, so without CPUs= and RealMemory= Slurm would
    schedule each powered-down node as 1 CPU and 1 MB."""
    for key, value in sorted(items.items()):
        if key.lower() not in ELASTIC_NODE_OPTIONS:
            raise InvalidSpec(f"{where}: {key}= is not a node option an elastic NodeSet's slurm.conf lines take")
        if not _ELASTIC_OPTION_VALUE.fullmatch(value):
            raise InvalidSpec(f"{where}: {key}={value!r} must hold only letters, digits and _ . , : / + -")
    given = {key.lower() for key in items}
    missing = [key for key in ("CPUs", "RealMemory") if key.lower() not in given]
    if missing:
        raise InvalidSpec(f"{where} must give {' and '.join(f'{k}=' for k in missing)} for an elastic NodeSet")


def on_demand_nodes(nodeset: Mapping[str, Any], where: str = "nodeset") -> dict[str, int]:
    """An elastic NodeSet's on-demand Slurm nodes (ordinals minReplicas..maxReplicas-1) by name, their ordinal
    as value; empty when the NodeSet is not elastic. InvalidSpec when spec.elastic cannot be read."""
    elastic = read_elastic(nodeset.get("spec") or {}, f"{where} spec")
    if elastic is None:
        return {}
    return _ordinal_nodes(nodeset, where, elastic.min_replicas, elastic.max_replicas)


def elastic_nodes(nodeset: Mapping[str, Any], where: str = "nodeset") -> dict[str, int]:
    """Every Slurm node slurm.conf names for an elastic NodeSet (ordinals 0..maxReplicas-1), as on_demand_nodes."""
    elastic = read_elastic(nodeset.get("spec") or {}, f"{where} spec")
    if elastic is None:
        return {}
    return _ordinal_nodes(nodeset, where, 0, elastic.max_replicas)


def _ordinal_nodes(nodeset: Mapping[str, Any], where: str, start: int, stop: int) -> dict[str, int]:
    prefix, padding = _hostname_parts(nodeset, where)
    return {prefix + str(o).zfill(padding): o for o in range(start, stop)}


def _hostname_parts(nodeset: Mapping[str, Any], where: str) -> tuple[str, int]:
    """The NodeSet's pod hostname prefix and ordinal padding (`ordinal_hostname`)."""
    spec = nodeset.get("spec") or {}
    template_hostname = ((spec.get("template") or {}).get("spec") or {}).get("hostname")
    padding = fields.opt_int(dict(spec), "ordinalPadding", 0, f"{where} spec", maximum=MAX_ORDINAL_PADDING)
    return hostname_prefix(str(nodeset["metadata"]["name"]), template_hostname), padding


def _hostlist(prefix: str, padding: int, start: int, stop: int) -> str | None:
    """Slurm's hostlist of the ordinal hostnames start..stop-1, None when empty."""
    if start >= stop:
        return None
    return f"{prefix}[{str(start).zfill(padding)}-{str(stop - 1).zfill(padding)}]"


def node_conf(
    feature: str, extra_conf: str, slurmd: Mapping[str, Any], template_spec: Mapping[str, Any], where: str
) -> dict[str, str]:
    """The node options each of the NodeSet's slurmd registers with (`--conf`): the user's extraConf, the
    NodeSet's feature among any others, and its gres; empty values left out (slurmd would read the next key as
    the value). slurm.conf's powered-down nodes of an elastic NodeSet carry the same options."""
    items = parse_extra_conf(extra_conf)
    features = {feature}
    for key in ("Feature", "Features"):
        for value in items.pop(key, []):
            features.update(v for v in value.split(",") if v)
    node_gres = gres.node_gres(items.pop("Gres", None), dict(slurmd), dict(template_spec), where)
    conf = {key: ",".join(v for v in values if v) for key, values in items.items()}
    conf.update(Features=",".join(sorted(features)), Gres=node_gres or "")
    return {key: text for key, text in conf.items() if text}


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


def hostname_prefix(nodeset: str, template_hostname: str | None) -> str:
    """What a StatefulSet-mode pod's hostname (its Slurm node name) starts with: the pod template's hostname
    (`gpu` -> `gpu0`), else `<nodeset>-`; the zero-padded ordinal follows."""
    return template_hostname or f"{nodeset}-"


def ordinal_hostname(nodeset: str, template_hostname: str | None, padding: int, ordinal: int) -> str:
    return hostname_prefix(nodeset, template_hostname) + str(ordinal).zfill(padding)

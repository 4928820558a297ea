"""slurm.conf for a Controller, line for line as Slinky writes it, and the checks that keep it sound.

slurm.conf is line oriented: a newline (or a trailing `\\` continuation) in any value a user
controls would smuggle in extra directives, so every value that lands inside one line is checked
here and rejected with an error naming its field. Rendering is a pure function of `SlurmConf`;
NodeSets are sorted by name so the text (and the config hash that rolls slurmctld) does not
depend on the order objects arrive in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hooks import cluster, gres, names
from hooks.cluster import InvalidSpec
from hooks.nodeset.pods import parse_extra_conf

if TYPE_CHECKING:
    from hooks.controller.model import Controller, Endpoint

ETC_DIR = "/etc/slurm"
STATE_SAVE_ROOT = "/var/spool/slurmctld"
SLURMCTLD_LOG = f"{cluster.LOG_DIR}/slurmctld.log"
JWT_KEY_FILE = "jwt.key"
SLURM_KEY_FILE = "slurm.key"
JWKS_FILE = "jwks.json"
CGROUP_CONF_FILE = "cgroup.conf"
SLURM_CONF_FILE = "slurm.conf"
CGROUP_CONF = "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"

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


@dataclass(frozen=True)
class Scripts:
    """Prolog/epilog file names (ConfigMap keys), each tuple sorted."""

    prolog: tuple[str, ...] = ()
    epilog: tuple[str, ...] = ()
    prolog_slurmctld: tuple[str, ...] = ()
    epilog_slurmctld: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmConf:
    cluster_name: str
    controller: Controller
    accounting: Endpoint | None = None
    metrics: bool = False
    jwks: bool = False
    scripts: Scripts = field(default_factory=Scripts)
    nodesets: tuple[NodeSetConf, ...] = ()
    extra_conf: str = ""


def render(conf: SlurmConf) -> str:
    """The slurm.conf of an in-cluster slurmctld (Slinky's sections, in Slinky's order)."""
    sections = [
        ("GENERAL", _general(conf)),
        (
            "LOGGING",
            [
                f"SlurmctldLogFile={SLURMCTLD_LOG}",
                f"SlurmSchedLogFile={SLURMCTLD_LOG}",
                f"SlurmdLogFile={cluster.LOG_DIR}/slurmd.log",
            ],
        ),
        ("PLUGINS & PARAMETERS", _plugins(conf)),
        ("ACCOUNTING", _accounting(conf.accounting)),
        (
            "SLURMCTLD PROLOG & EPILOG",
            _script_lines(conf.scripts.prolog_slurmctld, "PrologSlurmctld", f"{ETC_DIR}/")
            + _script_lines(conf.scripts.epilog_slurmctld, "EpilogSlurmctld", f"{ETC_DIR}/"),
        ),
        # Relative names: configless slurmd fetch them from slurmctld.
        (
            "PROLOG & EPILOG",
            _script_lines(conf.scripts.prolog, "Prolog", "") + _script_lines(conf.scripts.epilog, "Epilog", ""),
        ),
        ("NODESET & PARTITION", _nodeset_lines(conf.nodesets)),
        ("EXTRA CONFIG", [conf.extra_conf.rstrip("\n")] if conf.extra_conf.strip() else []),
        ("MERGED CONFIG", cluster.merged_config(operator_parameters(conf.jwks, _gres_types(conf)), conf.extra_conf)),
    ]
    return _join(sections)


def render_external(cluster_name: str, controller: Controller, accounting: Endpoint | None) -> str:
    """The minimal slurm.conf clients (slurmrestd) need to reach a slurmctld outside Kubernetes."""
    return _join(
        [
            (
                "GENERAL",
                [
                    f"ClusterName={cluster_name}",
                    "SlurmUser=slurm",
                    *(f"SlurmctldHost={host}" for host in controller.slurmctld_hosts),
                    f"SlurmctldPort={controller.endpoint.port}",
                ],
            ),
            ("PLUGINS & PARAMETERS", ["AuthType=auth/slurm", "CredType=cred/slurm", "AuthAltTypes=auth/jwt"]),
            ("ACCOUNTING", _accounting(accounting)),
        ]
    )


def operator_parameters(jwks: bool, gres_types: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Values the daemons depend on, for the keys a user may extend through extraConf.

    `GresTypes` names every gres a NodeSet's nodes register (hooks/gres.py); without it slurmctld
    rejects their registration.

    A user's own setting of one of these keys is merged into a last MERGED CONFIG line (Slurm
    keeps the last setting), so extraConf can add options but never drop ours.
    """
    alt = [f"jwt_key={ETC_DIR}/{JWT_KEY_FILE}"] + ([f"jwks={ETC_DIR}/{JWKS_FILE}"] if jwks else [])
    params = {
        "AuthAltParameters": alt,
        "AuthInfo": ["use_client_ids"],
        "SlurmctldParameters": ["enable_configless", "reconfig_on_restart"],
    }
    return params | ({"GresTypes": list(gres_types)} if gres_types else {})


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
    slurmd = cluster.container_override(dict(spec), "slurmd", f"{where} spec")
    value = gres.node_gres(explicit, slurmd, dict(template_spec), where)
    return gres.gres_types(value, f"{where} gres") if value else ()


def _gres_types(conf: SlurmConf) -> tuple[str, ...]:
    return gres.union(ns.gres_types for ns in conf.nodesets)


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


def _general(conf: SlurmConf) -> list[str]:
    controller = conf.controller
    return [
        f"ClusterName={conf.cluster_name}",
        "SlurmUser=slurm",
        *(f"SlurmctldHost={host}" for host in controller.slurmctld_hosts),
        f"SlurmctldPort={controller.endpoint.port}",
        f"SlurmctldAddr={controller.endpoint.host}",
        f"StateSaveLocation={STATE_SAVE_ROOT}/{conf.cluster_name}",
        "SlurmdUser=root",
        f"SlurmdPort={cluster.SLURMD_PORT}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        "MaxNodeCount=1024",
    ]


def _plugins(conf: SlurmConf) -> list[str]:
    ours = operator_parameters(conf.jwks, _gres_types(conf))
    lines = ["AuthType=auth/slurm", "CredType=cred/slurm", "AuthAltTypes=auth/jwt"]
    lines += [f"{key}={','.join(values)}" for key, values in ours.items()]
    return lines + (["MetricsType=metrics/openmetrics"] if conf.metrics else [])


def _accounting(accounting: Endpoint | None) -> list[str]:
    if accounting is None:
        return ["AccountingStorageType=accounting_storage/none"]
    return [
        "AccountingStorageType=accounting_storage/slurmdbd",
        f"AccountingStorageHost={accounting.host}",
        f"AccountingStoragePort={accounting.port}",
    ]


def _script_lines(files: Iterable[str], key: str, prefix: str) -> list[str]:
    return [f"{key}={prefix}{name}" for name in files]


def _nodeset_lines(nodesets: Iterable[NodeSetConf]) -> list[str]:
    lines = []
    for ns in sorted(nodesets, key=lambda n: (n.name, n.partition or "")):
        lines.append(f"NodeSet={ns.name} Feature={ns.name}")
        if ns.partition is not None:
            lines.append(f"PartitionName={ns.name} Nodes={ns.name} {ns.partition}".rstrip())
    return lines


def _join(sections: list[tuple[str, list[str]]]) -> str:
    out: list[str] = []
    for title, lines in sections:
        if lines:
            out += ["#", f"### {title} ###", *lines]
    return "\n".join(out) + "\n"

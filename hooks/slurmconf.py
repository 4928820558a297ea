"""slurm.conf for a Controller, line for line as Slinky writes it, and the checks that keep it sound.

slurm.conf is line oriented: a newline (or a trailing `\\` continuation) in any value a user
controls would smuggle in extra directives, so every value that lands inside one line is checked
here and rejected with an error naming its field. Rendering is a pure function of `SlurmConf`;
NodeSets are sorted by name so the text (and the config hash that rolls slurmctld) does not
depend on the order objects arrive in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hooks import conffile, logfile
from slinky_common import gres, wellknown
from slinky_common.nodesetconf import ElasticNodes, NodeSetConf

if TYPE_CHECKING:
    from hooks.controller.model import Controller, Endpoint

ETC_DIR = "/etc/slurm"
STATE_SAVE_ROOT = "/var/spool/slurmctld"
SLURMCTLD_LOG = f"{logfile.LOG_DIR}/slurmctld.log"
JWT_KEY_FILE = "jwt.key"
SLURM_KEY_FILE = "slurm.key"
JWKS_FILE = "jwks.json"
CGROUP_CONF_FILE = "cgroup.conf"
SLURM_CONF_FILE = "slurm.conf"
CGROUP_CONF = "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"


@dataclass(frozen=True)
class Scripts:
    """Prolog/epilog file names (ConfigMap keys), each tuple sorted."""

    prolog: tuple[str, ...] = ()
    epilog: tuple[str, ...] = ()
    prolog_slurmctld: tuple[str, ...] = ()
    epilog_slurmctld: tuple[str, ...] = ()


# Dynamic nodes Slurm makes room for (NodeSet pods, the bridge's external nodes), beside slurm.conf's own nodes.
MAX_DYNAMIC_NODES = 1024
# What slurmctld runs to power an elastic node up or down: nothing (slurm_sync and the NodeSet hook do the work).
POWER_PROGRAM = "/bin/true"
ENFORCE_PART_LIMITS = "EnforcePartLimits"  # set with an elastic NodeSet unless extraConf sets it (_power_saving)


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
                f"SlurmdLogFile={logfile.LOG_DIR}/slurmd.log",
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
        ("POWER SAVING", _power_saving(conf.nodesets, conf.extra_conf)),
        ("NODESET & PARTITION", _nodeset_lines(conf.nodesets)),
        ("EXTRA CONFIG", [conf.extra_conf.rstrip("\n")] if conf.extra_conf.strip() else []),
        ("MERGED CONFIG", conffile.merged_config(_operator_parameters(conf), conf.extra_conf)),
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

    `GresTypes` names every gres a NodeSet's nodes register (slinky_common/gres.py); without it slurmctld
    rejects their registration. No `cloud_reg_addrs` for elastic nodes: Slurm has taken a registering node's
    address from its slurmd since 23.11, and 26.05 logs the option as defunct (docs/architecture.md §4.9).

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


def _operator_parameters(conf: SlurmConf) -> dict[str, list[str]]:
    return operator_parameters(conf.jwks, _gres_types(conf))


def _gres_types(conf: SlurmConf) -> tuple[str, ...]:
    return gres.union(ns.gres_types for ns in conf.nodesets)


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
        f"SlurmdPort={wellknown.SLURMD_PORT}",
        "SlurmdSpoolDir=/var/spool/slurmd",
        f"MaxNodeCount={MAX_DYNAMIC_NODES + _elastic_nodes(conf)}",
    ]


def _elastic_nodes(conf: SlurmConf) -> int:
    """slurm.conf's elastic nodes fill Slurm's node table first; the room for dynamic nodes stays the same."""
    return sum(ns.elastic.elastic.max_replicas for ns in conf.nodesets if ns.elastic)


def _plugins(conf: SlurmConf) -> list[str]:
    ours = _operator_parameters(conf)
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


def _power_saving(nodesets: Iterable[NodeSetConf], extra_conf: str) -> list[str]:
    """With an elastic NodeSet, Slurm's power saving runs (docs/architecture.md §4.9). Its programs do nothing:
    slurm_sync sees a node powering up or down through slurmrestd and the NodeSet hook creates or removes its pod,
    so slurmctld needs no Kubernetes credentials. Only the elastic nodes carry a SuspendTime, so no other node is
    ever powered down.

    Every node an elastic NodeSet may have is known to Slurm, so ``EnforcePartLimits=ANY`` refuses at submit a
    job larger than its maximum, which would otherwise pend for good. The setting is cluster-wide: on a
    partition of dynamic nodes (a NodeSet that is not elastic) it also refuses a job larger than the nodes
    registered now, all of them at 0 replicas; a site that scales such a NodeSet up for pending jobs (KEDA on
    a pending-job metric) sets ``EnforcePartLimits=NO`` in extraConf, which replaces this line
    (docs/operations.md, "Elastic NodeSets")."""
    if not any(ns.elastic for ns in nodesets):
        return []
    lines = [f"SuspendProgram={POWER_PROGRAM}", f"ResumeProgram={POWER_PROGRAM}"]
    if ENFORCE_PART_LIMITS.lower() not in conffile.last_values(extra_conf, {ENFORCE_PART_LIMITS.lower()}):
        lines.append(f"{ENFORCE_PART_LIMITS}=ANY")
    return lines


def _nodeset_lines(nodesets: Iterable[NodeSetConf]) -> list[str]:
    lines = []
    for ns in sorted(nodesets, key=lambda n: (n.name, n.partition or "")):
        lines.append(f"NodeSet={ns.name} Feature={ns.name}")
        if ns.elastic is not None:
            lines += _elastic_node_lines(ns.elastic)
        if ns.partition is not None:
            power = f" ResumeTimeout={ns.elastic.elastic.resume_timeout}" if ns.elastic else ""
            lines.append(f"PartitionName={ns.name} Nodes={ns.name}{power} {ns.partition}".rstrip())
    return lines


def _elastic_node_lines(nodes: ElasticNodes) -> list[str]:
    """The always-on nodes are never powered down; the others start powered down (State=CLOUD) and are powered
    down again after SuspendTime idle."""
    lines = []
    if nodes.always_on:
        lines.append(f"NodeName={nodes.always_on} {nodes.options} SuspendTime=INFINITE")
    if nodes.on_demand:
        lines.append(f"NodeName={nodes.on_demand} State=CLOUD {nodes.options} SuspendTime={nodes.elastic.suspend_time}")
    return lines


def _join(sections: list[tuple[str, list[str]]]) -> str:
    out: list[str] = []
    for title, lines in sections:
        if lines:
            out += ["#", f"### {title} ###", *lines]
    return "\n".join(out) + "\n"

"""The NodeSet spec, parsed once and checked field by field.

Defaults follow Slinky v1beta1 (the CRD applies most of them, but a hook must not depend on
that: a request built by hand or by an older CRD still gets the same answer). A value the hook
cannot build pods from raises `InvalidSpec` naming the field: the hooks answer with every
child kept as last applied and an `InvalidSpec` condition (hooks/nodeset/hook.py), never with a 400,
which would only leave a Metacontroller event behind.

Names: the NodeSet name is the `app.kubernetes.io/instance` label of every child, and each pod's
name is its `pod-name` label and (StatefulSet mode) its hostname, so both are bounded by the
63-character limit of label values and DNS labels (`check_pod_identity`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from hooks import contract
from hooks.controller.model import controller_ref_name
from slinky_common import fields, names
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef, container_override
from slinky_common.jsontypes import dict_field
from slinky_common.nodesetconf import MAX_ORDINAL_PADDING, MAX_REPLICAS, Elastic, nodeset_conf, read_elastic

JSON = dict[str, Any]

STATEFULSET: str = "StatefulSet"
DAEMONSET: str = "DaemonSet"
ROLLING_UPDATE: str = "RollingUpdate"
ON_DELETE: str = "OnDelete"
SCHEDULED_UPDATE: str = "ScheduledUpdate"
RETAIN: str = "Retain"
DELETE: str = "Delete"

NODE_TYPE_KEY = contract.TYPE_NODE
SECRET_TYPE_KEY = contract.TYPE_SECRET
POD_TYPE_KEY = contract.TYPE_POD
PVC_TYPE_KEY = contract.TYPE_PVC
CONFIGMAP_TYPE_KEY = contract.TYPE_CONFIGMAP

_PERCENT = re.compile(r"^(0|[1-9][0-9]*)%$")
MAX_LABEL_VALUE = 63  # label values and DNS labels (pod hostnames)
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True)
class ScheduledUpdate:
    """updateStrategy.scheduledUpdate: the maintenance window's start (RFC 3339, UTC), minutes, user flags."""

    start_time: str
    minutes: int
    flags: tuple[str, ...]


# A pod that waits longer than this for a topology label is better started without it (slurm_sync sets it later).
MAX_TOPOLOGY_WAIT = 600


@dataclass(frozen=True)
class NodeSetSpec:
    """What the hook needs from a NodeSet, defaults applied."""

    name: str
    namespace: str
    controller_name: str
    replicas: int
    scaling_mode: str
    slurmd: JSON
    logfile: JSON
    template: JSON
    extra_conf: str
    ssh_enabled: bool
    extra_sshd_config: str
    sssd_conf_ref: KeyRef | None
    volume_claim_templates: tuple[JSON, ...]
    update_type: str
    max_unavailable: int | str
    pvc_when_deleted: str
    pvc_when_scaled: str
    min_ready_seconds: int
    ordinal_padding: int
    pin_to_node: bool
    oversubscribe_node: bool
    scheduled: ScheduledUpdate | None = None  # updateStrategy.scheduledUpdate, parsed only for ScheduledUpdate
    topology_wait: int = 0  # seconds a new pod waits for its Node's topology (names.ANNOTATION_TOPOLOGY_WAIT)
    elastic: Elastic | None = None  # spec.elastic: Slurm's power saving sizes the NodeSet

    @property
    def template_spec(self) -> JSON:
        return self.template.get("spec") or {}


def parse_nodeset(parent: JSON) -> NodeSetSpec:
    """Parse and check `parent.spec`; raises InvalidSpec naming the field."""
    meta = parent["metadata"]
    spec = parent.get("spec") or {}
    if len(meta["name"]) > MAX_LABEL_VALUE:
        raise InvalidSpec(
            f"metadata.name must be at most {MAX_LABEL_VALUE} characters: it is the {names.LABEL_INSTANCE} label of "
            "every child"
        )
    strategy = fields.opt_obj(spec, "updateStrategy")
    rolling = fields.opt_obj(strategy, "rollingUpdate", "spec.updateStrategy")
    retention = fields.opt_obj(spec, "persistentVolumeClaimRetentionPolicy")
    ssh = fields.opt_obj(spec, "ssh")
    ssh_enabled = fields.opt_bool(ssh, "enabled", False, "spec.ssh")
    elastic = _elastic(spec)
    if elastic is not None:
        nodeset_conf(parent, "this NodeSet's")  # its slurm.conf lines, refused here as the Controller hook would
    replicas = fields.opt_int(spec, "replicas", 1, maximum=MAX_REPLICAS)
    return NodeSetSpec(
        name=meta["name"],
        namespace=meta.get("namespace") or "",
        controller_name=controller_ref_name(spec),
        replicas=elastic.min_replicas if elastic else replicas,
        scaling_mode=fields.opt_enum(spec, "scalingMode", STATEFULSET, (STATEFULSET, DAEMONSET)),
        slurmd=container_override(spec, "slurmd"),
        logfile=container_override(spec, "logfile"),
        template=_template(spec),
        extra_conf=fields.opt_str(spec, "extraConf"),
        ssh_enabled=ssh_enabled,
        extra_sshd_config=fields.opt_str(ssh, "extraSshdConfig", where="spec.ssh"),
        sssd_conf_ref=_sssd_conf_ref(ssh, ssh_enabled),
        volume_claim_templates=_claim_templates(spec),
        update_type=fields.opt_enum(
            strategy, "type", ROLLING_UPDATE, (ROLLING_UPDATE, ON_DELETE, SCHEDULED_UPDATE), "spec.updateStrategy"
        ),
        max_unavailable=_max_unavailable(rolling),
        pvc_when_deleted=fields.opt_enum(
            retention, "whenDeleted", RETAIN, (RETAIN, DELETE), "spec.persistentVolumeClaimRetentionPolicy"
        ),
        pvc_when_scaled=fields.opt_enum(
            retention, "whenScaled", RETAIN, (RETAIN, DELETE), "spec.persistentVolumeClaimRetentionPolicy"
        ),
        min_ready_seconds=fields.opt_int(spec, "minReadySeconds", 0),
        ordinal_padding=fields.opt_int(spec, "ordinalPadding", 0, maximum=MAX_ORDINAL_PADDING),
        pin_to_node=fields.opt_bool(spec, "pinToNode", False),
        oversubscribe_node=fields.opt_bool(spec, "oversubscribeNode", False),
        scheduled=_scheduled_update(strategy) if strategy.get("type") == SCHEDULED_UPDATE else None,
        topology_wait=topology_wait(parent),
        elastic=elastic,
    )


def _elastic(spec: JSON) -> Elastic | None:
    """spec.elastic: Slurm's power saving sizes the NodeSet, so `replicas` is not used (its pods are the
    always-on minReplicas; docs/architecture.md §4.9). Only ordinal pods have a node name Slurm can power up."""
    elastic = read_elastic(spec)
    if elastic is None:
        return None
    if fields.opt_enum(spec, "scalingMode", STATEFULSET, (STATEFULSET, DAEMONSET)) != STATEFULSET:
        raise InvalidSpec("spec.elastic requires spec.scalingMode StatefulSet")
    if not fields.opt_bool(fields.opt_obj(spec, "partition"), "enabled", False, "spec.partition"):
        raise InvalidSpec("spec.elastic requires spec.partition.enabled (ResumeTimeout is a partition option)")
    return elastic


def topology_wait(parent: JSON) -> int:
    """The NodeSet's topology wait in whole seconds, 0 (no wait) by default, at most MAX_TOPOLOGY_WAIT."""
    value = (parent["metadata"].get("annotations") or {}).get(names.ANNOTATION_TOPOLOGY_WAIT)
    if value is None or value == "":
        return 0
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()) or int(value) > MAX_TOPOLOGY_WAIT:
        raise InvalidSpec(f"annotation {names.ANNOTATION_TOPOLOGY_WAIT} must be a whole number of seconds "
                          f"from 0 to {MAX_TOPOLOGY_WAIT}, got {value!r}")  # fmt: skip
    return int(value)


def related_nodes_selector(parent: JSON) -> JSON | None:
    """The Node label selector DaemonSet mode and pinToNode need; None when Nodes are not needed."""
    spec = parent.get("spec") or {}
    mode = fields.opt_enum(spec, "scalingMode", STATEFULSET, (STATEFULSET, DAEMONSET))
    if mode != DAEMONSET and not fields.opt_bool(spec, "pinToNode", False):
        return None
    # A nodeSelector is a hard requirement, so Nodes failing it are never needed.
    return {"matchLabels": dict(_template(spec).get("spec", {}).get("nodeSelector") or {})}


def sssd_secret_name(parent: JSON) -> str | None:
    spec = parent.get("spec") or {}
    ssh = fields.opt_obj(spec, "ssh")
    ref = _sssd_conf_ref(ssh, fields.opt_bool(ssh, "enabled", False, "spec.ssh"))
    return ref.name if ref else None


def lenient_when_deleted(parent: JSON) -> str:
    """whenDeleted for a spec that does not parse: only an explicit Delete deletes (slurm_sync reads it alike)."""
    spec = dict_field(parent, "spec")
    policy = spec.get("persistentVolumeClaimRetentionPolicy")
    return DELETE if isinstance(policy, dict) and policy.get("whenDeleted") == DELETE else RETAIN


def check_pod_identity(name: str, hostname: str, source: str) -> None:
    """A pod name is its pod-name label value and a hostname a DNS label: both at most 63 characters.

    `source` names what shapes them (a spec field, or the Node in DaemonSet mode).
    """
    if len(name) > MAX_LABEL_VALUE:
        raise InvalidSpec(
            f"{source} gives pod {name!r} a {len(name)}-character name, but its {names.LABEL_NODESET_POD_NAME} "
            f"label allows {MAX_LABEL_VALUE}"
        )
    if len(hostname) > MAX_LABEL_VALUE or not _DNS_LABEL.match(hostname):
        raise InvalidSpec(
            f"{source} gives pod {name!r} the hostname {hostname!r}, which is not a DNS label "
            f"(at most {MAX_LABEL_VALUE} lower-case letters, digits and '-')"
        )


def _template(spec: JSON) -> JSON:
    template = fields.opt_obj(spec, "template")
    fields.opt_obj(template, "metadata", "spec.template")
    template_spec = fields.opt_obj(template, "spec", "spec.template")
    for key in ("containers", "initContainers", "volumes", "tolerations"):
        if template_spec.get(key) is not None and not isinstance(template_spec[key], list):
            raise InvalidSpec(f"spec.template.spec.{key} must be a list")
    selector = template_spec.get("nodeSelector")
    if selector is not None and (
        not isinstance(selector, dict) or not all(isinstance(v, str) for v in selector.values())
    ):
        raise InvalidSpec("spec.template.spec.nodeSelector must map label names to strings")
    hostname = template_spec.get("hostname")
    if hostname is not None and not isinstance(hostname, str):
        raise InvalidSpec("spec.template.spec.hostname must be a string")
    return template


_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration_seconds(text: str) -> float | None:
    """A Go ``time.ParseDuration`` string ("30m", "1h30m", "90s") as seconds; None when unreadable or negative."""
    body = text.strip()
    if body == "0":
        return 0.0
    if not body or body.startswith("-"):
        return None
    body = body.removeprefix("+")
    total, at = 0.0, 0
    for match in _DURATION_PART.finditer(body):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _DURATION_UNIT_SECONDS[match.group(2)]
        at = match.end()
    return total if at == len(body) and at > 0 else None


def _scheduled_update(strategy: JSON) -> ScheduledUpdate:
    """startTime (RFC 3339) and duration (Go duration, at least one minute) are required; flags are Slurm words."""
    scheduled = fields.opt_obj(strategy, "scheduledUpdate", "spec.updateStrategy")
    field = "spec.updateStrategy.scheduledUpdate"
    start = scheduled.get("startTime")
    parsed = _rfc3339(start)
    if parsed is None:
        raise InvalidSpec(
            f"{field}.startTime must be an RFC 3339 timestamp (required for ScheduledUpdate), got {start!r}"
        )
    duration = scheduled.get("duration", "30m")
    seconds = go_duration_seconds(duration) if isinstance(duration, str) else None
    if seconds is None or seconds < 60:
        raise InvalidSpec(
            f"{field}.duration must be a duration of at least 1m (like '30m' or '1h30m'), got {duration!r}"
        )
    flags = scheduled.get("flags")
    if flags is None:
        flags = []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
        raise InvalidSpec(f"{field}.flags must be a list of Slurm reservation flags (like 'DAILY'), got {flags!r}")
    for flag in flags:
        if flag.upper() in ("WEEKDAY", "WEEKEND"):
            raise InvalidSpec(
                f"{field}.flags: {flag.upper()} is not supported (Slurm moves such a window by a varying number of "
                "days); use DAILY or WEEKLY"
            )
        if flag.upper() not in names.RESERVATION_USER_FLAGS:
            known = ", ".join(sorted(names.RESERVATION_USER_FLAGS))
            raise InvalidSpec(
                f"{field}.flags: {flag.upper()} is not supported (Slurm would not list it back unchanged); supported: "
                f"{known}"
            )
    start_utc = datetime.fromtimestamp(parsed, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return ScheduledUpdate(start_time=start_utc, minutes=int(seconds // 60), flags=tuple(f.upper() for f in flags))


def _rfc3339(value: Any) -> float | None:
    if not isinstance(value, str) or not re.fullmatch(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9:.]+([Zz]|[+-][0-9]{2}:[0-9]{2})", value
    ):
        return None
    try:
        return datetime.fromisoformat(value.replace("z", "Z").replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _sssd_conf_ref(ssh: JSON, enabled: bool) -> KeyRef | None:
    ref = fields.opt_obj(ssh, "sssdConfRef", "spec.ssh")
    if not enabled:
        return None
    name, key = ref.get("name"), ref.get("key")
    if not isinstance(name, str) or not name:
        raise InvalidSpec("spec.ssh.sssdConfRef.name must be set when ssh.enabled is true")
    if not isinstance(key, str) or not key:
        raise InvalidSpec("spec.ssh.sssdConfRef.key must be set when ssh.enabled is true")
    return KeyRef(name, key)


def _claim_templates(spec: JSON) -> tuple[JSON, ...]:
    claims = spec.get("volumeClaimTemplates")
    if claims is None:
        return ()
    if not isinstance(claims, list):
        raise InvalidSpec("spec.volumeClaimTemplates must be a list")
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        meta = claim.get("metadata") if isinstance(claim, dict) else None
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise InvalidSpec(f"spec.volumeClaimTemplates[{i}].metadata.name must be a non-empty string")
        if name in seen:
            raise InvalidSpec(f"spec.volumeClaimTemplates[{i}].metadata.name {name!r} is repeated")
        if not isinstance(claim.get("spec"), dict):
            raise InvalidSpec(f"spec.volumeClaimTemplates[{i}].spec must be an object")
        seen.add(name)
    return tuple(claims)


def _max_unavailable(rolling: JSON) -> int | str:
    value = rolling.get("maxUnavailable", "25%")
    field = "spec.updateStrategy.rollingUpdate.maxUnavailable"
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidSpec(f"{field} must be an integer or a percentage string")
    if isinstance(value, str) and not _PERCENT.match(value):
        if not value.isdigit():
            raise InvalidSpec(f"{field} must be an integer or a percentage like '25%', got {value!r}")
        value = int(value)
    if value in (0, "0%") or (isinstance(value, int) and value < 0):
        raise InvalidSpec(f"{field} must be positive (0 would never update a pod), got {value!r}")
    return value

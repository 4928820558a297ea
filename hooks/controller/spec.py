"""A Controller's spec, parsed and checked once, and its references resolved from `related`.

The CRD schema and its CEL rules reject most bad specs at admission, but a hook must not trust
that (the CRD may be an older copy): anything it cannot build from raises InvalidSpec naming the
field, which the hook answers with a status condition while every existing child stays untouched. References that do
not exist (yet) are different:
they are normal while a Helm release is being applied, so they are collected into `missing`
for a status condition and the hook keeps what it already has.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hooks import cluster, contract, references
from hooks.contract import CompositeRequest
from hooks.controller.model import Controller, Endpoint, check_port, external_endpoint, read_controller
from slinky_common import fields, nodesetconf, wellknown
from slinky_common.errors import BadHookRequest, InvalidSpec
from slinky_common.fields import KeyRef

JSON = dict[str, Any]

CONFIGMAP = contract.TYPE_CONFIGMAP
NODESET = contract.TYPE_NODESET
ACCOUNTING = contract.TYPE_ACCOUNTING

# Inline PersistentVolumeClaimSpec fields of `persistence`, and what a claim needs at minimum.
_CLAIM_FIELDS = (
    "accessModes",
    "dataSource",
    "dataSourceRef",
    "resources",
    "selector",
    "storageClassName",
    "volumeAttributesClassName",
    "volumeMode",
    "volumeName",
)
_CLAIM_DEFAULTS: JSON = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "4Gi"}}}
_SCRIPT_FIELDS = ("prologScriptRefs", "epilogScriptRefs", "prologSlurmctldScriptRefs", "epilogSlurmctldScriptRefs")


@dataclass(frozen=True)
class Persistence:
    enabled: bool
    existing_claim: str
    claim_spec: JSON


@dataclass(frozen=True)
class ServiceMonitorSpec:
    labels: dict[str, str]
    annotations: dict[str, str]
    interval: str
    scrape_timeout: str
    endpoints: tuple[JSON, ...]


@dataclass(frozen=True, kw_only=True)
class ControllerSpec(Controller):
    """The Controller as every hook sees it, plus what only its own hook reads."""

    cluster_name: str
    jwks: KeyRef | None
    inplace_reconfigure: bool
    slurmctld: JSON
    reconfigure: JSON
    logfile: JSON
    template: JSON
    extra_conf: str
    config_files: tuple[str, ...]
    scripts: dict[str, tuple[str, ...]]  # CRD field -> ConfigMap names
    persistence: Persistence
    service: JSON
    metrics: bool
    service_monitor: ServiceMonitorSpec | None

    def referenced_configmaps(self) -> tuple[str, ...]:
        """Every ConfigMap projected into /etc/slurm, sorted and unique (Slinky's projection order)."""
        script_maps = [n for refs in self.scripts.values() for n in refs]
        return tuple(sorted({*self.config_files, *script_maps}))


def referenced_configmaps(spec: JSON) -> tuple[str, ...]:
    """`ControllerSpec.referenced_configmaps` from the raw spec, for customize (which parses only what it needs)."""
    return tuple(sorted({name for field in ("configFileRefs", *_SCRIPT_FIELDS) for name in _local_refs(spec, field)}))


@dataclass(frozen=True)
class Resolved:
    """What `related` says about the references (only the ones present)."""

    secrets: dict[str, bytes]  # "<secret>/<key>" -> value, for the key hashes
    configmaps: dict[str, dict[str, str]]
    nodesets: tuple[nodesetconf.NodeSetConf, ...]
    accounting: Endpoint | None
    missing: tuple[str, ...] = ()  # one message per missing object or key
    config_inputs_missing: bool = False  # slurm.conf/cgroup.conf depend on a missing object


def parse_spec(parent: JSON) -> ControllerSpec:
    namespace = fields.namespace_of(parent)
    spec = fields.spec_of(parent)
    cluster_name = wellknown.cluster_name(parent)
    controller = read_controller(parent, namespace, "spec")
    persistence = _persistence(fields.opt_obj(spec, "persistence"))
    if controller.ha and not (persistence.enabled and persistence.existing_claim):
        raise InvalidSpec(
            "spec.persistence.existingClaim is required (with persistence.enabled) when spec.ha.enabled: "
            "backups share StateSaveLocation through a ReadWriteMany claim"
        )
    metrics = fields.opt_obj(spec, "metrics")
    metrics_enabled = fields.opt_bool(metrics, "enabled", False, "spec.metrics")
    return ControllerSpec(
        **{field.name: getattr(controller, field.name) for field in dataclasses.fields(Controller)},
        cluster_name=cluster_name,
        jwks=fields.key_ref(spec, "jwksKeyRef"),
        inplace_reconfigure=fields.opt_bool(spec, "inplaceReconfigure", False),
        slurmctld=fields.container_override(spec, "slurmctld"),
        reconfigure=fields.container_override(spec, "reconfigure"),
        logfile=fields.container_override(spec, "logfile"),
        template=fields.opt_obj(spec, "template"),
        extra_conf=nodesetconf.check_extra_conf(fields.opt_str(spec, "extraConf"), "spec.extraConf"),
        config_files=_local_refs(spec, "configFileRefs"),
        scripts={f: _local_refs(spec, f) for f in _SCRIPT_FIELDS},
        persistence=persistence,
        service=fields.service_override(spec),
        metrics=metrics_enabled,
        service_monitor=_service_monitor(metrics) if metrics_enabled else None,
    )


def resolve(req: CompositeRequest, spec: ControllerSpec) -> Resolved:
    """Look the references up in `related` (same namespace only, as Slinky since 1.1.1)."""
    missing: list[str] = []
    secrets: dict[str, bytes] = {}
    if spec.external is None:
        for ref in (spec.slurm_key, spec.jwt_key):
            if ref is None:
                continue
            value = references.secret_value(req, spec.namespace, ref)
            if isinstance(value, references.Missing):
                missing.append(value.message)
            else:
                secrets[f"{ref.name}/{ref.key}"] = value
    configmaps = {
        obj["metadata"]["name"]: _configmap_data(obj)
        for obj in req.related_of(CONFIGMAP)
        if obj["metadata"].get("namespace", spec.namespace) == spec.namespace
    }
    config_missing = False
    if spec.external is None:
        absent = [name for name in spec.referenced_configmaps() if name not in configmaps]
        config_missing = bool(absent)
        if spec.jwks and spec.jwks.name not in configmaps:
            absent = sorted({*absent, spec.jwks.name})
        missing += [f"ConfigMap {name!r} does not exist" for name in absent]
    accounting = None
    if spec.accounting:
        found = references.find_related(req, ACCOUNTING, spec.namespace, spec.accounting)
        if found is None:
            config_missing = True
            missing.append(f"Accounting {spec.accounting!r} does not exist")
        else:
            accounting = accounting_endpoint(found, f"related Accounting {spec.accounting!r}")
    nodesets = tuple(
        nodesetconf.nodeset_conf(ns, f"related NodeSet {ns['metadata']['name']!r}")
        for ns in req.related_of(NODESET)
        if ns["metadata"].get("namespace", spec.namespace) == spec.namespace
        and ((ns.get("spec") or {}).get("controllerRef") or {}).get("name") == spec.name
    )
    return Resolved(secrets, configmaps, nodesets, accounting, tuple(missing), config_missing)


def accounting_endpoint(accounting: JSON, where: str) -> Endpoint:
    """Where slurmctld reaches slurmdbd: the external host, or the Accounting's Service."""
    spec = fields.spec_of(accounting)
    if spec.get("external"):
        return external_endpoint(spec, f"{where} spec")
    meta = accounting["metadata"]
    port = (spec.get("service") or {}).get("port") or wellknown.SLURMDBD_PORT
    host = f"{cluster.accounting_host(meta['name'])}.{meta.get('namespace', '')}"
    return Endpoint(host, check_port(port, f"{where} spec.service.port"))


def _configmap_data(obj: JSON) -> dict[str, str]:
    data = obj.get("data") or {}
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise BadHookRequest(f"related ConfigMap {obj['metadata']['name']!r}: data must map keys to strings")
    return data


def _persistence(p: JSON) -> Persistence:
    claim_spec = {k: p[k] for k in _CLAIM_FIELDS if p.get(k) is not None}
    return Persistence(
        enabled=fields.opt_bool(p, "enabled", True, "spec.persistence"),
        existing_claim=fields.opt_str(p, "existingClaim", where="spec.persistence"),
        claim_spec={**_CLAIM_DEFAULTS, **claim_spec},
    )


def _service_monitor(metrics: JSON) -> ServiceMonitorSpec | None:
    where = "spec.metrics.serviceMonitor"
    sm = fields.opt_obj(metrics, "serviceMonitor", "spec.metrics")
    if not fields.opt_bool(sm, "enabled", False, where):
        return None
    endpoints = sm.get("endpoints") or []
    if not isinstance(endpoints, list) or not all(
        isinstance(e, dict) and isinstance(e.get("path"), str) for e in endpoints
    ):
        raise InvalidSpec(f"{where}.endpoints must be a list of objects with a path")
    return ServiceMonitorSpec(
        labels=_str_map(sm, "labels", where),
        annotations=_str_map(sm, "annotations", where),
        interval=fields.opt_str(sm, "interval", where=where),
        scrape_timeout=fields.opt_str(sm, "scrapeTimeout", where=where),
        endpoints=tuple(endpoints),
    )


def _local_refs(spec: JSON, field: str) -> tuple[str, ...]:
    """Names of a list of LocalObjectReferences, in order, without duplicates."""
    refs = spec.get(field) or []
    if not isinstance(refs, list) or not all(isinstance(r, dict) and isinstance(r.get("name", ""), str) for r in refs):
        raise InvalidSpec(f"spec.{field} must be a list of {{name: string}}")
    return tuple(dict.fromkeys(r["name"] for r in refs if r.get("name")))


def _str_map(spec: JSON, field: str, where: str) -> dict[str, str]:
    value = spec.get(field) or {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidSpec(f"{where}.{field} must map names to strings")
    return value

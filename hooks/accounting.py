"""Accounting → slurmdbd: the `<name>-accounting` Secret (slurmdbd.conf), StatefulSet and Service.

slurmdbd.conf carries the database password, so it lives in a Secret and the password is read
from the Secret `storageConfig.passwordKeyRef` names. The password goes into that file and
nowhere else: not into status, conditions, errors or logs. While the password or a key Secret
is missing, the config Secret and the StatefulSet stay exactly as they are (slurmdbd keeps
running on its last good config) and a condition says what is missing.

In `external` mode slurmdbd runs outside Kubernetes and nothing is managed here.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass

from hooks import cluster, conffile, contract, invalidspec, references
from hooks.applied import Child, kept
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.objects import child_metadata, content_hash, service
from hooks.podtemplate import apply_pod_template, merge_container
from hooks.references import Missing
from hooks.status import available_condition, condition, ready_condition, workload_ready
from slinky_common import fields, names, nodesetconf, wellknown
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef
from slinky_common.jsontypes import JSON
from slinky_common.wellknown import component_labels, selector_labels

APP = "slurmdbd"
COMPONENT = "accounting"
CONF = "slurmdbd.conf"
STATEFULSET_TYPE = contract.TYPE_STATEFULSET
SECRET_TYPE = contract.TYPE_SECRET
JWT_KEY_PATH = "/etc/slurm/jwt.key"
JWKS_PATH = "/etc/slurm/jwks.json"


@dataclass(frozen=True)
class Storage:
    """Connection settings, already written as Slurm config values (escaped)."""

    host: str
    port: int
    database: str
    username: str
    password: KeyRef


@dataclass(frozen=True)
class AccountingSpec:
    name: str
    namespace: str
    external: bool
    external_host: str
    external_port: int
    slurm_key: KeyRef | None
    jwt_key: KeyRef | None
    jwks: KeyRef | None
    storage: Storage | None  # None only in external mode
    extra_conf: str
    slurmdbd: JSON
    template: JSON
    service: JSON

    @property
    def child_name(self) -> str:
        return cluster.accounting_host(self.name)

    def secret_refs(self) -> list[KeyRef]:
        """The Secrets this Accounting reads (none in external mode)."""
        if self.external or self.storage is None:
            return []
        return [ref for ref in (self.storage.password, self.slurm_key, self.jwt_key) if ref is not None]


def parse(parent: JSON) -> AccountingSpec:
    spec = fields.spec_of(parent)
    external = fields.opt_bool(spec, "external", False)
    ext = fields.opt_obj(spec, "externalConfig")
    storage = None
    if not external:
        storage = _parse_storage(fields.opt_obj(spec, "storageConfig"))
        if fields.key_ref(spec, "slurmKeyRef") is None:
            raise InvalidSpec("spec.slurmKeyRef is required unless spec.external is true")
        if fields.jwt_key_ref(spec) is None:
            raise InvalidSpec("spec.jwtKeyRef (or spec.jwtHs256KeyRef) is required unless spec.external is true")
    return AccountingSpec(
        name=parent["metadata"]["name"],
        namespace=fields.namespace_of(parent),
        external=external,
        external_host=fields.opt_str(ext, "host", where="spec.externalConfig"),
        external_port=fields.opt_int(ext, "port", 0, where="spec.externalConfig"),
        slurm_key=fields.key_ref(spec, "slurmKeyRef"),
        jwt_key=fields.jwt_key_ref(spec),
        jwks=fields.key_ref(spec, "jwksKeyRef"),
        storage=storage,
        extra_conf=nodesetconf.check_extra_conf(fields.opt_str(spec, "extraConf"), "spec.extraConf"),
        slurmdbd=fields.container_override(spec, "slurmdbd"),
        template=fields.opt_obj(spec, "template"),
        service=fields.service_override(spec),
    )


def _parse_storage(storage: JSON) -> Storage:
    where = "spec.storageConfig"
    host = fields.opt_str(storage, "host", where=where)
    if not host:
        raise InvalidSpec(f"{where}.host is required")
    password = fields.key_ref(storage, "passwordKeyRef", where)
    if password is None:
        raise InvalidSpec(f"{where}.passwordKeyRef is required")
    return Storage(
        host=conffile.conf_field(host, f"{where}.host"),
        port=fields.opt_int(storage, "port", 3306, where, minimum=1),
        database=conffile.conf_field(fields.opt_str(storage, "database", "slurm_acct_db", where), f"{where}.database"),
        username=conffile.conf_field(fields.opt_str(storage, "username", where=where), f"{where}.username"),
        password=password,
    )


def customize(req: CustomizeRequest) -> JSON:
    """The password and key Secrets; each reference on its own, so one invalid field leaves the others."""
    ns, spec = fields.namespace_of(req.parent), fields.spec_of(req.parent)

    def name(read: Callable[[], KeyRef | None]) -> Callable[[], list[str]]:
        return lambda: [] if fields.opt_bool(spec, "external", False) or (ref := read()) is None else [ref.name]

    secrets = invalidspec.derivable(
        name(lambda: fields.key_ref(fields.opt_obj(spec, "storageConfig"), "passwordKeyRef", "spec.storageConfig")),
        name(lambda: fields.key_ref(spec, "slurmKeyRef")),
        name(lambda: fields.jwt_key_ref(spec)),
    )
    return {"relatedResources": [references.secret_rule(ns, secrets)] if secrets else []}


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse(req.parent)
    if spec.external:
        message = (
            f"slurmdbd runs outside Kubernetes at {spec.external_host}:{spec.external_port}; no workload is managed"
        )
        return {
            "status": {
                "conditions": [
                    condition(req.parent, names.CONDITION_EXTERNAL, True, "External", message),
                    ready_condition(req.parent, [], "External", message),
                ]
            },
            "children": [],
        }
    assert spec.storage is not None and spec.slurm_key is not None and spec.jwt_key is not None  # parse() checked
    values = {ref: references.secret_value(req, spec.namespace, ref) for ref in spec.secret_refs()}
    missing = [v for v in values.values() if isinstance(v, Missing)]
    present = {ref: v for ref, v in values.items() if isinstance(v, bytes)}
    password = _password(spec.storage.password, present.get(spec.storage.password))
    if isinstance(password, Missing):
        missing.append(password)
    children: list[Child] = [_service(req.parent, spec)]
    observed_sts = references.observed(req, STATEFULSET_TYPE, spec.child_name)
    if missing or not isinstance(password, str):
        for type_key in (SECRET_TYPE, STATEFULSET_TYPE):
            if (child := references.observed(req, type_key, spec.child_name)) is not None:
                children.append(kept(child))
    else:
        conf = slurmdbd_conf(spec, password)
        hashes = {
            names.ANNOTATION_SLURM_KEY_HASH: content_hash({spec.slurm_key.key: present[spec.slurm_key]}),
            names.ANNOTATION_JWT_KEY_HASH: content_hash({spec.jwt_key.key: present[spec.jwt_key]}),
            names.ANNOTATION_SLURMDBD_CONF_HASH: content_hash({CONF: conf}),
        }
        children += [_config_secret(req.parent, spec, conf), _statefulset(req.parent, spec, hashes)]
    resolved = references.references_condition(req.parent, missing)
    status = {
        "conditions": [
            workload_ready(req.parent, resolved, observed_sts, "StatefulSet", spec.child_name, 1, "slurmdbd"),
            resolved,
            available_condition(req.parent, observed_sts, 1),
        ]
    }
    response: JSON = {"status": status, "children": children}
    if missing:
        response["resyncAfterSeconds"] = references.MISSING_REFERENCE_RESYNC_SECONDS
    return response


def _password(ref: KeyRef, raw: bytes | None) -> str | Missing | None:
    """The password as a slurmdbd.conf value; None while its Secret is missing (already reported)."""
    if raw is None:
        return None
    try:
        written = conffile.conf_value(raw.decode())
    except UnicodeDecodeError:
        written = None
    if written is None:
        return Missing(
            "PasswordInvalid",
            f"Secret {ref.name!r} key {ref.key!r} holds a password slurmdbd.conf cannot "
            "carry (not UTF-8, a line break or NUL, or a double quote with spaces)",
        )
    return written


def slurmdbd_conf(spec: AccountingSpec, password: str) -> str:
    """slurmdbd.conf in Slinky's sections; `password` is already a written config value."""
    assert spec.storage is not None
    alt_params = [f"jwt_key={JWT_KEY_PATH}"] + ([f"jwks={JWKS_PATH}"] if spec.jwks else [])
    storage = spec.storage
    lines = [
        "#", "### GENERAL ###",
        f"DbdHost={spec.child_name}-0",
        f"DbdPort={wellknown.SLURMDBD_PORT}",
        f"SlurmUser={cluster.SLURM_USER}",
        "#", "### PLUGINS & PARAMETERS ###",
        "AuthType=auth/slurm",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters={','.join(alt_params)}",
        "AuthInfo=use_client_ids",
        "#", "### STORAGE ###",
        "StorageType=accounting_storage/mysql",
        f"StorageHost={storage.host}",
        f"StoragePort={storage.port}",
        f"StorageUser={storage.username}",
        f"StorageLoc={storage.database}",
        f"StoragePass={password}",
        "#", "### LOGGING ###",
        "LogFile=/dev/null",
    ]  # fmt: skip
    if spec.extra_conf:
        lines += ["#", "### EXTRA CONFIG ###", spec.extra_conf.rstrip("\n")]
    merged = conffile.merged_config({"AuthAltParameters": alt_params, "AuthInfo": ["use_client_ids"]}, spec.extra_conf)
    if merged:
        lines += ["#", "### MERGED CONFIG ###", *merged]
    return "\n".join(lines) + "\n"


def _service(parent: JSON, spec: AccountingSpec) -> JSON:
    return service(
        parent,
        spec.child_name,
        component_labels(APP, spec.name, COMPONENT),
        selector_labels(APP, spec.name),
        APP,
        wellknown.SLURMDBD_PORT,
        spec.service,
    )


def _config_secret(parent: JSON, spec: AccountingSpec, conf: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(parent, spec.child_name, component_labels(APP, spec.name, COMPONENT)),
        "type": "Opaque",
        "data": {CONF: base64.b64encode(conf.encode()).decode()},
    }


def _statefulset(parent: JSON, spec: AccountingSpec, hashes: dict[str, str]) -> JSON:
    assert spec.slurm_key is not None and spec.jwt_key is not None
    labels = component_labels(APP, spec.name, COMPONENT)
    sources: list[JSON] = [
        {"secret": {"name": spec.child_name, "items": [{"key": CONF, "path": CONF}]}},
        {"secret": {"name": spec.slurm_key.name, "items": [{"key": spec.slurm_key.key, "path": "slurm.key"}]}},
        {"secret": {"name": spec.jwt_key.name, "items": [{"key": spec.jwt_key.key, "path": "jwt.key"}]}},
    ]
    if spec.jwks is not None:
        sources.append({"configMap": {"name": spec.jwks.name, "items": [{"key": spec.jwks.key, "path": "jwks.json"}]}})
    container = merge_container(
        {
            "name": APP,
            "image": cluster.default_image(APP),
            "ports": [{"name": APP, "containerPort": wellknown.SLURMDBD_PORT, "protocol": "TCP"}],
            "readinessProbe": {"tcpSocket": {"port": APP}},
            "volumeMounts": [
                {"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True},
                {"name": "run", "mountPath": "/run"},
            ],
        },
        spec.slurmdbd,
    )
    uid = cluster.SLURM_UID
    pod = {
        "metadata": {"labels": labels, "annotations": {**hashes, names.ANNOTATION_DEFAULT_CONTAINER: APP}},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid, "fsGroup": uid},
            "containers": [container],
            "volumes": [
                {"name": "slurm-etc", "projected": {"defaultMode": 0o600, "sources": sources}},
                {"name": "run", "emptyDir": {"medium": "Memory"}},
            ],
        },
    }
    user_meta = spec.template.get("metadata") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": child_metadata(
            parent, spec.child_name, {**(user_meta.get("labels") or {}), **labels}, user_meta.get("annotations")
        ),
        "spec": {
            "replicas": 1,
            "serviceName": spec.child_name,
            "podManagementPolicy": "Parallel",
            "revisionHistoryLimit": 0,
            "selector": {"matchLabels": selector_labels(APP, spec.name)},
            "template": apply_pod_template(pod, spec.template),
        },
    }

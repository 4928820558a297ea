"""The Controller as every hook sees it: where slurmctld answers, the names derived from it, its keys.

One model for the Controller hook, which creates the Services named here (none for an external
slurmctld), and for each hook whose pods reach slurmctld: NodeSet (`slurmd --conf-server`),
LoginSet (`sackd --conf-server`) and RestApi (the Controller's slurm.conf and slurm.key). Two
models once disagreed: a LoginSet of an external Controller pointed sackd at a Service nobody
created (issue 23).

Clients use one address, the one slurm.conf gives them (`SlurmctldAddr`, or the external
`SlurmctldHost`): in the cluster the main Service, which with HA backups selects the active
slurmctld, so the pods' own addresses (the `SlurmctldHost` lines) are for slurmctld alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from hooks import cluster, contract, references
from hooks.contract import CompositeRequest
from slinky_common import fields, names
from slinky_common.errors import InvalidSpec
from slinky_common.fields import KeyRef

JSON = dict[str, Any]

SLURMCTLD_PORT = 6817
# One SlurmctldHost line and one slurmctld pod per controller: far above any real HA set-up, and a
# bound on the hook's work (the CRD allows any int32).
MAX_BACKUPS = 100
# A host name or an IP address (IPv6 literals add `:[]`): nothing slurm.conf or a command line splits on.
_HOST = re.compile(r"[A-Za-z0-9_.:\[\]-]+")


@dataclass(frozen=True)
class Endpoint:
    """Where a daemon listens."""

    host: str
    port: int


def check_host(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _HOST.fullmatch(value):
        raise InvalidSpec(f"{where} must be a host name or IP address, got {value!r}")
    return value


def check_port(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 < value < 65536:
        raise InvalidSpec(f"{where} must be a port number (1-65535), got {value!r}")
    return value


def external_endpoint(spec: JSON, where: str) -> Endpoint:
    """`externalConfig` of an external Controller or Accounting; `where` names the spec in messages."""
    ext = fields.opt_obj(spec, "externalConfig", where)
    return Endpoint(
        check_host(ext.get("host"), f"{where}.externalConfig.host"),
        check_port(ext.get("port"), f"{where}.externalConfig.port"),
    )


@dataclass(frozen=True)
class Controller:
    """A Controller CR, as far as any hook needs it."""

    name: str
    namespace: str
    external: Endpoint | None = None  # None when slurmctld runs in this cluster
    backups: int = 0  # standby slurmctld pods (spec.ha); always 0 for an external slurmctld
    slurm_key: KeyRef | None = None
    jwt_key: KeyRef | None = None
    accounting: str = ""  # spec.accountingRef.name
    deleting: bool = False

    @property
    def replicas(self) -> int:
        return 1 + self.backups

    @property
    def ha(self) -> bool:
        return self.backups > 0

    @property
    def service_name(self) -> str:
        """The main Service (SlurmctldAddr) and the StatefulSet: `<name>-controller`."""
        return f"{self.name}-controller"

    @property
    def internal_service_name(self) -> str:
        """The headless Service that gives each slurmctld pod its stable DNS name."""
        return f"{self.name}-controller-internal"

    @property
    def endpoint(self) -> Endpoint:
        """Where every client reaches slurmctld."""
        return self.external or Endpoint(f"{self.service_name}.{self.namespace}", SLURMCTLD_PORT)

    @property
    def conf_server(self) -> str:
        """`--conf-server` of slurmd and sackd."""
        return f"{self.endpoint.host}:{self.endpoint.port}"

    @property
    def slurmctld_hosts(self) -> tuple[str, ...]:
        """slurm.conf's SlurmctldHost values, primary first: each pod by its stable DNS name, or the external host."""
        if self.external is not None:
            return (self.external.host,)
        internal = f"{self.internal_service_name}.{self.namespace}"
        pods = (f"{self.service_name}-{i}" for i in range(self.replicas))
        return tuple(f"{pod}({pod}.{internal})" for pod in pods)

    @property
    def config_map(self) -> str:
        """The ConfigMap holding slurm.conf."""
        return f"{self.name}-config"

    @property
    def worker_service(self) -> str:
        """The headless Service every NodeSet pod of the cluster joins (worker hostnames resolve under it)."""
        return f"slurm-workers-{self.name}"

    @property
    def worker_dns_search(self) -> str:
        return f"{self.worker_service}.{self.namespace}.svc.{cluster.CLUSTER_DOMAIN}"


def read_controller(obj: JSON, namespace: str, where: str) -> Controller:
    """A Controller CR's model; an unusable field raises InvalidSpec, `where` naming its spec in the message."""
    spec = fields.spec_of(obj)
    external = fields.opt_bool(spec, "external", False, where)
    ha = fields.opt_obj(spec, "ha", where)
    ha_enabled = fields.opt_bool(ha, "enabled", False, f"{where}.ha")
    backups = fields.opt_int(ha, "backups", 1, f"{where}.ha", minimum=1, maximum=MAX_BACKUPS)
    return Controller(
        name=obj["metadata"]["name"],
        namespace=namespace,
        external=external_endpoint(spec, where) if external else None,
        backups=backups if ha_enabled and not external else 0,
        slurm_key=fields.key_ref(spec, "slurmKeyRef", where),
        jwt_key=fields.jwt_key_ref(spec, where),
        accounting=fields.local_ref_name(spec, "accountingRef", where),
        deleting=bool(obj["metadata"].get("deletionTimestamp")),
    )


def controller_ref_name(spec: JSON) -> str:
    """`spec.controllerRef.name` of a NodeSet, LoginSet or RestApi (the Controller is in the same namespace)."""
    name = fields.local_ref_name(spec, "controllerRef")
    if not name:
        raise InvalidSpec("spec.controllerRef.name is required")
    return name


def controller_rule(namespace: str, name: str) -> JSON:
    """The customize rule that brings the referenced Controller into `related`."""
    return {"apiVersion": names.API_VERSION, "resource": "controllers", "namespace": namespace, "names": [name]}


def find_controller(req: CompositeRequest, namespace: str, name: str) -> Controller | None:
    """The related Controller's model, None while it is not observed; InvalidSpec names an unusable field of it."""
    obj = references.find_related(req, contract.TYPE_CONTROLLER, namespace, name)
    return None if obj is None else read_controller(obj, namespace, f"related Controller {name!r} spec")

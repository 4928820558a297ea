"""RestApi → slurmrestd: a Deployment and a Service, both `<name>-restapi`.

slurmrestd is a stateless gateway to slurmctld: it reads slurm.conf and slurm.key from the
Controller and forwards each user's JWT (`SLURM_JWT=daemon`). It serves the slurmdbd endpoints
only when the cluster has accounting, otherwise it must be limited to `openapi/slurmctld` or it
refuses to start. It runs as `nobody`, since slurmrestd refuses root and SlurmUser.
"""

from __future__ import annotations

from dataclasses import dataclass

from hooks import cluster, contract, invalidspec, references
from hooks.applied import Child, kept
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.controller.model import Controller, controller_ref_name, controller_rule, find_controller
from hooks.objects import child_metadata, service
from hooks.podtemplate import apply_pod_template, merge_container
from hooks.references import Missing
from hooks.status import available_condition, workload_ready
from slinky_common import fields, names, wellknown
from slinky_common.jsontypes import JSON
from slinky_common.wellknown import component_labels, selector_labels

APP = "slurmrestd"
COMPONENT = "restapi"
NOBODY = 65534
DEPLOYMENT_TYPE = contract.TYPE_DEPLOYMENT
SERVICE_TYPE = contract.TYPE_SERVICE


@dataclass(frozen=True)
class RestApiSpec:
    name: str
    namespace: str
    controller: str
    replicas: int
    slurmrestd: JSON  # container overrides, without args
    args: list[str]  # appended to ours, before the listen address
    template: JSON
    service: JSON

    @property
    def child_name(self) -> str:
        return f"{self.name}-restapi"


def parse(parent: JSON) -> RestApiSpec:
    spec = fields.spec_of(parent)
    return RestApiSpec(
        name=parent["metadata"]["name"],
        namespace=fields.namespace_of(parent),
        controller=controller_ref_name(spec),
        replicas=fields.opt_int(spec, "replicas", 1),
        slurmrestd={k: v for k, v in fields.container_override(spec, "slurmrestd").items() if k != "args"},
        args=fields.str_list(fields.opt_obj(spec, "slurmrestd"), "args", "spec.slurmrestd"),
        template=fields.opt_obj(spec, "template"),
        service=fields.service_override(spec),
    )


def customize(req: CustomizeRequest) -> JSON:
    """The Controller: its accountingRef, config map and slurm.key name shape the Deployment."""
    ns = fields.namespace_of(req.parent)
    controller = invalidspec.derivable(lambda: [controller_ref_name(fields.spec_of(req.parent))])
    return {"relatedResources": [controller_rule(ns, name) for name in controller]}


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse(req.parent)
    children: list[Child] = [build_service(req.parent, spec)]
    missing: list[Missing] = []
    controller = find_controller(req, spec.namespace, spec.controller)
    observed = references.observed(req, DEPLOYMENT_TYPE, spec.child_name)
    if controller is None:
        missing.append(Missing("ControllerNotFound", f"Controller {spec.controller!r} does not exist"))
        if observed is not None:
            children.append(kept(observed))
    else:
        children.append(build_deployment(req.parent, spec, controller))
    resolved = references.references_condition(req.parent, missing)
    status = {
        "conditions": [
            workload_ready(req.parent, resolved, observed, "Deployment", spec.child_name, spec.replicas, "slurmrestd"),
            resolved,
            available_condition(req.parent, observed, spec.replicas),
        ]
    }
    response: JSON = {"status": status, "children": children}
    if missing:
        response["resyncAfterSeconds"] = references.MISSING_REFERENCE_RESYNC_SECONDS
    return response


def build_service(parent: JSON, spec: RestApiSpec) -> JSON:
    return service(
        parent,
        spec.child_name,
        component_labels(APP, spec.name, COMPONENT),
        selector_labels(APP, spec.name),
        APP,
        wellknown.SLURMRESTD_PORT,
        spec.service,
    )


def slurmrestd_args(spec: RestApiSpec, controller: Controller) -> list[str]:
    """Without accounting slurmrestd must not load the slurmdbd plugins; the listen address goes last."""
    base = [] if controller.accounting else ["-s", "openapi/slurmctld"]
    return [*base, *spec.args, f"0.0.0.0:{wellknown.SLURMRESTD_PORT}"]


def build_deployment(parent: JSON, spec: RestApiSpec, controller: Controller) -> JSON:
    labels = component_labels(APP, spec.name, COMPONENT)
    tcp = {"tcpSocket": {"port": APP}}
    container = merge_container(
        {
            "name": APP,
            "image": cluster.default_image(APP),
            "env": [
                {"name": "SLURM_JWT", "value": "daemon"},
                {"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_files,disable_unshare_sysv"},
            ],
            "ports": [{"name": APP, "containerPort": wellknown.SLURMRESTD_PORT, "protocol": "TCP"}],
            "startupProbe": {**tcp, "failureThreshold": 6, "periodSeconds": 10},
            "livenessProbe": {**tcp, "failureThreshold": 6, "periodSeconds": 10},
            "readinessProbe": dict(tcp),
            "securityContext": {"runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY},
            "volumeMounts": [{"name": "slurm-etc", "mountPath": "/etc/slurm", "readOnly": True}],
        },
        spec.slurmrestd,
    )
    container["args"] = slurmrestd_args(spec, controller)
    sources: list[JSON] = [
        {"configMap": {"name": controller.config_map, "items": [{"key": "slurm.conf", "path": "slurm.conf"}]}}
    ]
    if controller.slurm_key is not None:
        ref = controller.slurm_key
        sources.append({"secret": {"name": ref.name, "items": [{"key": ref.key, "path": "slurm.key"}]}})
    pod = {
        "metadata": {"labels": labels, "annotations": {names.ANNOTATION_DEFAULT_CONTAINER: APP}},
        "spec": {
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": NOBODY, "runAsGroup": NOBODY, "fsGroup": NOBODY},
            "containers": [container],
            "volumes": [{"name": "slurm-etc", "projected": {"defaultMode": 0o600, "sources": sources}}],
        },
    }
    template = apply_pod_template(pod, spec.template)
    user_meta = spec.template.get("metadata") or {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": child_metadata(
            parent, spec.child_name, {**(user_meta.get("labels") or {}), **labels}, user_meta.get("annotations")
        ),
        "spec": {
            "replicas": spec.replicas,
            "revisionHistoryLimit": 0,
            "selector": {"matchLabels": selector_labels(APP, spec.name)},
            "template": template,
        },
    }

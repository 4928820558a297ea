"""The bridge's pod admission webhooks (AdmissionReview v1): mark managed pods, reject what Slurm
cannot honour.

Which pods are managed. Slinky's rule is "in a managed namespace, or naming the bridge scheduler".
An AdmissionReview carries no namespace labels and the hooks read no config, so the namespaces
come from the webhook configuration itself:

* the MutatingWebhookConfiguration's `namespaceSelector` selects the managed namespaces (a list
  becomes `kubernetes.io/metadata.name In [...]`, a selector is used as is); with
  BRIDGE_MANAGED_NAMESPACES unset, every pod the webhook receives is managed;
* `BRIDGE_MANAGED_NAMESPACES=a,b` in the hook server's environment makes the webhook itself apply
  Slinky's rule (for a configuration that sends more namespaces, e.g. everything but kube-system,
  so that pods naming the bridge scheduler are handled anywhere); set but empty, it manages only
  pods that name the bridge scheduler;
* `BRIDGE_SCHEDULER_NAME` overrides names.BRIDGE_SCHEDULER_NAME.

The API server forbids a query string in `clientConfig.service.path`, so these settings cannot
travel with the request; they are deployment settings of the bridge's hook server, read on each
call (so tests and restarts see the current value).

Mutation (managed pods): on CREATE, `spec.nodeName` is cleared and a `default-scheduler` (or
unset) scheduler name becomes the bridge's; a pod that ends up with the bridge scheduler gets the
label the pod DecoratorController selects on and the toleration for the managed-node taint (which
slurm-bridge's scheduler adds in PreEnqueue; there is no scheduler here). On UPDATE only the
label may be added: the pod spec is immutable, and rewriting it as slurm-bridge does would make
every update of a pod created before its namespace became managed fail.

Validation (managed pods) follows slurm-bridge's rejections. Resize requests are
recognised by their effect (container resources changed), so they are refused however they come.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from hooks.contract import AdmissionRequest
from slinky_common import names, quantity, resources
from slinky_common.jsontypes import JSON

DEFAULT_SCHEDULER = "default-scheduler"
_KINDS = ("requests", "limits")


@dataclass(frozen=True)
class AdmissionSettings:
    scheduler_name: str = names.BRIDGE_SCHEDULER_NAME
    namespaces: frozenset[str] | None = None  # None: the webhook's namespaceSelector decides


def mutate(req: AdmissionRequest) -> JSON:
    return mutate_with(req, _env_settings())


def validate(req: AdmissionRequest) -> JSON:
    return validate_with(req, _env_settings())


def mutate_with(req: AdmissionRequest, cfg: AdmissionSettings) -> JSON:
    if req.operation not in ("CREATE", "UPDATE") or not is_managed(req, cfg):
        return _allowed(req.uid)
    patch = list(_patch(req, cfg))
    return _allowed(req.uid, patch)


def validate_with(req: AdmissionRequest, cfg: AdmissionSettings) -> JSON:
    if req.operation not in ("CREATE", "UPDATE") or not is_managed(req, cfg):
        return _allowed(req.uid)
    checks = (
        _create_problems(req.object)
        if req.operation == "CREATE"
        else _update_problems(req.object, req.old_object or {})
    )
    problems = list(checks)
    return _denied(req.uid, "; ".join(problems)) if problems else _allowed(req.uid)


def is_managed(req: AdmissionRequest, cfg: AdmissionSettings) -> bool:
    if cfg.namespaces is None or req.namespace in cfg.namespaces:
        return True
    return _spec(req.object).get("schedulerName") == cfg.scheduler_name


# --- mutation ------------------------------------------------------------------------------------------


def _patch(req: AdmissionRequest, cfg: AdmissionSettings) -> Iterator[JSON]:
    pod, spec = req.object, _spec(req.object)
    scheduler = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if req.operation == "CREATE":
        if "nodeName" in spec:
            yield {"op": "remove", "path": "/spec/nodeName"}
        if scheduler == DEFAULT_SCHEDULER:
            scheduler = cfg.scheduler_name
            yield {"op": "add", "path": "/spec/schedulerName", "value": scheduler}
    if scheduler != cfg.scheduler_name:
        return
    labels = pod["metadata"].get("labels")
    if labels is None:
        yield {"op": "add", "path": "/metadata/labels", "value": {names.LABEL_BRIDGE_MANAGED: "true"}}
    elif labels.get(names.LABEL_BRIDGE_MANAGED) != "true":
        yield {"op": "add", "path": "/metadata/labels/" + pointer_token(names.LABEL_BRIDGE_MANAGED), "value": "true"}
    if req.operation == "CREATE":
        yield from _toleration_patch(spec, managed_node_toleration(cfg.scheduler_name))


def managed_node_toleration(scheduler_name: str) -> JSON:
    return {"key": names.TAINT_MANAGED_NODE, "operator": "Equal", "value": scheduler_name, "effect": "NoExecute"}


def _toleration_patch(spec: JSON, toleration: JSON) -> Iterator[JSON]:
    tolerations = spec.get("tolerations")
    if tolerations is None:
        yield {"op": "add", "path": "/spec/tolerations", "value": [toleration]}
    elif toleration not in tolerations:
        yield {"op": "add", "path": "/spec/tolerations/-", "value": toleration}


def pointer_token(key: str) -> str:
    """RFC 6901: `~` becomes `~0`, then `/` becomes `~1`."""
    return key.replace("~", "~0").replace("/", "~1")


# --- validation ----------------------------------------------------------------------------------------


def _create_problems(pod: JSON) -> Iterator[str]:
    meta = pod["metadata"]
    if (meta.get("labels") or {}).get(names.LABEL_SLURM_JOB_ID):
        yield f"can't create a pod with a slurm external jobid label ({names.LABEL_SLURM_JOB_ID} is set by the bridge)"
    if (meta.get("annotations") or {}).get(names.ANNOTATION_SLURM_NODE):
        yield (
            f"can't create a pod with a slurm external node annotation ({names.ANNOTATION_SLURM_NODE} is set by the "
            "bridge)"
        )
    spec = _spec(pod)
    if spec.get("resourceClaims") is not None:
        yield (
            "can't schedule a pod with a resourceclaim, use the annotation "
            f"{names.SLURMJOB_PREFIX}gres to request devices instead"
        )
    if spec.get("topologySpreadConstraints"):
        yield "spec.topologySpreadConstraints is not supported by the slurm-bridge scheduler"
    if _uses_dra_cpu(pod) and _uses_native_cpu(pod):
        yield (f"native cpu requests or limits can't be combined with {resources.DRA_CPU}; request CPUs one way only")
    yield from _device_class_problems(pod)
    yield from _quantity_problems(pod)


def _quantity_problems(pod: JSON) -> Iterator[str]:
    """Each resource that becomes a Slurm number (resources.SLURM_FIELDS) and is no quantity or more than
    Slurm holds, else the pod's totals: admitted, such a pod could never get a job."""
    spec = _spec(pod)
    amounts = [
        (f"container {c.get('name')!r}: resources.{kind}", (c.get("resources") or {}).get(kind))
        for c in _all_containers(pod)
        for kind in _KINDS
    ]
    amounts += [(f"spec.resources.{kind}", (spec.get("resources") or {}).get(kind)) for kind in _KINDS]
    amounts.append(("spec.overhead", spec.get("overhead")))
    problems = [problem for where, held in amounts for problem in _amount_problems(where, held or {})]
    if not problems:
        try:
            resources.of_group([pod])
        except quantity.BadQuantity as err:
            problems.append(str(err))
    yield from problems


def _amount_problems(where: str, amounts: JSON) -> Iterator[str]:
    for resource, amount in amounts.items():
        if (convert := resources.SLURM_FIELDS.get(resource)) is not None:
            try:
                convert(quantity.parse(amount))
            except quantity.BadQuantity as err:
                yield f"{where}.{resource}: {err}"


def _update_problems(pod: JSON, old: JSON) -> Iterator[str]:
    if _container_resources(pod) != _container_resources(old):
        yield "can't resize a Slurm Bridge-managed pod"
    yield from _device_class_problems(pod)
    if (pod.get("status") or {}).get("phase") == "Running":
        for what, key in (("labels", names.LABEL_SLURM_JOB_ID), ("annotations", names.ANNOTATION_SLURM_NODE)):
            if (pod["metadata"].get(what) or {}).get(key) != (old.get("metadata", {}).get(what) or {}).get(key):
                yield f"can't change {key} of a running Slurm Bridge-managed pod"


def _device_class_problems(pod: JSON) -> Iterator[str]:
    """Only the supported DRA classes, and no annotation that contradicts them (rules 6 and 7)."""
    for container in _all_containers(pod):
        for device_class in sorted(resources.device_classes(container) - set(resources.SUPPORTED_DEVICE_CLASSES)):
            yield f"container {container.get('name')!r} uses unsupported DRA device class {device_class!r}"
    pod_annotations = pod["metadata"].get("annotations") or {}
    classes = set().union(*(resources.device_classes(c) for c in _all_containers(pod)))
    if names.SLURMJOB_PREFIX + "cpu-per-task" in pod_annotations and resources.DRA_CPU_CLASS in classes:
        yield f"annotation {names.SLURMJOB_PREFIX}cpu-per-task can't be combined with {resources.DRA_CPU}"
    if names.SLURMJOB_PREFIX + "gres" in pod_annotations and classes - {resources.DRA_CPU_CLASS}:
        yield (
            f"annotation {names.SLURMJOB_PREFIX}gres can't be combined with DRA device classes "
            f"{sorted(classes - {resources.DRA_CPU_CLASS})}"
        )


def _uses_dra_cpu(pod: JSON) -> bool:
    return any(resources.DRA_CPU_CLASS in resources.device_classes(c) for c in _all_containers(pod))


def _uses_native_cpu(pod: JSON) -> bool:
    holders = [_spec(pod), *_all_containers(pod)]
    return any(
        "cpu" in ((h.get("resources") or {}).get(kind) or {}) for h in holders for kind in ("requests", "limits")
    )


def _container_resources(pod: JSON) -> list[JSON | None]:
    spec = _spec(pod)
    return [spec.get("resources")] + [c.get("resources") for c in _all_containers(pod)]


def _all_containers(pod: JSON) -> list[JSON]:
    spec = _spec(pod)
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _spec(pod: JSON) -> JSON:
    return pod.get("spec") or {}


# --- responses -----------------------------------------------------------------------------------------


def _allowed(uid: str, patch: list[JSON] | None = None) -> JSON:
    response: JSON = {"uid": uid, "allowed": True}
    if patch:
        response |= {"patchType": "JSONPatch", "patch": base64.b64encode(orjson.dumps(patch)).decode()}
    return _review(response)


def _denied(uid: str, message: str) -> JSON:
    return _review({"uid": uid, "allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": message}})


def _review(response: JSON) -> JSON:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _env_settings() -> AdmissionSettings:
    """Settings from the hook server's environment (see the module docstring)."""
    namespaces = os.environ.get("BRIDGE_MANAGED_NAMESPACES")
    return AdmissionSettings(
        scheduler_name=os.environ.get("BRIDGE_SCHEDULER_NAME") or names.BRIDGE_SCHEDULER_NAME,
        namespaces=None if namespaces is None else frozenset(ns.strip() for ns in namespaces.split(",") if ns.strip()),
    )

"""The Controller hook: a Slurm control plane (slurmctld) from a `Controller` custom resource.

Children: the headless `<name>-controller-internal` Service (stable pod DNS for SlurmctldHost),
the `<name>-controller` Service (SlurmctldAddr, which clients use), the `<name>-config`
ConfigMap (slurm.conf, cgroup.conf), the slurmctld StatefulSet, and the objects every NodeSet of
the cluster shares (the headless `slurm-workers-<name>` Service that gives workers DNS names and
the `slurm-workers-pdb-<name>` PDB that protects busy workers) - one owner per object, as
Metacontroller requires. With `external: true` slurmctld runs elsewhere: only the ConfigMap (a
minimal slurm.conf for slurmrestd) and the shared worker objects remain. A ServiceMonitor is added
only when `metrics.serviceMonitor` asks for one and the CompositeController lists that child type
(the chart adds it when the Prometheus Operator CRDs exist); otherwise a condition says why not.

Main Service selector: with backups it selects the pod slurm_sync labels active (the one that
answers ping), so clients never reach a standby. A single slurmctld is always the active one, so
without HA it selects the normal labels and does not depend on slurm_sync being up.

Missing references (key Secrets, the Accounting, referenced ConfigMaps) never remove or roll
anything: hashes of a missing Secret keep their last value, slurm.conf is kept as last written
while an input it depends on is absent, a status condition names what is missing, and a resync
is requested.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeGuard

from hooks import cluster, contract, invalidspec, references, slurmconf
from hooks.contract import CompositeRequest, CustomizeRequest
from hooks.controller.model import Endpoint
from hooks.controller.pod import APP_NAME, COMPONENT, statefulset
from hooks.controller.spec import NODESET, ControllerSpec, Resolved, parse_spec, referenced_configmaps, resolve
from hooks.objects import child_metadata, content_hash, service
from hooks.status import condition, ready_condition, replica_count, unmet, workload_ready
from slinky_common import fields, names, nodesetconf, wellknown
from slinky_common.wellknown import SLURMCTLD_PORT, component_labels, selector_labels

JSON = dict[str, Any]

CONFIGMAP = contract.TYPE_CONFIGMAP
STATEFULSET = contract.TYPE_STATEFULSET
SERVICE_MONITOR_API = "monitoring.coreos.com/v1"
DEFAULT_METRICS_PATHS = ("/metrics/jobs", "/metrics/nodes", "/metrics/partitions", "/metrics/scheduler")
WORKER_APP_NAME = "slurmd"


def worker_pdb_name(controller: str) -> str:
    return f"slurm-workers-pdb-{controller}"


def customize(req: CustomizeRequest) -> JSON:
    """Related objects by name or namespace only, from the spec alone (answers are cached per generation).

    Each rule is derived on its own, so an invalid value in one field still leaves the others.
    """
    ns, spec = fields.namespace_of(req.parent), fields.spec_of(req.parent)

    def in_cluster() -> bool:  # slurm.conf for clients of an external slurmctld names only it and slurmdbd
        return not fields.opt_bool(spec, "external", False)

    def secrets() -> list[str]:
        return [ref.name for ref in (fields.key_ref(spec, "slurmKeyRef"), fields.jwt_key_ref(spec)) if ref is not None]

    def configmaps() -> list[str]:
        jwks = fields.key_ref(spec, "jwksKeyRef")
        return [*referenced_configmaps(spec), *([jwks.name] if jwks else [])]

    return {
        "relatedResources": invalidspec.derivable(
            lambda: _by_name(names.API_VERSION, "accountings", ns, [fields.local_ref_name(spec, "accountingRef")]),
            lambda: (
                [{"apiVersion": names.API_VERSION, "resource": "nodesets", "namespace": ns}] if in_cluster() else []
            ),
            lambda: _by_name("v1", "secrets", ns, secrets()) if in_cluster() else [],
            lambda: _by_name("v1", "configmaps", ns, configmaps()) if in_cluster() else [],
        )
    }


def _by_name(api_version: str, resource: str, namespace: str, wanted: list[str]) -> list[JSON]:
    """One rule for the named objects; none without names (an empty `names` would match every object)."""
    present = sorted({n for n in wanted if n})
    return (
        [{"apiVersion": api_version, "resource": resource, "namespace": namespace, "names": present}] if present else []
    )


@invalidspec.reports_invalid_spec
def sync(req: CompositeRequest) -> JSON:
    spec = parse_spec(req.parent)
    refs = resolve(req, spec)
    observed_config = references.observed(req, CONFIGMAP, spec.config_map)
    refs = _nodesets_unlisted(req, spec, refs, observed_config)
    data, frozen = _config_data(spec, refs, observed_config)
    children = [_config_map(req.parent, spec, data)]
    monitor_supported = _child_type_configured(req.controller, SERVICE_MONITOR_API, "servicemonitors")
    if spec.external is None:
        observed_sts = references.observed(req, STATEFULSET, spec.service_name)
        annotations = _pod_annotations(spec, refs, data, observed_sts)
        children = [
            _internal_service(req.parent, spec),
            _main_service(req.parent, spec),
            *children,
            statefulset(req.parent, spec, annotations, observed_sts),
        ]
        if spec.service_monitor is not None and monitor_supported:
            children.append(_service_monitor(req.parent, spec))
    children += [_worker_service(req.parent, spec), _worker_pdb(req.parent, spec)]
    response: JSON = {"status": _status(req, spec, refs, frozen, monitor_supported), "children": children}
    if refs.missing:
        response["resyncAfterSeconds"] = references.MISSING_REFERENCE_RESYNC_SECONDS
    return response


def _nodesets_unlisted(req: CompositeRequest, spec: ControllerSpec, refs: Resolved, observed: JSON | None) -> Resolved:
    """Metacontroller sends one `related` entry per customize rule, empty when nothing matched. An
    absent NodeSet entry (a failed list, a customize answer cached from before the rule) says
    nothing about the NodeSets: a slurm.conf that lists some is kept as written, not rewritten
    without their NodeSet/PartitionName lines (slurmctld would drop those partitions)."""
    if spec.external is not None or NODESET in req.related:
        return refs
    written = ((observed or {}).get("data") or {}).get(slurmconf.SLURM_CONF_FILE)
    if not isinstance(written, str) or not any(line.startswith("NodeSet=") for line in written.splitlines()):
        return refs
    message = "the NodeSet list is absent from the hook request"
    return dataclasses.replace(refs, missing=(*refs.missing, message), config_inputs_missing=True)


def _config_data(spec: ControllerSpec, refs: Resolved, observed: JSON | None) -> tuple[dict[str, str], bool]:
    """The ConfigMap data, and whether it was kept as observed because an input is missing."""
    kept = (observed or {}).get("data")
    if refs.config_inputs_missing and _is_string_map(kept) and slurmconf.SLURM_CONF_FILE in kept:
        return dict(kept), True
    accounting = refs.accounting
    if spec.accounting and accounting is None:  # not created yet: the in-cluster default is the likely answer
        accounting = Endpoint(f"{cluster.accounting_host(spec.accounting)}.{spec.namespace}", wellknown.SLURMDBD_PORT)
    if spec.external is not None:
        return {slurmconf.SLURM_CONF_FILE: slurmconf.render_external(spec.cluster_name, spec, accounting)}, False
    conf = slurmconf.SlurmConf(
        cluster_name=spec.cluster_name,
        controller=spec,
        accounting=accounting,
        metrics=spec.metrics,
        jwks=spec.jwks is not None,
        scripts=_scripts(spec, refs),
        nodesets=refs.nodesets,
        extra_conf=spec.extra_conf,
    )
    data = {slurmconf.SLURM_CONF_FILE: slurmconf.render(conf)}
    # A user's cgroup.conf (from configFileRefs) replaces ours; two files on one path would clash.
    if not any(slurmconf.CGROUP_CONF_FILE in refs.configmaps.get(n, {}) for n in spec.config_files):
        data[slurmconf.CGROUP_CONF_FILE] = slurmconf.CGROUP_CONF
    return data, False


def _scripts(spec: ControllerSpec, refs: Resolved) -> slurmconf.Scripts:
    def files(field: str) -> tuple[str, ...]:
        return tuple(
            sorted(
                {
                    nodesetconf.check_word(key, f"related[{CONFIGMAP!r}][{spec.namespace}/{name}].data key")
                    for name in spec.scripts[field]
                    for key in refs.configmaps.get(name, {})
                }
            )
        )

    return slurmconf.Scripts(
        prolog=files("prologScriptRefs"),
        epilog=files("epilogScriptRefs"),
        prolog_slurmctld=files("prologSlurmctldScriptRefs"),
        epilog_slurmctld=files("epilogSlurmctldScriptRefs"),
    )


def _pod_annotations(
    spec: ControllerSpec, refs: Resolved, data: dict[str, str], observed_sts: JSON | None
) -> dict[str, str]:
    """Hashes that roll slurmctld when its keys or (without inplaceReconfigure) its config change.

    A hash whose input is missing keeps its observed value: a Secret or ConfigMap that is
    briefly absent must not restart the control plane.
    """
    observed = ((((observed_sts or {}).get("spec") or {}).get("template") or {}).get("metadata") or {}).get(
        "annotations"
    ) or {}
    result: dict[str, str] = {}
    for annotation, ref in (
        (names.ANNOTATION_SLURM_KEY_HASH, spec.slurm_key),
        (names.ANNOTATION_JWT_KEY_HASH, spec.jwt_key),
    ):
        value = refs.secrets.get(f"{ref.name}/{ref.key}") if ref else None
        result[annotation] = (
            content_hash({ref.key: value}) if ref and value is not None else observed.get(annotation, "")
        )
    if spec.inplace_reconfigure:
        return result
    inputs = {f"{spec.config_map}/{k}": v for k, v in data.items()}
    projected = [*spec.referenced_configmaps(), *([spec.jwks.name] if spec.jwks else [])]
    for name in projected:
        inputs |= {f"{name}/{k}": v for k, v in refs.configmaps.get(name, {}).items()}
    absent = any(name not in refs.configmaps for name in projected)
    kept = observed.get(names.ANNOTATION_SLURM_CONFIG_HASH)
    result[names.ANNOTATION_SLURM_CONFIG_HASH] = kept if absent and isinstance(kept, str) else content_hash(inputs)
    return result


def _config_map(parent: JSON, spec: ControllerSpec, data: dict[str, str]) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(parent, spec.config_map, component_labels(APP_NAME, spec.name, COMPONENT)),
        "data": data,
    }


def _internal_service(parent: JSON, spec: ControllerSpec) -> JSON:
    # Without the component label, so a ServiceMonitor selecting it matches only the main Service.
    selector = selector_labels(APP_NAME, spec.name)
    return service(parent, spec.internal_service_name, selector, selector, APP_NAME, SLURMCTLD_PORT, headless=True)


def _main_service(parent: JSON, spec: ControllerSpec) -> JSON:
    selector = selector_labels(APP_NAME, spec.name)
    if spec.ha:
        selector[names.LABEL_ACTIVE_CONTROLLER] = "true"
    labels = component_labels(APP_NAME, spec.name, COMPONENT)
    return service(parent, spec.service_name, labels, selector, APP_NAME, SLURMCTLD_PORT, spec.service)


def _worker_labels(spec: ControllerSpec) -> dict[str, str]:
    return {names.LABEL_NAME: WORKER_APP_NAME, names.LABEL_COMPONENT: "worker", names.LABEL_CLUSTER: spec.name}


def _worker_service(parent: JSON, spec: ControllerSpec) -> JSON:
    selector = {names.LABEL_NAME: WORKER_APP_NAME, names.LABEL_CLUSTER: spec.name}
    return service(
        parent,
        spec.worker_service,
        _worker_labels(spec),
        selector,
        WORKER_APP_NAME,
        wellknown.SLURMD_PORT,
        headless=True,
    )


def _worker_pdb(parent: JSON, spec: ControllerSpec) -> JSON:
    """No voluntary eviction of a worker slurm_sync marked busy (running jobs)."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(parent, worker_pdb_name(spec.name), _worker_labels(spec)),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {names.LABEL_POD_PROTECT: "true", names.LABEL_CLUSTER: spec.name}},
        },
    }


def _service_monitor(parent: JSON, spec: ControllerSpec) -> JSON:
    sm = spec.service_monitor
    assert sm is not None
    labels = component_labels(APP_NAME, spec.name, COMPONENT)
    endpoints = list(sm.endpoints) or [{"path": p} for p in DEFAULT_METRICS_PATHS]
    return {
        "apiVersion": SERVICE_MONITOR_API,
        "kind": "ServiceMonitor",
        "metadata": child_metadata(parent, spec.service_name, {**sm.labels, **labels}, sm.annotations),
        "spec": {
            "selector": {"matchLabels": labels},
            "namespaceSelector": {"matchNames": [spec.namespace]},
            "endpoints": [_metrics_endpoint(e, sm.interval, sm.scrape_timeout) for e in endpoints],
        },
    }


def _metrics_endpoint(endpoint: JSON, interval: str, scrape_timeout: str) -> JSON:
    result: JSON = {"port": APP_NAME, "scheme": "http", "path": endpoint["path"]}
    for key, default in (("interval", interval), ("scrapeTimeout", scrape_timeout)):
        if endpoint.get(key) or default:
            result[key] = endpoint.get(key) or default
    return result


def _status(req: CompositeRequest, spec: ControllerSpec, refs: Resolved, frozen: bool, monitor_supported: bool) -> JSON:
    parent = req.parent
    if refs.missing:
        message = "missing: " + "; ".join(refs.missing) + ". Existing children and pod hashes are kept"
        message += "; slurm.conf is kept as last written until they exist" if frozen else ""
        resolved = condition(parent, names.CONDITION_REFERENCES_RESOLVED, False, "MissingReferences", message)
    else:
        message = "every referenced object exists"
        resolved = condition(parent, names.CONDITION_REFERENCES_RESOLVED, True, "AllFound", message)
    if spec.external is not None:
        where = f"{spec.external.host}:{spec.external.port}"
        message = f"slurmctld runs outside Kubernetes at {where}; only its client slurm.conf is managed here"
        conditions = [
            condition(parent, names.CONDITION_EXTERNAL, True, "External", message),
            ready_condition(parent, unmet(resolved), "External", message),
        ]
    else:
        sts = references.observed(req, STATEFULSET, spec.service_name)
        conditions = _workload_conditions(parent, spec, sts, resolved)
    conditions.append(resolved)
    if spec.service_monitor is not None and spec.external is None:
        if monitor_supported:
            conditions.append(
                condition(parent, names.CONDITION_SERVICE_MONITOR_CREATED, True, "Created", "ServiceMonitor is a child")
            )
        else:
            conditions.append(
                condition(
                    parent,
                    names.CONDITION_SERVICE_MONITOR_CREATED,
                    False,
                    "ChildTypeNotConfigured",
                    "metrics.serviceMonitor.enabled but the CompositeController has no monitoring.coreos.com/v1 "
                    "servicemonitors "
                    "child type; enable it in the slurm-operator chart once the Prometheus Operator CRDs are installed",
                )
            )
    return {"conditions": conditions}


def _workload_conditions(parent: JSON, spec: ControllerSpec, sts: JSON | None, resolved: JSON) -> list[JSON]:
    """Ready: every reference exists and every slurmctld is up on the current template. Available: at least one is."""
    name = spec.service_name
    ready_cond = workload_ready(parent, resolved, sts, "StatefulSet", name, spec.replicas, "slurmctld")
    if sts is None:
        message = f"StatefulSet {name} does not exist yet"
        return [ready_cond, condition(parent, names.CONDITION_AVAILABLE, False, "StatefulSetMissing", message)]
    ready = replica_count(sts.get("status") or {}, "readyReplicas")
    reason = "SlurmctldReady" if ready else "NoSlurmctldReady"
    message = f"{ready}/{spec.replicas} slurmctld pods ready"
    return [ready_cond, condition(parent, names.CONDITION_AVAILABLE, ready > 0, reason, message)]


def _child_type_configured(controller: JSON, api_version: str, resource: str) -> bool:
    rules = (controller.get("spec") or {}).get("childResources") or []
    return any(
        isinstance(r, dict) and r.get("apiVersion") == api_version and r.get("resource") == resource for r in rules
    )


def _is_string_map(value: Any) -> TypeGuard[dict[str, str]]:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())

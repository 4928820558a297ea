"""The slurmctld StatefulSet: pod, sidecars, probes, /etc/slurm projection and state storage.

The pod runs as the `slurm` user (uid/gid 401), never as root. /etc/slurm is one projected
volume holding the generated config, the two auth keys and every referenced ConfigMap, so
kubelet keeps files current and the optional reconfigure sidecar can notice changes.
StatefulSet fields Kubernetes will not update (selector, serviceName, volumeClaimTemplates) are
fixed, so the InPlace update strategy of the CompositeController can never be refused.
"""

from __future__ import annotations

import copy
from typing import Any

from hooks import cluster, logfile, slurmconf
from hooks.controller.spec import ControllerSpec

# The same log FIFO sidecar as slurmd's (slurmctld writes its log into the FIFO it reads).
from hooks.objects import child_metadata
from hooks.podtemplate import apply_pod_template, merge_container
from slinky_common import names
from slinky_common.wellknown import SLURMCTLD_PORT, component_labels, selector_labels

JSON = dict[str, Any]

APP_NAME = "slurmctld"
COMPONENT = "controller"
SLURM_UID = cluster.SLURM_UID
DEFAULT_SLURMCTLD_IMAGE = cluster.default_image(APP_NAME)
ETC_VOLUME = "slurm-etc"
STATESAVE_VOLUME = "statesave"
AUTHSOCKET_DIR = "/run/slurmctld"
# Slinky's mode: owner read/write, group execute; kubelet adds group read for the fsGroup (slurm),
# so slurmctld reads the keys and runs the scripts while other users see nothing.
ETC_MODE = 0o610
_PROBE_TIMING = {"failureThreshold": 6, "periodSeconds": 10}

# Runs `scontrol reconfigure` (until it succeeds) whenever a file under /etc/slurm changes;
# kubelet's `..data` bookkeeping entries are skipped, the visible symlinks followed.
RECONFIGURE_SCRIPT = """set -euo pipefail
checksum() {
  find -L /etc/slurm -mindepth 1 -name '..*' -prune -o -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum
}
last="$(checksum)"
while true; do
  sleep 5
  now="$(checksum)"
  if [[ "$now" != "$last" ]]; then
    until scontrol reconfigure; do echo "scontrol reconfigure failed; retrying" >&2; sleep 5; done
    last="$now"
  fi
done
"""


def statefulset(parent: JSON, spec: ControllerSpec, pod_annotations: dict[str, str], observed: JSON | None) -> JSON:
    """The slurmctld StatefulSet; `observed` (the live one, if any) only pins immutable fields."""
    labels = component_labels(APP_NAME, spec.name, COMPONENT)
    user_meta = spec.template.get("metadata") or {}
    claim_templates = _claim_templates(spec, observed)
    pod_spec = _pod_spec(spec, has_claim_template=bool(claim_templates))
    template = apply_pod_template(
        {
            "metadata": {
                "labels": labels,
                "annotations": {names.ANNOTATION_DEFAULT_CONTAINER: APP_NAME, **pod_annotations},
            },
            "spec": pod_spec,
        },
        spec.template,
    )
    _require_anti_affinity(template["spec"], selector_labels(APP_NAME, spec.name))
    sts_spec: JSON = {
        "replicas": spec.replicas,
        "revisionHistoryLimit": 0,
        "selector": {"matchLabels": selector_labels(APP_NAME, spec.name)},
        "serviceName": spec.internal_service_name,
        "template": template,
    }
    if claim_templates:
        sts_spec["volumeClaimTemplates"] = claim_templates
    policy = _pod_management_policy(spec, observed)
    if policy:
        sts_spec["podManagementPolicy"] = policy
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": child_metadata(
            parent,
            spec.service_name,
            {**(user_meta.get("labels") or {}), **labels},
            user_meta.get("annotations"),
        ),
        "spec": sts_spec,
    }


def _pod_management_policy(spec: ControllerSpec, observed: JSON | None) -> str | None:
    """Parallel for a new StatefulSet with backups; an existing one keeps its own (the field is immutable).

    Every slurmctld resolves every SlurmctldHost at start and waits until it can: under OrderedReady the
    first pod waits for the name of a pod that is only made once the first is Ready, and never starts
    (seen on the cluster lab, at creation and whenever every slurmctld pod is gone at once).
    """
    if observed is not None:  # rendered only when not the server's default, so the apply stays a fixed point
        return "Parallel" if (observed.get("spec") or {}).get("podManagementPolicy") == "Parallel" else None
    return "Parallel" if spec.ha else None


def _pod_spec(spec: ControllerSpec, has_claim_template: bool) -> JSON:
    init = [_reconfigure_sidecar(spec)] if spec.inplace_reconfigure else []
    volumes = [
        _etc_volume(spec),
        {"name": "slurm-logfile", "emptyDir": {"medium": "Memory"}},
        {"name": "run", "emptyDir": {"medium": "Memory"}},
        {"name": "slurm-authsocket", "emptyDir": {}},
    ]
    if not has_claim_template:
        volumes.append(_statesave_volume(spec))
    return {
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": SLURM_UID,
            "runAsGroup": SLURM_UID,
            "fsGroup": SLURM_UID,
        },
        "initContainers": [*init, _logfile_sidecar(spec)],
        "containers": [_slurmctld_container(spec)],
        "volumes": volumes,
    }


def _slurmctld_container(spec: ControllerSpec) -> JSON:
    port = {"name": APP_NAME, "containerPort": SLURMCTLD_PORT, "protocol": "TCP"}
    # A standby slurmctld never reports ready on /readyz; with backups, liveness decides readiness.
    ready_path = "/livez" if spec.ha else "/readyz"
    base = {
        "name": APP_NAME,
        "image": DEFAULT_SLURMCTLD_IMAGE,
        "ports": [port],
        "startupProbe": _http_probe("/livez"),
        "livenessProbe": _http_probe("/livez"),
        "readinessProbe": _http_probe(ready_path),
        "securityContext": {"runAsNonRoot": True, "runAsUser": SLURM_UID, "runAsGroup": SLURM_UID},
        "volumeMounts": [
            {"name": ETC_VOLUME, "mountPath": slurmconf.ETC_DIR, "readOnly": True},
            {"name": "run", "mountPath": "/run"},
            {"name": STATESAVE_VOLUME, "mountPath": f"{slurmconf.STATE_SAVE_ROOT}/{spec.cluster_name}"},
            {"name": "slurm-authsocket", "mountPath": AUTHSOCKET_DIR},
            {"name": "slurm-logfile", "mountPath": logfile.LOG_DIR},
        ],
    }
    return merge_container(base, spec.slurmctld)


def _logfile_sidecar(spec: ControllerSpec) -> JSON:
    return logfile.logfile_sidecar(slurmconf.SLURMCTLD_LOG, spec.logfile)


def _reconfigure_sidecar(spec: ControllerSpec) -> JSON:
    base = {
        "name": "reconfigure",
        "image": spec.slurmctld.get("image") or DEFAULT_SLURMCTLD_IMAGE,  # it needs scontrol
        "restartPolicy": "Always",
        "command": ["tini", "-g", "--", "bash", "-c", RECONFIGURE_SCRIPT],
        "volumeMounts": [
            {"name": ETC_VOLUME, "mountPath": slurmconf.ETC_DIR, "readOnly": True},
            {"name": "slurm-authsocket", "mountPath": AUTHSOCKET_DIR, "readOnly": True},
        ],
    }
    return merge_container(base, spec.reconfigure)


def _etc_volume(spec: ControllerSpec) -> JSON:
    sources: list[JSON] = [{"configMap": {"name": spec.config_map}}]
    for ref, path in ((spec.slurm_key, slurmconf.SLURM_KEY_FILE), (spec.jwt_key, slurmconf.JWT_KEY_FILE)):
        if ref is not None:
            sources.append({"secret": {"name": ref.name, "items": [{"key": ref.key, "path": path}]}})
    sources += [{"configMap": {"name": name}} for name in spec.referenced_configmaps()]
    if spec.jwks is not None:
        sources.append(
            {"configMap": {"name": spec.jwks.name, "items": [{"key": spec.jwks.key, "path": slurmconf.JWKS_FILE}]}}
        )
    return {"name": ETC_VOLUME, "projected": {"defaultMode": ETC_MODE, "sources": sources}}


def _statesave_volume(spec: ControllerSpec) -> JSON:
    p = spec.persistence
    if p.enabled and p.existing_claim:
        return {"name": STATESAVE_VOLUME, "persistentVolumeClaim": {"claimName": p.existing_claim}}
    return {"name": STATESAVE_VOLUME, "emptyDir": {}}


def _claim_templates(spec: ControllerSpec, observed: JSON | None) -> list[JSON]:
    """The StateSave claim template, written as the API server stores it.

    Metacontroller's apply replaces a list whose items have no top-level `name` as a whole, so any field the
    server adds and we leave out would mean an update on every sync. An existing StatefulSet's templates are
    immutable and echoed exactly as stored; a new one gets the server's defaults (apiVersion and kind, volumeMode
    Filesystem, phase Pending).
    """
    if observed is not None:
        return [
            copy.deepcopy(t)
            for t in (observed.get("spec") or {}).get("volumeClaimTemplates") or []
            if isinstance(t, dict) and isinstance(t.get("metadata"), dict)
        ]
    p = spec.persistence
    if not p.enabled or p.existing_claim:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": STATESAVE_VOLUME},
            "spec": {"volumeMode": "Filesystem", **copy.deepcopy(p.claim_spec)},
            "status": {"phase": "Pending"},
        }
    ]


def _http_probe(path: str) -> JSON:
    return {"httpGet": {"path": path, "port": APP_NAME}, **_PROBE_TIMING}


def _require_anti_affinity(pod_spec: JSON, selector: dict[str, str]) -> None:
    """Never two slurmctld of one cluster on a node (a node loss must not take primary and backup)."""
    term = {"labelSelector": {"matchLabels": dict(selector)}, "topologyKey": "kubernetes.io/hostname"}
    anti = pod_spec.setdefault("affinity", {}).setdefault("podAntiAffinity", {})
    terms = anti.setdefault("requiredDuringSchedulingIgnoredDuringExecution", [])
    if term not in terms:
        terms.append(term)

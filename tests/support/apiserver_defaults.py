"""What the kube-apiserver stores for a child we create: the defaults it fills in, as it serialises them.

Only defaulting (the registered `SetDefaults_*` functions and the apps/v1 conversion) is modelled, not admission
plugins: those add tolerations and the service-account token volume to Pods, never to workload templates, and
our Pods are OnDelete children. The defaults that decide Metacontroller's fixed point are those inside list
items without a conventional merge key (see tests/support/metacontroller_apply.py), since such a list is
replaced whole on every merge:

* StatefulSet `spec.volumeClaimTemplates[]` (Kubernetes `pkg/apis/apps/v1/conversion.go`,
  `Convert_apps_StatefulSetSpec_To_v1_StatefulSetSpec`, kubernetes/kubernetes#87583): each item is served with
  `apiVersion: v1` and `kind: PersistentVolumeClaim`; the generated defaulter runs the PVC defaults on each
  item (`pkg/apis/core/v1/defaults.go`): `status.phase: Pending` (`SetDefaults_PersistentVolumeClaim`) and
  `spec.volumeMode: Filesystem` (`SetDefaults_PersistentVolumeClaimSpec`). Up to Kubernetes 1.33 the item's
  zero `metadata.creationTimestamp` is serialised as an explicit null (dropped from 1.34,
  kubernetes/kubernetes#130989).
* projected volume `sources[]`: `serviceAccountToken.expirationSeconds: 3600`
  (`SetDefaults_ServiceAccountTokenProjection`) and `downwardAPI.items[].fieldRef.apiVersion: v1`
  (`SetDefaults_ObjectFieldSelector`).

The other defaults below sit in objects or in list items with a merge key, where Metacontroller keeps them;
they are here so the model sees a realistic stored object (`pkg/apis/core/v1/defaults.go`,
`pkg/apis/apps/v1/defaults.go`, the Service registry's IP allocation).
"""

from __future__ import annotations

import copy
from typing import Any

JSON = dict[str, Any]

# The first minor version that omits a zero metadata.creationTimestamp instead of writing null.
OMITS_NULL_CREATION_TIMESTAMP = 34
DEFAULT_UID = "00000000-0000-4000-8000-000000000001"
_POD_SPEC_DEFAULTS = {
    "restartPolicy": "Always", "dnsPolicy": "ClusterFirst", "schedulerName": "default-scheduler",
    "terminationGracePeriodSeconds": 30, "securityContext": {}, "enableServiceLinks": True,
}  # fmt: skip
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")
_PROBE_DEFAULTS = {"timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3}


def stored(obj: JSON, minor: int, uid: str = DEFAULT_UID) -> JSON:
    """`obj` as a Kubernetes 1.<minor> API server returns it after a create."""
    out = copy.deepcopy(obj)
    meta = out["metadata"]
    meta.update(uid=uid, resourceVersion="1", generation=1, creationTimestamp="2025-06-01T08:00:00Z")
    kind = (out["apiVersion"], out["kind"])
    spec = out.get("spec") or {}
    if kind == ("apps/v1", "StatefulSet"):
        _statefulset(spec, minor)
        out["status"] = {"replicas": 0, "availableReplicas": 0}
    elif kind == ("apps/v1", "Deployment"):
        _deployment(spec, minor)
        out["status"] = {}
    elif kind == ("v1", "Pod"):
        _pod_spec(spec)
        _requests_from_limits(spec)
        out["status"] = {"phase": "Pending", "qosClass": "Burstable"}
    elif kind == ("v1", "Service"):
        _service(spec)
        out["status"] = {"loadBalancer": {}}
    elif kind == ("v1", "Secret"):
        out.setdefault("type", "Opaque")
    elif kind == ("v1", "PersistentVolumeClaim"):
        spec.setdefault("volumeMode", "Filesystem")
        out["status"] = {"phase": "Pending"}
    elif kind == ("policy/v1", "PodDisruptionBudget"):
        out["status"] = {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0}
    return out


def _statefulset(spec: JSON, minor: int) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    strategy = spec.setdefault("updateStrategy", {})
    if "type" not in strategy:
        strategy["type"] = "RollingUpdate"
        strategy.setdefault("rollingUpdate", {})
    if strategy["type"] == "RollingUpdate" and "rollingUpdate" in strategy:
        strategy["rollingUpdate"].setdefault("partition", 0)
    retention = spec.setdefault("persistentVolumeClaimRetentionPolicy", {})
    retention.setdefault("whenDeleted", "Retain")
    retention.setdefault("whenScaled", "Retain")
    _pod_template(spec.get("template") or {}, minor)
    for claim in spec.get("volumeClaimTemplates") or []:
        _claim_template(claim, minor)


def _claim_template(claim: JSON, minor: int) -> None:
    claim["apiVersion"] = "v1"
    claim["kind"] = "PersistentVolumeClaim"
    if minor < OMITS_NULL_CREATION_TIMESTAMP:
        claim.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    claim.setdefault("spec", {}).setdefault("volumeMode", "Filesystem")
    claim.setdefault("status", {}).setdefault("phase", "Pending")


def _deployment(spec: JSON, minor: int) -> None:
    spec.setdefault("replicas", 1)
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    strategy = spec.setdefault("strategy", {})
    strategy.setdefault("type", "RollingUpdate")
    if strategy["type"] == "RollingUpdate":
        strategy.setdefault("rollingUpdate", {}).setdefault("maxUnavailable", "25%")
        strategy["rollingUpdate"].setdefault("maxSurge", "25%")
    _pod_template(spec.get("template") or {}, minor)


def _pod_template(template: JSON, minor: int) -> None:
    if minor < OMITS_NULL_CREATION_TIMESTAMP:
        template.setdefault("metadata", {}).setdefault("creationTimestamp", None)
    _pod_spec(template.setdefault("spec", {}))


def _pod_spec(spec: JSON) -> None:
    for key, value in _POD_SPEC_DEFAULTS.items():
        spec.setdefault(key, copy.deepcopy(value))
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        _container(container)
    for volume in spec.get("volumes") or []:
        _volume(volume)


def _container(container: JSON) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    container.setdefault("imagePullPolicy", _pull_policy(container.get("image") or ""))
    container.setdefault("resources", {})
    for port in container.get("ports") or []:
        port.setdefault("protocol", "TCP")
    for probe in (container.get(name) for name in _PROBES):
        if isinstance(probe, dict):
            for key, value in _PROBE_DEFAULTS.items():
                probe.setdefault(key, value)
            if isinstance(probe.get("httpGet"), dict):
                probe["httpGet"].setdefault("scheme", "HTTP")
    for env in container.get("env") or []:
        _field_ref((env.get("valueFrom") or {}).get("fieldRef"))


def _pull_policy(image: str) -> str:
    """SetDefaults_Container: Always for `:latest` or no tag (a digest counts as a tag), else IfNotPresent."""
    name = image.rsplit("/", 1)[-1]
    if "@" in name or (":" in name and not name.endswith(":latest")):
        return "IfNotPresent"
    return "Always"


def _volume(volume: JSON) -> None:
    for source in ("configMap", "secret", "downwardAPI", "projected"):
        if isinstance(volume.get(source), dict):
            volume[source].setdefault("defaultMode", 0o644)
    for item in (volume.get("downwardAPI") or {}).get("items") or []:
        _field_ref(item.get("fieldRef"))
    for source in (volume.get("projected") or {}).get("sources") or []:
        if isinstance(source.get("serviceAccountToken"), dict):
            source["serviceAccountToken"].setdefault("expirationSeconds", 3600)
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            _field_ref(item.get("fieldRef"))


def _field_ref(ref: Any) -> None:
    if isinstance(ref, dict):
        ref.setdefault("apiVersion", "v1")


def _requests_from_limits(spec: JSON) -> None:
    """SetDefaults_Pod (Pods only, not templates): a limit without a request becomes the request."""
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        for name, limit in (resources.get("limits") or {}).items():
            resources.setdefault("requests", {}).setdefault(name, limit)


def _service(spec: JSON) -> None:
    spec.setdefault("type", "ClusterIP")
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] in ("ClusterIP", "NodePort", "LoadBalancer"):
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("clusterIP", "10.96.0.10")
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port["port"])


def updated(previous: JSON, written: JSON, minor: int) -> JSON:
    """What the API server stores for an Update of `previous` with `written`: defaults again, status kept."""
    out = stored(written, minor, uid=previous["metadata"]["uid"])
    out["metadata"]["resourceVersion"] = str(int(previous["metadata"]["resourceVersion"]) + 1)
    out["metadata"]["creationTimestamp"] = previous["metadata"]["creationTimestamp"]
    if "status" in previous:
        out["status"] = copy.deepcopy(previous["status"])
    return out

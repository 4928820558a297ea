"""Write examples/requests/*.json: one realistic request per hook route of docs/architecture.md §3.

    .venv/bin/python examples/requests/generate.py          # rewrite the files
    .venv/bin/python examples/requests/generate.py --check  # exit 1 if a file is stale

Everything describes one cluster, `slurm` in namespace `slurm` (Controller `slurm`, NodeSet
`slurm-worker-debug`, LoginSet `slurm-login`, RestApi `slurm`, Accounting `slurm`, Token
`slurm-token`), plus bridge pods in the managed namespace `slurm-bridge`. Requests are what
Metacontroller v4.17 sends with hook version v2: `controller` carries the manifest from
compositecontrollers/ (so these files change when a manifest does: run this script), observed
children carry the system metadata Metacontroller and the API server add (uid, resourceVersion,
ownerReferences, controller-uid, last-applied annotation, managedFields, status) that a hook must
never echo back. Secrets hold obviously fake key material. (A real `controller` also carries the
fields Metacontroller's CRD defaults; hooks must not depend on its contents.)

Routes without a hook in the manifests (the finalize hooks of every kind but NodeSet) get no
example: Metacontroller never calls them, and the hook server answers them 501.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402 - after the sys.path insert that makes the repo importable

from hooks.cluster import IMAGE_TAG  # noqa: E402 - after the sys.path insert that makes the repo importable
from hooks.nodeset.pods import revision_hash  # noqa: E402 - after the sys.path insert that makes the repo importable
from slinky_common import names as n  # noqa: E402 - after the sys.path insert that makes the repo importable

OUT = Path(__file__).resolve().parent
MANIFESTS = ROOT / "compositecontrollers"

JSON = dict[str, Any]

NS = "slurm"
CLUSTER = "slurm"
BRIDGE_NS = "slurm-bridge"
CREATED = "2025-06-02T09:00:00Z"
LATER = "2025-06-02T09:00:41Z"
DELETING = "2025-06-03T15:20:00Z"
LAST_APPLIED = n.ANNOTATION_LAST_APPLIED


# --------------------------------------------------------------------------- helpers


def uid(*parts: str) -> str:
    """A stable, realistic-looking UID for one object."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "slinky-example/" + "/".join(parts)))


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def manifest(name: str) -> JSON:
    return yaml.safe_load((MANIFESTS / name).read_text())


def controller_of(manifest_file: str) -> JSON:
    """The `controller` field as Metacontroller sends it: metadata, spec, empty status."""
    doc = manifest(manifest_file)
    name = doc["metadata"]["name"]
    return {
        "metadata": {
            "name": name,
            "uid": uid("cc", name),
            "resourceVersion": "1204",
            "generation": 1,
            "creationTimestamp": "2025-06-01T08:00:00Z",
            "labels": doc["metadata"].get("labels", {}),
        },
        "spec": doc["spec"],
        "status": {},
    }


def cr(kind: str, name: str, spec: JSON, status: JSON, generation: int = 1, rv: str = "5012") -> JSON:
    """A Slinky custom resource as the informer cache holds it."""
    return {
        "apiVersion": n.API_VERSION,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid(kind, name),
            "resourceVersion": rv,
            "generation": generation,
            "creationTimestamp": CREATED,
            "labels": {"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "slurm-1.0.0"},
            "annotations": {"meta.helm.sh/release-name": "slurm", "meta.helm.sh/release-namespace": NS},
        },
        "spec": spec,
        "status": status,
    }


def deleting(obj: JSON, finalizers: list[str], grace: int = 0) -> JSON:
    """The same object after `kubectl delete` while finalizers hold it (the API server bumps generation)."""
    out = json.loads(json.dumps(obj))
    out["metadata"]["deletionTimestamp"] = DELETING
    out["metadata"]["deletionGracePeriodSeconds"] = grace
    out["metadata"]["finalizers"] = finalizers
    if "generation" in out["metadata"]:
        out["metadata"]["generation"] += 1
    return out


def cc_finalizer(manifest_file: str) -> str:
    return "metacontroller.io/compositecontroller-" + manifest(manifest_file)["metadata"]["name"]


def dc_finalizer(manifest_file: str) -> str:
    return "metacontroller.io/decoratorcontroller-" + manifest(manifest_file)["metadata"]["name"]


def digest(text: str) -> str:
    """The hex SHA-256 of a text: config hashes, image and container IDs."""
    return hashlib.sha256(text.encode()).hexdigest()


def owner_ref(api_version: str, kind: str, name: str, owner_uid: str) -> JSON:
    """The controller reference a controller puts on what it made."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": owner_uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def owned(desired: JSON, parent: JSON, rv: str, status: JSON | None = None) -> JSON:
    """An observed child: the short form a hook returned, plus what Metacontroller and the API server added."""
    obj = json.loads(json.dumps(desired))
    meta = obj["metadata"]
    meta["namespace"] = parent["metadata"]["namespace"]
    meta.setdefault("labels", {})["controller-uid"] = parent["metadata"]["uid"]
    applied = {k: v for k, v in obj.items() if k != "status"}
    meta.setdefault("annotations", {})[LAST_APPLIED] = json.dumps(applied, separators=(",", ":"), sort_keys=True)
    meta["uid"] = uid(obj["kind"], meta["namespace"], meta["name"])
    meta["resourceVersion"] = rv
    meta["creationTimestamp"] = LATER
    meta["ownerReferences"] = [
        owner_ref(parent["apiVersion"], parent["kind"], parent["metadata"]["name"], parent["metadata"]["uid"])
    ]
    meta["managedFields"] = [
        {
            "manager": "metacontroller",
            "operation": "Update",
            "apiVersion": obj["apiVersion"],
            "time": LATER,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, f"f:{LAST_APPLIED}": {}}}},
        }
    ]
    if status is not None:
        obj["status"] = status
    return obj


def object_map(*objs: JSON) -> dict[str, JSON]:
    """v2 keys: `namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    out: dict[str, JSON] = {}
    for obj in objs:
        meta = obj["metadata"]
        out[f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]] = obj
    return out


def plain(api_version: str, kind: str, name: str, namespace: str = NS, **body: Any) -> JSON:
    """An object not owned by the parent (a related object), with server metadata."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid(kind, namespace, name),
            "resourceVersion": "3001",
            "creationTimestamp": CREATED,
            **body.pop("metadata", {}),
        },
        **body,
    }


def composite(
    manifest_file: str,
    parent: JSON,
    children: dict[str, dict[str, JSON]],
    related: dict[str, dict[str, JSON]],
    finalizing: bool,
) -> JSON:
    return {
        "controller": controller_of(manifest_file),
        "parent": parent,
        "children": children,
        "related": related,
        "finalizing": finalizing,
    }


def selector_labels(app: str, instance: str) -> dict[str, str]:
    return {n.LABEL_NAME: app, n.LABEL_INSTANCE: instance}


def labels(app: str, instance: str, component: str) -> dict[str, str]:
    return {**selector_labels(app, instance), n.LABEL_COMPONENT: component}


def image(name: str) -> str:
    return f"ghcr.io/slinkyproject/{name}:{IMAGE_TAG}"


def port(name: str, number: int) -> JSON:
    return {"name": name, "containerPort": number, "protocol": "TCP"}


def logfile_sidecar(socket: str) -> JSON:
    return {
        "name": "logfile",
        "image": "docker.io/library/alpine:latest",
        "command": ["sh", "-c", 'mkfifo -m 777 "$SOCKET" 2>/dev/null; exec cat "$SOCKET"'],
        "env": [{"name": "SOCKET", "value": socket}],
        "restartPolicy": "Always",
        "volumeMounts": [{"name": "slurm-logfile", "mountPath": "/var/log/slurm"}],
    }


def http_probe(path: str, port_name: str, failures: int | None = None) -> JSON:
    return with_failures({"httpGet": {"path": path, "port": port_name}}, failures)


def tcp_probe(number: int, failures: int | None = None) -> JSON:
    return with_failures({"tcpSocket": {"port": number}}, failures)


def with_failures(probe: JSON, failures: int | None) -> JSON:
    """A probe that tolerates ``failures`` checks 10 s apart (none: the defaults)."""
    if failures:
        probe |= {"failureThreshold": failures, "periodSeconds": 10}
    return probe


def service_port(name: str, number: int) -> JSON:
    return {"name": name, "port": number, "targetPort": name}


def run_as(user: int) -> JSON:
    """A pod security context: not root, one user and group for the process and its volumes."""
    return {"runAsNonRoot": True, "runAsUser": user, "runAsGroup": user, "fsGroup": user}


def mount(name: str, path: str, read_only: bool = False, sub_path: str = "") -> JSON:
    volume_mount: JSON = {"name": name, "mountPath": path}
    if sub_path:
        volume_mount["subPath"] = sub_path
    if read_only:
        volume_mount["readOnly"] = True
    return volume_mount


def memory_volume(name: str) -> JSON:
    return {"name": name, "emptyDir": {"medium": "Memory"}}


def projected(name: str, sources: list[JSON], mode: int | None = None) -> JSON:
    volume: JSON = {} if mode is None else {"defaultMode": mode}
    return {"name": name, "projected": {**volume, "sources": sources}}


def key_source(kind: str, name: str, key: str) -> JSON:
    """A projected-volume source with one key of a Secret or ConfigMap (``kind``: secret or configMap)."""
    return {kind: {"name": name, "items": [{"key": key, "path": key}]}}


def slurm_key_source() -> JSON:
    return key_source("secret", "slurm-key", "slurm.key")


def jwt_key_source() -> JSON:
    return key_source("secret", "slurm-jwt-key", "jwt.key")


def v1_object(kind: str, name: str, object_labels: dict[str, str] | None = None, **body: Any) -> JSON:
    """A ConfigMap or Secret as a hook returns it (labels only where the hook sets them)."""
    meta: JSON = {"name": name}
    if object_labels:
        meta["labels"] = object_labels
    return {"apiVersion": "v1", "kind": kind, "metadata": meta, **body}


def workload(
    kind: str,
    name: str,
    component: tuple[str, str, str],
    annotations: dict[str, str],
    pod_spec: JSON,
    before_selector: JSON | None = None,
    after_template: JSON | None = None,
) -> JSON:
    """A one-replica Deployment or StatefulSet of one component; ``before_selector`` and ``after_template``
    place the kind's own spec fields where the hooks put them."""
    app, instance, _ = component
    component_labels = labels(*component)
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "labels": component_labels},
        "spec": {
            "replicas": 1,
            "revisionHistoryLimit": 0,
            **(before_selector or {}),
            "selector": {"matchLabels": selector_labels(app, instance)},
            "template": {"metadata": {"labels": component_labels, "annotations": annotations}, "spec": pod_spec},
            **(after_template or {}),
        },
    }


def rolled_out(**more: Any) -> JSON:
    """A workload's status with its one replica ready; ``more``: what the kind reports besides."""
    return {"observedGeneration": 1, "replicas": 1, "readyReplicas": 1, "availableReplicas": 1, **more}


def pod_condition(kind: str, status: str, since: str, **more: str) -> JSON:
    return {"type": kind, "status": status, "lastTransitionTime": since, **more}


def pod_addresses(host_ip: str, pod_ip: str) -> JSON:
    return {"hostIP": host_ip, "hostIPs": [{"ip": host_ip}], "podIP": pod_ip, "podIPs": [{"ip": pod_ip}]}


def container_status(name: str, image_ref: str, image_id: str, pod: str, state: JSON, running: bool) -> JSON:
    return {
        "name": name,
        "ready": running,
        "started": running,
        "restartCount": 0,
        "image": image_ref,
        "imageID": image_id,
        "containerID": f"containerd://{digest(pod)}",
        "state": state,
    }


# --------------------------------------------------------------------------- shared objects

SLURM_KEY = b64("example-slurm-key-not-a-secret-" * 8)
JWT_KEY_TEXT = "example-jwt-key-not-a-secret-" * 4
DB_PASSWORD = "example-db-password"

SLURM_KEY_SECRET = plain("v1", "Secret", "slurm-key", type="Opaque", immutable=True, data={"slurm.key": SLURM_KEY})
JWT_KEY_SECRET = plain(
    "v1", "Secret", "slurm-jwt-key", type="Opaque", immutable=True, data={"jwt.key": b64(JWT_KEY_TEXT)}
)
DB_SECRET = plain("v1", "Secret", "mariadb-password", type="Opaque", data={"password": b64(DB_PASSWORD)})
SSSD_SECRET = plain(
    "v1",
    "Secret",
    "slurm-sssd-conf",
    type="Opaque",
    data={
        "sssd.conf": b64(
            "[sssd]\nconfig_file_version = 2\nservices = nss,pam\ndomains = DEFAULT\n\n"
            "[domain/DEFAULT]\nid_provider = files\n"
        )
    },
)

CONTROLLER = cr(
    "Controller",
    "slurm",
    spec={
        "clusterName": CLUSTER,
        "slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"},
        "jwtKeyRef": {"name": "slurm-jwt-key", "key": "jwt.key"},
        "accountingRef": {"name": "slurm"},
        "slurmctld": {"image": image("slurmctld")},
        "logfile": {"image": "docker.io/library/alpine:latest"},
        "persistence": {
            "enabled": True,
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}},
        },
    },
    status={"observedGeneration": 1},
)

NODESET_NAME = "slurm-worker-debug"
NODESET = cr(
    "NodeSet",
    NODESET_NAME,
    spec={
        "controllerRef": {"name": "slurm"},
        "replicas": 2,
        "scalingMode": "StatefulSet",
        "slurmd": {"image": image("slurmd"), "resources": {"limits": {"cpu": "2", "memory": "4Gi"}}},
        "logfile": {"image": "docker.io/library/alpine:latest"},
        "partition": {"enabled": True, "config": "Default=YES MaxTime=UNLIMITED State=UP"},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
    },
    status={
        "observedGeneration": 1,
        "replicas": 2,
        "desired": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "updatedReplicas": 2,
        "unavailableReplicas": 0,
        "slurmIdle": 2,
        "slurmAllocated": 0,
        "slurmDown": 0,
        "slurmDrain": 0,
        "nodeSetHash": f"{NODESET_NAME}-6d5f8c7b9",
        "selector": f"{n.LABEL_INSTANCE}={NODESET_NAME},{n.LABEL_NAME}=slurmd",
    },
)

LOGINSET = cr(
    "LoginSet",
    "slurm-login",
    spec={
        "controllerRef": {"name": "slurm"},
        "replicas": 1,
        "login": {"image": image("login")},
        "sssdConfRef": {"name": "slurm-sssd-conf", "key": "sssd.conf"},
        "rootSshAuthorizedKeys": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExampleKeyNotReal admin@example.com",
        "service": {"spec": {"type": "LoadBalancer"}},
    },
    status={"observedGeneration": 1, "replicas": 1, "selector": f"{n.LABEL_INSTANCE}=slurm-login,{n.LABEL_NAME}=login"},
)

RESTAPI = cr(
    "RestApi",
    "slurm",
    spec={"controllerRef": {"name": "slurm"}, "replicas": 1, "slurmrestd": {"image": image("slurmrestd")}},
    status={"observedGeneration": 1},
)

ACCOUNTING = cr(
    "Accounting",
    "slurm",
    spec={
        "slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"},
        "jwtKeyRef": {"name": "slurm-jwt-key", "key": "jwt.key"},
        "slurmdbd": {"image": image("slurmdbd")},
        "storageConfig": {
            "host": "mariadb",
            "port": 3306,
            "database": "slurm_acct_db",
            "username": "slurm",
            "passwordKeyRef": {"name": "mariadb-password", "key": "password"},
        },
    },
    status={"observedGeneration": 1},
)

TOKEN_ISSUED_AT = 1748854841  # 2025-06-02T09:00:41Z
TOKEN = cr(
    "Token",
    "slurm-token",
    spec={
        "username": "slurm",
        "jwtKeyRef": {"name": "slurm-jwt-key", "key": "jwt.key"},
        "lifetime": "15m",
        "refresh": True,
    },
    status={"observedGeneration": 1, "issuedAt": LATER},
)


# --------------------------------------------------------------------------- Controller


SLURM_CONF = """#
### GENERAL ###
ClusterName=slurm
SlurmUser=slurm
SlurmctldHost=slurm-controller-0(slurm-controller-0.slurm-controller-internal.slurm)
SlurmctldPort=6817
SlurmctldAddr=slurm-controller.slurm
StateSaveLocation=/var/spool/slurmctld/slurm
SlurmdUser=root
SlurmdPort=6818
SlurmdSpoolDir=/var/spool/slurmd
MaxNodeCount=1024
#
### LOGGING ###
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmSchedLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
#
### PLUGINS & PARAMETERS ###
AuthType=auth/slurm
CredType=cred/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt.key
AuthInfo=use_client_ids
SlurmctldParameters=enable_configless,reconfig_on_restart
#
### ACCOUNTING ###
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=slurm-accounting
AccountingStoragePort=6819
#
### NODESET & PARTITION ###
NodeSet=slurm-worker-debug Feature=slurm-worker-debug
PartitionName=slurm-worker-debug Nodes=slurm-worker-debug Default=YES MaxTime=UNLIMITED State=UP
"""


def service(
    name: str,
    selector: dict[str, str],
    ports: list[JSON],
    headless: bool = False,
    lb: bool = False,
    component: tuple[str, str, str] | None = None,
) -> JSON:
    spec: JSON = {"selector": selector, "ports": ports}
    if headless:
        spec |= {"clusterIP": "None", "publishNotReadyAddresses": True}
    if lb:
        spec["type"] = "LoadBalancer"
    meta: JSON = {"name": name}
    if component:
        meta["labels"] = labels(*component)
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def observed_service(svc: JSON, parent: JSON, rv: str, cluster_ip: str) -> JSON:
    """A Service after the API server defaulted it (clusterIP, families, session affinity)."""
    obj = owned(svc, parent, rv, status={"loadBalancer": {}})
    spec = obj["spec"]
    if spec.get("clusterIP") != "None":
        spec["clusterIP"] = cluster_ip
        spec["clusterIPs"] = [cluster_ip]
    else:
        spec["clusterIPs"] = ["None"]
    spec |= {
        "type": spec.get("type", "ClusterIP"),
        "sessionAffinity": "None",
        "ipFamilies": ["IPv4"],
        "ipFamilyPolicy": "SingleStack",
        "internalTrafficPolicy": "Cluster",
    }
    for p in spec["ports"]:
        p.setdefault("protocol", "TCP")
    return obj


def controller_children() -> dict[str, dict[str, JSON]]:
    component = ("slurmctld", "slurm", "controller")
    ctld = labels(*component)
    sel = selector_labels("slurmctld", "slurm")
    ctld_port = service_port("slurmctld", 6817)
    services = [
        observed_service(
            service("slurm-controller", {**sel, n.LABEL_ACTIVE_CONTROLLER: "true"}, [ctld_port], component=component),
            CONTROLLER,
            "5101",
            "10.96.18.7",
        ),
        observed_service(
            service("slurm-controller-internal", sel, [ctld_port], headless=True, component=component),
            CONTROLLER,
            "5102",
            "",
        ),
        observed_service(
            service(
                "slurm-workers-slurm",
                {n.LABEL_NAME: "slurmd", n.LABEL_CLUSTER: CLUSTER},
                [service_port("slurmd", 6818)],
                headless=True,
            ),
            CONTROLLER,
            "5103",
            "",
        ),
    ]
    config = owned(
        v1_object(
            "ConfigMap",
            "slurm-config",
            ctld,
            data={"slurm.conf": SLURM_CONF, "cgroup.conf": "CgroupPlugin=cgroup/v2\nIgnoreSystemd=yes\n"},
        ),
        CONTROLLER,
        "5104",
    )
    pod_spec = {
        "automountServiceAccountToken": False,
        "securityContext": run_as(401),
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": sel}}
                ]
            }
        },
        "initContainers": [logfile_sidecar("/var/log/slurm/slurmctld.log")],
        "containers": [
            {
                "name": "slurmctld",
                "image": image("slurmctld"),
                "ports": [port("slurmctld", 6817)],
                "startupProbe": http_probe("/livez", "slurmctld", 6),
                "livenessProbe": http_probe("/livez", "slurmctld", 6),
                "readinessProbe": http_probe("/readyz", "slurmctld"),
                "volumeMounts": [
                    mount("slurm-etc", "/etc/slurm", read_only=True),
                    mount("run", "/run"),
                    mount("statesave", "/var/spool/slurmctld/slurm"),
                    mount("slurm-authsocket", "/run/slurmctld"),
                    mount("slurm-logfile", "/var/log/slurm"),
                ],
            }
        ],
        "volumes": [
            projected(
                "slurm-etc",
                [{"configMap": {"name": "slurm-config"}}, slurm_key_source(), jwt_key_source()],
                mode=0o610,
            ),
            memory_volume("run"),
            {"name": "slurm-authsocket", "emptyDir": {}},
            memory_volume("slurm-logfile"),
        ],
    }
    statesave_claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "statesave"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "4Gi"}},
            "volumeMode": "Filesystem",
        },
        "status": {"phase": "Pending"},  # served like this: the API server defaults claim templates
    }
    sts = owned(
        workload(
            "StatefulSet",
            "slurm-controller",
            component,
            {n.ANNOTATION_DEFAULT_CONTAINER: "slurmctld", n.ANNOTATION_SLURM_CONFIG_HASH: digest(SLURM_CONF)},
            pod_spec,
            before_selector={"serviceName": "slurm-controller-internal"},
            after_template={"volumeClaimTemplates": [statesave_claim]},
        ),
        CONTROLLER,
        "5160",
        status=rolled_out(
            currentReplicas=1,
            updatedReplicas=1,
            currentRevision="slurm-controller-7b9c5d6f4",
            updateRevision="slurm-controller-7b9c5d6f4",
            collisionCount=0,
        ),
    )
    pdb = owned(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "slurm-workers-pdb-slurm"},
            "spec": {
                "maxUnavailable": 0,
                "selector": {"matchLabels": {n.LABEL_POD_PROTECT: "true", n.LABEL_CLUSTER: CLUSTER}},
            },
        },
        CONTROLLER,
        "5106",
        status={
            "observedGeneration": 1,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "disruptionsAllowed": 0,
            "expectedPods": 0,
        },
    )
    return {
        "Service.v1": object_map(*services),
        "ConfigMap.v1": object_map(config),
        "StatefulSet.apps/v1": object_map(sts),
        "PodDisruptionBudget.policy/v1": object_map(pdb),
    }


def controller_related() -> dict[str, dict[str, JSON]]:
    return {
        f"NodeSet.{n.API_VERSION}": object_map(NODESET),
        f"Accounting.{n.API_VERSION}": object_map(ACCOUNTING),
        "Secret.v1": object_map(SLURM_KEY_SECRET, JWT_KEY_SECRET),
    }


# --------------------------------------------------------------------------- NodeSet

WORKER_NODES = ["kind-worker", "kind-worker2"]


def worker_pod(
    ordinal: int, parent: JSON, slurm_states: list[tuple[str, str]], protect: bool, drained: str | None
) -> JSON:
    """One slurmd pod as the nodeset hook creates it, then scheduled, running and observed by slurm_sync;
    ``drained``: the epoch of the drain intent slurm_sync marked it drained for."""
    name = f"{NODESET_NAME}-{ordinal}"
    pod_labels = {
        **labels("slurmd", NODESET_NAME, "worker"),
        n.LABEL_CLUSTER: CLUSTER,
        n.LABEL_NODESET_POD_NAME: name,
        n.LABEL_NODESET_POD_INDEX: str(ordinal),
        n.LABEL_NODESET_POD_HOSTNAME: name,
        n.LABEL_NODESET_REVISION: revision_hash(parent),  # pods of the current spec: a steady state
        n.LABEL_NODESET_SCALING_MODE: "StatefulSet",
    }
    desired = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": pod_labels, "annotations": {n.ANNOTATION_DEFAULT_CONTAINER: "slurmd"}},
        "spec": {
            "hostname": name,
            "subdomain": "slurm-workers-slurm",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "dnsConfig": {"searches": ["slurm-workers-slurm.slurm.svc.cluster.local"]},
            "tolerations": [{"key": "nodeset.slinky.slurm.net/worker", "operator": "Equal", "effect": "NoExecute"}],
            "affinity": {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {
                                "matchExpressions": [{"key": n.LABEL_NAME, "operator": "In", "values": ["slurmd"]}]
                            },
                        }
                    ]
                }
            },
            "initContainers": [logfile_sidecar("/var/log/slurm/slurmd.log")],
            "containers": [
                {
                    "name": "slurmd",
                    "image": image("slurmd"),
                    "args": [
                        "-Z",
                        "--conf-server",
                        "slurm-controller.slurm:6817",
                        "--conf",
                        "'Features=slurm-worker-debug Topology='\"$SLINKY_TOPOLOGY\"''",
                    ],
                    "env": [
                        {
                            "name": "SLINKY_TOPOLOGY",
                            "valueFrom": {
                                "fieldRef": {"fieldPath": f"metadata.annotations['{n.ANNOTATION_TOPOLOGY_SPEC}']"}
                            },
                        },
                        {"name": "POD_CPUS", "value": "2"},
                        {"name": "POD_MEMORY", "value": "4096"},
                    ],
                    "ports": [port("slurmd", 6818)],
                    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "2", "memory": "4Gi"}},
                    "startupProbe": http_probe("/livez", "slurmd", 6),
                    "livenessProbe": http_probe("/livez", "slurmd", 6),
                    "readinessProbe": http_probe("/readyz", "slurmd"),
                    "securityContext": {
                        "privileged": True,
                        "capabilities": {"add": ["BPF", "NET_ADMIN", "SYS_ADMIN", "SYS_NICE"]},
                    },
                    "lifecycle": {
                        "preStop": {
                            "exec": {
                                "command": [
                                    "/usr/bin/sh",
                                    "-c",
                                    "scontrol update nodename=$(hostname) state=down reason='slurm-operator: Pod is "
                                    "terminating';",
                                ]
                            }
                        }
                    },
                    "volumeMounts": [
                        mount("slurm-etc", "/etc/slurm", read_only=True),
                        mount("slurm-logfile", "/var/log/slurm"),
                    ],
                }
            ],
            "volumes": [projected("slurm-etc", [slurm_key_source()], mode=0o600), memory_volume("slurm-logfile")],
        },
    }
    pod = owned(desired, parent, f"{5200 + 10 * ordinal}")
    if protect:  # slurm_sync marks busy pods so the shared PDB protects them
        pod["metadata"]["labels"][n.LABEL_POD_PROTECT] = "true"
    if drained:  # slurm_sync: Slurm reports the node drained and idle, the pod may go (docs/architecture.md §4.1)
        pod["metadata"]["annotations"][n.ANNOTATION_DRAINED] = drained
    node = WORKER_NODES[ordinal]
    pod["spec"] |= {  # what the scheduler and the API server's defaulting added
        "nodeName": node,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
    }
    conditions = [
        pod_condition(kind, "True", LATER)
        for kind in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    conditions += [  # written by slurm_sync: one condition per Slurm node state, message = Slurm reason
        pod_condition(
            n.CONDITION_SLURM_NODE_STATE_PREFIX + state, "True", LATER, **({"message": reason} if reason else {})
        )
        for state, reason in slurm_states
    ]
    running = {"running": {"startedAt": LATER}}
    pod["status"] = {
        "phase": "Running",
        "conditions": conditions,
        **pod_addresses(f"172.18.0.{ordinal + 3}", f"10.244.{ordinal + 1}.17"),
        "qosClass": "Guaranteed",
        "startTime": LATER,
        "containerStatuses": [
            container_status(
                "slurmd", image("slurmd"), f"{image('slurmd')}@sha256:{digest('slurmd')}", name, running, True
            )
        ],
    }
    return pod


def nodeset_children(
    parent: JSON, states: list[list[tuple[str, str]]], protect: list[bool], drained: list[str | None]
) -> dict[str, dict[str, JSON]]:
    pods = [worker_pod(i, parent, states[i], protect[i], drained[i]) for i in range(2)]
    return {"Pod.v1": object_map(*pods), "PersistentVolumeClaim.v1": {}, "ConfigMap.v1": {}}


def nodeset_related() -> dict[str, dict[str, JSON]]:
    return {f"Controller.{n.API_VERSION}": object_map(CONTROLLER), "Secret.v1": object_map(SLURM_KEY_SECRET)}


# --------------------------------------------------------------------------- LoginSet

SSHD_CONFIG = (
    "#\n### GENERAL ###\nInclude /etc/ssh/sshd_config.d/*.conf\nUsePAM yes\nX11Forwarding yes\n"
    "Subsystem sftp internal-sftp\n#\n### EXTRA CONFIG ###\n\n"
)


def loginset_children() -> dict[str, dict[str, JSON]]:
    component = ("login", "slurm-login", "login")
    lbl = labels(*component)
    fake_key = "-----BEGIN OPENSSH PRIVATE KEY-----\nexample-{}-host-key-not-real\n-----END OPENSSH PRIVATE KEY-----\n"
    host_keys = owned(
        v1_object(
            "Secret",
            "slurm-login-ssh-host-keys",
            lbl,
            type="Opaque",
            immutable=True,
            data={
                f"ssh_host_{algo}_key{suffix}": b64(
                    fake_key.format(algo) if not suffix else f"ssh-{algo} AAAAexample{algo}\n"
                )
                for algo in ("ecdsa", "ed25519", "rsa")
                for suffix in ("", ".pub")
            },
        ),
        LOGINSET,
        "5301",
    )
    ssh_config = owned(
        v1_object(
            "ConfigMap",
            "slurm-login-ssh-config",
            lbl,
            data={
                "authorized_keys": "#\n### SLINKY ###\n" + LOGINSET["spec"]["rootSshAuthorizedKeys"] + "\n",
                "sshd_config": SSHD_CONFIG,
            },
        ),
        LOGINSET,
        "5302",
    )
    svc = observed_service(
        service(
            "slurm-login",
            selector_labels("login", "slurm-login"),
            [service_port("login", 22)],
            lb=True,
            component=component,
        ),
        LOGINSET,
        "5303",
        "10.96.44.12",
    )
    svc["spec"] |= {"externalTrafficPolicy": "Cluster", "allocateLoadBalancerNodePorts": True}
    svc["spec"]["ports"][0]["nodePort"] = 31022
    svc["status"] = {"loadBalancer": {"ingress": [{"ip": "172.18.255.200", "ipMode": "VIP"}]}}
    pod_spec = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "dnsConfig": {"searches": ["slurm-workers-slurm.slurm.svc.cluster.local"]},
        "initContainers": [
            {
                "name": "initconf",
                "image": "docker.io/library/alpine:latest",
                "command": ["sh", "-c", "cp /mnt/slurm/* /mnt/etc/slurm/ && chown -R 401:401 /mnt/etc/slurm"],
                "env": [{"name": "SLURM_USER", "value": "slurm"}],
                "volumeMounts": [
                    mount("slurm-config", "/mnt/slurm", read_only=True),
                    mount("slurm-etc", "/mnt/etc/slurm"),
                ],
            }
        ],
        "containers": [
            {
                "name": "login",
                "image": image("login"),
                "env": [{"name": "SACKD_OPTIONS", "value": "--conf-server slurm-controller.slurm:6817"}],
                "ports": [port("login", 22)],
                "readinessProbe": {"exec": {"command": ["test", "-S", "/run/slurm/sack.socket"]}},
                "volumeMounts": [
                    mount("slurm-etc", "/etc/slurm", read_only=True),
                    mount("sackd-dir", "/run/slurm"),
                    mount("ssh-config", "/etc/ssh/sshd_config", read_only=True, sub_path="sshd_config"),
                    mount("sssd-conf", "/etc/sssd/sssd.conf", read_only=True, sub_path="sssd.conf"),
                ],
            }
        ],
        "volumes": [
            memory_volume("slurm-etc"),
            memory_volume("sackd-dir"),
            projected("slurm-config", [slurm_key_source()]),
            {"name": "ssh-host-keys", "secret": {"secretName": "slurm-login-ssh-host-keys", "defaultMode": 0o600}},
            {"name": "ssh-config", "configMap": {"name": "slurm-login-ssh-config", "defaultMode": 0o600}},
            {
                "name": "sssd-conf",
                "secret": {
                    "secretName": "slurm-sssd-conf",
                    "defaultMode": 0o600,
                    "items": [{"key": "sssd.conf", "path": "sssd.conf"}],
                },
            },
        ],
    }
    deploy = owned(
        workload("Deployment", "slurm-login", component, {n.ANNOTATION_DEFAULT_CONTAINER: "login"}, pod_spec),
        LOGINSET,
        "5360",
        status=rolled_out(
            updatedReplicas=1,
            conditions=[
                {
                    "type": "Available",
                    "status": "True",
                    "reason": "MinimumReplicasAvailable",
                    "message": "Deployment has minimum availability.",
                    "lastTransitionTime": LATER,
                    "lastUpdateTime": LATER,
                },
                {
                    "type": "Progressing",
                    "status": "True",
                    "reason": "NewReplicaSetAvailable",
                    "message": 'ReplicaSet "slurm-login-5d8f9c6b7" has successfully progressed.',
                    "lastTransitionTime": LATER,
                    "lastUpdateTime": LATER,
                },
            ],
        ),
    )
    return {
        "Deployment.apps/v1": object_map(deploy),
        "Service.v1": object_map(svc),
        "ConfigMap.v1": object_map(ssh_config),
        "Secret.v1": object_map(host_keys),
    }


def loginset_related() -> dict[str, dict[str, JSON]]:
    return {
        f"Controller.{n.API_VERSION}": object_map(CONTROLLER),
        "Secret.v1": object_map(SLURM_KEY_SECRET, SSSD_SECRET),
    }


# --------------------------------------------------------------------------- RestApi


def restapi_children() -> dict[str, dict[str, JSON]]:
    component = ("slurmrestd", "slurm", "restapi")
    svc = observed_service(
        service(
            "slurm-restapi",
            selector_labels("slurmrestd", "slurm"),
            [service_port("slurmrestd", 6820)],
            component=component,
        ),
        RESTAPI,
        "5401",
        "10.96.60.20",
    )
    pod_spec = {
        "automountServiceAccountToken": False,
        "securityContext": run_as(65534),
        "containers": [
            {
                "name": "slurmrestd",
                "image": image("slurmrestd"),
                "args": ["0.0.0.0:6820"],
                "env": [
                    {"name": "SLURM_JWT", "value": "daemon"},
                    {"name": "SLURMRESTD_SECURITY", "value": "disable_unshare_files,disable_unshare_sysv"},
                ],
                "ports": [port("slurmrestd", 6820)],
                "startupProbe": tcp_probe(6820, 6),
                "livenessProbe": tcp_probe(6820, 6),
                "readinessProbe": tcp_probe(6820),
                "securityContext": {"runAsNonRoot": True, "runAsUser": 65534},
                "volumeMounts": [mount("slurm-etc", "/etc/slurm", read_only=True)],
            }
        ],
        "volumes": [
            projected(
                "slurm-etc",
                [key_source("configMap", "slurm-config", "slurm.conf"), slurm_key_source()],
                mode=0o600,
            )
        ],
    }
    deploy = owned(
        workload("Deployment", "slurm-restapi", component, {n.ANNOTATION_DEFAULT_CONTAINER: "slurmrestd"}, pod_spec),
        RESTAPI,
        "5460",
        status=rolled_out(updatedReplicas=1),
    )
    return {"Deployment.apps/v1": object_map(deploy), "Service.v1": object_map(svc)}


def restapi_related() -> dict[str, dict[str, JSON]]:
    return {
        f"Controller.{n.API_VERSION}": object_map(CONTROLLER),
        f"Accounting.{n.API_VERSION}": object_map(ACCOUNTING),
    }


# --------------------------------------------------------------------------- Accounting

SLURMDBD_CONF = f"""#
### GENERAL ###
DbdHost=slurm-accounting-0
DbdPort=6819
SlurmUser=slurm
#
### PLUGINS & PARAMETERS ###
AuthType=auth/slurm
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=/etc/slurm/jwt.key
AuthInfo=use_client_ids
#
### STORAGE ###
StorageType=accounting_storage/mysql
StorageHost=mariadb
StoragePort=3306
StorageUser=slurm
StorageLoc=slurm_acct_db
StoragePass={DB_PASSWORD}
#
### LOGGING ###
LogFile=/dev/null
"""


def accounting_children() -> dict[str, dict[str, JSON]]:
    component = ("slurmdbd", "slurm", "accounting")
    svc = observed_service(
        service(
            "slurm-accounting",
            selector_labels("slurmdbd", "slurm"),
            [service_port("slurmdbd", 6819)],
            component=component,
        ),
        ACCOUNTING,
        "5501",
        "10.96.70.9",
    )
    conf = owned(
        v1_object(
            "Secret", "slurm-accounting", labels(*component), type="Opaque", data={"slurmdbd.conf": b64(SLURMDBD_CONF)}
        ),
        ACCOUNTING,
        "5502",
    )
    pod_spec = {
        "securityContext": run_as(401),
        "containers": [
            {
                "name": "slurmdbd",
                "image": image("slurmdbd"),
                "ports": [port("slurmdbd", 6819)],
                "readinessProbe": tcp_probe(6819),
                "volumeMounts": [mount("slurm-etc", "/etc/slurm", read_only=True), mount("run", "/run")],
            }
        ],
        "volumes": [
            projected(
                "slurm-etc",
                [
                    key_source("secret", "slurm-accounting", "slurmdbd.conf"),
                    slurm_key_source(),
                    jwt_key_source(),
                ],
                mode=0o600,
            ),
            memory_volume("run"),
        ],
    }
    sts = owned(
        workload(
            "StatefulSet",
            "slurm-accounting",
            component,
            {n.ANNOTATION_DEFAULT_CONTAINER: "slurmdbd", n.ANNOTATION_SLURMDBD_CONF_HASH: digest(SLURMDBD_CONF)},
            pod_spec,
            before_selector={"podManagementPolicy": "Parallel", "serviceName": "slurm-accounting"},
        ),
        ACCOUNTING,
        "5560",
        status=rolled_out(
            currentReplicas=1,
            updatedReplicas=1,
            collisionCount=0,
            currentRevision="slurm-accounting-84c7d9b5f",
            updateRevision="slurm-accounting-84c7d9b5f",
        ),
    )
    return {"StatefulSet.apps/v1": object_map(sts), "Service.v1": object_map(svc), "Secret.v1": object_map(conf)}


def accounting_related() -> dict[str, dict[str, JSON]]:
    return {"Secret.v1": object_map(SLURM_KEY_SECRET, JWT_KEY_SECRET, DB_SECRET)}


# --------------------------------------------------------------------------- Token


def hs256_jwt(claims: JSON, key: bytes) -> str:
    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = part(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    body = part(json.dumps(claims, separators=(",", ":")).encode())
    sig = part(hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest())
    return f"{head}.{body}.{sig}"


def token_children() -> dict[str, dict[str, JSON]]:
    jwt = hs256_jwt(
        {
            "exp": TOKEN_ISSUED_AT + 900,
            "iat": TOKEN_ISSUED_AT,
            "iss": "slurm-operator",
            "jti": uid("jwt", "slurm-token"),
            "nbf": TOKEN_ISSUED_AT,
            "sun": "slurm",
        },
        JWT_KEY_TEXT.encode(),
    )
    secret = owned(
        v1_object("Secret", "slurm-token-jwt-slurm", type="Opaque", data={"SLURM_JWT": b64(jwt)}), TOKEN, "5601"
    )
    return {"Secret.v1": object_map(secret)}


def token_related() -> dict[str, dict[str, JSON]]:
    return {"Secret.v1": object_map(JWT_KEY_SECRET)}


# --------------------------------------------------------------------------- bridge

JOB_NAME = "job-sleep-single"
BRIDGE_POD = f"{JOB_NAME}-8wtc2"
BUSYBOX = "docker.io/library/busybox:1.37"


def sleep_container() -> JSON:
    """The Job's one container, as its template says."""
    return {
        "name": "sleep",
        "image": BUSYBOX,
        "command": ["sleep", "60"],
        "resources": {"requests": {"cpu": "1", "memory": "100Mi"}, "limits": {"cpu": "1", "memory": "100Mi"}},
    }


JOB = plain(
    "batch/v1",
    "Job",
    JOB_NAME,
    namespace=BRIDGE_NS,
    metadata={
        "generation": 1,
        "labels": {"app": "sleep"},
        "annotations": {
            n.SLURMJOB_PREFIX + "job-name": JOB_NAME,
            n.SLURMJOB_PREFIX + "timelimit": "5",
            n.SLURMJOB_PREFIX + "account": "physics",
        },
    },
    spec={
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": 0,
        "completionMode": "NonIndexed",
        "manualSelector": False,
        "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed",
        "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": uid("Job", BRIDGE_NS, JOB_NAME)}},
        "template": {
            "metadata": {"labels": {"app": "sleep"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [sleep_container()],
            },
        },
    },
    status={"active": 1, "startTime": LATER, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {}},
)


def bridge_pod(*, mutated: bool, named: bool, server_fields: bool) -> JSON:
    """The Job's pod as the admission webhook sees it (mutated or not) or as stored afterwards."""
    job_uid = uid("Job", BRIDGE_NS, JOB_NAME)
    pod_labels = {
        "app": "sleep",
        "batch.kubernetes.io/controller-uid": job_uid,
        "batch.kubernetes.io/job-name": JOB_NAME,
        "controller-uid": job_uid,
        "job-name": JOB_NAME,
    }
    if mutated:
        pod_labels[n.LABEL_BRIDGE_MANAGED] = "true"
    meta: JSON = {
        "generateName": f"{JOB_NAME}-",
        "namespace": BRIDGE_NS,
        "labels": pod_labels,
        "ownerReferences": [owner_ref("batch/v1", "Job", JOB_NAME, job_uid)],
    }
    if named:
        meta["name"] = BRIDGE_POD
    if server_fields:
        meta |= {"uid": uid("Pod", BRIDGE_NS, BRIDGE_POD), "resourceVersion": "7310", "creationTimestamp": LATER}
    pod: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    **sleep_container(),
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "imagePullPolicy": "IfNotPresent",
                    "volumeMounts": [
                        mount("kube-api-access-x7k2p", "/var/run/secrets/kubernetes.io/serviceaccount", read_only=True)
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "schedulerName": n.BRIDGE_SCHEDULER_NAME if mutated else "default-scheduler",
            "serviceAccountName": "default",
            "securityContext": {},
            "terminationGracePeriodSeconds": 30,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "tolerations": [
                {
                    "key": f"node.kubernetes.io/{taint}",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for taint in ("not-ready", "unreachable")
            ],
            "volumes": [
                projected(
                    "kube-api-access-x7k2p",
                    [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        key_source("configMap", "kube-root-ca.crt", "ca.crt"),
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    mode=0o644,
                )
            ],
        },
    }
    if mutated:  # the webhook adds the managed-node toleration with the scheduler name
        pod["spec"]["tolerations"].append(
            {"key": n.TAINT_MANAGED_NODE, "operator": "Equal", "value": n.BRIDGE_SCHEDULER_NAME, "effect": "NoExecute"}
        )
    if server_fields:
        pod["status"] = {"phase": "Pending", "qosClass": "Guaranteed"}
    return pod


def managed_pod_sync() -> JSON:
    """A pending bridge pod: no real scheduler serves its schedulerName, so it has no conditions yet."""
    pod = bridge_pod(mutated=True, named=True, server_fields=True)
    pod["metadata"]["finalizers"] = [dc_finalizer("bridge-pod.yaml")]
    return pod


def managed_pod_finished() -> JSON:
    """The same pod after Slurm ran its placeholder job on kind-worker, the pod succeeded and was deleted."""
    started, finished = "2025-06-02T09:01:10Z", "2025-06-02T09:02:12Z"
    done = {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": "2025-06-02T09:01:12Z",
            "finishedAt": finished,
        }
    }
    pod = managed_pod_sync()
    pod["metadata"]["labels"][n.LABEL_SLURM_JOB_ID] = "42"
    pod["metadata"]["annotations"] = {n.ANNOTATION_SLURM_NODE: "kind-worker"}
    pod["metadata"]["resourceVersion"] = "7488"
    pod["spec"]["nodeName"] = "kind-worker"
    pod["status"] = {
        "phase": "Succeeded",
        "qosClass": "Guaranteed",
        **pod_addresses("172.18.0.3", "10.244.1.31"),
        "startTime": started,
        "conditions": [
            pod_condition("PodReadyToStartContainers", "False", "2025-06-02T09:02:13Z"),
            pod_condition("Initialized", "True", started, reason="PodCompleted"),
            pod_condition("Ready", "False", finished, reason="PodCompleted"),
            pod_condition("ContainersReady", "False", finished, reason="PodCompleted"),
            pod_condition("PodScheduled", "True", started),
        ],
        "containerStatuses": [
            container_status(
                "sleep", BUSYBOX, f"docker.io/library/busybox@sha256:{digest('busybox')}", BRIDGE_POD, done, False
            )
        ],
    }
    return deleting(pod, [dc_finalizer("bridge-pod.yaml")], grace=30)


def node(
    name: str,
    ip: str,
    node_labels: dict[str, str],
    annotations: dict[str, str],
    finalizers: list[str],
    unschedulable: bool = False,
    taints: list[JSON] | None = None,
) -> JSON:
    meta: JSON = {
        "name": name,
        "uid": uid("Node", name),
        "resourceVersion": "8123",
        "creationTimestamp": "2025-06-01T07:55:00Z",
        "labels": {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": name,
            "kubernetes.io/os": "linux",
            **node_labels,
        },
        "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            **annotations,
        },
        "finalizers": finalizers,
    }
    spec: JSON = {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "providerID": f"kind://docker/kind/{name}"}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = taints
    resources = {
        "cpu": "8",
        "memory": "32803912Ki",
        "pods": "110",
        "ephemeral-storage": "263112772Ki",
        "hugepages-2Mi": "0",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "conditions": [
                node_condition(
                    "MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"
                ),
                node_condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                node_condition(
                    "PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"
                ),
                node_condition(
                    "Ready", "True", "KubeletReady", "kubelet is posting ready status", "2025-06-01T07:55:30Z"
                ),
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": uid("boot", name),
                "containerRuntimeVersion": "containerd://2.1.1",
                "kernelVersion": "6.1.0-37-amd64",
                "kubeProxyVersion": "",
                "kubeletVersion": "v1.33.1",
                "machineID": uid("machine", name).replace("-", ""),
                "operatingSystem": "linux",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "systemUUID": uid("system", name),
            },
        },
    }


def node_condition(kind: str, status: str, reason: str, message: str, since: str = "2025-06-01T07:55:00Z") -> JSON:
    """A condition as the kubelet reports it."""
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": LATER,
        "lastTransitionTime": since,
    }


def decorator(manifest_file: str, obj: JSON, related: dict[str, dict[str, JSON]], finalizing: bool) -> JSON:
    return {
        "controller": controller_of(manifest_file),
        "object": obj,
        "attachments": {},  # no attachment rules in the bridge DecoratorControllers
        "related": related,
        "finalizing": finalizing,
    }


def admission(operation_uid: str, pod: JSON) -> JSON:
    request: JSON = {
        "uid": operation_uid,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
        "requestResource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": BRIDGE_NS,
        "operation": "CREATE",
        "userInfo": {
            "username": "system:serviceaccount:kube-system:job-controller",
            "uid": uid("sa", "kube-system", "job-controller"),
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"],
        },
        "object": pod,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    if pod["metadata"].get("name"):
        request["name"] = pod["metadata"]["name"]
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# --------------------------------------------------------------------------- all requests


def requests() -> dict[str, JSON]:
    """File name -> request body, for every hook route of docs/architecture.md §3."""
    out: dict[str, JSON] = {}

    def composite_set(
        kind: str,
        parent: JSON,
        children: dict,
        related: dict,
        finalize_children: dict | None = None,
        finalize_parent: JSON | None = None,
    ) -> None:
        file = f"{kind}.yaml"
        out[f"{kind}-sync.json"] = composite(file, parent, children, related, finalizing=False)
        out[f"{kind}-customize.json"] = {"controller": controller_of(file), "parent": parent}
        if "finalize" in manifest(file)["spec"]["hooks"]:
            out[f"{kind}-finalize.json"] = composite(
                file,
                finalize_parent or deleting(parent, [cc_finalizer(file)]),
                finalize_children or children,
                related,
                finalizing=True,
            )

    composite_set("controller", CONTROLLER, controller_children(), controller_related())

    idle = [("Idle", "")]
    nodeset_deleting = deleting(NODESET, [cc_finalizer("nodeset.yaml")])
    nodeset_deleting["status"] |= {"slurmIdle": 1, "slurmAllocated": 1, "slurmDrain": 2}
    drain_reason = f"{n.DRAIN_REASON_PREFIX} NodeSet {NS}/{NODESET_NAME} is being deleted"
    # the drain intents the first finalize published (its epoch: the NodeSet's resourceVersion then)
    epoch = "5007"
    nodeset_deleting["status"][n.STATUS_DRAINING_PODS] = [
        {"name": f"{NODESET_NAME}-{i}", "reason": "NodeSet deleted", n.DRAIN_EPOCH: epoch} for i in range(2)
    ]
    composite_set(
        "nodeset",
        NODESET,
        nodeset_children(NODESET, [idle, idle], [False, False], [None, None]),
        nodeset_related(),
        # Mid-drain: pod 0's node is drained and idle (marked), pod 1's still runs a job (busy, protected).
        finalize_children=nodeset_children(
            nodeset_deleting,
            [[("Idle", ""), ("Drain", drain_reason)], [("Mixed", ""), ("Drain", drain_reason)]],
            protect=[False, True],
            drained=[epoch, None],
        ),
        finalize_parent=nodeset_deleting,
    )
    composite_set("loginset", LOGINSET, loginset_children(), loginset_related())
    composite_set("restapi", RESTAPI, restapi_children(), restapi_related())
    composite_set("accounting", ACCOUNTING, accounting_children(), accounting_related())
    composite_set("token", TOKEN, token_children(), token_related())

    job_related = {"Job.batch/v1": object_map(JOB)}
    out["bridge-pod-sync.json"] = decorator("bridge-pod.yaml", managed_pod_sync(), job_related, finalizing=False)
    out["bridge-pod-customize.json"] = {"controller": controller_of("bridge-pod.yaml"), "parent": managed_pod_sync()}
    out["bridge-pod-finalize.json"] = decorator("bridge-pod.yaml", managed_pod_finished(), job_related, finalizing=True)

    # A cordoned bridge worker: the hook should ask for its Slurm node to be drained.
    worker = node(
        "kind-worker",
        "172.18.0.3",
        {n.LABEL_BRIDGE_WORKER: "worker"},
        {},
        [dc_finalizer("bridge-node-worker.yaml")],
        unschedulable=True,
        taints=[
            {"key": n.TAINT_MANAGED_NODE, "value": n.BRIDGE_SCHEDULER_NAME, "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": "2025-06-03T14:00:00Z"},
        ],
    )
    out["bridge-node-sync.json"] = decorator("bridge-node-worker.yaml", worker, {}, finalizing=False)
    # An external node whose label was just removed: Metacontroller calls finalize (opt-out), the
    # Slurm node must be drained and deleted before the finalizer goes; slurm_sync still reports it
    # registered, so the hook holds the node.
    external = node(
        "kind-worker3",
        "172.18.0.5",
        {},
        {n.ANNOTATION_EXTERNAL_NODE_PARTITIONS: "slurm-bridge", n.ANNOTATION_EXTERNAL_NODE_REGISTERED: "kind-worker3"},
        [dc_finalizer("bridge-node-external.yaml")],
    )
    out["bridge-node-finalize.json"] = decorator("bridge-node-external.yaml", external, {}, finalizing=True)

    # Mutating admission sees the pod before the API server generates its name; validating after.
    out["bridge-admission-mutate.json"] = admission(
        uid("admission", "mutate"), bridge_pod(mutated=False, named=False, server_fields=False)
    )
    out["bridge-admission-validate.json"] = admission(
        uid("admission", "validate"), bridge_pod(mutated=True, named=True, server_fields=False)
    )
    return out


def render(body: JSON) -> str:
    return json.dumps(body, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, body in requests().items():
        path = OUT / name
        text = render(body)
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale examples (run examples/requests/generate.py):", ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

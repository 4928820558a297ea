"""NodeSet sync latency for 10 … 5,000 pods against the JSON floor (docs/architecture.md §7, issue 16).

The request is a steady-state resync as Metacontroller sends it: the NodeSet with the status of
the previous sync, its Controller, and N running worker pods that the hook itself created
(first sync), then "observed" the way the API server, the kubelet, Metacontroller and slurm_sync
leave them: defaulted spec, scheduler's nodeName, full metadata (uid, resourceVersion,
ownerReferences, the `metacontroller.k8s.io/last-applied-configuration` annotation written as Go
writes JSON, managedFields of three managers) and a status with the kubelet's conditions plus the
SlurmNodeState* conditions.

* hook:  the Flask app called as a WSGI server calls it (`app(environ, start_response)`, the body
  read from `wsgi.input`, the answer joined, then closed, which frees the parsed request): parse,
  check, hook, response check, serialise, free. Werkzeug's test client is not in it (its own
  request building and response wrapping cost a third of a 10-pod sync and no server pays them).
* floor: parsing the same request bytes plus serialising the same response as plain JSON data
  (the response bytes parsed back), each with the fastest JSON library in the venv for that input
  (`measure.fastest`: orjson or msgspec), with the garbage collector paused: the least any
  implementation that reads the whole request must do. The hook reads less of it: it skips the
  observed objects' managedFields, which no hook reads (hooks/requestjson.py).
* shaped floor: the hook's own decoding of the request (hooks/requestjson.py) plus orjson.dumps of
  the response: what the hook server cannot avoid given how it parses. The hook reads less than the
  floor above, so the 1.3x budget alone would let its other work grow a good deal unnoticed; the
  `vs shaped` row keeps that work in check.
* ratio: the median over interleaved (hook, floor) pairs of hook/floor (`measure.paired_ratio`).
  Budgets: at most 1.3 with 1,000 pods, at most 2 with 10 (a fixed cost per request weighs more
  there); at most 1.6 against the shaped floor with 1,000 pods.
* The verdict on each kept pod's last-applied annotation is remembered per worker (hooks/applied.py),
  so a resync after the first parses none of them; the `cold` row shows a first sync after a restart.
"""

from __future__ import annotations

import copy
import hashlib
import io
import json
import sys
import uuid
from collections.abc import Callable
from typing import Any

import orjson

from bench.measure import (
    JSON_PARSERS,
    JSON_SERIALISERS,
    Budget,
    Report,
    compare,
    fastest,
    fmt_ns,
    fmt_ratio,
    gc_paused,
    paired_ratio,
)
from slinky_common import names

JSON = dict[str, Any]

TITLE = "NodeSet sync latency vs JSON floor (parse + serialise, fastest JSON library)"
SIZES = (10, 100, 1_000, 5_000)
BUDGETS = {10: 2.0, 1_000: 1.3}  # pods -> most hook/floor allowed
SHAPED_BUDGETS = {1_000: 1.6}  # pods -> most hook / shaped floor allowed (see the module docstring)
COLD_PODS = 1_000
COLUMNS = [
    "pods", "request", "response", "hook p50", "hook p90", "floor p50", "floor p90", "floor JSON", "ratio", "samples",
]  # fmt: skip

NS = "slurm"
NODESET = "gpu"
CLUSTER = "slurm"
CREATED = "2025-06-02T09:00:00Z"
LATER = "2025-06-02T09:00:41Z"
SLURM_UPDATE = "2025-06-02T09:05:12Z"
IMAGE = "ghcr.io/slinkyproject/slurmd:26.05-ubuntu26.04"
SYNC_PATH = "/nodeset/sync"


def uid(*parts: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "slinky-bench/" + "/".join(parts)))


PARENT_UID = uid("NodeSet", NS, NODESET)


def go_json(obj: Any) -> str:
    """JSON as Go's encoding/json writes an unstructured object: sorted keys, compact, HTML-safe."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def fields_v1(obj: Any) -> JSON:
    """A managedFields `fieldsV1` set covering every field of `obj` (lists keyed by name/type)."""
    if not isinstance(obj, dict):
        return {}
    out: JSON = {".": {}} if obj else {}
    for key, value in obj.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            merge_key = next((k for k in ("name", "type", "key", "ip", "containerPort") if k in value[0]), None)
            if merge_key is None:
                out[f"f:{key}"] = {}
            else:
                out[f"f:{key}"] = {
                    ".": {},
                    **{
                        f"k:{json.dumps({merge_key: v.get(merge_key)}, separators=(',', ':'))}": fields_v1(v)
                        for v in value
                    },
                }
        else:
            out[f"f:{key}"] = fields_v1(value)
    return out


def nodeset_parent(replicas: int, status: JSON | None = None) -> JSON:
    spec = {
        "controllerRef": {"name": CLUSTER},
        "replicas": replicas,
        "scalingMode": "StatefulSet",
        "slurmd": {"image": IMAGE, "resources": {"limits": {"cpu": "64", "memory": "256Gi"}}},
        "logfile": {"image": "docker.io/library/alpine:latest"},
        "extraConf": "Gres=gpu:8 Weight=10",
        "partition": {"enabled": True, "config": "Default=YES MaxTime=UNLIMITED State=UP"},
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%"}},
        "template": {
            "spec": {
                "nodeSelector": {"node.kubernetes.io/instance-type": "gpu-8x"},
                "priorityClassName": "slurm-workers",
            }
        },
    }
    parent: JSON = {
        "apiVersion": names.API_VERSION,
        "kind": "NodeSet",
        "metadata": {
            "name": NODESET,
            "namespace": NS,
            "uid": PARENT_UID,
            "resourceVersion": "90210",
            "generation": 3,
            "creationTimestamp": CREATED,
            "labels": {"app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "slurm-1.0.0"},
            "annotations": {"meta.helm.sh/release-name": "slurm", "meta.helm.sh/release-namespace": NS},
            "finalizers": ["metacontroller.io/compositecontroller-slurm-operator-nodeset"],
        },
        "spec": spec,
    }
    parent["metadata"]["managedFields"] = [
        {
            "manager": "helm",
            "operation": "Update",
            "apiVersion": names.API_VERSION,
            "time": CREATED,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:spec": fields_v1(spec)},
        },
        {
            "manager": "metacontroller",
            "operation": "Update",
            "apiVersion": names.API_VERSION,
            "time": LATER,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": fields_v1(status or {})},
            "subresource": "status",
        },
    ]
    if status is not None:
        parent["status"] = status
    return parent


def controller_cr() -> JSON:
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Controller",
        "metadata": {
            "name": CLUSTER,
            "namespace": NS,
            "uid": uid("Controller", NS, CLUSTER),
            "resourceVersion": "3001",
            "generation": 1,
            "creationTimestamp": CREATED,
        },
        "spec": {
            "slurmKeyRef": {"name": "slurm-key", "key": "slurm.key"},
            "jwtKeyRef": {"name": "slurm-jwt", "key": "jwt.key"},
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "Ready", "message": "", "lastTransitionTime": LATER}
            ]
        },
    }


def observed_pod(desired: JSON, index: int) -> JSON:
    """One pod the hook returned, as Metacontroller observes it once scheduled and running."""
    pod = copy.deepcopy(desired)
    meta = pod["metadata"]
    name = meta["name"]
    meta["annotations"] = {**meta.get("annotations", {}), names.ANNOTATION_LAST_APPLIED: go_json(desired)}
    meta["labels"]["controller-uid"] = PARENT_UID
    busy = index % 3 == 1
    if busy:  # slurm_sync protects pods whose node runs jobs
        meta["labels"][names.LABEL_POD_PROTECT] = "true"
    meta.update(
        namespace=NS,
        uid=uid("Pod", NS, name),
        resourceVersion=str(100000 + 7 * index),
        creationTimestamp=LATER,
        ownerReferences=[
            {
                "apiVersion": names.API_VERSION,
                "kind": "NodeSet",
                "name": NODESET,
                "uid": PARENT_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    spec = pod["spec"]
    node = f"gpu-node-{index:05d}"
    spec |= {
        "nodeName": node,
        "restartPolicy": "Always",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 1000,
    }
    spec["tolerations"] = [
        *spec.get("tolerations", []),
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        {
            "key": "node.kubernetes.io/unreachable",
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": 300,
        },
    ]
    for container in [*spec.get("initContainers", []), *spec.get("containers", [])]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("resources", {})
        container |= {"terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File"}
        for probe_key in ("startupProbe", "livenessProbe", "readinessProbe"):
            if probe_key in container:
                probe = container[probe_key]
                probe["httpGet"].setdefault("scheme", "HTTP")
                probe.setdefault("failureThreshold", 3)
                probe.setdefault("periodSeconds", 10)
                probe |= {"timeoutSeconds": 1, "successThreshold": 1}
    ip = f"10.{(index >> 16) & 255}.{(index >> 8) & 255}.{index & 255}"
    host_ip = f"172.18.{(index >> 8) & 255}.{index & 255}"
    slurm_state = ("Allocated" if index % 2 else "Mixed") if busy else "Idle"
    kubelet_conditions = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": LATER}
        for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    slurm_conditions = [
        {
            "type": names.CONDITION_SLURM_NODE_STATE_PREFIX + slurm_state,
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": SLURM_UPDATE,
            "message": "",
        }
    ]
    digest = hashlib.sha256(name.encode()).hexdigest()
    status = {
        "phase": "Running",
        "conditions": kubelet_conditions + slurm_conditions,
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "qosClass": "Burstable",
        "startTime": LATER,
        "initContainerStatuses": [
            {
                "name": c["name"],
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": c["image"],
                "imageID": f"{c['image']}@sha256:{digest}",
                "containerID": f"containerd://{digest}",
                "state": {"running": {"startedAt": LATER}},
            }
            for c in spec.get("initContainers", [])
        ],
        "containerStatuses": [
            {
                "name": c["name"],
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": c["image"],
                "imageID": f"{c['image']}@sha256:{digest}",
                "containerID": f"containerd://{digest[::-1]}",
                "lastState": {},
                "state": {"running": {"startedAt": LATER}},
            }
            for c in spec.get("containers", [])
        ],
    }
    pod["status"] = status
    meta["managedFields"] = [
        {
            "manager": "metacontroller",
            "operation": "Update",
            "apiVersion": "v1",
            "time": LATER,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": fields_v1({k: meta[k] for k in ("labels", "annotations", "ownerReferences")}),
                "f:spec": fields_v1(desired["spec"]),
            },
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": LATER,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": fields_v1(
                    {k: v for k, v in status.items() if k != "conditions"} | {"conditions": kubelet_conditions}
                )
            },
            "subresource": "status",
        },
        {
            "manager": "slurm-sync",
            "operation": "Update",
            "apiVersion": "v1",
            "time": SLURM_UPDATE,
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": fields_v1({"conditions": slurm_conditions})},
            "subresource": "status",
        },
    ]
    return pod


def build_request(pods: int, client: Any) -> bytes:
    """A steady-state resync with `pods` running worker pods, as request bytes."""
    related = {
        f"Controller.{names.API_VERSION}": {f"{NS}/{CLUSTER}": controller_cr()},
        "Secret.v1": {},
    }
    first = _post(client, {"controller": {}, "parent": nodeset_parent(pods), "children": {}, "related": related})
    desired = sorted((c for c in first["children"] if c["kind"] == "Pod"), key=lambda c: c["metadata"]["name"])
    observed = {f"{NS}/{c['metadata']['name']}": observed_pod(c, i) for i, c in enumerate(desired)}
    body = {
        "controller": {"metadata": {"name": "slurm-operator-nodeset"}},
        "parent": nodeset_parent(pods, status=first["status"]),
        "children": {"Pod.v1": observed, "PersistentVolumeClaim.v1": {}, "ConfigMap.v1": {}},
        "related": related,
        "finalizing": False,
    }
    return orjson.dumps(body)


def _post(client: Any, body: JSON | bytes) -> JSON:
    data = body if isinstance(body, bytes) else orjson.dumps(body)
    resp = client.post(SYNC_PATH, data=data, content_type="application/json")
    if resp.status_code != 200:
        raise RuntimeError(f"{SYNC_PATH} answered {resp.status_code}: {resp.data[:500]!r}")
    return orjson.loads(resp.data)


def wsgi_post(app: Any, path: str, body: bytes) -> bytes:
    """One POST as a WSGI server makes it: environ, the app, the joined answer, close (200 or raise)."""
    environ = {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8080",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": sys.stderr,
        "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0),
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    statuses: list[str] = []
    answer = app(environ, lambda status, headers, exc_info=None: statuses.append(status))
    try:
        data = b"".join(answer)
    finally:
        answer.close()
    if not statuses[0].startswith("200"):
        raise RuntimeError(f"{path} answered {statuses[0]}: {data[:500]!r}")
    return data


def run(quick: bool = False) -> Report:
    from hooks import applied, requestjson
    from hooks.app import create_app

    app = create_app()
    client = app.test_client()
    report = Report(
        title=TITLE,
        columns=COLUMNS,
    )
    for pods in SIZES:
        body = build_request(pods, client)
        response = orjson.loads(wsgi_post(app, SYNC_PATH, body))
        kept = [c for c in response["children"] if c["kind"] == "Pod"]
        if len(kept) != pods or response["status"][names.STATUS_DRAINING_PODS]:
            raise RuntimeError(f"steady-state request with {pods} pods did not keep every pod as is")

        def hook(body: bytes = body) -> bytes:
            return wsgi_post(app, SYNC_PATH, body)

        def cold(body: bytes = body) -> bytes:
            applied.VERDICTS.clear()
            return wsgi_post(app, SYNC_PATH, body)

        parser, serialiser = fastest(JSON_PARSERS, body), fastest(JSON_SERIALISERS, response)

        def floor(
            body: bytes = body,
            response: JSON = response,
            parse: Any = JSON_PARSERS[parser],
            serialise: Any = JSON_SERIALISERS[serialiser],
        ) -> bytes:
            parse(body)
            return serialise(response)

        def shaped_floor(body: bytes = body, response: JSON = response) -> bytes:
            requestjson.load_composite_request(body)
            return orjson.dumps(response)

        runs: list[tuple[str, Callable[[], bytes], Callable[[], bytes], str, float | None]] = [
            ("", hook, floor, f"{parser}+{serialiser}", BUDGETS.get(pods))
        ]
        if pods == COLD_PODS:
            runs.append((" cold", cold, floor, f"{parser}+{serialiser}", None))
        if pods in SHAPED_BUDGETS:
            runs.append((" vs shaped", hook, shaped_floor, "shaped+orjson", SHAPED_BUDGETS[pods]))
        for label, subject, baseline, libraries, budget in runs:
            samples = 3 if quick else 5 if pods >= 5_000 else 15 if budget else 9
            seconds = 1.0 if quick else 8.0 if budget else 3.0
            hook_stats, floor_stats = compare(subject, gc_paused(baseline), min_samples=samples, max_seconds=seconds)
            ratio = paired_ratio(hook_stats, floor_stats)
            report.rows.append(
                [
                    f"{pods:,}{label}",
                    f"{len(body) / 1e6:.2f} MB",
                    f"{len(orjson.dumps(response)) / 1e6:.2f} MB",
                    fmt_ns(hook_stats.median),
                    fmt_ns(hook_stats.p90),
                    fmt_ns(floor_stats.median),
                    fmt_ns(floor_stats.p90),
                    libraries,
                    fmt_ratio(ratio),
                    str(hook_stats.n),
                ]
            )
            if budget and label:
                name = f"NodeSet sync with {pods:,} pods, hook/shaped floor"
                report.budgets.append(Budget(name, ratio, budget))
            elif budget:
                report.budgets.append(Budget(f"NodeSet sync with {pods:,} pods, hook/floor", ratio, budget))
        del body, response, hook, cold, floor, shaped_floor
    applied.VERDICTS.clear()
    report.notes.append(
        "hook = the Flask app called as gunicorn calls it (WSGI: parse, check, hook, serialise, free the request);"
    )
    report.notes.append(
        "floor = parse(request) + serialise(response as plain JSON) with the fastest library for each (floor JSON),"
        " GC paused, interleaved with the hook;"
    )
    report.notes.append(
        f"ratio = median over (hook, floor) pairs; '{COLD_PODS:,} cold': every annotation verdict forgotten first;"
    )
    report.notes.append(
        "'vs shaped': the floor is the hook's own request decoding (hooks/requestjson.py) + orjson.dumps."
    )
    return report

"""What counts as a wrong write while a fault lasts (and while slurm_sync recovers from it).

Kubernetes writes are judged against the truth: the lab's real Slurm, read straight from
slurmrestd (never through the proxy) right after the pass that wrote them. A drained mark is wrong
unless the node really is drained and idle, an absent mark unless the node is really gone, and so
on. Slurm writes are judged by what the proxy forwarded: an undrain of a node whose pod should be
drained, a cancel of a job whose pod exists, a node deletion, and, when the answers came from
another cluster, any write at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from slinky_common import names, slurmstate
from tests.chaos.proxy import Request
from tests.fixtures.slurm import SlurmLab

JSON = dict[str, Any]
KubeWrite = tuple[str, str, str, Any]  # (method, path, content type, body) as the fake apiservers record them
UNDRAIN_STATES = frozenset({"RESUME", "UNDRAIN", "IDLE"})
TRUTH_TIMEOUT = 10.0  # the lab answers in milliseconds; without an answer the writes wait to be judged


@dataclass(frozen=True)
class SlurmNodeTruth:
    states: tuple[str, ...]
    reason: str


def real_nodes(lab: SlurmLab) -> dict[str, SlurmNodeTruth] | None:
    """Every node as the real slurmctld has it now (through the lab's own slurmrestd), or None
    while it cannot say (slurmctld stopped): the writes then wait to be judged."""
    try:
        answer = httpx.get(lab.rest_url + lab.path("nodes"), headers=lab.headers, timeout=TRUTH_TIMEOUT)
    except httpx.TimeoutException:
        return None
    if answer.status_code != 200:
        return None
    return {n["name"]: SlurmNodeTruth(tuple(n.get("state") or ()), str(n.get("reason") or ""))
            for n in answer.json()["nodes"]}  # fmt: skip


def _pod_name(path: str) -> str | None:
    parts = path.strip("/").split("/")
    return parts[parts.index("pods") + 1] if "pods" in parts[:-1] else None


def _metadata(body: Any) -> JSON:
    return (body.get("metadata") or {}) if isinstance(body, dict) else {}


def operator_kube_wrongs(
    writes: Iterable[KubeWrite], truth: Mapping[str, SlurmNodeTruth], pod_nodes: Mapping[str, str]
) -> list[str]:
    """Marks, protection and conditions on NodeSet pods that the real Slurm contradicts; any delete."""
    wrongs = []
    for method, path, _, body in writes:
        pod = _pod_name(path)
        if method == "DELETE":
            wrongs.append(f"DELETE {path}")
        if pod is None or pod not in pod_nodes:
            continue
        node = truth.get(pod_nodes[pod])
        states = node.states if node else ()
        meta = _metadata(body)
        annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
        if annotations.get(names.ANNOTATION_DRAINED) and not (node and slurmstate.is_released(states)):  # any epoch
            wrongs.append(f"{pod}: drained mark while Slurm has {pod_nodes[pod]} {'+'.join(states) or 'missing'}")
        if annotations.get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true" and node is not None:
            wrongs.append(f"{pod}: absent mark while Slurm has {pod_nodes[pod]} {'+'.join(states)}")
        if names.LABEL_POD_PROTECT in labels and labels[names.LABEL_POD_PROTECT] is None and slurmstate.is_busy(states):
            wrongs.append(f"{pod}: protection removed while {pod_nodes[pod]} runs a job")
        true_now = set(slurmstate.condition_types(states))
        for condition in (body.get("status") or {}).get("conditions") or [] if isinstance(body, dict) else []:
            if condition.get("$patch") == "delete" and condition.get("type") in true_now:
                wrongs.append(f"{pod}: condition {condition['type']} removed while still true in Slurm")
    return wrongs


def bridge_kube_wrongs(writes: Iterable[KubeWrite]) -> list[str]:
    """Every bridge pod exists and its job runs (or is being submitted): nothing may be deleted,
    released or unlabelled."""
    wrongs = []
    for method, path, _, body in writes:
        if method == "DELETE":
            wrongs.append(f"DELETE {path}")
            continue
        meta = _metadata(body)
        annotations, labels = meta.get("annotations") or {}, meta.get("labels") or {}
        dropped = names.FINALIZER_SCHEDULER in (meta.get("$deleteFromPrimitiveList/finalizers") or [])
        if dropped or ("finalizers" in meta and names.FINALIZER_SCHEDULER not in (meta["finalizers"] or [])):
            wrongs.append(f"{path}: scheduler finalizer removed")
        if annotations.get(names.ANNOTATION_JOB_RELEASED):
            wrongs.append(f"{path}: released from job {annotations[names.ANNOTATION_JOB_RELEASED]}")
        if names.LABEL_SLURM_JOB_ID in labels and labels[names.LABEL_SLURM_JOB_ID] is None:
            wrongs.append(f"{path}: job id label removed")
        if names.ANNOTATION_SLURM_NODE in annotations and annotations[names.ANNOTATION_SLURM_NODE] is None:
            wrongs.append(f"{path}: Slurm node annotation removed")
    return wrongs


def slurm_wrongs(
    writes: Iterable[Request], *, foreign: bool, guarded_nodes: Iterable[str], guarded_jobs: Iterable[int]
) -> list[str]:
    """Writes that reached Slurm and may not have: ``guarded_nodes`` must stay drained (their pods
    are condemned or their jobs run), ``guarded_jobs`` have existing pods."""
    nodes, jobs = set(guarded_nodes), {str(j) for j in guarded_jobs}
    wrongs = []
    for request in writes:
        what = f"{request.method} {request.endpoint}"
        kind, _, name = request.endpoint.partition("/")
        if foreign:
            wrongs.append(f"{what}: written to a slurmrestd of another cluster")
        elif kind == "node" and request.method == "DELETE":
            wrongs.append(f"{what}: node deleted")
        elif kind == "node" and name in nodes and UNDRAIN_STATES & set(_body(request).get("state") or ()):
            wrongs.append(f"{what}: undrained {name} ({_body(request).get('state')})")
        elif kind == "job" and request.method == "DELETE" and name in jobs:
            wrongs.append(f"{what}: cancelled job {name}, whose pod exists")
    return wrongs


def _body(request: Request) -> JSON:
    try:
        body = orjson.loads(request.body or b"{}")
    except orjson.JSONDecodeError:
        return {}
    return body if isinstance(body, dict) else {}

"""The cluster lab's stand-in for kube-controller-manager's StatefulSet, Deployment, ReplicaSet and PV binder.

The lab runs a real API server but no kube-controller-manager, so the workloads the hooks render (the
Controller's and Accounting's StatefulSets, the RestApi's and LoginSet's Deployments) would never get a
pod. `Workloads` does what the real controllers do for the fields our objects use, following their
sources (pkg/controller/statefulset, deployment, replicaset) step by step, so that the hooks read the
status a real cluster would show and a rollout happens in the order a real one does:

- StatefulSet: pods `<set>-<ordinal>` with the revision, pod-name and pod-index labels, hostname and
  subdomain, claims from volumeClaimTemplates and their retention policy; OrderedReady or Parallel;
  RollingUpdate (partition, maxUnavailable as with the MaxUnavailableStatefulSet gate on) or OnDelete;
  a Failed or Succeeded pod deleted and made again; status as `kubectl rollout status` reads it.
- Deployment → ReplicaSet → Pod: `<deployment>-<pod-template-hash>`, revisions, RollingUpdate
  (maxSurge/maxUnavailable) or Recreate, proportional scaling, paused, revisionHistoryLimit, the
  Available and Progressing conditions; ReplicaSets make `<rs>-<5 random chars>` pods (generateName).
- PVC binding: a Pending claim becomes Bound to what it asked for (there are no PersistentVolumes).
- ServiceAccounts: every active namespace gets its `default` ServiceAccount, as the serviceaccounts
  controller makes it (a pod that names none runs as it, and the node agent mounts its token).

Where it differs from the real controllers, on purpose:
- No ControllerRevision objects: the lab API server does not serve them. A StatefulSet's revisions are
  still named `<set>-<hash>` with the real hash (FNV-32 of the template patch plus the collision count);
  the templates of past revisions are kept in memory, so after a restart a rollout in progress goes on
  from the update revision, as the real controller does when its ControllerRevisions are gone.
- pod-template-hash is FNV-32a over the template's JSON, not over Go's spew dump: same form, other values.
- The lab API server applies no defaults: specs are read through the defaults kube-apiserver would
  have filled in (1 replica, OrderedReady, RollingUpdate with partition 0, 25% surge and unavailable...).
- Polling (one LIST per kind a pass) instead of informers; no Events; orphans are not adopted and
  owned objects whose labels stop matching their owner's selector are not released. A write the server
  refuses (a conflict above all) is logged and left for the next pass.
- Namespaces labelled `cluster-lab.slinky.slurm.net/workloads=private` are left alone: a test runs its
  own instance there (`Workloads(..., namespace=...)`) while the lab's runs everywhere else.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import logging
import re
import struct
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import requests

from lab import kube

Obj = dict[str, Any]
REPLICASETS = kube.Resource("apps/v1", "replicasets")
KINDS = {"pods": "Pod", "persistentvolumeclaims": "PersistentVolumeClaim", "statefulsets": "StatefulSet",
         "deployments": "Deployment", "replicasets": "ReplicaSet", "serviceaccounts": "ServiceAccount"}  # fmt: skip

REVISION_LABEL = "controller-revision-hash"
POD_NAME_LABEL = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"
TEMPLATE_HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
# Deployment annotations never copied onto its ReplicaSets (deployment/util annotationsToSkip).
SKIPPED_ANNOTATIONS = frozenset({"kubectl.kubernetes.io/last-applied-configuration", REVISION, REVISION_HISTORY,
                                 DESIRED_REPLICAS, MAX_REPLICAS, "deprecated.deployment.rollback.to"})  # fmt: skip
MAX_REVISION_HISTORY_CHARS = 2000
BURST_REPLICAS = 500  # the ReplicaSet controller's most creations or deletions in one sync
NO_DEADLINE = 2**31 - 1
TERMINAL = ("Failed", "Succeeded")
# A namespace labelled <PRIVATE_LABEL>=private has a workload controller of its own (a test's): the lab's leaves it.
PRIVATE_LABEL = "cluster-lab.slinky.slurm.net/workloads"


# ---------------------------------------------------------------- small helpers over objects


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def _stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(value: str | None) -> datetime.datetime | None:
    return datetime.datetime.fromisoformat(value) if value else None


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name') or meta.get('generateName', '') + '*'}"


def _labels(obj: Obj) -> dict[str, str]:
    return obj["metadata"].get("labels") or {}


def _annotations(obj: Obj) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def _status(obj: Obj | None, name: str) -> int:
    """An integer status field; 0 when absent (the API omits zeros)."""
    return ((obj or {}).get("status") or {}).get(name) or 0


def _replicas(obj: Obj) -> int:
    """spec.replicas, defaulted to 1 as kube-apiserver would."""
    value = obj["spec"].get("replicas")
    return 1 if value is None else value


def _terminating(obj: Obj) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


def _phase(pod: Obj) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def _condition(obj: Obj, kind: str) -> Obj | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _ready(pod: Obj) -> bool:
    cond = _condition(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


def _available(pod: Obj, min_ready: int, now: datetime.datetime) -> bool:
    """podutil.IsPodAvailable: Ready, and for more than minReadySeconds."""
    if not _ready(pod):
        return False
    since = _time((_condition(pod, "Ready") or {}).get("lastTransitionTime"))
    return min_ready == 0 or (since is not None and since + datetime.timedelta(seconds=min_ready) < now)


def _running_and_ready(pod: Obj) -> bool:
    return _phase(pod) == "Running" and _ready(pod)


def _healthy(pod: Obj) -> bool:
    return _running_and_ready(pod) and not _terminating(pod)


def _active(pod: Obj) -> bool:
    """controller.IsPodActive: neither finished nor being deleted."""
    return _phase(pod) not in TERMINAL and not _terminating(pod)


def _matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A LabelSelector against labels; a missing selector selects nothing, an empty one everything."""
    if selector is None:
        return False
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if (op == "In" and (not present or labels[key] not in values)) or (
            op == "NotIn" and present and labels[key] in values
        ):
            return False
        if (op == "Exists" and not present) or (op == "DoesNotExist" and present):
            return False
    return True


def _controller_ref(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _controlled_by(obj: Obj, owner: Obj) -> bool:
    uid = owner["metadata"]["uid"]
    return any(r.get("controller") and r.get("uid") == uid for r in obj["metadata"].get("ownerReferences") or [])


def _scaled(value: int | str | None, total: int, round_up: bool, default: int | str) -> int:
    """intstr.GetScaledValueFromIntOrPercent: an int as is, "N%" of total (ceiling or floor)."""
    value = default if value is None else value
    if isinstance(value, int):
        return value
    if not value.endswith("%") or not value[:-1].isdigit():
        raise ValueError(f"invalid value for IntOrString: {value!r} is not a percentage")
    product = int(value[:-1]) * total
    return -(-product // 100) if round_up else product // 100


def _pruned(value: Any) -> Any:
    """For semantic equality: nil and empty maps and lists compare equal, as apiequality.Semantic has it."""
    if isinstance(value, dict):
        items = ((k, _pruned(v)) for k, v in value.items())
        return {k: v for k, v in items if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_pruned(v) for v in value]
    return value


# ---------------------------------------------------------------- hashes, as the controllers name things

_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"


def _safe_encode(text: str) -> str:
    """k8s.io/apimachinery rand.SafeEncodeString: no vowels, no confusable characters."""
    return "".join(_ALPHANUMS[ord(c) % len(_ALPHANUMS)] for c in text)


def _fnv32(data: bytes) -> int:
    """hash/fnv New32, which HashControllerRevision uses."""
    value = 0x811C9DC5
    for byte in data:
        value = ((value * 0x01000193) & 0xFFFFFFFF) ^ byte
    return value


def _fnv32a(data: bytes) -> int:
    """hash/fnv New32a, which ComputeHash uses."""
    value = 0x811C9DC5
    for byte in data:
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _go_json(value: Any) -> bytes:
    """json.Marshal of a map[string]interface{} in Go: sorted keys, compact, HTML characters escaped."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"),
                          ("\u2029", "\\u2029")):  # fmt: skip
        text = text.replace(char, escaped)
    return text.encode()


def revision_name(sts: Obj, collision_count: int) -> str:
    """A StatefulSet's revision for its template: statefulset.newRevision + history.HashControllerRevision."""
    patch = {"spec": {"template": {**sts["spec"]["template"], "$patch": "replace"}}}
    digest = _fnv32(_go_json(patch) + str(collision_count).encode())
    return f"{sts['metadata']['name'][:223]}-{_safe_encode(str(digest))}"


def pod_template_hash(template: Obj, collision_count: int | None) -> str:
    """controller.ComputeHash's form (FNV-32a, the collision count as 8 little-endian bytes) over JSON."""
    data = _go_json(template)
    if collision_count is not None:
        data += struct.pack("<Q", collision_count & 0xFFFFFFFF)
    return _safe_encode(str(_fnv32a(data)))


# ---------------------------------------------------------------- writes and the observed world


class Retry(Exception):
    """A write the API server refused (a conflict above all): the object is left for the next pass."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class Writer:
    """Every write goes through here: one log line each, counted by verb and kind."""

    def __init__(self, client: kube.Client, log: logging.Logger) -> None:
        self.client = client
        self.log = log
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _call(self, verb: str, res: kube.Resource, obj: Obj, why: str, call: Callable[[], Any]) -> Any:
        kind = KINDS.get(res.plural, res.plural)
        with self._lock:
            self.counts[f"{verb} {kind}"] += 1
        try:
            result = call()
        except kube.ApiError as err:
            self.log.info("%s %s %s failed, retried next pass: %s (%s)", verb, kind, _key(obj), err, why)
            raise Retry(str(err), err.status) from err
        self.log.info("%s %s %s: %s", verb, kind, _key(result if isinstance(result, dict) else obj), why)
        return result

    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)

    def create(self, res: kube.Resource, obj: Obj, why: str) -> Obj:
        return self._call("create", res, obj, why, lambda: self.client.create(res, obj))

    def update(self, res: kube.Resource, obj: Obj, why: str) -> Obj:
        return self._call("update", res, obj, why, lambda: self.client.update(res, obj))

    def update_status(self, res: kube.Resource, obj: Obj, why: str) -> Obj:
        return self._call("update_status", res, obj, why, lambda: self.client.update_status(res, obj))

    def delete(self, res: kube.Resource, obj: Obj, why: str) -> None:
        """A plain DELETE (the server makes a bound pod's graceful), preconditioned on the uid we saw."""
        meta = obj["metadata"]
        call = lambda: self.client.delete(res, meta["namespace"], meta["name"], uid=meta["uid"])  # noqa: E731
        self._call("delete", res, obj, why, call)


@dataclass
class Snapshot:
    """One pass's view of the cluster (five lists), kept current with our own writes."""

    statefulsets: list[Obj]
    deployments: list[Obj]
    replicasets: dict[str, Obj]  # by uid
    pods: dict[str, list[Obj]]  # by namespace
    claims: dict[tuple[str, str], Obj]  # by (namespace, name)

    @classmethod
    def load(cls, client: kube.Client, namespace: str | None) -> Snapshot:
        """Everything in `namespace`; or in every namespace but the private ones (PRIVATE_LABEL)."""
        private = set()
        if namespace is None:
            private = {n["metadata"]["name"] for n in client.list(kube.NAMESPACES, selector=f"{PRIVATE_LABEL}=private")}

        def listed(res: kube.Resource) -> list[Obj]:
            return [o for o in client.list(res, namespace) if o["metadata"]["namespace"] not in private]

        pods: dict[str, list[Obj]] = {}
        for pod in listed(kube.PODS):
            pods.setdefault(pod["metadata"]["namespace"], []).append(pod)
        claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in listed(kube.PVCS)}
        return cls(listed(kube.STATEFULSETS), listed(kube.DEPLOYMENTS),
                   {rs["metadata"]["uid"]: rs for rs in listed(REPLICASETS)}, pods, claims)  # fmt: skip

    def pods_in(self, namespace: str) -> list[Obj]:
        return self.pods.get(namespace, [])

    def replicasets_in(self, namespace: str) -> list[Obj]:
        return [rs for rs in self.replicasets.values() if rs["metadata"]["namespace"] == namespace]


# ---------------------------------------------------------------- StatefulSet


@dataclass(frozen=True)
class SetSpec:
    """A StatefulSet's spec through kube-apiserver's defaults (SetDefaults_StatefulSet)."""

    replicas: int
    start: int
    parallel: bool
    on_delete: bool
    rolling: Obj | None  # updateStrategy.rollingUpdate, None when absent after defaulting
    partition: int
    max_unavailable: int | str
    min_ready: int
    when_scaled: str
    when_deleted: str

    @classmethod
    def of(cls, sts: Obj) -> SetSpec:
        spec = sts["spec"]
        strategy = spec.get("updateStrategy") or {}
        kind, rolling = strategy.get("type") or "", strategy.get("rollingUpdate")
        if not kind:
            kind, rolling = "RollingUpdate", rolling if rolling is not None else {}
        policy = spec.get("persistentVolumeClaimRetentionPolicy") or {}
        return cls(
            replicas=_replicas(sts),
            start=(spec.get("ordinals") or {}).get("start") or 0,
            parallel=spec.get("podManagementPolicy") == "Parallel",
            on_delete=kind == "OnDelete",
            rolling=rolling,
            partition=(rolling or {}).get("partition") or 0,
            max_unavailable=(rolling or {}).get("maxUnavailable") or 1,
            min_ready=spec.get("minReadySeconds") or 0,
            when_scaled=policy.get("whenScaled") or "Retain",
            when_deleted=policy.get("whenDeleted") or "Retain",
        )

    def in_range(self, ordinal: int) -> bool:
        return self.start <= ordinal < self.start + self.replicas


_ORDINAL = re.compile(r"^(.*)-([0-9]+)$")


def _parent_and_ordinal(pod: Obj) -> tuple[str, int]:
    match = _ORDINAL.match(pod["metadata"]["name"])
    if not match or int(match.group(2)) >= 2**31:
        return "", -1
    return match.group(1), int(match.group(2))


def _ordinal(pod: Obj) -> int:
    return _parent_and_ordinal(pod)[1]


def _revision(pod: Obj) -> str:
    return _labels(pod).get(REVISION_LABEL, "")


@dataclass
class SetPass:
    """What one sync of one StatefulSet works on (stateful_set_control.go's updateStatefulSet locals)."""

    sts: Obj
    spec: SetSpec
    snap: Snapshot
    now: datetime.datetime
    update_revision: str
    replicas: list[Obj]
    condemned: list[Obj]
    status: Obj

    @property
    def name(self) -> str:
        return self.sts["metadata"]["name"]

    @property
    def namespace(self) -> str:
        return self.sts["metadata"]["namespace"]

    @property
    def monotonic(self) -> bool:
        return not self.spec.parallel


def _claim_name(template: Obj, sts: Obj, ordinal: int) -> str:
    return f"{template['metadata']['name']}-{sts['metadata']['name']}-{ordinal}"


def _claims(sts: Obj, ordinal: int) -> list[tuple[str, Obj]]:
    """getPersistentVolumeClaims: (template name, claim) for one ordinal, labelled with the set's selector."""
    claims = []
    for template in sts["spec"].get("volumeClaimTemplates") or []:
        meta = copy.deepcopy(template.get("metadata") or {})
        labels = {**(meta.get("labels") or {}), **((sts["spec"].get("selector") or {}).get("matchLabels") or {})}
        meta = {k: v for k, v in meta.items() if k in ("annotations", "finalizers")}
        meta.update(name=_claim_name(template, sts, ordinal), namespace=sts["metadata"]["namespace"], labels=labels)
        claim = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": meta,
                 "spec": copy.deepcopy(template.get("spec") or {})}  # fmt: skip
        claims.append((template["metadata"]["name"], claim))
    return claims


def _with_storage(sts: Obj, pod: Obj) -> list[Obj]:
    """updateStorage: a volume per claim template, then the pod's other volumes."""
    claims = _claims(sts, _ordinal(pod))
    names = {name for name, _ in claims}
    volumes = [{"name": name, "persistentVolumeClaim": {"claimName": c["metadata"]["name"]}} for name, c in claims]
    return volumes + [v for v in pod["spec"].get("volumes") or [] if v.get("name") not in names]


def _storage_matches(sts: Obj, pod: Obj) -> bool:
    volumes = {v.get("name"): v for v in pod["spec"].get("volumes") or []}
    for name, claim in _claims(sts, _ordinal(pod)):
        source = (volumes.get(name) or {}).get("persistentVolumeClaim") or {}
        if source.get("claimName") != claim["metadata"]["name"]:
            return False
    return True


def _identity_matches(sts: Obj, pod: Obj) -> bool:
    parent, ordinal = _parent_and_ordinal(pod)
    meta = pod["metadata"]
    return (ordinal >= 0 and parent == sts["metadata"]["name"] and meta["namespace"] == sts["metadata"]["namespace"]
            and _labels(pod).get(POD_NAME_LABEL) == meta["name"])  # fmt: skip


def _set_identity(pod: Obj) -> None:
    labels = pod["metadata"].setdefault("labels", {})
    labels[POD_NAME_LABEL] = pod["metadata"]["name"]
    labels[POD_INDEX_LABEL] = str(_ordinal(pod))


def _new_stateful_pod(sts: Obj, template: Obj, revision: str, ordinal: int) -> Obj:
    """newStatefulSetPod + setPodRevision: the template, the identity, the claims' volumes."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {"name": f"{sts['metadata']['name']}-{ordinal}", "namespace": sts["metadata"]["namespace"],
                 "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [_controller_ref(sts)]}  # fmt: skip
    for extra in ("annotations", "finalizers"):
        if tmeta.get(extra):
            meta[extra] = copy.deepcopy(tmeta[extra])
    pod: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}
    _set_identity(pod)
    meta["labels"][REVISION_LABEL] = revision
    pod["spec"]["hostname"] = meta["name"]
    if sts["spec"].get("serviceName"):
        pod["spec"]["subdomain"] = sts["spec"]["serviceName"]
    if volumes := _with_storage(sts, pod):
        pod["spec"]["volumes"] = volumes
    return pod


def _ref_matches(ref: Obj, obj: Obj, api_version: str, kind: str) -> bool:
    return (
        ref.get("apiVersion") == api_version and ref.get("kind") == kind and ref.get("name") == obj["metadata"]["name"]
    )


def _pod_uid(pod: Obj) -> str:
    return pod["metadata"].get("uid", "")


class ClaimOwners:
    """The retention policy as owner references on a pod's claims (stateful_set_utils.go)."""

    SET = ("apps/v1", "StatefulSet")
    POD = ("v1", "Pod")

    def __init__(self, sts: Obj, spec: SetSpec, pod: Obj) -> None:
        self.sts, self.spec, self.pod = sts, spec, pod
        self.scaled_down = not spec.in_range(_ordinal(pod))

    def _is_ours(self, ref: Obj) -> bool:
        return _ref_matches(ref, self.sts, *self.SET) or _ref_matches(ref, self.pod, *self.POD)

    def _stale(self, claim: Obj, obj: Obj, kind: tuple[str, str]) -> bool:
        ref = next((r for r in claim["metadata"].get("ownerReferences") or [] if _ref_matches(r, obj, *kind)), None)
        return ref is not None and ref.get("uid") != obj["metadata"].get("uid", "")

    def stale(self, claim: Obj) -> bool:
        """A claim still owned by an earlier pod of that name (PodClaimIsStale)."""
        return self._stale(claim, self.pod, self.POD)

    def _unexpected_controller(self, claim: Obj) -> bool:
        if self.spec.when_scaled == "Retain" and self.spec.when_deleted == "Retain":
            return False
        for ref in claim["metadata"].get("ownerReferences") or []:
            for obj, kind in ((self.sts, self.SET), (self.pod, self.POD)):
                if _ref_matches(ref, obj, *kind):
                    if ref.get("uid") != obj["metadata"].get("uid", ""):
                        return True
                    break
            else:
                if ref.get("controller"):
                    return True
        return False

    def _has(self, claim: Obj, owner: Obj) -> bool:
        uid = owner["metadata"].get("uid")
        return any(r.get("uid") == uid for r in claim["metadata"].get("ownerReferences") or [])

    def wanted(self) -> tuple[bool, bool]:
        """(set owns, pod owns) under the policy."""
        delete_scaled, delete_deleted = self.spec.when_scaled == "Delete", self.spec.when_deleted == "Delete"
        if delete_scaled and self.scaled_down:
            return False, True
        return delete_deleted, False

    def up_to_date(self, claim: Obj) -> bool:
        """isClaimOwnerUpToDate."""
        if self._stale(claim, self.sts, self.SET) or self.stale(claim):
            return True
        if self._unexpected_controller(claim):
            return not (self._has(claim, self.sts) or self._has(claim, self.pod))
        uids = {self.sts["metadata"]["uid"], _pod_uid(self.pod)}
        if any(
            r.get("uid") in uids and not r.get("controller") for r in claim["metadata"].get("ownerReferences") or []
        ):
            return False
        return (self._has(claim, self.sts), self._has(claim, self.pod)) == self.wanted()

    def refs(self, claim: Obj) -> list[Obj]:
        """updateClaimOwnerRefForSetAndPod: the claim's references with ours as the policy wants them."""
        unexpected = self._unexpected_controller(claim)
        refs = [r for r in claim["metadata"].get("ownerReferences") or [] if not self._is_ours(r)]
        if unexpected:
            return refs
        set_owns, pod_owns = self.wanted()
        if set_owns:
            refs.append(_controller_ref(self.sts))
        if pod_owns and _pod_uid(self.pod):
            refs.append(_controller_ref({"apiVersion": "v1", "kind": "Pod", "metadata": self.pod["metadata"]}))
        return refs


class StatefulSets:
    """pkg/controller/statefulset: pods and claims of every StatefulSet, and its status."""

    def __init__(self, writer: Writer) -> None:
        self.w = writer
        self.history: dict[tuple[str, str], Obj] = {}  # (set uid, revision) -> template

    def sync(self, sts: Obj, snap: Snapshot, now: datetime.datetime) -> None:
        if sts["spec"].get("selector") in (None, {}):
            return
        spec = SetSpec.of(sts)
        work = self._prepare(sts, spec, snap, now)
        if not _terminating(sts):
            with contextlib.suppress(Retry):
                self._reconcile(work)
        self._write_status(work)
        self._forget(sts, work)

    def forget_all_but(self, uids: set[str]) -> None:
        self.history = {k: v for k, v in self.history.items() if k[0] in uids}

    def _forget(self, sts: Obj, work: SetPass) -> None:
        """truncateHistory: keep the current, update and live pods' revisions only."""
        uid = sts["metadata"]["uid"]
        live = {work.status["currentRevision"], work.update_revision} | {_revision(p) for p in work.replicas}
        live |= {_revision(p) for p in work.condemned}
        self.history = {k: v for k, v in self.history.items() if k[0] != uid or k[1] in live}

    def _prepare(self, sts: Obj, spec: SetSpec, snap: Snapshot, now: datetime.datetime) -> SetPass:
        uid, name = sts["metadata"]["uid"], sts["metadata"]["name"]
        observed = sts.get("status") or {}
        collision = observed.get("collisionCount") or 0
        update_revision, template = revision_name(sts, collision), sts["spec"]["template"]
        self.history[(uid, update_revision)] = template
        current_revision = observed.get("currentRevision") or ""
        current_template = self.history.get((uid, current_revision))
        if current_template is None:  # no history yet (or lost): the update revision is current
            current_revision, current_template = update_revision, template
        pods = [p for p in snap.pods_in(sts["metadata"]["namespace"])
                if _controlled_by(p, sts) and _parent_and_ordinal(p)[0] == name]  # fmt: skip
        slots: list[Obj | None] = [None] * spec.replicas
        condemned = []
        for pod in pods:
            ordinal = _ordinal(pod)
            if spec.in_range(ordinal):
                slots[ordinal - spec.start] = pod
            elif ordinal >= 0:
                condemned.append(pod)
        condemned.sort(key=_ordinal, reverse=True)
        replicas = []
        for index, slot in enumerate(slots):
            if slot is None:  # not created yet: at the current revision below the partition, else the update one
                ordinal = spec.start + index
                current = self._current_for(spec, observed, ordinal)
                revision, chosen = (current_revision, current_template) if current else (update_revision, template)
                slot = _new_stateful_pod(sts, chosen, revision, ordinal)
            replicas.append(slot)
        status = {"observedGeneration": sts["metadata"].get("generation", 0), "currentRevision": current_revision,
                  "updateRevision": update_revision, "collisionCount": collision}  # fmt: skip
        status.update(_set_counts(replicas + condemned, spec.min_ready, now, current_revision, update_revision))
        return SetPass(sts, spec, snap, now, update_revision, replicas, condemned, status)

    @staticmethod
    def _current_for(spec: SetSpec, observed: Obj, ordinal: int) -> bool:
        """newVersionedStatefulSetPod: below the partition, a new pod gets the current revision."""
        if (
            not spec.on_delete
            and spec.rolling is None
            and ordinal < spec.start + (observed.get("currentReplicas") or 0)
        ):
            return True
        return spec.rolling is not None and ordinal < spec.start + spec.partition

    def _reconcile(self, work: SetPass) -> None:
        """updateStatefulSet after the status is computed: replicas, condemned pods, then the rollout."""
        for index in range(len(work.replicas)):
            if self._replica(work, index) and work.monotonic:
                return
        for pod in work.condemned:  # claims of condemned pods as the retention policy wants them
            self._fix_claims(work, pod)
        first_unhealthy = next((p for p in work.replicas if not _healthy(p)), None)
        if first_unhealthy is None:
            first_unhealthy = next((p for p in reversed(work.condemned) if not _healthy(p)), None)
        for pod in work.condemned:
            if self._condemned(work, pod, first_unhealthy) and work.monotonic:
                return
        if not work.spec.on_delete:
            self._roll(work)

    def _replica(self, work: SetPass, index: int) -> bool:
        """processReplica; True when a monotonic set must stop here for this pass."""
        pod, sts = work.replicas[index], work.sts
        if _phase(pod) in TERMINAL:
            if not _terminating(pod):
                self.w.delete(kube.PODS, pod, f"StatefulSet {work.name}: pod {_phase(pod)}, made again once gone")
            return True
        if not _phase(pod):  # not created yet
            owners = ClaimOwners(sts, work.spec, pod)
            if work.spec.when_scaled == "Delete" and any(
                owners.stale(c) for c in self._existing_claims(work, pod)
            ):  # a claim of an earlier pod of that name, still waiting for the garbage collector
                return True
            self._create_claims(work, pod)
            why = f"StatefulSet {work.name}: ordinal {_ordinal(pod)} missing, revision {_revision(pod)}"
            self.w.create(kube.PODS, pod, why)
            return work.monotonic
        if _phase(pod) == "Pending":
            self._create_claims(work, pod)
        if work.monotonic and (
            _terminating(pod) or not _running_and_ready(pod) or not _available(pod, work.spec.min_ready, work.now)
        ):
            return True
        self._enforce(work, pod)
        return False

    def _existing_claims(self, work: SetPass, pod: Obj) -> list[Obj]:
        found = (
            work.snap.claims.get((work.namespace, c["metadata"]["name"])) for _, c in _claims(work.sts, _ordinal(pod))
        )
        return [c for c in found if c is not None]

    def _create_claims(self, work: SetPass, pod: Obj) -> None:
        """createPersistentVolumeClaims: the missing ones (owned as the policy wants); none may be deleting."""
        deleting = []
        for _, claim in _claims(work.sts, _ordinal(pod)):
            existing = work.snap.claims.get((work.namespace, claim["metadata"]["name"]))
            if existing is None:
                claim["metadata"]["ownerReferences"] = ClaimOwners(work.sts, work.spec, pod).refs(claim)
                if not claim["metadata"]["ownerReferences"]:
                    del claim["metadata"]["ownerReferences"]
                why = f"StatefulSet {work.name}: claim of {pod['metadata']['name']}"
                work.snap.claims[(work.namespace, claim["metadata"]["name"])] = self.w.create(kube.PVCS, claim, why)
            elif _terminating(existing):
                deleting.append(existing["metadata"]["name"])
        if deleting:
            raise Retry(f"StatefulSet {work.name}: claims being deleted: {deleting}")

    def _fix_claims(self, work: SetPass, pod: Obj) -> None:
        """UpdatePodClaimForRetentionPolicy for the claims whose owners the policy wants otherwise."""
        owners = ClaimOwners(work.sts, work.spec, pod)
        for claim in self._existing_claims(work, pod):
            if owners.up_to_date(claim):
                continue
            fixed = copy.deepcopy(claim)
            fixed["metadata"]["ownerReferences"] = owners.refs(claim)
            why = f"StatefulSet {work.name}: retention policy {work.spec.when_deleted}/{work.spec.when_scaled}"
            work.snap.claims[(work.namespace, claim["metadata"]["name"])] = self.w.update(kube.PVCS, fixed, why)

    def _enforce(self, work: SetPass, pod: Obj) -> None:
        """The invariants of a running replica: its identity, its claims' volumes, its claims' owners."""
        self._fix_claims(work, pod)
        if _identity_matches(work.sts, pod) and _storage_matches(work.sts, pod):
            return
        pod = copy.deepcopy(pod)
        _set_identity(pod)
        if not _storage_matches(work.sts, pod):
            pod["spec"]["volumes"] = _with_storage(work.sts, pod)
            self._create_claims(work, pod)
        self.w.update(kube.PODS, pod, f"StatefulSet {work.name}: identity and storage of the replica")

    def _condemned(self, work: SetPass, pod: Obj, first_unhealthy: Obj | None) -> bool:
        """processCondemned: scale-in from the highest ordinal, each waiting for the ones before."""
        if _terminating(pod):
            return True
        if (
            work.monotonic
            and pod is not first_unhealthy
            and (not _running_and_ready(pod) or not _available(pod, work.spec.min_ready, work.now))
        ):
            return True
        self.w.delete(kube.PODS, pod, f"StatefulSet {work.name}: scale in to {work.spec.replicas}")
        return True

    def _roll(self, work: SetPass) -> None:
        """updateStatefulSetAfterInvariantEstablished: replace old pods from the highest ordinal down."""
        spec = work.spec
        update_min, limit = 0, 1
        if spec.rolling is not None:
            update_min, limit = spec.partition, max(1, _scaled(spec.max_unavailable, spec.replicas, False, 1))
        budget = limit - sum(1 for p in work.replicas if not _healthy(p))
        for index in range(len(work.replicas) - 1, update_min - 1, -1):
            if budget <= 0:
                return
            pod = work.replicas[index]
            if _revision(pod) != work.update_revision and not _terminating(pod):
                why = f"StatefulSet {work.name}: rolling update to {work.update_revision}"
                self.w.delete(kube.PODS, pod, why)
                budget -= 1
                work.status["currentReplicas"] -= 1

    def _write_status(self, work: SetPass) -> None:
        """completeRollingUpdate, then a write only when a field differs (inconsistentStatus)."""
        status, replicas = work.status, work.spec.replicas
        if (
            not work.spec.on_delete
            and status["updatedReplicas"] == status["readyReplicas"] == replicas == status["replicas"]
        ):
            status["currentReplicas"], status["currentRevision"] = status["updatedReplicas"], status["updateRevision"]
        observed = work.sts.get("status") or {}
        fields = ("replicas", "currentReplicas", "readyReplicas", "updatedReplicas", "availableReplicas",
                  "currentRevision", "updateRevision")  # fmt: skip
        if status["observedGeneration"] <= (observed.get("observedGeneration") or 0) and all(
            (observed.get(f) or type(status[f])()) == status[f] for f in fields
        ):
            return
        sts = copy.deepcopy(work.sts)
        sts["status"] = status
        why = (f"{status['readyReplicas']}/{replicas} ready, {status['updatedReplicas']} updated, "
               f"revision {status['currentRevision']} -> {status['updateRevision']}")  # fmt: skip
        with contextlib.suppress(Retry):
            self.w.update_status(kube.STATEFULSETS, sts, why)


def _set_counts(pods: Iterable[Obj], min_ready: int, now: datetime.datetime, current: str, update: str) -> Obj:
    """computeReplicaStatus over the pods that exist."""
    counts = dict.fromkeys(("replicas", "readyReplicas", "availableReplicas", "currentReplicas", "updatedReplicas"), 0)
    for pod in pods:
        if not _phase(pod):
            continue
        counts["replicas"] += 1
        if _running_and_ready(pod):
            counts["readyReplicas"] += 1
            counts["availableReplicas"] += _available(pod, min_ready, now)
        if not _terminating(pod):
            counts["currentReplicas"] += _revision(pod) == current
            counts["updatedReplicas"] += _revision(pod) == update
    return counts


# ---------------------------------------------------------------- ReplicaSet

_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def _deletion_order(pod: Obj, rank: int) -> tuple:
    """ActivePodsWithRanks.Less as a sort key: the first pods are the ones to delete."""
    ready = _ready(pod)
    ready_since = (_condition(pod, "Ready") or {}).get("lastTransitionTime") if ready else None
    restarts = max((s.get("restartCount") or 0 for s in (pod.get("status") or {}).get("containerStatuses") or []),
                   default=0)  # fmt: skip
    try:
        cost = int(_annotations(pod).get("controller.kubernetes.io/pod-deletion-cost", "0"))
    except ValueError:
        cost = 0
    created = _time(pod["metadata"].get("creationTimestamp"))
    return (bool(pod["spec"].get("nodeName")), _PHASE_RANK.get(_phase(pod), 0), ready, cost, -rank,
            ready_since is not None, _negated(_time(ready_since)), -restarts, created is not None,
            _negated(created))  # fmt: skip


def _negated(when: datetime.datetime | None) -> float:
    return -when.timestamp() if when else 0.0


def _pod_from_template(template: Obj, owner: Obj) -> Obj:
    """controller.GetPodFromTemplate: labels, annotations, finalizers and spec; named by the server."""
    tmeta = template.get("metadata") or {}
    meta: Obj = {"generateName": f"{owner['metadata']['name']}-", "namespace": owner["metadata"]["namespace"],
                 "labels": dict(tmeta.get("labels") or {}), "ownerReferences": [_controller_ref(owner)]}  # fmt: skip
    for extra in ("annotations", "finalizers"):
        if tmeta.get(extra):
            meta[extra] = copy.deepcopy(tmeta[extra])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {})}


class ReplicaSets:
    """pkg/controller/replicaset: as many active pods as spec.replicas, and the status."""

    def __init__(self, writer: Writer) -> None:
        self.w = writer

    def sync(self, rs: Obj, snap: Snapshot, now: datetime.datetime) -> None:
        namespace, selector = rs["metadata"]["namespace"], rs["spec"].get("selector")
        template_labels = ((rs["spec"].get("template") or {}).get("metadata") or {}).get("labels") or {}
        if selector in (None, {}) or not _matches(selector, template_labels):  # kube-apiserver would refuse it
            raise ValueError("spec.selector is empty or does not match the template's labels")
        owned = [p for p in snap.pods_in(namespace) if _controlled_by(p, rs) and _matches(selector, _labels(p))]
        active = [p for p in owned if _active(p)]
        terminating = [p for p in owned if _terminating(p) and _phase(p) not in TERMINAL]
        failure: tuple[str, str] | None = None
        if not _terminating(rs):
            try:
                self._manage(rs, active, snap)
            except Retry as err:
                failure = ("FailedCreate" if len(active) < _replicas(rs) else "FailedDelete", str(err))
        self._write_status(rs, active, terminating, failure, now)

    def _manage(self, rs: Obj, active: list[Obj], snap: Snapshot) -> None:
        diff = len(active) - _replicas(rs)
        name = rs["metadata"]["name"]
        if diff < 0:
            for _ in range(min(-diff, BURST_REPLICAS)):
                pod = _pod_from_template(rs["spec"].get("template") or {}, rs)
                self.w.create(kube.PODS, pod, f"ReplicaSet {name}: {len(active)} of {_replicas(rs)} pods")
        elif diff > 0:
            for pod in self._to_delete(rs, active, snap, min(diff, BURST_REPLICAS)):
                self.w.delete(kube.PODS, pod, f"ReplicaSet {name}: {len(active)} pods for {_replicas(rs)}")

    @staticmethod
    def _to_delete(rs: Obj, active: list[Obj], snap: Snapshot, count: int) -> list[Obj]:
        """getPodsToDelete: unscheduled, pending, not ready, cheap, doubled-up, young pods first."""
        if count >= len(active):
            return active
        owner = next((r.get("uid") for r in rs["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
        siblings = [s for s in snap.replicasets_in(rs["metadata"]["namespace"])
                    if owner and any(r.get("uid") == owner and r.get("controller")
                                     for r in s["metadata"].get("ownerReferences") or [])] or [rs]  # fmt: skip
        per_node: Counter[str] = Counter()
        for pod in snap.pods_in(rs["metadata"]["namespace"]):
            if _active(pod) and any(_controlled_by(pod, s) for s in siblings):
                per_node[pod["spec"].get("nodeName") or ""] += 1
        ranked = sorted(active, key=lambda p: _deletion_order(p, per_node[p["spec"].get("nodeName") or ""]))
        return ranked[:count]

    def _write_status(self, rs: Obj, active: list[Obj], terminating: list[Obj], failure: tuple[str, str] | None,
                      now: datetime.datetime) -> None:  # fmt: skip
        """calculateStatus + updateReplicaSetStatus: written when a count, a condition or the generation moved."""
        template_labels = (rs["spec"].get("template") or {}).get("metadata", {}).get("labels") or {}
        min_ready = rs["spec"].get("minReadySeconds") or 0
        old = rs.get("status") or {}
        labelled = sum(_matches({"matchLabels": template_labels}, _labels(p)) for p in active)
        status: Obj = {**old, "replicas": len(active), "fullyLabeledReplicas": labelled,
                       "readyReplicas": sum(_ready(p) for p in active),
                       "availableReplicas": sum(_available(p, min_ready, now) for p in active),
                       "terminatingReplicas": len(terminating)}  # fmt: skip
        conditions = [c for c in old.get("conditions") or [] if c.get("type") != "ReplicaFailure" or failure]
        if failure and _condition(rs, "ReplicaFailure") is None:
            conditions.append({"type": "ReplicaFailure", "status": "True", "lastTransitionTime": _stamp(now),
                               "reason": failure[0], "message": failure[1]})  # fmt: skip
        status["conditions"] = conditions
        generation = rs["metadata"].get("generation", 0)
        counts = ("replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "terminatingReplicas")
        if (all((old.get(k) or 0) == status[k] for k in counts) and (old.get("observedGeneration") or 0) == generation
                and (old.get("conditions") or []) == conditions):  # fmt: skip
            return
        status["observedGeneration"] = generation
        if not conditions:
            del status["conditions"]
        new = copy.deepcopy(rs)
        new["status"] = status
        why = f"{status['readyReplicas']}/{_replicas(rs)} ready, {status['availableReplicas']} available"
        with contextlib.suppress(Retry):
            self.w.update_status(REPLICASETS, new, why)


# ---------------------------------------------------------------- Deployment


@dataclass
class Rollout:
    """One sync of one Deployment: the deployment (status kept current), its defaulted spec, its ReplicaSets."""

    d: Obj
    spec: Obj
    snap: Snapshot
    now: datetime.datetime
    rs_uids: list[str]
    pods_by_rs: dict[str, list[Obj]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.d["metadata"]["name"]

    @property
    def replicas(self) -> int:
        return self.spec["replicas"]

    @property
    def rolling(self) -> bool:
        return self.spec["strategy"]["type"] == "RollingUpdate"

    def all(self) -> list[Obj]:
        return [self.snap.replicasets[uid] for uid in self.rs_uids if uid in self.snap.replicasets]

    def fresh(self, rs: Obj | None) -> Obj | None:
        return None if rs is None else self.snap.replicasets.get(rs["metadata"]["uid"], rs)

    def status(self) -> Obj:
        return self.d.setdefault("status", {})


def _deployment_spec(d: Obj) -> Obj:
    """SetDefaults_Deployment on a copy of the spec."""
    spec = copy.deepcopy(d["spec"])
    spec["replicas"] = _replicas(d)
    strategy = spec.setdefault("strategy", {})
    strategy["type"] = strategy.get("type") or "RollingUpdate"
    if strategy["type"] == "RollingUpdate":
        rolling = strategy.get("rollingUpdate") or {}
        rolling.setdefault("maxSurge", "25%")
        rolling.setdefault("maxUnavailable", "25%")
        strategy["rollingUpdate"] = rolling
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)
    spec["minReadySeconds"] = spec.get("minReadySeconds") or 0
    return spec


def _fenceposts(spec: Obj) -> tuple[int, int]:
    """ResolveFenceposts: (maxSurge, maxUnavailable), never both 0."""
    rolling, desired = spec["strategy"]["rollingUpdate"], spec["replicas"]
    surge = _scaled(rolling.get("maxSurge"), desired, True, 0)
    unavailable = _scaled(rolling.get("maxUnavailable"), desired, False, 0)
    return (surge, 1) if surge == 0 and unavailable == 0 else (surge, unavailable)


def _max_surge(spec: Obj) -> int:
    return _fenceposts(spec)[0] if spec["strategy"]["type"] == "RollingUpdate" else 0


def _max_unavailable(spec: Obj) -> int:
    if spec["strategy"]["type"] != "RollingUpdate" or spec["replicas"] == 0:
        return 0
    return min(_fenceposts(spec)[1], spec["replicas"])


def _rs_revision(rs: Obj) -> int | None:
    try:
        return int(_annotations(rs).get(REVISION, ""))
    except ValueError:
        return None


def _by_creation(rs: Obj) -> tuple[str, str]:
    return rs["metadata"].get("creationTimestamp") or "", rs["metadata"]["name"]


def _equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """EqualIgnoreHash: two pod templates equal but for the pod-template-hash label."""
    a, b = copy.deepcopy(a), copy.deepcopy(b)
    for template in (a, b):
        (template.get("metadata") or {}).get("labels", {}).pop(TEMPLATE_HASH_LABEL, None)
    return _pruned(a) == _pruned(b)


def _find_new(spec: Obj, rs_list: list[Obj]) -> Obj | None:
    """FindNewReplicaSet: the oldest ReplicaSet whose template is the deployment's."""
    return next(
        (
            rs
            for rs in sorted(rs_list, key=_by_creation)
            if _equal_ignore_hash(rs["spec"]["template"], spec["template"])
        ),
        None,
    )


def _active_rs(rs_list: Iterable[Obj | None]) -> list[Obj]:
    return [rs for rs in rs_list if rs is not None and _replicas(rs) > 0]


def _sum(rs_list: Iterable[Obj | None], count: Callable[[Obj], int]) -> int:
    return sum(count(rs) for rs in rs_list if rs is not None)


def _set_condition(status: Obj, cond: Obj) -> None:
    """SetDeploymentCondition: unchanged when status and reason are; lastTransitionTime kept when status is."""
    conditions = status.get("conditions") or []
    current = next((c for c in conditions if c.get("type") == cond["type"]), None)
    if current and current.get("status") == cond["status"] and current.get("reason") == cond["reason"]:
        return
    if current and current.get("status") == cond["status"]:
        cond["lastTransitionTime"] = current.get("lastTransitionTime")
    status["conditions"] = [c for c in conditions if c.get("type") != cond["type"]] + [cond]


def _new_condition(kind: str, status: str, reason: str, message: str, now: datetime.datetime) -> Obj:
    return {"type": kind, "status": status, "lastUpdateTime": _stamp(now), "lastTransitionTime": _stamp(now),
            "reason": reason, "message": message}  # fmt: skip


def _same_status(a: Obj, b: Obj) -> bool:
    """Statuses equal as the API stores them (absent integers are 0)."""
    return {k: v for k, v in a.items() if v not in (0, None, [], "")} == {
        k: v for k, v in b.items() if v not in (0, None, [], "")
    }


class Deployments:
    """pkg/controller/deployment: ReplicaSets for a Deployment's templates, scaled by its strategy."""

    def __init__(self, writer: Writer) -> None:
        self.w = writer

    def sync(self, d: Obj, snap: Snapshot, now: datetime.datetime) -> None:
        spec = _deployment_spec(d)
        if spec.get("selector") in (None, {}):
            return
        namespace = d["metadata"]["namespace"]
        owned = [rs for rs in snap.replicasets_in(namespace) if _controlled_by(rs, d)]
        work = Rollout(copy.deepcopy(d), spec, snap, now, [rs["metadata"]["uid"] for rs in owned])
        for rs in owned:
            pods = [p for p in snap.pods_in(namespace) if _controlled_by(p, rs)]
            work.pods_by_rs[rs["metadata"]["uid"]] = [p for p in pods if _matches(spec["selector"], _labels(p))]
        with contextlib.suppress(Retry):
            self._sync(work)

    def _sync(self, work: Rollout) -> None:
        if _terminating(work.d):
            new, old = self._all(work, create=False)
            return self._write_status(work, [*old, new], new)
        self._check_paused(work)
        if work.spec.get("paused") or self._scaling_event(work):
            return self._scale_only(work)
        if work.spec["strategy"]["type"] == "Recreate":
            return self._recreate(work)
        return self._rolling(work)

    # -- the deployment's own writes

    def _update_status(self, work: Rollout, why: str) -> None:
        work.d = self.w.update_status(kube.DEPLOYMENTS, work.d, why)

    def _update_rs(self, work: Rollout, rs: Obj, why: str) -> Obj:
        updated = self.w.update(REPLICASETS, rs, why)
        work.snap.replicasets[updated["metadata"]["uid"]] = updated
        return updated

    # -- new and old ReplicaSets (getAllReplicaSetsAndSyncRevision)

    def _all(self, work: Rollout, create: bool) -> tuple[Obj | None, list[Obj]]:
        existing = _find_new(work.spec, work.all())
        old = [rs for rs in work.all() if rs is not existing]
        return self._new(work, existing, old, create), old

    def _new(self, work: Rollout, existing: Obj | None, old: list[Obj], create: bool) -> Obj | None:
        """getNewReplicaSet: sync the new ReplicaSet's annotations and the revision, or create it."""
        revision = str(max((r for r in map(_rs_revision, old) if r is not None), default=0) + 1)
        if existing is not None:
            rs = copy.deepcopy(existing)
            changed = self._new_rs_annotations(work, rs, revision, exists=True)
            if changed or (rs["spec"].get("minReadySeconds") or 0) != work.spec["minReadySeconds"]:
                rs["spec"]["minReadySeconds"] = work.spec["minReadySeconds"]
                return self._update_rs(work, rs, f"Deployment {work.name}: annotations and minReadySeconds")
            needs = self._set_revision(work, _annotations(rs).get(REVISION, ""))
            if self._has_deadline(work) and _condition(work.d, "Progressing") is None:
                message = f'Found new replica set "{rs["metadata"]["name"]}"'
                cond = _new_condition("Progressing", "True", "FoundNewReplicaSet", message, work.now)
                _set_condition(work.status(), cond)
                needs = True
            if needs:
                self._update_status(work, f"revision {_annotations(work.d).get(REVISION)}")
            return existing
        return self._create(work, old, revision) if create else None

    def _create(self, work: Rollout, old: list[Obj], revision: str) -> Obj:
        d, spec = work.d, work.spec
        template_hash = pod_template_hash(spec["template"], (d.get("status") or {}).get("collisionCount"))
        template = copy.deepcopy(spec["template"])
        template.setdefault("metadata", {})["labels"] = {**(template["metadata"].get("labels") or {}),
                                                         TEMPLATE_HASH_LABEL: template_hash}  # fmt: skip
        selector = copy.deepcopy(spec["selector"])
        selector["matchLabels"] = {**(selector.get("matchLabels") or {}), TEMPLATE_HASH_LABEL: template_hash}
        rs: Obj = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
                   "metadata": {"name": f"{work.name}-{template_hash}", "namespace": d["metadata"]["namespace"],
                                "ownerReferences": [_controller_ref(d)], "labels": template["metadata"]["labels"]},
                   "spec": {"replicas": 0, "minReadySeconds": spec["minReadySeconds"], "selector": selector,
                            "template": template}}  # fmt: skip
        rs["spec"]["replicas"] = self._new_rs_replicas(work, [*old, rs], rs)
        self._new_rs_annotations(work, rs, revision, exists=False)
        try:
            created, already = self.w.create(REPLICASETS, rs, f"Deployment {work.name}: revision {revision}"), False
        except Retry as err:
            if err.status != 409:
                raise
            created, already = self._collision(work, rs), True
        work.snap.replicasets[created["metadata"]["uid"]] = created
        if created["metadata"]["uid"] not in work.rs_uids:
            work.rs_uids.append(created["metadata"]["uid"])
        needs = self._set_revision(work, revision)
        if not already and self._has_deadline(work):
            message = f'Created new replica set "{created["metadata"]["name"]}"'
            _set_condition(
                work.status(), _new_condition("Progressing", "True", "NewReplicaSetCreated", message, work.now)
            )
            needs = True
        if needs:
            self._update_status(work, f"revision {revision}, {created['metadata']['name']}")
        return created

    def _collision(self, work: Rollout, rs: Obj) -> Obj:
        """A ReplicaSet of that name exists: ours for this template, or a hash collision to count."""
        found = self.w.client.get(REPLICASETS, rs["metadata"]["namespace"], rs["metadata"]["name"])
        if (
            found
            and _controlled_by(found, work.d)
            and _equal_ignore_hash(work.spec["template"], found["spec"]["template"])
        ):
            found.setdefault("kind", "ReplicaSet")
            found.setdefault("apiVersion", "apps/v1")
            return found
        work.status()["collisionCount"] = (work.status().get("collisionCount") or 0) + 1
        self._update_status(work, f"hash collision on {rs['metadata']['name']}")
        raise Retry(f"hash collision on {rs['metadata']['name']}")

    def _set_revision(self, work: Rollout, revision: str) -> bool:
        annotations = work.d["metadata"].setdefault("annotations", {})
        if annotations.get(REVISION) == revision:
            return False
        annotations[REVISION] = revision
        return True

    def _new_rs_annotations(self, work: Rollout, rs: Obj, revision: str, exists: bool) -> bool:
        """SetNewReplicaSetAnnotations: the deployment's annotations, the revision and its history."""
        annotations = rs["metadata"].setdefault("annotations", {})
        changed = False
        for key, value in _annotations(work.d).items():
            if key not in SKIPPED_ANNOTATIONS and annotations.get(key) != value:
                annotations[key], changed = value, True
        old = annotations.get(REVISION, "")
        try:
            old_number = int(old) if old else 0
        except ValueError:
            return False
        if old_number < int(revision):
            annotations[REVISION], changed = revision, True
            if old:
                history = [h for h in annotations.get(REVISION_HISTORY, "").split(",") if h] + [old]
                while len(",".join(history)) > MAX_REVISION_HISTORY_CHARS and len(history) > 1:
                    history.pop(0)
                annotations[REVISION_HISTORY] = ",".join(history)
        if not exists:
            changed = self._replicas_annotations(work, rs) or changed
        return changed

    def _replicas_annotations(self, work: Rollout, rs: Obj) -> bool:
        """SetReplicasAnnotations: desired and max (desired + surge) replicas at the last scaling."""
        annotations = rs["metadata"].setdefault("annotations", {})
        wanted = {DESIRED_REPLICAS: str(work.replicas), MAX_REPLICAS: str(work.replicas + _max_surge(work.spec))}
        if all(annotations.get(k) == v for k, v in wanted.items()):
            return False
        annotations.update(wanted)
        return True

    def _has_deadline(self, work: Rollout) -> bool:
        return work.spec["progressDeadlineSeconds"] != NO_DEADLINE

    # -- scaling

    def _scale_rs(self, work: Rollout, rs: Obj, size: int, only_if_different: bool = True) -> bool:
        """scaleReplicaSet(AndRecordEvent): the new size and the replicas annotations in one update."""
        rs = work.fresh(rs) or rs
        if only_if_different and _replicas(rs) == size:
            return False
        resize = _replicas(rs) != size
        copy_ = copy.deepcopy(rs)
        if not (self._replicas_annotations(work, copy_) or resize):
            return False
        old = _replicas(rs)
        copy_["spec"]["replicas"] = size
        self._update_rs(work, copy_, f"Deployment {work.name}: scale {rs['metadata']['name']} {old} -> {size}")
        return resize

    def _new_rs_replicas(self, work: Rollout, all_rs: list[Obj], new: Obj) -> int:
        """NewRSNewReplicas: how far the new ReplicaSet may grow now."""
        if not work.rolling:
            return work.replicas
        surge = _scaled(work.spec["strategy"]["rollingUpdate"].get("maxSurge"), work.replicas, True, 0)
        current = _sum(all_rs, _replicas)
        if current >= work.replicas + surge:
            return _replicas(new)
        return _replicas(new) + min(work.replicas + surge - current, work.replicas - _replicas(new))

    def _scaling_event(self, work: Rollout) -> bool:
        """isScalingEvent: an active ReplicaSet was last sized for another replica count."""
        new, old = self._all(work, create=False)
        for rs in _active_rs([*old, new]):
            desired = _annotations(rs).get(DESIRED_REPLICAS)
            if desired is not None and desired.isdigit() and int(desired) != work.replicas:
                return True
        return False

    def _scale_only(self, work: Rollout) -> None:
        """sync: scale (proportionally while rolling), clean up a paused deployment, write the status."""
        new, old = self._all(work, create=False)
        self._scale(work, new, old)
        new, old = work.fresh(new), [work.fresh(rs) or rs for rs in old]
        if work.spec.get("paused"):
            self._cleanup(work, old)
        self._write_status(work, [*old, new], new)

    def _scale(self, work: Rollout, new: Obj | None, old: list[Obj]) -> None:
        latest = self._active_or_latest(new, old)
        if latest is not None:
            self._scale_rs(work, latest, work.replicas)
            return
        if new is not None and self._saturated(work, new):
            for rs in _active_rs(old):
                self._scale_rs(work, rs, 0)
            return
        if work.rolling:
            self._scale_proportionally(work, _active_rs([*old, new]))

    @staticmethod
    def _active_or_latest(new: Obj | None, old: list[Obj]) -> Obj | None:
        if new is None and not old:
            return None
        newest_first = sorted(old, key=_by_creation, reverse=True)
        active = _active_rs([*newest_first, new])
        if len(active) == 1:
            return active[0]
        if not active:
            return new if new is not None else newest_first[0]
        return None

    def _saturated(self, work: Rollout, rs: Obj) -> bool:
        desired = _annotations(rs).get(DESIRED_REPLICAS, "")
        return (desired.isdigit() and int(desired) == work.replicas == _replicas(rs)
                and _status(rs, "availableReplicas") == work.replicas)  # fmt: skip

    def _scale_proportionally(self, work: Rollout, active: list[Obj]) -> None:
        """The extra (or missing) replicas spread over the active ReplicaSets by size, leftovers to the largest."""
        allowed = work.replicas + _max_surge(work.spec) if work.replicas > 0 else 0
        to_add = allowed - _sum(active, _replicas)
        ordered = sorted(active, key=_by_creation, reverse=to_add > 0)  # ties: newer first up, older first down
        ordered.sort(key=lambda rs: -_replicas(rs))
        added, sizes = 0, {}
        for rs in ordered:
            proportion = self._proportion(work, rs, to_add, added) if to_add else 0
            sizes[rs["metadata"]["uid"]] = _replicas(rs) + proportion
            added += proportion
        for index, rs in enumerate(ordered):
            uid = rs["metadata"]["uid"]
            if index == 0 and to_add:
                sizes[uid] = max(0, sizes[uid] + to_add - added)
            self._scale_rs(work, rs, sizes[uid], only_if_different=False)

    def _proportion(self, work: Rollout, rs: Obj, to_add: int, added: int) -> int:
        """GetReplicaSetProportion."""
        if _replicas(rs) == 0 or to_add == added:
            return 0
        if work.replicas == 0:
            fraction = -_replicas(rs)
        else:
            before = _annotations(rs).get(MAX_REPLICAS, "")
            base = int(before) if before.isdigit() and int(before) else _status(work.d, "replicas")
            if base == 0:
                fraction = work.replicas
            else:
                maximum = work.replicas + _max_surge(work.spec)
                fraction = int(_replicas(rs) * maximum / base + 0.5) - _replicas(rs)
        allowed = to_add - added
        return min(fraction, allowed) if to_add > 0 else max(fraction, allowed)

    # -- strategies

    def _rolling(self, work: Rollout) -> None:
        """rolloutRolling: grow the new ReplicaSet within maxSurge, shrink the old within maxUnavailable."""
        new, old = self._all(work, create=True)
        assert new is not None
        if self._reconcile_new(work, new):
            return self._rollout_status(work, new)
        if self._reconcile_old(work, new):
            return self._rollout_status(work, new)
        if self._complete(work, work.d.get("status") or {}):
            self._cleanup(work, [work.fresh(rs) or rs for rs in old])
        return self._rollout_status(work, new)

    def _reconcile_new(self, work: Rollout, new: Obj) -> bool:
        if _replicas(new) == work.replicas:
            return False
        if _replicas(new) > work.replicas:
            return self._scale_rs(work, new, work.replicas)
        return self._scale_rs(work, new, self._new_rs_replicas(work, work.all(), new))

    def _reconcile_old(self, work: Rollout, new: Obj) -> bool:
        """reconcileOldReplicaSets: unhealthy old replicas first, then as many as availability allows."""
        new = work.fresh(new) or new
        old = [rs for rs in work.all() if rs["metadata"]["uid"] != new["metadata"]["uid"]]
        if _sum(old, _replicas) == 0:
            return False
        min_available = work.replicas - _max_unavailable(work.spec)
        new_unavailable = _replicas(new) - _status(new, "availableReplicas")
        room = _sum(work.all(), _replicas) - min_available - new_unavailable
        if room <= 0:
            return False
        active_old = [rs["metadata"]["uid"] for rs in _active_rs(old)]
        cleaned = 0
        for rs in sorted(_active_rs(old), key=_by_creation):
            if cleaned >= room:
                break
            unhealthy = _replicas(rs) - _status(rs, "availableReplicas")
            if unhealthy <= 0:
                continue
            count = min(room - cleaned, unhealthy)
            self._scale_rs(work, rs, _replicas(rs) - count)
            cleaned += count
        return cleaned + self._scale_down_old(work, new, active_old) > 0

    def _scale_down_old(self, work: Rollout, new: Obj, active_old: list[str]) -> int:
        """scaleDownOldReplicaSetsForRollingUpdate over the old ReplicaSets active when the pass began."""
        old = [work.snap.replicasets[uid] for uid in active_old if uid in work.snap.replicasets]
        min_available = work.replicas - _max_unavailable(work.spec)
        available = _sum([*old, new], lambda rs: _status(rs, "availableReplicas"))
        if available <= min_available:
            return 0
        total, goal = 0, available - min_available
        for rs in sorted(old, key=_by_creation):
            if total >= goal:
                break
            if _replicas(rs) == 0:
                continue
            count = min(_replicas(rs), goal - total)
            self._scale_rs(work, rs, _replicas(rs) - count)
            total += count
        return total

    def _recreate(self, work: Rollout) -> None:
        """rolloutRecreate: every old pod gone before the new ReplicaSet is created and scaled up."""
        new, old = self._all(work, create=False)
        scaled = False
        for rs in _active_rs(old):
            scaled = self._scale_rs(work, rs, 0) or scaled
        if scaled:
            return self._rollout_status(work, new)
        if self._old_pods_running(work, new, [work.fresh(rs) or rs for rs in old]):
            return self._rollout_status(work, new)
        if new is None:
            new, old = self._all(work, create=True)
            assert new is not None
        self._scale_rs(work, new, work.replicas)
        if self._complete(work, work.d.get("status") or {}):
            self._cleanup(work, [work.fresh(rs) or rs for rs in old])
        return self._rollout_status(work, new)

    def _old_pods_running(self, work: Rollout, new: Obj | None, old: list[Obj]) -> bool:
        if _sum(old, lambda rs: _status(rs, "replicas")) > 0:
            return True
        new_uid = new["metadata"]["uid"] if new else None
        return any(_phase(p) not in TERMINAL for uid, pods in work.pods_by_rs.items() if uid != new_uid for p in pods)

    def _cleanup(self, work: Rollout, old: list[Obj]) -> None:
        """cleanupDeployment: delete the oldest empty ReplicaSets beyond revisionHistoryLimit."""
        alive = [rs for rs in old if not _terminating(rs)]
        excess = len(alive) - work.spec["revisionHistoryLimit"]
        if excess <= 0:
            return
        alive.sort(key=lambda rs: (_rs_revision(rs) or 0, *_by_creation(rs)))
        for rs in alive[:excess]:
            if (
                _status(rs, "replicas")
                or _replicas(rs)
                or rs["metadata"].get("generation", 0) > _status(rs, "observedGeneration")
            ):
                continue
            self.w.delete(
                REPLICASETS,
                rs,
                f"Deployment {work.name}: beyond revisionHistoryLimit {work.spec['revisionHistoryLimit']}",
            )

    # -- status

    def _complete(self, work: Rollout, status: Obj) -> bool:
        """DeploymentComplete."""
        return (all((status.get(k) or 0) == work.replicas for k in ("updatedReplicas", "replicas", "availableReplicas"))
                and (status.get("observedGeneration") or 0) >= work.d["metadata"].get("generation", 0))  # fmt: skip

    def _calculate(self, work: Rollout, all_rs: Sequence[Obj | None], new: Obj | None) -> Obj:
        """calculateStatus: the counts over the ReplicaSets, and Available against maxUnavailable."""
        all_rs = [work.fresh(rs) for rs in all_rs if rs is not None]
        new = work.fresh(new)
        available = _sum(all_rs, lambda rs: _status(rs, "availableReplicas"))
        old = work.d.get("status") or {}
        status: Obj = {"observedGeneration": work.d["metadata"].get("generation", 0),
                       "replicas": _sum(all_rs, lambda rs: _status(rs, "replicas")),
                       "updatedReplicas": _status(new, "replicas"),
                       "readyReplicas": _sum(all_rs, lambda rs: _status(rs, "readyReplicas")),
                       "availableReplicas": available,
                       "unavailableReplicas": max(0, _sum(all_rs, _replicas) - available)}  # fmt: skip
        if all("terminatingReplicas" in (rs.get("status") or {}) for rs in all_rs if rs):
            status["terminatingReplicas"] = _sum(all_rs, lambda rs: _status(rs, "terminatingReplicas"))
        if old.get("collisionCount") is not None:
            status["collisionCount"] = old["collisionCount"]
        status["conditions"] = copy.deepcopy(old.get("conditions") or [])
        if available >= work.replicas - _max_unavailable(work.spec):
            cond = _new_condition(
                "Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.", work.now
            )
        else:
            cond = _new_condition("Available", "False", "MinimumReplicasUnavailable",
                                  "Deployment does not have minimum availability.", work.now)  # fmt: skip
        _set_condition(status, cond)
        return status

    def _write_status(self, work: Rollout, all_rs: Sequence[Obj | None], new: Obj | None) -> None:
        """syncDeploymentStatus: write when anything differs."""
        status = self._calculate(work, all_rs, new)
        if not _same_status(work.d.get("status") or {}, status):
            work.d["status"] = status
            self._update_status(work, self._summary(work, status))

    def _rollout_status(self, work: Rollout, new: Obj | None) -> None:
        """syncRolloutStatus: the counts, then Progressing (complete, progressing, or timed out)."""
        status = self._calculate(work, work.all(), new)
        new = work.fresh(new)
        rs_name = f'ReplicaSet "{new["metadata"]["name"]}"' if new else f'Deployment "{work.name}"'
        if not self._has_deadline(work):
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Progressing"]
        current = _condition(work.d, "Progressing")
        complete = (status["replicas"] == status["updatedReplicas"] and current is not None
                    and current.get("reason") == "NewReplicaSetAvailable")  # fmt: skip
        if self._has_deadline(work) and not complete:
            if self._complete(work, status):
                message = f"{rs_name} has successfully progressed."
                _set_condition(
                    status, _new_condition("Progressing", "True", "NewReplicaSetAvailable", message, work.now)
                )
            elif self._progressing(work, status):
                cond = _new_condition(
                    "Progressing", "True", "ReplicaSetUpdated", f"{rs_name} is progressing.", work.now
                )
                if current is not None:
                    if current.get("status") == "True":
                        cond["lastTransitionTime"] = current.get("lastTransitionTime")
                    status["conditions"] = [c for c in status["conditions"] if c.get("type") != "Progressing"]
                _set_condition(status, cond)
            elif self._timed_out(work, status):
                message = f"{rs_name} has timed out progressing."
                _set_condition(
                    status, _new_condition("Progressing", "False", "ProgressDeadlineExceeded", message, work.now)
                )
        if failure := self._replica_failure(work, new):
            _set_condition(status, failure)
        else:
            status["conditions"] = [c for c in status["conditions"] if c.get("type") != "ReplicaFailure"]
        if not _same_status(work.d.get("status") or {}, status):
            work.d["status"] = status
            self._update_status(work, self._summary(work, status))

    @staticmethod
    def _replica_failure(work: Rollout, new: Obj | None) -> Obj | None:
        """getReplicaFailures: the new ReplicaSet's ReplicaFailure condition first, else an old one's."""

        def failures(rs: Obj) -> list[Obj]:
            return [c for c in (rs.get("status") or {}).get("conditions") or [] if c.get("type") == "ReplicaFailure"]

        found = failures(new) if new is not None else []
        found = found or [c for rs in work.all() for c in failures(rs)]
        if not found:
            return None
        cond = found[0]
        since = cond.get("lastTransitionTime")
        return {"type": "ReplicaFailure", "status": cond.get("status"), "lastUpdateTime": since,
                "lastTransitionTime": since, "reason": cond.get("reason"), "message": cond.get("message")}  # fmt: skip

    @staticmethod
    def _summary(work: Rollout, status: Obj) -> str:
        conditions = ", ".join(f"{c['type']}={c['status']} ({c.get('reason')})" for c in status.get("conditions") or [])
        return (f"{status['readyReplicas']}/{work.replicas} ready, {status['updatedReplicas']} updated, "
                f"{status['availableReplicas']} available; {conditions}")  # fmt: skip

    def _progressing(self, work: Rollout, status: Obj) -> bool:
        """DeploymentProgressing: more updated, ready or available pods, or fewer old ones, than last time."""
        old = work.d.get("status") or {}

        def get(source: Obj, key: str) -> int:
            return source.get(key) or 0

        old_pods, old_pods_before = (get(status, "replicas") - get(status, "updatedReplicas"),
                                     get(old, "replicas") - get(old, "updatedReplicas"))  # fmt: skip
        return (get(status, "updatedReplicas") > get(old, "updatedReplicas") or old_pods < old_pods_before
                or get(status, "readyReplicas") > get(old, "readyReplicas")
                or get(status, "availableReplicas") > get(old, "availableReplicas"))  # fmt: skip

    def _timed_out(self, work: Rollout, status: Obj) -> bool:
        cond = next((c for c in status["conditions"] if c.get("type") == "Progressing"), None)
        if cond is None or cond.get("reason") == "NewReplicaSetAvailable":
            return False
        if cond.get("reason") == "ProgressDeadlineExceeded":
            return True
        since = _time(cond.get("lastUpdateTime"))
        return since is not None and since + datetime.timedelta(seconds=work.spec["progressDeadlineSeconds"]) < work.now

    def _check_paused(self, work: Rollout) -> None:
        """checkPausedConditions: Progressing Unknown while paused, and once resumed."""
        if not self._has_deadline(work):
            return
        cond = _condition(work.d, "Progressing")
        if cond is not None and cond.get("reason") == "ProgressDeadlineExceeded":
            return
        paused_shown = cond is not None and cond.get("reason") == "DeploymentPaused"
        if work.spec.get("paused") and not paused_shown:
            reason, message = "DeploymentPaused", "Deployment is paused"
        elif not work.spec.get("paused") and paused_shown:
            reason, message = "DeploymentResumed", "Deployment is resumed"
        else:
            return
        _set_condition(work.status(), _new_condition("Progressing", "Unknown", reason, message, work.now))
        self._update_status(work, message)


# ---------------------------------------------------------------- claims


class ClaimBinder:
    """The PV controller's part we need: a Pending claim becomes Bound to what it asked for.

    There are no PersistentVolumes: the kubelet stand-in keeps a directory per claim.
    """

    def __init__(self, writer: Writer) -> None:
        self.w = writer

    def sync(self, claim: Obj) -> None:
        if _terminating(claim) or _phase(claim) not in ("", "Pending"):
            return
        spec = claim.get("spec") or {}
        status: Obj = {"phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"]}
        if storage := ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            status["capacity"] = {"storage": storage}
        bound = copy.deepcopy(claim)
        bound["status"] = {**(claim.get("status") or {}), **status}
        with contextlib.suppress(Retry):
            self.w.update_status(kube.PVCS, bound, f"bound: {storage or 'no size'} {','.join(status['accessModes'])}")


# ---------------------------------------------------------------- the loop


class DefaultServiceAccounts:
    """kube-controller-manager's serviceaccounts controller: a `default` ServiceAccount in every active namespace."""

    def __init__(self, writer: Writer) -> None:
        self._writer = writer

    def sync(self, client: kube.Client) -> None:
        have = {
            sa["metadata"]["namespace"]
            for sa in client.list(kube.SERVICEACCOUNTS)
            if sa["metadata"]["name"] == "default"
        }
        for ns in client.list(kube.NAMESPACES):
            name = ns["metadata"]["name"]
            if name not in have and not _terminating(ns) and (ns.get("status") or {}).get("phase") != "Terminating":
                body = {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": name},
                }
                with contextlib.suppress(Retry):  # logged by the writer; the next pass tries again
                    self._writer.create(kube.SERVICEACCOUNTS, body, f"namespace {name} has no default ServiceAccount")


class Workloads:
    """The workload controllers of kube-controller-manager, for the cluster lab (see the module docstring)."""

    def __init__(self, client: kube.Client, log: logging.Logger | None = None, interval: float = 0.5,
                 namespace: str | None = None) -> None:  # fmt: skip
        """`namespace`: manage that one only (a test's own instance); by default every namespace not
        labelled PRIVATE_LABEL=private (so that a test's instance and the lab's never manage the same objects).
        """
        self.client = client
        self.log = log or logging.getLogger("lab.workloads")
        self.interval = interval
        self.namespace = namespace
        self._writer = Writer(client, self.log)
        self._sets = StatefulSets(self._writer)
        self._deployments = Deployments(self._writer)
        self._replicasets = ReplicaSets(self._writer)
        self._claims = ClaimBinder(self._writer)
        self._accounts = DefaultServiceAccounts(self._writer)
        self._last_error: dict[str, str] = {}

    def run(self, stop: threading.Event) -> None:
        """Sync every `interval` seconds until `stop`; an unreachable server is retried, not fatal."""
        while not stop.is_set():
            try:
                self.sync_once()
                self._report("server", None)
            except (kube.ApiError, requests.RequestException) as err:
                self._report("server", f"cannot list from the API server: {err}")
            except Exception as err:  # a bug: logged (once), and the lab keeps its controllers
                if self._last_error.get("bug") != repr(err):
                    self.log.exception("a pass failed")
                self._last_error["bug"] = repr(err)
            stop.wait(self.interval)

    def sync_once(self) -> None:
        """One pass: StatefulSets, Deployments, then ReplicaSets (seeing this pass's scaling), then claims."""
        snap, now = Snapshot.load(self.client, self.namespace), _now()
        for sts in snap.statefulsets:
            self._guard(sts, lambda o: self._sets.sync(o, snap, now))
        for d in snap.deployments:
            self._guard(d, lambda o: self._deployments.sync(o, snap, now))
        for uid in list(snap.replicasets):
            self._guard(snap.replicasets[uid], lambda o: self._replicasets.sync(o, snap, now))
        for claim in list(snap.claims.values()):
            self._guard(claim, self._claims.sync)
        if self.namespace is None:  # the lab's own instance; a test's runs in one namespace it made
            self._accounts.sync(self.client)
        self._sets.forget_all_but({s["metadata"]["uid"] for s in snap.statefulsets})

    def stats(self) -> dict[str, int]:
        """Write requests sent so far, by verb and kind ("create Pod": 3), refused ones included."""
        return self._writer.stats()

    def _guard(self, obj: Obj, sync: Callable[[Obj], None]) -> None:
        """One object's sync; a spec we cannot read is logged once (until it changes), not fatal."""
        name = f"{obj.get('kind')} {_key(obj)}"
        try:
            sync(obj)
            self._report(name, None)
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            self._report(name, f"{name}: cannot sync: {type(err).__name__}: {err}")

    def _report(self, key: str, message: str | None) -> None:
        if message is None:
            self._last_error.pop(key, None)
        elif self._last_error.get(key) != message:
            self._last_error[key] = message
            self.log.warning("%s", message)

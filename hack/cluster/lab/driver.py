"""The cluster lab's stand-in for Metacontroller 4.17.2: drives every Composite- and DecoratorController.

It reads the same `metacontroller.k8s.io/v1alpha1` CompositeController and DecoratorController objects a real
Metacontroller would, so the lab can swap this driver for the real binary with the same manifests. Modelled on
Metacontroller's `pkg/controller/composite` (controller.go, hooks.go), `pkg/controller/decorator` (controller.go,
hooks.go, selector.go, metacontroller.go), `pkg/controller/common` (manage_children.go, finalizer, customize) and
`pkg/hooks` (webhook.go), read at v4.17.2; children are written through the project's own model of its apply
(`tests/support/metacontroller_apply.py`), so what the lab writes is what the suite predicts.

One sync of a composite's parent, in Metacontroller's order: the parent's finalizer (added when there is a
finalize hook), its children claimed (owned by its uid and matching its selector; matching orphans adopted,
owned misfits released), customize (cached per parent uid and generation) and the related objects its rules
select, the v2 sync (or finalize) request, the finalizer removed on `finalized`, children deleted / created /
updated per each type's updateStrategy, and the status written through `/status` with `observedGeneration`
when it differs.

A decorator's objects are those of its `spec.resources` that its labelSelector and annotationSelector match
(keyed by group and kind: a later rule for the same kind replaces an earlier one), plus any object still
carrying its finalizer `metacontroller.io/decoratorcontroller-<name>`. One sync: finalizer.SyncObject (added
when there is a finalize hook and the object is not being deleted, removed when there is none), customize and
related objects as for composites, then the finalize hook for an object being deleted or no longer selected
(the sync hook otherwise) with `{controller, object, attachments, related, finalizing}`, and the answer's
labels and annotations (null removes a key), status (null keeps it) and, on `finalized`, the finalizer's
removal written in one update of the version synced (status first through `/status` when the type has one; a
conflict or a gone object is left to the next sync). Metacontroller restarts a decorator only when its spec
changes, and keeps sending the object it started with as `controller`: so does the driver, which then syncs
every object anew (a new informer lists them all).

Instead of informers, every pass (1 s) lists each resource it needs once. A parent is synced when what its
sync would read changed (resourceVersions of the parent, its children and its related objects: the events
Metacontroller reacts to), when a resync it asked for (`resyncAfterSeconds`), its `resyncPeriodSeconds` or a
retry after a failure is due. Nothing changed means no hook call and no write.

Not modelled (none is used by the project's manifests): Rolling* update methods (treated as their plain
method), v1 hooks, server-side apply, ETags, TLS to hooks, and a decorator's attachments (`spec.attachments`
is refused as configuration, attachments in an answer fail the sync; the request's `attachments` is `{}`).
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from functools import partial
from typing import Any, ClassVar
from urllib.parse import urlsplit

import requests

from lab import kube
from tests.support import metacontroller_apply as apply

Obj = dict[str, Any]
ObjectMap = dict[str, dict[str, Obj]]  # {"Kind.apiVersion": {"ns/name" or "name": object}}
ServiceResolver = Callable[[str, str, int], "tuple[str, int] | None"]  # (namespace, name, port) -> (address, port)

METACONTROLLER = "metacontroller.k8s.io/v1alpha1"
COMPOSITES = kube.Resource(METACONTROLLER, "compositecontrollers")
DECORATORS = kube.Resource(METACONTROLLER, "decoratorcontrollers")
GC_FINALIZERS = ("foregroundDeletion", "orphan")  # the GC owns the children then: no managing them
DEFAULT_RESYNC = 30 * 60.0  # no resyncPeriodSeconds: parents still resync on the 30m informer relist
DEFAULT_HOOK_TIMEOUT = 10.0  # webhook.go: no (or a non-positive) timeout
CUSTOMIZE_TTL = 20 * 60.0  # customize answers are cached per (uid, generation) for 20 minutes
DISCOVERY_TTL = 20.0  # Metacontroller's --discovery-interval
MAX_BACKOFF = 60.0
PRIVATE = "lab.slinky.slurm.net/private-driver"  # a controller only a Driver naming it in `only` drives
CONFLICT_TRIES = 4  # client-go retry.DefaultBackoff: 4 steps from 10 ms, factor 5
METHODS = {"": "OnDelete", "OnDelete": "OnDelete", "InPlace": "InPlace", "Recreate": "Recreate",
           "RollingInPlace": "InPlace", "RollingRecreate": "Recreate"}  # fmt: skip
SYNC_FIELDS = frozenset({"status", "children", "resyncAfterSeconds", "finalized"})
DECORATE_FIELDS = frozenset({"labels", "annotations", "status", "attachments", "resyncAfterSeconds", "finalized"})
RULE_FIELDS = frozenset({"apiVersion", "resource", "labelSelector", "namespaceSelector", "namespace", "names"})


class DriverError(Exception):
    """A sync that could not finish: logged in one line, retried with backoff."""


class ConfigError(DriverError):
    """A controller this driver cannot drive (its parents are left alone)."""


class HookError(DriverError):
    """A hook that did not answer 200 with a well-formed body: nothing is written for the parent."""


class TooManyRequests(DriverError):
    """A hook's 429: Metacontroller retries after Retry-After, without counting it as a failure."""

    def __init__(self, after: float) -> None:
        super().__init__(f"429, retry after {after}s")
        self.after = after


# --- small pure helpers ---------------------------------------------------------------------------


def go_duration(text: str) -> float:
    """Seconds in a Go duration ("5s", "1m30s", "250ms"), as metav1.Duration reads webhook.timeout."""
    body = text.lstrip("+-")
    sign = -1.0 if text.startswith("-") else 1.0
    if body == "0":
        return 0.0
    total, pos = 0.0, 0
    for match in _DURATION.finditer(body):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not body or pos != len(body):
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector(selector).Matches(labels); nil or empty selects everything."""
    if not selector:
        return True
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(_expression_matches(expr, labels) for expr in selector.get("matchExpressions") or [])


def _expression_matches(expr: Obj, labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    raise DriverError(f"label selector operator {op!r} is not one of In, NotIn, Exists, DoesNotExist")


def meta(obj: Obj) -> Obj:
    return obj.get("metadata") or {}


def labels_of(obj: Obj) -> dict[str, str]:
    return meta(obj).get("labels") or {}


def uniform_key(obj: Obj) -> str:
    """v2's object key: `namespace/name`, or `name` for a cluster-scoped object."""
    ns, name = meta(obj).get("namespace"), meta(obj).get("name", "")
    return f"{ns}/{name}" if ns else name


def type_key(obj: Obj) -> str:
    """Metacontroller's group key `Kind.apiVersion` ("Service.v1", "StatefulSet.apps/v1")."""
    return f"{obj.get('kind')}.{obj.get('apiVersion')}"


def describe(obj: Obj) -> str:
    return f"{obj.get('kind')} {uniform_key(obj)}"


def deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def controller_ref(obj: Obj) -> Obj | None:
    return next((ref for ref in meta(obj).get("ownerReferences") or [] if ref.get("controller")), None)


def api_group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def finalizers(obj: Obj) -> list[str]:
    return list(meta(obj).get("finalizers") or [])


def _gvk_order(key: str) -> tuple[str, str, str]:
    """GetAllGVKs order: group, version, kind."""
    kind, _, api_version = key.partition(".")
    group, _, version = api_version.rpartition("/")
    return group, version, kind


# --- discovery and configuration ------------------------------------------------------------------


@dataclass(frozen=True)
class ApiType:
    """A served resource as discovery describes it."""

    resource: kube.Resource
    kind: str
    namespaced: bool
    status: bool  # has a /status subresource

    @property
    def key(self) -> str:
        return f"{self.kind}.{self.resource.api_version}"


class Discovery:
    """Kind, scope and subresources of (apiVersion, plural), refreshed like Metacontroller's discovery."""

    def __init__(self, client: kube.Client) -> None:
        self._client = client
        self._cache: dict[str, tuple[float, dict[str, ApiType]]] = {}

    def lookup(self, api_version: str, plural: str) -> ApiType:
        at, served = self._cache.get(api_version, (-DISCOVERY_TTL - 1, {}))
        age = time.monotonic() - at
        if age > DISCOVERY_TTL or (plural not in served and age > 2):
            at, served = self._cache[api_version] = (time.monotonic(), self._fetch(api_version))
        found = served.get(plural)
        if found is None:
            raise ConfigError(f"the API server does not serve {plural} in {api_version}")
        return found

    def _fetch(self, api_version: str) -> dict[str, ApiType]:
        try:
            answer = self._client.request("GET", "/api/v1" if api_version == "v1" else f"/apis/{api_version}")
        except kube.ApiError as err:
            if err.status == 404:
                return {}
            raise
        listed = answer.get("resources") or []
        names = {r["name"] for r in listed}
        return {
            r["name"]: ApiType(kube.Resource(api_version, r["name"]), r["kind"], bool(r.get("namespaced")),
                               f"{r['name']}/status" in names)
            for r in listed if "/" not in r["name"]
        }  # fmt: skip


@dataclass(frozen=True)
class Hook:
    """One webhook: where, how long to wait, how strictly to read the answer, with which credential."""

    name: str
    url: str
    timeout: float
    strict: bool
    authorization: str | None
    service: tuple[str, str, int] | None = None  # (namespace, name, port) of a hook named by its Service

    @property
    def path(self) -> str:
        return urlsplit(self.url).path or "/"


@dataclass(frozen=True)
class ChildRule:
    api: ApiType
    method: str  # OnDelete, InPlace or Recreate


@dataclass(frozen=True)
class Controller(ABC):
    """What both kinds share: the object the driver started it from, its hooks, its resync period."""

    name: str
    obj: Obj
    sync: Hook | None
    customize: Hook | None
    finalize: Hook | None
    resync: float
    finalizer_prefix: ClassVar[str]

    @property
    def finalizer(self) -> str:
        return self.finalizer_prefix + self.name

    @property
    @abstractmethod
    def parents(self) -> tuple[ApiType, ...]:
        """The types whose objects it syncs."""

    @abstractmethod
    def selects(self, obj: Obj) -> bool:
        """Whether its selectors pick `obj` (an object they don't pick is synced only while it has our finalizer)."""

    @abstractmethod
    def ignores_status(self, obj: Obj) -> bool:
        """ignoreStatusChanges for `obj`'s type: a status-only change of a live object wakes no sync."""

    @abstractmethod
    def api_of(self, obj: Obj) -> ApiType:
        """The discovered type of `obj`, for writing it."""


@dataclass(frozen=True)
class Composite(Controller):
    """A parsed CompositeController."""

    parent: ApiType
    children: tuple[ChildRule, ...]
    generate_selector: bool
    parent_selector: Obj | None
    ignore_status: bool
    finalizer_prefix: ClassVar[str] = "metacontroller.io/compositecontroller-"

    @property
    def parents(self) -> tuple[ApiType, ...]:
        return (self.parent,)

    def selects(self, obj: Obj) -> bool:
        return selector_matches(self.parent_selector, labels_of(obj))

    def ignores_status(self, obj: Obj) -> bool:
        return self.ignore_status

    def api_of(self, obj: Obj) -> ApiType:
        return self.parent

    def rule_for(self, key: str) -> ChildRule | None:
        return next((rule for rule in self.children if rule.api.key == key), None)

    def method(self, api_version: str, kind: str) -> str:
        """updateStrategy by API group and kind, any version (makeUpdateStrategyMap)."""
        for rule in self.children:
            if api_group(rule.api.resource.api_version) == api_group(api_version) and rule.api.kind == kind:
                return rule.method
        return "OnDelete"


@dataclass(frozen=True)
class ParentRule:
    """One of a DecoratorController's spec.resources: the type, and what selects its objects."""

    api: ApiType
    labels: Obj | None
    annotations: Obj | None  # annotationSelector as the label selector Metacontroller makes of it
    ignore_status: bool

    def matches(self, obj: Obj) -> bool:
        """Both selectors (decoratorSelector.Matches); an absent one selects everything."""
        annotations = meta(obj).get("annotations") or {}
        return selector_matches(self.labels, labels_of(obj)) and selector_matches(self.annotations, annotations)


@dataclass(frozen=True)
class Decorator(Controller):
    """A parsed DecoratorController: one rule per group and kind of its spec.resources."""

    rules: tuple[ParentRule, ...]
    finalizer_prefix: ClassVar[str] = "metacontroller.io/decoratorcontroller-"

    @property
    def parents(self) -> tuple[ApiType, ...]:
        return tuple(rule.api for rule in self.rules)

    def rule_of(self, obj: Obj) -> ParentRule | None:
        """The rule for `obj`'s group and kind, any version."""
        group, kind = api_group(obj.get("apiVersion", "")), obj.get("kind")
        return next((r for r in self.rules if api_group(r.api.resource.api_version) == group and r.api.kind == kind),
                    None)  # fmt: skip

    def selects(self, obj: Obj) -> bool:
        rule = self.rule_of(obj)
        return rule is not None and rule.matches(obj)

    def ignores_status(self, obj: Obj) -> bool:
        rule = self.rule_of(obj)
        return rule is not None and rule.ignore_status

    def api_of(self, obj: Obj) -> ApiType:
        rule = self.rule_of(obj)
        if rule is None:
            raise DriverError(f"{describe(obj)} is of no type in the spec.resources of {self.name}")
        return rule.api


@dataclass
class ParentState:
    """What the driver remembers of one parent between passes."""

    fingerprint: Any = None
    periodic_at: float = 0.0
    requested: list[float] = field(default_factory=list)  # resyncAfterSeconds, conflicts
    retry_at: float | None = None
    failures: int = 0

    def due(self, now: float) -> bool:
        if self.retry_at is not None:
            return now >= self.retry_at
        return now >= self.periodic_at or any(t <= now for t in self.requested)


@dataclass
class Outcome:
    resync_after: float = 0.0
    conflict: bool = False
    related: ObjectMap | None = None


class Snapshot:
    """Every object of a resource, in all namespaces, listed at most once per pass."""

    def __init__(self, client: kube.Client) -> None:
        self._client = client
        self._lists: dict[kube.Resource, list[Obj]] = {}

    def objects(self, res: kube.Resource) -> list[Obj]:
        if res not in self._lists:
            self._lists[res] = self._client.list(res)
        return self._lists[res]


# --- the driver -----------------------------------------------------------------------------------


class Driver:
    """Calls the hooks of every Composite- and DecoratorController as Metacontroller 4.17 does, and applies
    their answers.

    `only` limits it to the controllers of those names; without it, it drives every one but those
    annotated PRIVATE (a test's own, which the lab's driver, running on the same API server, must leave to
    the test's driver). `interval` is the time between passes.
    """

    def __init__(self, client: kube.Client, log: logging.Logger | None = None, *,
                 only: Collection[str] | None = None, interval: float = 1.0,
                 resolve: ServiceResolver | None = None) -> None:  # fmt: skip
        self._client = client
        self._resolve = resolve
        self.log = log or logging.getLogger("lab.driver")
        self._only = set(only) if only is not None else None
        self._interval = interval
        self._http = requests.Session()
        self._discovery = Discovery(client)
        self._composites: dict[str, tuple[str, Composite]] = {}  # by name: (resourceVersion, parsed)
        self._decorators: dict[str, tuple[str, Decorator]] = {}  # by name: (spec as JSON, parsed)
        self._states: dict[tuple[str, str], ParentState] = {}
        self._customized: dict[tuple[str, str, int], tuple[float, list[Obj]]] = {}
        self._warned: dict[str, str] = {}
        self._lock = threading.Lock()
        self._hook_calls: dict[str, Counter[str]] = defaultdict(Counter)
        self._writes: Counter[str] = Counter()
        self._counts: Counter[str] = Counter()

    # -- public ------------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Pass after pass until `stop` is set; a failed pass is logged and the next one tries again."""
        self.log.info("driving Composite- and DecoratorControllers (Metacontroller 4.17 stand-in), a pass every %.1fs",
                      self._interval)  # fmt: skip
        while not stop.is_set():
            started = time.monotonic()
            try:
                self._pass(stop)
                self._warned.pop("pass", None)
            except (kube.ApiError, requests.RequestException) as err:
                self._warn("pass", f"pass failed, next in {self._interval}s: {err}")
            except Exception:
                self.log.exception("pass failed")
            self._count("passes")
            stop.wait(max(0.05, self._interval - (time.monotonic() - started)))
        self._http.close()

    def stats(self) -> dict[str, Any]:
        """Counters: hook calls by path and status, writes by verb, passes, syncs, failed syncs."""
        with self._lock:
            return {
                "hook_calls": {path: dict(codes) for path, codes in self._hook_calls.items()},
                "writes": dict(self._writes),
                **dict(self._counts),
            }

    # -- a pass ------------------------------------------------------------------------------------

    def _pass(self, stop: threading.Event) -> None:
        snap = Snapshot(self._client)
        kinds = ((COMPOSITES, self._composite, self._composites), (DECORATORS, self._decorator, self._decorators))
        seen: set[tuple[str, str]] = set()
        for res, parse, parsed in kinds:
            objects = self._controllers(snap, res)
            for obj in objects:
                if stop.is_set():
                    return
                if self._wanted(obj):
                    seen |= self._drive(obj, parse, snap)
            names = {meta(o).get("name") for o in objects}
            for name in set(parsed) - names:
                del parsed[name]
        for key in set(self._states) - seen:
            del self._states[key]
        self._expire_customize(seen)

    def _controllers(self, snap: Snapshot, res: kube.Resource) -> list[Obj]:
        """The controllers of one kind by name; none while its CRD is not installed."""
        try:
            objects = snap.objects(res)
        except kube.ApiError as err:
            if err.status == 404:
                self._warn(f"crd/{res.plural}", f"no {res.plural} CRD ({METACONTROLLER}) is installed yet")
                return []
            raise
        self._warned.pop(f"crd/{res.plural}", None)
        return sorted(objects, key=lambda o: meta(o).get("name", ""))

    def _wanted(self, obj: Obj) -> bool:
        if self._only is not None:
            return meta(obj).get("name") in self._only
        return PRIVATE not in (meta(obj).get("annotations") or {})

    def _drive(self, obj: Obj, parse: Callable[[Obj], Controller], snap: Snapshot) -> set[tuple[str, str]]:
        """Visit every parent of one controller; the (finalizer, parent uid) pairs seen."""
        name, kind = meta(obj)["name"], obj.get("kind", "")
        try:
            ctl = parse(obj)
            parents = [p for api in ctl.parents for p in snap.objects(api.resource)]
        except (DriverError, kube.ApiError) as err:
            self._warn(f"{kind}/{name}", f"{kind} {name} is not driven: {err}")
            return set()
        self._warned.pop(f"{kind}/{name}", None)
        now = time.monotonic()
        seen = set()
        for parent in parents:
            seen.add((ctl.finalizer, meta(parent)["uid"]))
            self._visit(ctl, parent, snap, now)
        return seen

    def _visit(self, ctl: Controller, parent: Obj, snap: Snapshot, now: float) -> None:
        """Sync one parent if anything its sync reads changed or a resync is due."""
        state = self._states.setdefault((ctl.finalizer, meta(parent)["uid"]), ParentState())
        try:
            if not self._selected(ctl, parent):
                return
            candidates = self._candidates(ctl, parent, snap) if isinstance(ctl, Composite) else {}
            rules = self._cached_rules(ctl, parent)
            related = self._related(rules, snap) if rules is not None else None
            fingerprint = self._fingerprint(ctl, parent, candidates, related)
            if fingerprint == state.fingerprint and not state.due(now):
                return
            state.fingerprint = fingerprint
            self._count("syncs")
            if isinstance(ctl, Composite):
                outcome = self._sync(ctl, parent, candidates, snap)
            else:
                outcome = self._decorate(ctl, parent, snap)
        except TooManyRequests as err:
            state.retry_at = now + err.after
            self.log.info("%s hook of %s: %s", ctl.name, describe(parent), err)
            return
        except (DriverError, kube.ApiError, apply.MergeError, requests.RequestException) as err:
            self._failed(ctl, parent, state, str(err))
            return
        except Exception as err:
            self.log.exception("sync of %s by %s failed", describe(parent), ctl.name)
            self._failed(ctl, parent, state, repr(err))
            return
        if outcome.related is not None:  # customize was called in this sync: its rules now in the fingerprint
            state.fingerprint = self._fingerprint(ctl, parent, candidates, outcome.related)
        self._succeeded(ctl, state, now, outcome)

    def _failed(self, ctl: Controller, parent: Obj, state: ParentState, why: str) -> None:
        state.failures += 1
        delay = min(MAX_BACKOFF, 2.0 ** (state.failures - 1))
        state.retry_at = time.monotonic() + delay
        self._count("failed_syncs")
        self.log.warning("%s: sync of %s failed, retry in %.0fs: %s", ctl.name, describe(parent), delay, why)

    def _succeeded(self, ctl: Controller, state: ParentState, now: float, outcome: Outcome) -> None:
        """Resyncs asked for before `now` (when the sync started) are done; new ones count from its end."""
        done = time.monotonic()
        state.failures, state.retry_at = 0, None
        state.periodic_at = done + ctl.resync
        state.requested = [t for t in state.requested if t > now]
        if outcome.resync_after > 0:
            state.requested.append(done + outcome.resync_after)
        if outcome.conflict:
            state.requested.append(done)

    # -- what a sync reads -------------------------------------------------------------------------

    def _selected(self, ctl: Controller, parent: Obj) -> bool:
        """A parent outside the controller's selectors is left alone unless it carries our finalizer."""
        return ctl.finalizer in finalizers(parent) or ctl.selects(parent)

    def _selector(self, cc: Composite, parent: Obj) -> Obj:
        """makeSelector: controller-uid=<uid> with generateSelector, else the parent's spec.selector."""
        if cc.generate_selector:
            return {"matchLabels": {apply.SELECTOR_LABEL: meta(parent)["uid"]}}
        selector = (parent.get("spec") or {}).get("selector")
        if not isinstance(selector, dict) or not (selector.get("matchLabels") or selector.get("matchExpressions")):
            raise DriverError(".spec.selector must have either matchLabels, matchExpressions, or both")
        return selector

    def _candidates(self, cc: Composite, parent: Obj, snap: Snapshot) -> dict[ChildRule, list[Obj]]:
        """Per child type: objects owned by the parent's uid, and orphans its selector matches."""
        uid = meta(parent)["uid"]
        ns = meta(parent).get("namespace") if cc.parent.namespaced else None
        try:
            selector: Obj | None = self._selector(cc, parent)
        except DriverError:
            selector = None  # the sync reports it; any orphan may matter meanwhile
        out = {}
        for rule in cc.children:
            found = []
            for obj in snap.objects(rule.api.resource):
                if ns is not None and meta(obj).get("namespace") != ns:
                    continue
                ref = controller_ref(obj)
                if (ref and ref.get("uid") == uid) or (not ref and (selector is None or _matches(selector, obj))):
                    found.append(obj)
            out[rule] = found
        return out

    def _cached_rules(self, ctl: Controller, parent: Obj) -> list[Obj] | None:
        """The related rules customize gave for this parent's generation; none to ask for without customize."""
        if ctl.customize is None:
            return []
        entry = self._customized.get(_customize_key(ctl, parent))
        if entry is None or time.monotonic() - entry[0] > CUSTOMIZE_TTL:
            return None
        return entry[1]

    def _fingerprint(self, ctl: Controller, parent: Obj, candidates: dict[ChildRule, list[Obj]],
                     related: ObjectMap | None) -> tuple:  # fmt: skip
        """What a sync of this parent reads, by resourceVersion: equal fingerprints need no new sync."""
        m = meta(parent)
        if ctl.ignores_status(parent) and not deleting(parent):
            parent_part: Any = (
                m.get("generation"),
                apply.go_json(m.get("labels")),
                apply.go_json(m.get("annotations")),
            )
        else:
            parent_part = m.get("resourceVersion")
        children = tuple(sorted((meta(o)["uid"], meta(o).get("resourceVersion")) for objs in candidates.values()
                                for o in objs))  # fmt: skip
        linked = None
        if related is not None:
            linked = tuple(sorted((k, meta(o)["uid"], meta(o).get("resourceVersion"))
                                  for k, group in related.items() for o in group.values()))  # fmt: skip
        return meta(ctl.obj).get("resourceVersion"), parent_part, children, linked

    # -- one sync (syncParentObject) ---------------------------------------------------------------

    def _sync(self, cc: Composite, parent: Obj, candidates: dict[ChildRule, list[Obj]], snap: Snapshot) -> Outcome:
        outcome = Outcome()
        updated = self._sync_finalizer(cc, parent)
        if updated is None or not self._selected(cc, updated):
            return outcome
        parent = updated
        children = self._claim(cc, parent, candidates)
        related = self._related_for(cc, parent, snap, outcome)
        finalizing = _finalizing(cc, parent)
        hook = cc.finalize if finalizing else cc.sync
        if hook is None:
            raise ConfigError("sync hook nil//not defined")
        request = {"controller": cc.obj, "parent": parent, "children": children, "related": related,
                   "finalizing": finalizing}  # fmt: skip
        answer = self._call(hook, request, _check_sync_answer)
        desired = [apply.prepare_child(c, parent, cc.generate_selector) for c in answer.get("children") or []]
        outcome.resync_after = float(answer.get("resyncAfterSeconds") or 0)
        if answer.get("finalized"):
            released = self._remove_finalizer(cc, parent)
            if released is None:
                return outcome
            parent = released
        self._check_labels(cc, parent, desired)
        manage_error = None
        if not deleting(parent) or self._should_finalize(cc, parent):
            try:
                outcome.conflict = self._manage(cc, parent, children, desired)
            except DriverError as err:
                manage_error = err
        outcome.conflict |= self._update_status(cc, parent, answer.get("status"))
        if manage_error is not None:
            raise manage_error
        return outcome

    def _should_finalize(self, cc: Composite, parent: Obj) -> bool:
        """Children are managed under deletion only while our finalizer holds and the GC does not own them."""
        held = finalizers(parent)
        return cc.finalize is not None and cc.finalizer in held and not any(f in held for f in GC_FINALIZERS)

    def _check_labels(self, cc: Composite, parent: Obj, desired: list[Obj]) -> None:
        """Desired children must match the parent's selector (they would be orphaned at once otherwise)."""
        selector = self._selector(cc, parent)
        for child in desired:
            if not selector_matches(selector, labels_of(child)):
                raise DriverError(f"labels on desired child {describe(child)} don't match parent selector")

    # -- one decorator sync (decorator's syncParentObject) ----------------------------------------

    def _decorate(self, dc: Controller, parent: Obj, snap: Snapshot) -> Outcome:
        """A DecoratorController's sync: finalizer, related objects, the sync or finalize hook, and its answer
        written onto the object (typed Controller: it needs nothing more of a Decorator)."""
        outcome = Outcome()
        updated = self._sync_finalizer(dc, parent)
        if updated is None or not self._selected(dc, updated):
            return outcome
        parent = updated
        related = self._related_for(dc, parent, snap, outcome)
        finalizing = _finalizing(dc, parent)
        hook = dc.finalize if finalizing else dc.sync
        if hook is None:
            raise ConfigError("no enabled hooks found")
        request = {"controller": dc.obj, "object": parent, "attachments": {}, "related": related,
                   "finalizing": finalizing}  # fmt: skip
        answer = self._call(hook, request, _check_decorate_answer)
        if answer.get("attachments"):
            raise DriverError(f"the {hook.name} hook answered attachments, which the lab does not model")
        outcome.resync_after = float(answer.get("resyncAfterSeconds") or 0)
        self._write_decoration(dc, parent, answer)
        return outcome

    def _write_decoration(self, dc: Controller, parent: Obj, answer: Obj) -> None:
        """The answer written onto the object: one update of the version synced, status first through /status;
        a conflict or a gone object is left to the next sync, as Metacontroller leaves it to the next event."""
        decoration = _decoration(parent, answer, dc.finalizer)
        if decoration is None:
            return
        body, status_changed, release = decoration
        api = dc.api_of(parent)
        if status_changed and api.status:
            written = self._write(partial(self._client.update_status, api.resource, body), body, "update_status",
                                  f"status from {dc.name}")  # fmt: skip
            if written is None:
                return
            body["metadata"]["resourceVersion"] = meta(written)["resourceVersion"]
        if release:
            _set_finalizer(body, dc.finalizer, False)
        why = f"remove finalizer {dc.finalizer} (finalized)" if release else f"decorated by {dc.name}"
        self._write(partial(self._client.update, api.resource, body), body, "update", why)

    def _write(self, call: Callable[[], Obj], body: Obj, verb: str, why: str) -> Obj | None:
        """One write whose conflict or 404 is not an error (None): the object changed or went since it was read."""
        try:
            written = call()
        except kube.ApiError as err:
            if err.status in (404, 409):
                return None
            raise
        self._wrote(verb, body, why)
        return written

    # -- finalizer, claim, customize, related ------------------------------------------------------

    def _sync_finalizer(self, ctl: Controller, parent: Obj) -> Obj | None:
        """finalizer.SyncObject: ours on the parent iff there is a finalize hook (never added under deletion)."""
        enabled = ctl.finalize is not None
        if (ctl.finalizer in finalizers(parent)) == enabled or (enabled and deleting(parent)):
            return parent
        if enabled:
            return self._atomic(ctl.api_of(parent), parent, lambda o: _set_finalizer(o, ctl.finalizer, True),
                                f"add finalizer {ctl.finalizer}")  # fmt: skip
        return self._remove_finalizer(ctl, parent)

    def _remove_finalizer(self, ctl: Controller, parent: Obj) -> Obj | None:
        return self._atomic(ctl.api_of(parent), parent, lambda o: _set_finalizer(o, ctl.finalizer, False),
                            f"remove finalizer {ctl.finalizer}")  # fmt: skip

    def _claim(self, cc: Composite, parent: Obj, candidates: dict[ChildRule, list[Obj]]) -> ObjectMap:
        """ClaimChildren: keep owned children that match, release owned misfits, adopt matching orphans."""
        selector = self._selector(cc, parent)
        uid = meta(parent)["uid"]
        can_adopt: list[bool] = []
        out: ObjectMap = {}
        for rule, objs in candidates.items():
            group = out.setdefault(rule.api.key, {})
            for obj in objs:
                owned = controller_ref(obj) is not None
                if owned and _matches(selector, obj):
                    group[uniform_key(obj)] = obj
                elif owned and not deleting(parent):
                    self._atomic(rule.api, obj, partial(_drop_owner, uid=uid), f"release from {describe(parent)}")
                elif not owned and _adoptable(selector, parent, obj) and self._can_adopt(cc, parent, can_adopt):
                    adopt = partial(_add_owner, ref=_owner_ref(parent))
                    if self._atomic(rule.api, obj, adopt, f"adopt by {describe(parent)}"):
                        group[uniform_key(obj)] = obj
        return out

    def _can_adopt(self, cc: Composite, parent: Obj, memo: list[bool]) -> bool:
        """An uncached read of the parent (once per sync): no adopting for a parent just deleted."""
        if not memo:
            fresh = self._client.get(cc.parent.resource, meta(parent).get("namespace"), meta(parent)["name"])
            if fresh is None or meta(fresh).get("uid") != meta(parent)["uid"] or deleting(fresh):
                raise DriverError(f"can't adopt children: {describe(parent)} is gone or being deleted")
            memo.append(True)
        return True

    def _related_for(self, ctl: Controller, parent: Obj, snap: Snapshot, outcome: Outcome) -> ObjectMap:
        """GetRelatedObjects: by the cached rules, else by customize's answer (then kept in `outcome`)."""
        rules = self._cached_rules(ctl, parent)
        if rules is not None:
            return self._related(rules, snap)
        outcome.related = self._related(self._customize(ctl, parent), snap)
        return outcome.related

    def _customize(self, ctl: Controller, parent: Obj) -> list[Obj]:
        """The customize hook's related rules, cached per parent uid and generation as Metacontroller does."""
        if ctl.customize is None:
            return []
        answer = self._call(ctl.customize, {"controller": ctl.obj, "parent": parent}, _check_customize_answer)
        rules = answer.get("relatedResources") or []
        self._customized[_customize_key(ctl, parent)] = (time.monotonic(), rules)
        return rules

    def _expire_customize(self, seen: set[tuple[str, str]]) -> None:
        live = {uid for _, uid in seen}
        now = time.monotonic()
        for key, (at, _) in list(self._customized.items()):
            if key[1] not in live or now - at > CUSTOMIZE_TTL:
                del self._customized[key]

    def _related(self, rules: list[Obj], snap: Snapshot) -> ObjectMap:
        """GetRelatedObjects (v2): each rule's objects from any namespace unless the rule names one."""
        out: ObjectMap = {}
        for rule in rules:
            api = self._discovery.lookup(rule["apiVersion"], rule["resource"])
            group = out.setdefault(api.key, {})
            for obj in self._select_related(rule, api, snap):
                group[uniform_key(obj)] = obj
        return out

    def _select_related(self, rule: Obj, api: ApiType, snap: Snapshot) -> list[Obj]:
        labels, ns_selector = rule.get("labelSelector"), rule.get("namespaceSelector")
        namespace, names = rule.get("namespace") or "", rule.get("names") or []
        if names and (labels is not None or ns_selector is not None):
            raise DriverError(f"related rule cannot have both names and labelSelector/namespaceSelector: {rule}")
        if namespace and ns_selector is not None:
            raise DriverError(f"related rule cannot have both namespace and namespaceSelector: {rule}")
        objs = snap.objects(api.resource)
        if ns_selector is not None:
            if not api.namespaced:
                raise DriverError("namespaceSelector is only supported for namespaced related resources")
            chosen = {meta(n)["name"] for n in snap.objects(kube.NAMESPACES) if _matches(ns_selector, n)}
            return [o for o in objs if meta(o).get("namespace") in chosen and _matches(labels, o)]
        if api.namespaced and namespace:
            objs = [o for o in objs if meta(o).get("namespace") == namespace]
        if labels is not None:
            return [o for o in objs if _matches(labels, o)]
        return [o for o in objs if not names or meta(o).get("name") in names]

    # -- applying the answer (ManageChildren) ------------------------------------------------------

    def _manage(self, cc: Composite, parent: Obj, observed: ObjectMap, desired: list[Obj]) -> bool:
        """Delete undesired children, then create or update desired ones; True after a write conflict."""
        wanted: ObjectMap = {}
        for child in desired:
            wanted.setdefault(type_key(child), {})[uniform_key(child)] = child
        errors: list[str] = []
        conflict = False
        for key in sorted(observed, key=_gvk_order):
            rule = cc.rule_for(key)
            for name, obj in sorted(observed[key].items()):
                if rule is not None and not deleting(obj) and name not in wanted.get(key, {}):
                    conflict |= self._guarded(errors, partial(self._delete, rule.api, obj, parent, "not desired"))
        for key in sorted(wanted, key=_gvk_order):
            rule = cc.rule_for(key)
            if rule is None:
                errors.append(f"{key} is not a childResources type of {cc.name}")
                continue
            for name, child in sorted(wanted[key].items()):
                old = observed.get(key, {}).get(name)
                conflict |= self._guarded(errors, partial(self._apply, cc, rule, parent, old, child))
        if errors:
            raise DriverError("; ".join(errors))
        return conflict

    def _guarded(self, errors: list[str], write: Callable[[], bool]) -> bool:
        """One child's write; its failure is collected so the others still happen (utilerrors aggregate)."""
        try:
            return write()
        except (kube.ApiError, apply.MergeError, requests.RequestException) as err:
            errors.append(str(err))
            return False

    def _apply(self, cc: Composite, rule: ChildRule, parent: Obj, observed: Obj | None, desired: Obj) -> bool:
        """DynamicApply.Apply: create, or the 3-way merge and the child type's update method."""
        if observed is None:
            return self._create(rule.api, apply.create_body(desired, parent), parent)
        merged = apply.apply_update(observed, desired)
        if apply.go_equal(merged, observed) or deleting(observed):
            return False
        method = cc.method(desired["apiVersion"], desired["kind"])
        if method == "Recreate":
            return self._delete(rule.api, observed, parent, "Recreate update strategy")
        if method == "InPlace":
            return self._update(rule.api, merged, parent)
        return False

    def _create(self, api: ApiType, body: Obj, parent: Obj) -> bool:
        try:
            self._client.create(api.resource, body)
        except kube.ApiError as err:
            if err.status == 409:  # already exists: nothing to retry
                return False
            raise
        self._wrote("create", body, f"child of {describe(parent)}")
        return False

    def _update(self, api: ApiType, body: Obj, parent: Obj) -> bool:
        try:
            self._client.update(api.resource, body)
        except kube.ApiError as err:
            if err.status in (404, 409):  # gone, or changed since read: the next pass sees it
                return err.status == 409
            raise
        self._wrote("update", body, f"child of {describe(parent)}, InPlace")
        return False

    def _delete(self, api: ApiType, obj: Obj, parent: Obj, why: str) -> bool:
        """Delete with the child's uid as precondition and background propagation, as Metacontroller does."""
        m = meta(obj)
        try:
            gone = not self._client.delete(api.resource, m.get("namespace"), m["name"], uid=m["uid"],
                                           propagation="Background")  # fmt: skip
        except kube.ApiError as err:
            if err.status == 409:  # replaced since read (uid precondition)
                return True
            raise
        if not gone:
            self._wrote("delete", obj, f"child of {describe(parent)}, {why}")
        return False

    def _update_status(self, cc: Composite, parent: Obj, status: Obj | None) -> bool:
        """updateParentStatus: the hook's status plus observedGeneration, written only when it differs."""
        status = dict(status or {})
        status["observedGeneration"] = meta(parent).get("generation", 0)

        def put(obj: Obj) -> bool:
            if apply.go_equal(obj.get("status"), status):
                return False
            obj["status"] = status
            return True

        try:
            self._atomic(cc.parent, parent, put, "status", sub="status" if cc.parent.status else None)
        except kube.ApiError as err:
            if err.status in (404, 409):
                return err.status == 409
            raise
        return False

    def _atomic(self, api: ApiType, obj: Obj, change: Callable[[Obj], bool], why: str,
                sub: str | None = None) -> Obj | None:  # fmt: skip
        """AtomicUpdate: read the live object, change it, write it, again on a conflict; None once it is gone."""
        m = meta(obj)
        for attempt in range(CONFLICT_TRIES):
            current = self._client.get(api.resource, m.get("namespace"), m["name"])
            if current is None or meta(current).get("uid") != m.get("uid"):
                return None
            if not change(current):
                return current
            try:
                if sub == "status":
                    result = self._client.update_status(api.resource, current)
                else:
                    result = self._client.update(api.resource, current)
            except kube.ApiError as err:
                if err.status == 409 and attempt + 1 < CONFLICT_TRIES:
                    time.sleep(0.01 * 5**attempt)
                    continue
                if err.status == 404:
                    return None
                raise
            self._wrote("update_status" if sub == "status" else "update", current, why)
            return result
        return None

    # -- hooks -------------------------------------------------------------------------------------

    def _call(self, hook: Hook, request: Obj, check: Callable[[Any, bool], str | None]) -> Obj:
        """POST the request as Go's json.Marshal writes it; anything but a well-formed 200 is a HookError."""
        headers = {"Content-Type": "application/json"}
        if hook.authorization:
            headers["Authorization"] = hook.authorization
        what = f"{hook.name} hook {hook.url}"
        url = self._dial_url(hook)
        try:
            answer = self._http.post(url, data=apply.go_json(request).encode(), headers=headers,
                                     timeout=hook.timeout)  # fmt: skip
        except requests.Timeout:
            self._hook_call(hook, "timeout")
            raise HookError(f"{what}: no answer within {hook.timeout:g}s") from None
        except requests.RequestException as err:
            self._hook_call(hook, "error")
            raise HookError(f"{what}: {err}") from None
        self._hook_call(hook, str(answer.status_code))
        if answer.status_code == 429:
            raise TooManyRequests(_retry_after(answer.headers.get("Retry-After", "")))
        start = answer.text[:200]
        if answer.status_code != 200:
            raise HookError(f"{what} answered {answer.status_code}: {start!r}")
        try:
            data = json.loads(answer.content, parse_constant=_no_constant)
        except ValueError as err:
            raise HookError(f"{what} answered 200 with a body that is not JSON ({err}): {start!r}") from None
        problem = check(data, hook.strict)
        if problem:
            raise HookError(f"{what} answered 200 with a malformed body ({problem}): {start!r}")
        return data

    def _dial_url(self, hook: Hook) -> str:
        """Where a hook is called: its URL, or for a Service's the address a cluster's DNS and kube-proxy would
        connect to (a ready endpoint's, at the Service port's target), a HookError when none is ready."""
        if hook.service is None or self._resolve is None:
            return hook.url
        namespace, name, port = hook.service
        target = self._resolve(namespace, name, port)
        if target is None:
            self._hook_call(hook, "error")
            raise HookError(
                f"{hook.name} hook {hook.url}: Service {namespace}/{name} port {port} has no ready endpoint"
            )
        parts = urlsplit(hook.url)
        return parts._replace(netloc=f"{target[0]}:{target[1]}").geturl()

    # -- configuration -----------------------------------------------------------------------------

    def _composite(self, obj: Obj) -> Composite:
        """The parsed CompositeController, parsed again when its resourceVersion changes."""
        name, version = meta(obj)["name"], meta(obj).get("resourceVersion", "")
        cached = self._composites.get(name)
        if cached and cached[0] == version:
            return cached[1]
        spec = obj.get("spec") or {}
        parent_rule = spec.get("parentResource") or {}
        hooks = spec.get("hooks") or {}
        if not hooks:
            raise ConfigError("no hooks defined")
        cc = Composite(
            name=name,
            obj=obj,
            parent=self._discovery.lookup(parent_rule.get("apiVersion", ""), parent_rule.get("resource", "")),
            children=tuple(self._child_rule(name, c) for c in spec.get("childResources") or []),
            sync=self._hook(spec, "sync"),
            customize=self._hook(spec, "customize"),
            finalize=self._hook(spec, "finalize"),
            generate_selector=bool(spec.get("generateSelector")),
            parent_selector=parent_rule.get("labelSelector"),
            ignore_status=bool(parent_rule.get("ignoreStatusChanges")),
            resync=_resync_period(spec.get("resyncPeriodSeconds")),
        )
        self._composites[name] = (version, cc)
        self.log.info("driving CompositeController %s (%s)", name, cc.parent.key)
        return cc

    def _child_rule(self, cc_name: str, child: Obj) -> ChildRule:
        api = self._discovery.lookup(child.get("apiVersion", ""), child.get("resource", ""))
        method = ((child.get("updateStrategy") or {}).get("method")) or ""
        if method not in METHODS:
            raise ConfigError(f"invalid update strategy for {api.kind}: unknown method {method!r}")
        if method.startswith("Rolling"):
            self._warn(f"rolling/{cc_name}/{api.key}", f"{cc_name}: {method} for {api.key} is applied as "
                       f"{METHODS[method]} (the lab does not model rollouts)")  # fmt: skip
        return ChildRule(api, METHODS[method])

    def _decorator(self, obj: Obj) -> Decorator:
        """The parsed DecoratorController, parsed again only when its spec changes: Metacontroller restarts a
        decorator on a spec change only, and keeps the object it started it from (sent as `controller`)."""
        name, spec = meta(obj)["name"], obj.get("spec") or {}
        digest = apply.go_json(spec)
        cached = self._decorators.get(name)
        if cached and cached[0] == digest:
            return cached[1]
        if not spec.get("hooks"):
            raise ConfigError("no hooks defined")
        if spec.get("attachments"):
            raise ConfigError("spec.attachments is not modelled by the lab (no project DecoratorController has any)")
        dc = Decorator(
            name=name,
            obj=obj,
            sync=self._hook(spec, "sync"),
            customize=self._hook(spec, "customize"),
            finalize=self._hook(spec, "finalize"),
            resync=_resync_period(spec.get("resyncPeriodSeconds")),
            rules=self._parent_rules(spec.get("resources") or []),
        )
        self._decorators[name] = (digest, dc)
        self.log.info("driving DecoratorController %s (%s)", name, ", ".join(api.key for api in dc.parents))
        return dc

    def _parent_rules(self, resources: list[Obj]) -> tuple[ParentRule, ...]:
        """spec.resources keyed by group and kind, as decoratorSelector keys them: a later rule replaces one."""
        rules: dict[tuple[str, str], ParentRule] = {}
        for rule in resources:
            api = self._discovery.lookup(rule.get("apiVersion", ""), rule.get("resource", ""))
            by_annotation = rule.get("annotationSelector")
            annotations = None if by_annotation is None else {
                "matchLabels": by_annotation.get("matchAnnotations"),
                "matchExpressions": by_annotation.get("matchExpressions"),
            }  # fmt: skip
            rules[(api_group(api.resource.api_version), api.kind)] = ParentRule(
                api, rule.get("labelSelector"), annotations, bool(rule.get("ignoreStatusChanges"))
            )
        return tuple(rules.values())

    def _hook(self, spec: Obj, name: str) -> Hook | None:
        hook = (spec.get("hooks") or {}).get(name)
        if hook is None:
            return None
        version = hook.get("version") or "v1"
        if version != "v2":
            raise ConfigError(f"the {name} hook is version {version}; the lab drives v2 hooks only")
        webhook = hook.get("webhook") or {}
        url = webhook.get("url")
        target = None
        if not url:
            service = webhook.get("service") or {}
            if not (service and webhook.get("path")):
                raise ConfigError(f"the {name} hook must specify either a full 'url', or both 'service' and 'path'")
            if self._resolve is None:
                raise ConfigError(
                    f"the {name} hook names Service {service.get('namespace')}/{service.get('name')}: this driver "
                    f"was given no way to reach Services; set webhook.url instead (http://127.0.0.1:<port>{webhook['path']})"
                )
            # Metacontroller's own URL for a Service (its namespace defaults to the controller's, "" here)
            target = (service.get("namespace") or "default", service["name"], int(service.get("port") or 80))
            url = f"{service.get('protocol') or 'http'}://{target[1]}.{target[0]}:{target[2]}{webhook['path']}"
        if (webhook.get("etag") or {}).get("enabled"):
            self._warn(f"etag/{url}", f"{url}: etag is not modelled; every call gets a full answer")
        mode = webhook.get("responseUnMarshallMode")
        return Hook(name, url, self._timeout(url, webhook.get("timeout")), mode == "strict" or mode is None,
                    self._credentials(webhook, spec.get("endpointConfigs") or [], url), target)  # fmt: skip

    def _timeout(self, url: str, text: str | None) -> float:
        if text is None:
            return DEFAULT_HOOK_TIMEOUT
        try:
            seconds = go_duration(str(text))
        except ValueError:
            seconds = 0.0
        if seconds <= 0:
            self._warn(f"timeout/{url}", f"{url}: timeout {text!r} must be a positive duration; using 10s")
            return DEFAULT_HOOK_TIMEOUT
        return seconds

    def _credentials(self, webhook: Obj, configs: list[Obj], url: str) -> str | None:
        """ResolveEndpointConfig: the webhook's own credentials, else those of the endpointConfig for its host."""
        keys = ("caBundle", "clientTLS", "authorization", "basicAuth")
        source = webhook if any(webhook.get(k) for k in keys) else _endpoint_config(url, configs)
        if source is None:
            return None
        if source.get("caBundle") or source.get("clientTLS"):
            raise ConfigError(f"{url}: caBundle and clientTLS are not supported by the lab (plain http hooks)")
        auth, basic = source.get("authorization"), source.get("basicAuth")
        if auth and basic:
            raise ConfigError("authorization and basicAuth are mutually exclusive")
        if auth:
            kind = (auth.get("type") or "").strip()
            if kind.lower() == "basic":
                raise ConfigError(f"authorization type {kind!r} is not supported; use the basicAuth field instead")
            return f"{kind or 'Bearer'} {self._secret_value(auth['secretRef'], auth['secretRef']['key']).strip()}"
        if basic:
            ref = basic["secretRef"]
            user = self._secret_value(ref, basic.get("usernameKey") or "username").strip()
            password = self._secret_value(ref, basic.get("passwordKey") or "password").strip()
            if ":" in user:
                raise ConfigError("basicAuth username must not contain ':'")
            return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        return None

    def _secret_value(self, ref: Obj, key: str) -> str:
        secret = self._client.get(kube.SECRETS, ref.get("namespace"), ref.get("name", ""))
        if secret is None:
            raise ConfigError(f"can't get secret {ref.get('namespace')}/{ref.get('name')}")
        value = (secret.get("data") or {}).get(key)
        if value is None:
            raise ConfigError(f"secret {ref.get('namespace')}/{ref.get('name')} does not contain key {key!r}")
        return base64.b64decode(value).decode()

    # -- bookkeeping -------------------------------------------------------------------------------

    def _warn(self, key: str, message: str) -> None:
        """Log a condition once, and again only when its message changes."""
        if self._warned.get(key) != message:
            self._warned[key] = message
            self.log.warning("%s", message)

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _hook_call(self, hook: Hook, status: str) -> None:
        with self._lock:
            self._hook_calls[hook.path][status] += 1

    def _wrote(self, verb: str, obj: Obj, why: str) -> None:
        with self._lock:
            self._writes[verb] += 1
        self.log.info("%s %s (%s)", verb, describe(obj), why)


# --- module-level helpers used by the driver ------------------------------------------------------


def _matches(selector: Obj | None, obj: Obj) -> bool:
    return selector_matches(selector, labels_of(obj))


def _adoptable(selector: Obj, parent: Obj, obj: Obj) -> bool:
    return _matches(selector, obj) and not deleting(parent) and not deleting(obj)


def _finalizing(ctl: Controller, parent: Obj) -> bool:
    """The finalize hook is called (and not sync) for a parent being deleted or no longer selected."""
    return ctl.finalize is not None and (deleting(parent) or not ctl.selects(parent))


def _customize_key(ctl: Controller, parent: Obj) -> tuple[str, str, int]:
    m = meta(parent)
    return ctl.finalizer, m["uid"], m.get("generation", 0)


def _resync_period(seconds: Any) -> float:
    """resyncPeriodSeconds, at least 1s (0 included); absent, the 30m relist still resyncs every parent."""
    return DEFAULT_RESYNC if seconds is None else max(1.0, float(seconds))


def _owner_ref(parent: Obj) -> Obj:
    m = meta(parent)
    return {"apiVersion": parent["apiVersion"], "kind": parent["kind"], "name": m["name"], "uid": m["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def _add_owner(obj: Obj, ref: Obj) -> bool:
    refs = [r for r in meta(obj).get("ownerReferences") or [] if r.get("uid") != ref["uid"]]
    obj["metadata"]["ownerReferences"] = [*refs, ref]
    return True


def _drop_owner(obj: Obj, uid: str) -> bool:
    obj["metadata"]["ownerReferences"] = [r for r in meta(obj).get("ownerReferences") or [] if r.get("uid") != uid]
    return True


def _decoration(parent: Obj, answer: Obj, finalizer: str) -> tuple[Obj, bool, bool] | None:
    """The object with the answer's labels and annotations (null removes a key) and status (null keeps it),
    whether its status changed and whether `finalized` releases our finalizer; None when nothing changes."""
    body = copy.deepcopy(parent)
    m = body["metadata"]
    labels, annotations = dict(m.get("labels") or {}), dict(m.get("annotations") or {})
    changed = _update_strings(labels, answer.get("labels"))
    changed = _update_strings(annotations, answer.get("annotations")) or changed
    status = parent.get("status") if answer.get("status") is None else answer["status"]
    status_changed = not apply.go_equal(parent.get("status"), status)
    release = bool(answer.get("finalized")) and finalizer in finalizers(parent)
    if not (changed or status_changed or release):
        return None
    m["labels"], m["annotations"] = labels, annotations
    if status is not None:
        body["status"] = status
    return body, status_changed, release


def _update_strings(dest: dict[str, str], updates: dict[str, str | None] | None) -> bool:
    """updateStringMap: set each key, remove those given as null; whether anything changed."""
    changed = False
    for key, value in (updates or {}).items():
        if value is None:
            changed |= dest.pop(key, None) is not None
        elif dest.get(key) != value:
            dest[key] = value
            changed = True
    return changed


def _set_finalizer(obj: Obj, name: str, present: bool) -> bool:
    held = finalizers(obj)
    if (name in held) == present:
        return False
    obj["metadata"]["finalizers"] = [*held, name] if present else [f for f in held if f != name]
    return True


def _endpoint_config(url: str, configs: list[Obj]) -> Obj | None:
    """matchEndpointConfig: by host, or host:port with the scheme's default port filled in or left out."""
    parts = urlsplit(url)
    host, port = parts.netloc, parts.port
    default = {"https": 443, "http": 80}.get(parts.scheme)
    canonical = f"{parts.hostname}:{default}" if port is None and default else host
    for config in configs:
        wanted = str(config.get("host", "")).lower()
        if wanted in (host.lower(), canonical.lower()):
            return config
        if port is not None and port == default and wanted == (parts.hostname or "").lower():
            return config
    return None


def _retry_after(value: str) -> float:
    """Retry-After in seconds or as an HTTP date; 0 when it says neither (Go's Atoi of junk)."""
    try:
        return float(int(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return 0.0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _check_sync_answer(data: Any, strict: bool) -> str | None:
    """What Go's (strict) unmarshal of a CompositeHookResponse would refuse, plus children it cannot apply."""
    problem = _answer_problem(data, strict, SYNC_FIELDS)
    if problem:
        return problem
    children = data.get("children")
    if children is not None and not isinstance(children, list):
        return "children is not a list"
    return next((p for p in map(_child_problem, children or []) if p), None)


def _check_decorate_answer(data: Any, strict: bool) -> str | None:
    """What Go's (strict) unmarshal of a v2 DecoratorHookResponse would refuse."""
    problem = _answer_problem(data, strict, DECORATE_FIELDS)
    if problem:
        return problem
    for key in ("labels", "annotations"):
        values = data.get(key)
        if values is not None and (
            not isinstance(values, dict) or not all(v is None or isinstance(v, str) for v in values.values())
        ):
            return f"{key} is not a map of strings and nulls"
    if data.get("attachments") is not None and not isinstance(data["attachments"], list):
        return "attachments is not a list"
    return None


def _answer_problem(data: Any, strict: bool, fields: frozenset[str]) -> str | None:
    """What both kinds' answers share: an object of known fields, status, resyncAfterSeconds, finalized."""
    if not isinstance(data, dict):
        return "not a JSON object"
    unknown = set(data) - fields
    if strict and unknown:
        return f"unknown field(s) {sorted(unknown)}"
    if data.get("status") is not None and not isinstance(data["status"], dict):
        return "status is not an object"
    resync = data.get("resyncAfterSeconds")
    if resync is not None and (isinstance(resync, bool) or not isinstance(resync, int | float)):
        return "resyncAfterSeconds is not a number"
    if data.get("finalized") is not None and not isinstance(data["finalized"], bool):
        return "finalized is not a boolean"
    return None


def _child_problem(child: Any) -> str | None:
    if not isinstance(child, dict):
        return "a child is not an object"
    if not isinstance(child.get("kind"), str) or not child["kind"] or not isinstance(child.get("apiVersion"), str):
        return "a child has no kind or apiVersion"
    if not isinstance(child.get("metadata"), dict):
        return f"a {child['kind']} child has no metadata"
    name, labels = child["metadata"].get("name"), child["metadata"].get("labels")
    if not isinstance(name, str) or not name:
        return f"a {child['kind']} child has no metadata.name"
    if labels is not None and (not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values())):
        return f"invalid labels on desired child {child['kind']} {name}"
    return None


def _check_customize_answer(data: Any, strict: bool) -> str | None:
    if not isinstance(data, dict):
        return "not a JSON object"
    if strict and set(data) - {"relatedResources"}:
        return f"unknown field(s) {sorted(set(data) - {'relatedResources'})}"
    rules = data.get("relatedResources")
    if rules is not None and not isinstance(rules, list):
        return "relatedResources is not a list"
    for rule in rules or []:
        if not isinstance(rule, dict):
            return "a related rule is not an object"
        if strict and set(rule) - RULE_FIELDS:
            return f"unknown field(s) {sorted(set(rule) - RULE_FIELDS)} in a related rule"
        if not isinstance(rule.get("apiVersion"), str) or not isinstance(rule.get("resource"), str):
            return "a related rule has no apiVersion or resource"
        if any(
            rule.get(k) is not None and not isinstance(rule[k], dict) for k in ("labelSelector", "namespaceSelector")
        ):
            return "a related rule's selector is not an object"
        names = rule.get("names")
        if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
            return "a related rule's names is not a list of strings"
        if rule.get("namespace") is not None and not isinstance(rule["namespace"], str):
            return "a related rule's namespace is not a string"
    return None

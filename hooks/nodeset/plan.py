"""Which worker pods a NodeSet wants: create, keep, condemn (docs/architecture.md §4 drain before delete).

A plan never deletes anything itself. It names the pods that must go and why; the sync hook
leaves a condemned pod out of the desired children only once slurm_sync has marked it drained
(or its Slurm node absent). Everything else observed stays desired, including pods the plan
cannot make sense of: those are reported, never dropped.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hooks.nodeset.observe import ObservedPod, victim_order
from hooks.nodeset.pods import PodSlot, daemonset_slot, statefulset_slot
from hooks.nodeset.scheduling import Fit, node_fit
from hooks.nodeset.spec import ROLLING_UPDATE, SCHEDULED_UPDATE, NodeSetSpec
from slinky_common import names, slurmstate
from slinky_common.wellknown import node_hostname

JSON = dict[str, Any]


@dataclass
class Plan:
    """The outcome for one sync; `condemned` and `unexpected` map pod names to human reasons."""

    create: list[PodSlot] = field(default_factory=list)
    condemned: dict[str, str] = field(default_factory=dict)
    unexpected: dict[str, str] = field(default_factory=dict)
    desired: int = 0
    # condemned pods whose Slurm node record must go before they do (names.DRAIN_DELETE_NODE)
    delete_node: set[str] = field(default_factory=set)

    def condemn(self, pods: Iterable[ObservedPod], reason: str, delete_node: bool = False) -> None:
        """First reason wins; a terminating pod is already going and needs no drain intent."""
        for pod in pods:
            if not pod.terminating:
                self.condemned.setdefault(pod.name, reason)
                if delete_node:
                    self.delete_node.add(pod.name)

    def delete_stale_records(self, pods: Iterable[ObservedPod], registration: str) -> None:
        """A condemned pod whose slurmd registered otherwise than its replacement will: its record goes first.
        A pod without the hash (made before it existed) is left as it was: unknown means no action."""
        for pod in pods:
            if pod.name in self.condemned and pod.registration not in (None, registration):
                self.delete_node.add(pod.name)


@dataclass(frozen=True)
class Context:
    """The inputs every planning step reads."""

    spec: NodeSetSpec
    revision: str
    draining: frozenset[str]  # pods listed in the last published status.drainingPods
    now: float | None  # the hook's clock (hooks/nodeset.now); None when minReadySeconds is 0 (not read)
    # ScheduledUpdate: Slurm nodes slurm_sync reports in MAINTENANCE under this NodeSet's reservation
    maintenance: frozenset[str] = frozenset()
    # elastic: each on-demand ordinal's power in slurm_sync's report (slinky_common.slurmstate.POWER_UP ...);
    # an ordinal it lacks is unknown
    power: Mapping[int, str] = field(default_factory=dict)

    def available(self, pod: ObservedPod) -> bool:
        """Healthy, and Ready for at least minReadySeconds by the hook's clock.

        A pod Ready without a readable transition time is not available while minReadySeconds
        is set (the time it became ready is unknown).
        """
        if not pod.healthy:
            return False
        if self.spec.min_ready_seconds == 0:
            return True
        return (
            pod.ready_since is not None
            and self.now is not None
            and pod.ready_since + self.spec.min_ready_seconds <= self.now
        )

    def seconds_until_available(self, pods: Iterable[ObservedPod]) -> int | None:
        """Whole seconds until the next healthy pod reaches minReadySeconds (at least 1); None if none will."""
        if self.spec.min_ready_seconds == 0 or self.now is None:
            return None
        waits = [
            pod.ready_since + self.spec.min_ready_seconds - self.now
            for pod in pods
            if pod.healthy and pod.ready_since is not None and not self.available(pod)
        ]
        return max(1, math.ceil(min(waits))) if waits else None

    def order(self, pod: ObservedPod, ordinal: int | None = None) -> tuple[Any, ...]:
        return victim_order(pod, ordinal, self.draining)


def plan_statefulset(
    ctx: Context, pods: list[ObservedPod], ordinal_to_node: dict[str, str], fits: dict[str, Fit]
) -> Plan:
    """Ordinal pods: replicas of them, lowest free ordinals first, highest-ordinal victims first. An elastic
    NodeSet's are its always-on ordinals and those Slurm powers up (_plan_elastic)."""
    spec = ctx.spec
    plan = Plan(desired=spec.replicas)
    ordinals = {p.name: _ordinal(p.name, spec.name) for p in pods}
    members = _claim_ordinals(plan, spec, _current_mode(plan, spec, pods), ordinals)
    wanted = _plan_elastic(plan, ctx, members) if spec.elastic else None
    if wanted is None:
        _scale(plan, ctx, members)
    kept = {o: p for o, p in members.items() if p.name not in plan.condemned}
    plan.condemn((p for p in kept.values() if p.finished), "pod finished; replacing it")
    if spec.update_type == ROLLING_UPDATE:
        _rolling_update(plan, ctx, [(p, o) for o, p in sorted(kept.items())], plan.desired)
    elif spec.update_type == SCHEDULED_UPDATE:
        _scheduled_update(plan, ctx, kept.values())
    taken = {o for o in ordinals.values() if o is not None}
    names_taken = {p.name for p in pods}
    for ordinal in _free_ordinals(spec.replicas - len(members), taken) if wanted is None else sorted(wanted - taken):
        slot = statefulset_slot(spec, ordinal, _pin(spec, ordinal, ordinal_to_node, fits))
        if slot.name not in names_taken:
            plan.create.append(slot)
    return plan


def _free_ordinals(missing: int, taken: set[int]) -> Iterator[int]:
    """The lowest `missing` ordinals no pod holds."""
    ordinal = 0
    while missing > 0:
        if ordinal not in taken:
            yield ordinal
            missing -= 1
        ordinal += 1


def _plan_elastic(plan: Plan, ctx: Context, members: dict[int, ObservedPod]) -> set[int]:
    """The ordinals an elastic NodeSet wants (docs/architecture.md §4.9): the always-on ones below minReplicas and
    each one Slurm powers up. A pod goes (drained first, as every pod) when Slurm powered its node down or gave up
    waiting for it, when its ordinal is past maxReplicas, or once it was condemned: a slurmd that ran before Slurm
    powered its node up again never registers the node, so that pod must be replaced. A pod of an ordinal the
    report lacks is kept and none is created for it: unknown means no action."""
    elastic = ctx.spec.elastic
    assert elastic is not None
    wanted = set(range(elastic.min_replicas))
    wanted.update(o for o, power in ctx.power.items() if power == slurmstate.POWER_UP and o < elastic.max_replicas)
    plan.desired = len(wanted)
    for ordinal, pod in sorted(members.items()):
        if ordinal >= elastic.max_replicas:
            plan.condemn([pod], f"scale-in to maxReplicas {elastic.max_replicas}")
        elif ordinal < elastic.min_replicas:
            continue
        elif ctx.power.get(ordinal) == slurmstate.POWER_DOWN:
            plan.condemn([pod], "Slurm powered its node down")
        elif ctx.power.get(ordinal) == slurmstate.RESUME_FAILED:
            plan.condemn([pod], "its node was not up within ResumeTimeout; Slurm requeued the job")
        elif pod.name in ctx.draining:
            plan.condemn([pod], "its slurmd cannot register a node Slurm powers up again; replacing it")
    return wanted


def plan_daemonset(ctx: Context, pods: list[ObservedPod], nodes: list[JSON], pod_spec: JSON) -> Plan:
    """One pod per Node the pod template fits; a pod whose node left or stopped matching goes.

    An empty Node list is read as "nodes unknown" (a cluster without Nodes runs no pods), so a
    missing related list never condemns every worker at once.
    """
    spec = ctx.spec
    plan = Plan()
    by_name = {n["metadata"]["name"]: n for n in nodes}
    by_node: dict[str, list[ObservedPod]] = {}
    for pod in _current_mode(plan, spec, pods):
        node = pod.pinned_node or pod.node_name
        if node is None:
            plan.unexpected[pod.name] = "DaemonSet-mode pod without a node"
        else:
            by_node.setdefault(node, []).append(pod)
    names_taken = {p.name for p in pods}
    members: list[tuple[ObservedPod, int | None]] = []
    for node_name in sorted(by_name.keys() | by_node.keys()):
        group = by_node.get(node_name, [])
        kube_node = by_name.get(node_name)
        if kube_node is None:
            if by_name:
                plan.condemn(group, f"node {node_name} is gone")
            else:
                members += [(p, None) for p in group if not p.terminating]
            continue
        fit = node_fit(kube_node, pod_spec)
        hostname = node_hostname(kube_node, names.ANNOTATION_HOSTNAME_OVERRIDE)
        if fit.should_run or (fit.should_continue and group):
            plan.desired += 1
        if not fit.should_continue:
            plan.condemn(group, f"node {node_name} no longer matches the NodeSet")
            continue
        keeper = _node_keeper(plan, ctx, group, node_name, hostname)
        if keeper is not None:
            members.append((keeper, None))
        slot = daemonset_slot(spec, node_name, hostname)
        if fit.should_run and not group and slot.name not in names_taken:
            plan.create.append(slot)
    plan.condemn((p for p, _ in members if p.finished), "pod finished; replacing it")
    if spec.update_type == ROLLING_UPDATE:
        _rolling_update(plan, ctx, [m for m in members if m[0].name not in plan.condemned], plan.desired)
    elif spec.update_type == SCHEDULED_UPDATE:
        _scheduled_update(plan, ctx, (p for p, _ in members))
    return plan


def plan_finalize(pods: list[ObservedPod]) -> Plan:
    """Deleting the NodeSet drains every pod; each goes once drained."""
    plan = Plan()
    plan.condemn(pods, "NodeSet deleted")
    return plan


def plan_hold(pods: list[ObservedPod], published: dict[str, str]) -> Plan:
    """Nothing can be decided (no Controller): keep every pod and the drain intents already published."""
    plan = Plan()
    for pod in pods:
        if pod.name in published:
            plan.condemn([pod], published[pod.name])
    return plan


def scaled_max_unavailable(value: int | str, total: int) -> int:
    """An int, or a percentage of `total` rounded up; at least 1 when there is anything to update."""
    if isinstance(value, str):
        value = math.ceil(int(value.rstrip("%")) * total / 100)
    return max(1, value) if total > 0 else 0


def _current_mode(plan: Plan, spec: NodeSetSpec, pods: list[ObservedPod]) -> list[ObservedPod]:
    """Our pods of the current scaling mode; other-mode pods are condemned, foreign ones reported."""
    current = []
    for pod in pods:
        if not pod.ours:
            plan.unexpected[pod.name] = "not a worker pod of this NodeSet (labels or owner differ)"
        elif pod.scaling_mode not in (None, spec.scaling_mode):
            plan.condemn([pod], f"scaling mode changed to {spec.scaling_mode}")
        else:
            current.append(pod)
    return current


def _claim_ordinals(
    plan: Plan, spec: NodeSetSpec, pods: list[ObservedPod], ordinals: dict[str, int | None]
) -> dict[int, ObservedPod]:
    """One pod per ordinal; a second pod with the same ordinal is condemned and reported."""
    by_ordinal: dict[int, list[ObservedPod]] = {}
    for pod in pods:
        ordinal = ordinals[pod.name]
        if ordinal is None:
            plan.unexpected[pod.name] = f"name does not follow {spec.name}-<ordinal>"
        else:
            by_ordinal.setdefault(ordinal, []).append(pod)
    members = {}
    for ordinal, group in sorted(by_ordinal.items()):
        if len(group) > 1:
            canonical = statefulset_slot(spec, ordinal).name
            group.sort(key=lambda p: (p.name != canonical, p.name))
        members[ordinal] = group[0]
        for extra in group[1:]:
            plan.unexpected[extra.name] = f"duplicate of ordinal {ordinal} ({group[0].name})"
            plan.condemn([extra], f"duplicate of ordinal {ordinal}")
    return members


def _scale(plan: Plan, ctx: Context, members: dict[int, ObservedPod]) -> None:
    """Condemn the excess over replicas; pods already terminating count as going first."""
    excess = len(members) - ctx.spec.replicas
    if excess <= 0:
        return
    ranked = sorted(members.items(), key=lambda item: (not item[1].terminating, ctx.order(item[1], item[0])))
    plan.condemn((pod for _, pod in ranked[:excess]), f"scale-in to {ctx.spec.replicas} replicas", delete_node=True)


def _rolling_update(plan: Plan, ctx: Context, members: list[tuple[ObservedPod, int | None]], target: int) -> None:
    """Replace old-revision pods, keeping at most maxUnavailable of `target` unavailable.

    Unhealthy old pods go at once (they serve nothing). Healthy ones go in victim order, as
    many as the budget leaves after every pod that is already unavailable or missing.
    """
    live = [(p, o) for p, o in members if not p.terminating and p.name not in plan.condemned]
    old = [(p, o) for p, o in live if p.revision != ctx.revision]
    reason = f"rolling update to revision {ctx.revision}"
    plan.condemn((p for p, _ in old if not p.healthy), reason)
    available = sum(1 for p, _ in live if p.name not in plan.condemned and ctx.available(p))
    budget = scaled_max_unavailable(ctx.spec.max_unavailable, target) - max(0, target - available)
    healthy_old = sorted((m for m in old if m[0].name not in plan.condemned), key=lambda m: ctx.order(m[0], m[1]))
    plan.condemn((p for p, _ in healthy_old[: max(0, budget)]), reason)


def _scheduled_update(plan: Plan, ctx: Context, members: Iterable[ObservedPod]) -> None:
    """Old-revision pods whose Slurm node is in maintenance under our reservation go (drained first).

    Both words come from slurm_sync: the pod's SlurmNodeStateMaintenance condition and the
    NodeSet's reservation report naming the node. Outside the window nothing is condemned.
    """
    reason = f"scheduled update to revision {ctx.revision} in maintenance reservation"
    plan.condemn(
        (
            p
            for p in members
            if p.revision != ctx.revision and "MAINTENANCE" in p.slurm_states and p.hostname in ctx.maintenance
        ),
        reason,
    )


def _node_keeper(plan: Plan, ctx: Context, group: list[ObservedPod], node: str, hostname: str) -> ObservedPod | None:
    """The one pod that serves a node; pods with a stale hostname or extra pods are condemned."""
    stale = [p for p in group if p.hostname != hostname]
    plan.condemn(stale, f"hostname of node {node} changed to {hostname}")
    live = [p for p in group if p not in stale and not p.terminating]
    if not live:
        return None
    expected = daemonset_slot(ctx.spec, node, hostname).name
    keeper = max(live, key=lambda p: (p.name == expected, ctx.order(p)))
    plan.condemn((p for p in live if p is not keeper), f"another pod already serves node {node}")
    return keeper


def _pin(spec: NodeSetSpec, ordinal: int, ordinal_to_node: dict[str, str], fits: dict[str, Fit]) -> str | None:
    """pinToNode: the node this ordinal first ran on, while that node exists and the pod fits it."""
    if not spec.pin_to_node:
        return None
    node = ordinal_to_node.get(str(ordinal))
    return node if node is not None and node in fits and fits[node].should_run else None


def _ordinal(pod_name: str, nodeset: str) -> int | None:
    match = _ordinal_pattern(nodeset).fullmatch(pod_name)
    return int(match.group(1)) if match else None


@functools.lru_cache(maxsize=256)
def _ordinal_pattern(nodeset: str) -> re.Pattern[str]:
    """`<nodeset>-<ordinal>`, compiled once per NodeSet name (every pod's name is matched on each sync)."""
    return re.compile(re.escape(nodeset) + r"-([0-9]{1,10})")

"""One pass's pod writes (issue 28, docs/architecture.md §4.8): up to ``workers`` pods at once, busiest first,
the busiest while the pass is still planning the others.

A storm of changes (a slurmctld restart, a partition drained) gives a pass thousands of pods to write, and
planning them all takes a while at 20,000 nodes. A pod whose node just took a job and lacks its ``pod-protect``
label (what keeps a node drain from evicting that job) is written as soon as it is planned; the others once
planning ends, in ``plan.write_order``. A pod's own writes keep their order (``OperatorLoop._apply_pod``), a
pass ends only when every pod's have ended, and each worker's tally joins the pass's in write order, so that
its errors read as if one writer had made them. With one worker, or one pod to write, writes are made on the
pass's own thread in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor

from slurm_sync.operator import plan as planning
from slurm_sync.operator.plan import PodPlan, PodState
from slurm_sync.operator.steps import Tally

Apply = Callable[[PodPlan, Tally], PodState]  # one pod's writes, counted in the tally given


def urgent(plan: PodPlan) -> bool:
    """The plan labels a pod whose node runs a job (``plan.write_order``'s first rank)."""
    return planning.write_order(plan)[0] == 0


class PodWrites:
    """The writes of one pass: ``add`` each plan with work as it is made, then ``finish``."""

    def __init__(self, apply: Apply, pool: ThreadPoolExecutor | None) -> None:
        self._apply, self._pool = apply, pool
        self._started: list[tuple[PodPlan, Tally, Future[PodState] | PodState]] = []
        self._later: list[PodPlan] = []

    def add(self, plan: PodPlan) -> None:
        if urgent(plan):
            self._start(plan, self._pool)
        else:
            self._later.append(plan)

    def abandon(self) -> None:
        """The pass failed while planning: the writes already started end before it does (fail closed: no write
        of a failed pass goes on beside the next one)."""
        futures.wait([done for _, _, done in self._started if isinstance(done, Future)])

    def finish(self, tally: Tally) -> dict[str, PodState]:
        """Every pod's writes made: each pod's state after them; the workers' tallies added to ``tally``."""
        later = sorted(self._later, key=planning.write_order)
        pool = self._pool if self._started or len(later) > 1 else None
        for plan in later:
            self._start(plan, pool)
        futures.wait([done for _, _, done in self._started if isinstance(done, Future)])
        states = {}
        for plan, own, done in self._started:
            tally.merge(own)
            states[plan.pod.name] = done.result() if isinstance(done, Future) else done
        return states

    def _start(self, plan: PodPlan, pool: ThreadPoolExecutor | None) -> None:
        own = Tally()
        done = pool.submit(self._apply, plan, own) if pool is not None else self._apply(plan, own)
        self._started.append((plan, own, done))

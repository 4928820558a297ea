"""The chaos suite: every fault kind, on the operator side and on the bridge side, against the
real Slurm lab through the fault proxy (tests/chaos/rigs.py describes the two scenes).

For each fault: no wrong Kubernetes write (judged against the real Slurm after every pass), no
wrong Slurm write (judged on what the proxy let through), readiness false while the fault lasts
(unless the side never asks what the fault touches), the job still RUNNING in the real slurmctld
afterwards, and recovery without help once the fault clears (the work held back during the fault
gets done). Each test records its outcome for the summary line (tests/chaos/summary.py)
before it asserts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import pytest
from pytest_httpserver import HTTPServer

from tests.chaos.faults import KINDS, FaultKind, Target
from tests.chaos.proxy import FaultProxy
from tests.chaos.rigs import BUSY_NODE, BridgeRig, BridgeScene, Install, Judge, OperatorRig, OperatorScene, job_node
from tests.chaos.summary import PROPERTY, outcome
from tests.fixtures.slurm import wait_for

pytestmark = pytest.mark.slurm
RECOVERY_WAIT = 20.0  # seconds of passes allowed to recover (the outage itself waits for a restarted slurmctld)


class Side(Protocol):
    side: str
    judge: Judge

    def settle(self) -> None: ...

    def tempt(self) -> None: ...

    def step(self) -> bool: ...

    def ready(self) -> tuple[bool, str]: ...

    def lost(self) -> str | None: ...

    def recovered(self) -> bool: ...

    def survived(self) -> None: ...

    def slurm_wrongs(self, fault: str, foreign: bool) -> list[str]: ...


Record = Callable[[str, object], None]  # pytest's record_property


def trial(side: Side, kind: FaultKind, target: Target, proxy: FaultProxy, record_property: Record) -> None:
    """Settle, fault for ``kind.passes`` passes, clear, recover; then judge everything at once."""
    judge = side.judge
    try:
        side.settle()
        with kind.outage(judge.lab), proxy.injecting(kind.name, kind.make(target)):
            judge.blind = kind.blinds
            side.tempt()
            for _ in range(kind.passes):
                side.step()
            ready, why = side.ready()
        judge.blind = False
        if side.side not in kind.spares:
            judge.check(not ready, f"readiness stayed true under {kind.name}: nobody is told that Slurm is not heard")
        elif not ready:
            judge.failures.append(f"unready under {kind.name}, which {side.side} never asks about: {why}")
        lost = side.lost()
        if lost:
            judge.failures.append(f"nothing to recover: {lost}")
        else:
            try:
                wait_for(side.recovered, bool, timeout=RECOVERY_WAIT, interval=0.1, what=f"recovery after {kind.name}")
            except AssertionError as exc:
                judge.failures.append(f"no recovery: {exc}")
        side.survived()
        judge.wrongs += side.slurm_wrongs(kind.name, kind.foreign)
    finally:
        record_property(PROPERTY, outcome(kind.name, side.side, judge.wrongs))
    if judge.wrongs:
        lines = "\n".join(judge.wrongs + judge.failures)
        pytest.fail(f"{len(judge.wrongs)} wrong write(s) under {kind.name}:\n{lines}")
    if judge.failures:
        pytest.fail(f"under {kind.name}:\n" + "\n".join(judge.failures))


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_operator_side(
    kind: FaultKind,
    operator_scene: OperatorScene,
    proxy: FaultProxy,
    httpserver: HTTPServer,
    install: Install,
    record_property: Record,
) -> None:
    operator_scene.ensure()
    rig = OperatorRig.build(operator_scene, proxy, httpserver.url_for("/"), install)
    try:
        trial(rig, kind, Target(BUSY_NODE, operator_scene.lab.jwt_key_file.read_bytes()), proxy, record_property)
    finally:
        rig.close()


@pytest.mark.parametrize("kind", KINDS, ids=str)
def test_bridge_side(
    kind: FaultKind,
    bridge_scene: BridgeScene,
    proxy: FaultProxy,
    httpserver: HTTPServer,
    install: Install,
    record_property: Record,
) -> None:
    url = httpserver.url_for("/")
    bridge_scene.ensure(url, install)
    rig = BridgeRig.build(bridge_scene, proxy, url, install, newcomer=f"new-{kind.name}")
    try:
        target = Target(job_node(bridge_scene.lab, bridge_scene.job), bridge_scene.lab.jwt_key_file.read_bytes())
        trial(rig, kind, target, proxy, record_property)
    finally:
        rig.close()

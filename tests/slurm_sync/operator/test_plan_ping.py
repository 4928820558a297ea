"""When a pass whose node listing answered pings Slurm (issue 30): only when the active slurmctld label may
have to move, among two slurmctld pods or more, or onto a lone pod not labelled yet."""

from __future__ import annotations

import pytest

from slurm_sync.operator.plan import needs_ping
from slurm_sync.operator.view import ControllerPodView


def ctld(name: str, active: bool) -> ControllerPodView:
    return ControllerPodView("ns", name, name, active)


@pytest.mark.parametrize(
    ("pods", "pinged"),
    [
        ((), False),  # an external slurmctld: no pod to label
        ((ctld("c-0", True),), False),  # the lone pod, labelled: nothing a ping could change
        ((ctld("c-0", False),), True),  # its first pass
        ((ctld("c-0", True), ctld("c-1", False)), True),  # a backup could have taken over
        ((ctld("c-0", True), ctld("c-1", True)), True),  # two labelled (a patch failed half way): one must go
    ],
)
def test_a_ping_only_where_the_active_label_can_move(pods: tuple[ControllerPodView, ...], pinged: bool) -> None:
    assert needs_ping(pods) is pinged

"""A node that registers while a pass runs, after the pass read Slurm's node listing and before it asks
about the node by name (issue 30: a pod's slurmd starting during a scale-out): the pass reads the listing
again at once and plans the node from it, instead of writing nothing for it until the next pass. A node
the second listing lacks too is a wrong listing (tests/slurm_sync/operator/test_loop.py): nothing written.
The same on the real Slurm lab: tests/slurm_sync/test_service_registration.py."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_httpserver import HTTPServer

from slurm_sync.slurm.types import Node
from tests.slurm_sync.kubefixtures import FakeSlurm, controller_pod, kube_node, node, nodeset
from tests.slurm_sync.operator.looprig import COMMENT, IDLE_STATE, expect_reads, loop, run, settled_hash, steady_pod


@dataclass
class RegisteringSlurm(FakeSlurm):
    """Each unlisted node registers just before Slurm is asked about it by name."""

    def get_node(self, name: str) -> Node:
        self.unlisted.discard(name)
        return super().get_node(name)


def test_a_node_registered_after_the_listing_is_planned_in_the_same_pass(server: HTTPServer) -> None:
    slurm = RegisteringSlurm({"gpu-0": node("gpu-0", "IDLE")}, unlisted={"gpu-0"})  # no comment yet: new
    expect_reads(
        server,
        [steady_pod()],
        [nodeset(observed=settled_hash(("gpu-0", IDLE_STATE)))],
        [kube_node()],
        [controller_pod("slurm-controller-0", active=True)],
    )
    result = run(server, loop(server, slurm))
    assert slurm.asked == ["gpu-0"] and slurm.relists == 1, "asked by name, then the listing read again whole"
    assert [(name, update.comment) for name, update in slurm.updates] == [("gpu-0", COMMENT)]
    assert result.ok and result.slurm_writes == 1

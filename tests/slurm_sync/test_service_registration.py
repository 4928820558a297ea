"""A Slurm node deleted and registered again under the same name, on the real Slurm 26.05 lab (issue 30): its
pod's slurmd starting again during a scale-out. The pass during which it registers, after that pass read
the node listing and before it asked about the node by name, reads the listing again and plans the node
at once: its pod's podInfo comment is in Slurm when that pass ends. It used to be "missing from the listing
but Slurm has it ... nothing written" until the next pass, up to a poll interval later.

A dynamic slurmd (`slurmd -Z`, as a NodeSet pod's) is started inside the pass, right after slurmrestd
answered the node listing (an httpx response hook), and the pass goes on once slurmctld has registered it.
The lab is shared: the slurmd (by PID) and the record are removed in ``finally``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
from pytest_httpserver import HTTPServer

from tests.fixtures.slurm import SlurmLab, _load_lab
from tests.slurm_sync.dynamicnode import NODE, registered_idle, start_slurmd, stop
from tests.slurm_sync.kubefixtures import NS, pod
from tests.slurm_sync.servicerig import Rig, rig_of

pytestmark = pytest.mark.slurm


@pytest.fixture
def rig(slurm_lab: SlurmLab, httpserver: HTTPServer) -> Iterator[Rig]:
    slurmds = [start_slurmd(2, 500)]
    try:
        with rig_of(slurm_lab, httpserver, "n3", "n4") as rig:
            rig.kube.add("pods", pod("gpu-0", NODE))
            registered_idle(rig.lab)
            rig.slurmds = slurmds  # type: ignore[attr-defined]
            yield rig
    finally:
        for slurmd in slurmds:
            stop(slurmd)
        _load_lab().run("scontrol", "delete", f"nodename={NODE}")


def comment(rig: Rig) -> str:
    shown = rig.lab.run("scontrol", "show", "node", NODE).stdout
    return next((part.removeprefix("Comment=") for part in shown.split() if part.startswith("Comment=")), "")


def register_after_the_listing(rig: Rig) -> None:
    """Start the slurmd once the pass's next node listing is answered; let the pass go on once registered."""
    client = rig.service.clusters.handles[f"{NS}/slurm"].client
    hooks = client._http.event_hooks["response"]

    def once(response: httpx.Response) -> None:
        if response.request.url.path.endswith("/nodes/"):
            hooks.remove(once)
            rig.slurmds.append(start_slurmd(2, 500))  # type: ignore[attr-defined]
            registered_idle(rig.lab)

    hooks.append(once)


def test_a_node_registered_again_is_planned_in_the_pass_it_registers_in(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    assert rig.service.run_pass()
    assert '"podName":"gpu-0"' in comment(rig), "the first registration, planned"
    stop(rig.slurmds[0])  # type: ignore[attr-defined]  # scaled in: the pod's slurmd stops, its record goes
    rig.lab.run("scontrol", "delete", f"nodename={NODE}", check=True)
    assert rig.service.run_pass()  # Slurm says the node does not exist: evidence, nothing proven yet
    register_after_the_listing(rig)
    with caplog.at_level(logging.INFO, logger="slurm_sync"):
        assert rig.service.run_pass()
    assert '"podName":"gpu-0"' in comment(rig), "the new record's podInfo, written by that pass"
    assert f"node {NODE} registered after the pass read the listing" in caplog.text
    assert "missing from the listing but Slurm has it" not in caplog.text

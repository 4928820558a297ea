"""The whole service against the real Slurm 26.05 lab (slurmrestd via --slurm-url) and a small
stateful Kubernetes fake: discovery, token minting, drains, marks, fail-closed, recovery.

The lab is shared: these tests drain only n3/n4 and restore them (resume, scancel, comment) in
``finally`` blocks. The outage test kills the lab's slurmrestd and starts it again exactly as the lab did (not
with up.sh, which would rebuild the whole lab with a new JWT key under everyone else's tests).
"""

from __future__ import annotations

import threading

import httpx
import pytest

from slinky_common import names
from slurm_sync.service import health_server
from tests.fixtures.slurm import wait_for
from tests.fixtures.slurmrestd import (
    Daemon,
    kill_slurmrestd,
    start_slurmrestd,
)
from tests.slurm_sync.kubefixtures import NS
from tests.slurm_sync.servicerig import (
    OUR_REASON,
    Rig,
    sbatch,
)

pytestmark = pytest.mark.slurm


def test_busy_node_is_drained_but_marked_only_after_the_job_ends(rig: Rig) -> None:
    job = sbatch(rig.lab, "n3")
    try:
        wait_for(lambda: rig.slurm_node("n3"), lambda s: "State=ALLOCATED" in s or "State=MIXED" in s, what="job on n3")
        rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
        assert rig.service.run_pass()
        out = wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 draining")
        assert f"Reason={OUR_REASON}" in out
        assert rig.service.run_pass()
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n3")
        assert {"SlurmNodeStateDrain", "SlurmNodeStateAllocated"} <= set(rig.conditions("gpu-n3")) or {
            "SlurmNodeStateDrain",
            "SlurmNodeStateMixed",
        } <= set(rig.conditions("gpu-n3"))
        assert rig.pod("gpu-n3")["metadata"]["labels"][names.LABEL_POD_PROTECT] == "true"
        observed = rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_SLURM_OBSERVED]
        rig.lab.run("scancel", str(job), check=True)
        wait_for(
            lambda: rig.slurm_node("n3"),
            lambda s: "ALLOCATED" not in s and "MIXED" not in s and "COMPLETING" not in s,
            what="n3 idle",
        )
        assert rig.service.run_pass()
        assert rig.annotations("gpu-n3")[names.ANNOTATION_DRAINED] == "true"
        assert names.LABEL_POD_PROTECT not in rig.pod("gpu-n3")["metadata"]["labels"]
        assert (
            rig.kube.get("nodesets", NS, "gpu")["metadata"]["annotations"][names.ANNOTATION_SLURM_OBSERVED] != observed
        )
        assert rig.annotations("gpu-n4").get(names.ANNOTATION_DRAINED) is None
        # settled: another pass writes nothing anywhere
        before = len(rig.kube.writes)
        assert rig.service.run_pass()
        assert rig.kube.writes[before:] == []
    finally:
        rig.lab.run("scancel", str(job))


def test_administrators_drain_is_mirrored_and_never_lifted(rig: Rig) -> None:
    rig.lab.run("scontrol", "update", "nodename=n4", "state=drain", "reason=maint", check=True)
    for _ in range(2):
        assert rig.service.run_pass()
        assert rig.conditions("gpu-n4")["SlurmNodeStateDrain"] == "maint"
    assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
    out = rig.slurm_node("n4")
    assert "DRAIN" in out and "Reason=maint" in out
    # the pod link is written to the Slurm node comment
    assert '"podName":"gpu-n4"' in out


def test_slurmrestd_outage_fails_closed_and_recovers(rig: Rig) -> None:
    server = health_server("127.0.0.1:0", rig.service.health, rig.metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    daemon: Daemon | None = None
    try:
        assert httpx.get(base + "/readyz").status_code == 503  # before the first pass
        rig.set_intents({"gpu-n4": "scale-in to 1 replicas"})
        assert rig.service.run_pass()
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" in s, what="n4 drained by us")
        assert rig.service.run_pass()
        assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
        assert httpx.get(base + "/readyz").status_code == 200
        # intent gone (scale back up) while slurmrestd dies: nothing may move
        rig.set_intents({})
        daemon = kill_slurmrestd(rig.lab)
        before = len(rig.kube.writes)
        assert not rig.service.run_pass()
        assert rig.object_writes(before) == []
        (event,) = rig.events(before)  # said on the Controller
        assert event[:4] == ("Warning", "SlurmUnreadable", "Controller", "slurm") and "Connection refused" in event[4]
        assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"  # unknown is not false
        assert names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations("gpu-n3")
        assert f"Reason={OUR_REASON}" in rig.slurm_node("n4")  # not undrained (scontrol talks to slurmctld)
        ready = httpx.get(base + "/readyz")
        assert ready.status_code == 503 and "slurm/slurm" in ready.text
        assert (
            rig.metrics.registry.get_sample_value(
                "slurm_sync_slurm_errors_total", {"cluster": f"{NS}/slurm", "kind": "unavailable"}
            )
            >= 1
        )
        # slurmrestd returns: the loop recovers by itself, and only now lifts our drain (mark first)
        start_slurmrestd(rig.lab, daemon)
        daemon = None
        assert rig.service.run_pass()
        assert httpx.get(base + "/readyz").status_code == 200
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n4")
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" not in s, what="n4 undrained by us")
        # Slurm briefly shows NOT_RESPONDING after an undrain; the conditions follow it
        wait_for(
            lambda: (rig.service.run_pass(), rig.conditions("gpu-n4"))[1],
            lambda c: c == {"SlurmNodeStateIdle": ""},
            what="gpu-n4 conditions back to Idle",
        )
    finally:
        server.shutdown()
        server.server_close()
        if daemon is not None:
            start_slurmrestd(rig.lab, daemon)


def test_slurmrestd_dying_between_the_listing_and_the_updates_of_one_pass_moves_nothing(rig: Rig) -> None:
    """The node and job listings of a pass succeed (an idle pass pings no more: the slurmctld pod is
    labelled), then slurmrestd dies before the pass's first node update: the half pass may not set a
    drained or absent mark nor lift a drain, and the next full pass finishes the job."""
    rig.set_intents({"gpu-n4": "scale-in to 1 replicas"})
    assert rig.service.run_pass()
    wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" in s, what="n4 drained by us")
    assert rig.service.run_pass()
    assert rig.annotations("gpu-n4")[names.ANNOTATION_DRAINED] == "true"
    # now: drain n3 (new intent) and lift our drain of n4 (intent gone) in one pass
    rig.set_intents({"gpu-n3": "scale-in to 1 replicas"})
    dead: list[Daemon] = []
    reads: list[str] = []
    killing = threading.Lock()  # the pass sends its pods' updates from several workers at once

    def die_before_the_first_write(request: httpx.Request) -> None:
        if request.method == "GET":
            reads.append(request.url.path)
            return
        with killing:
            if not dead:
                dead.append(kill_slurmrestd(rig.lab))

    (handle,) = rig.service.clusters.handles.values()
    handle.client._http.event_hooks["request"].append(die_before_the_first_write)
    try:
        assert not rig.service.run_pass()
        assert dead, "the pass made no Slurm write: the test did not test anything"
        assert any(p.endswith("/nodes/") for p in reads) and any(p.endswith("/jobs/") for p in reads)
        n3, n4 = rig.slurm_node("n3"), rig.slurm_node("n4")
        assert "DRAIN" not in n3  # its drain failed ...
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n3")  # ... and no mark claims one
        assert "DRAIN" in n4 and f"Reason={OUR_REASON}" in n4  # not undrained
        # the mark goes before the undrain by design (a drained mark never outlives its drain); the
        # node stays drained, so the next pass lifts it
        assert names.ANNOTATION_DRAINED not in rig.annotations("gpu-n4")
        assert all(names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations(p) for p in ("gpu-n3", "gpu-n4"))
        ready, why = rig.service.health.ready()  # Slurm was read, but our writes failed: not ready, and why
        assert not ready and f"{NS}/slurm: Slurm cluster " in why and "update node n3 (DRAIN): POST " in why
        handle.client._http.event_hooks["request"].remove(die_before_the_first_write)
        start_slurmrestd(rig.lab, dead.pop())
        assert rig.service.run_pass()
        wait_for(lambda: rig.slurm_node("n4"), lambda s: "DRAIN" not in s, what="n4 undrained by the next pass")
        wait_for(lambda: rig.slurm_node("n3"), lambda s: "DRAIN" in s, what="n3 drained by the next pass")
        assert all(names.ANNOTATION_SLURM_NODE_ABSENT not in rig.annotations(p) for p in ("gpu-n3", "gpu-n4"))
    finally:
        if dead:
            start_slurmrestd(rig.lab, dead.pop())

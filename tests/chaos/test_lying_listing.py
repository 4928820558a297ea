"""Issue 24's lying listing, on the real Slurm through the fault proxy: for two passes slurmrestd answers
an empty node listing and a not-found for each node asked about, while the job listing of the same
passes still shows the scene's job on n3 (tests/chaos/rigs.py: gpu-n3 drains around it, protected).

Busy evidence wins: no pod is marked absent, none loses pod-protect or a Slurm state condition, and
``/readyz`` is 503 naming the contradiction. Once slurmrestd tells the truth again, the very next pass
lists the nodes whole (an incremental listing would answer "not modified" and keep the emptied view)
and acts on them: gpu-n4, condemned during the fault, has its node drained in that pass.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest
from pytest_httpserver import HTTPServer

from slinky_common import names
from slurm_sync.metrics import Metrics
from slurm_sync.service import health_server
from tests.chaos.faults import NodesGone
from tests.chaos.proxy import FaultProxy
from tests.chaos.rigs import BUSY_NODE, SPARE_NODE, Install, OperatorRig, OperatorScene
from tests.chaos.rules import KubeWrite

pytestmark = pytest.mark.slurm
FAULT = "lying-listing"
LYING_PASSES = 2  # the "twice": with absence confirmed on any later pass, enough to mark


@pytest.fixture
def rig(operator_scene: OperatorScene, proxy: FaultProxy, httpserver: HTTPServer, install: Install
        ) -> Iterator[OperatorRig]:  # fmt: skip
    operator_scene.ensure()
    built = OperatorRig.build(operator_scene, proxy, httpserver.url_for("/"), install)
    try:
        yield built
    finally:
        built.close()


@pytest.fixture
def readyz(rig: OperatorRig) -> Iterator[str]:
    """slurm_sync's own /readyz over HTTP, as the kubelet probes it."""
    server: ThreadingHTTPServer = health_server("127.0.0.1:0", rig.service.health, Metrics())
    threading.Thread(target=server.serve_forever, name="readyz", daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/readyz"
    finally:
        server.shutdown()
        server.server_close()


def marks_and_removals(writes: Iterable[KubeWrite]) -> list[str]:
    """Every absent mark set, pod-protect label removed or Slurm state condition deleted on a pod."""
    found = []
    for _, path, _, body in writes:
        meta = (body.get("metadata") or {}) if isinstance(body, dict) else {}
        if (meta.get("annotations") or {}).get(names.ANNOTATION_SLURM_NODE_ABSENT) == "true":
            found.append(f"{path}: marked {names.ANNOTATION_SLURM_NODE_ABSENT}")
        if names.LABEL_POD_PROTECT in (meta.get("labels") or {}) and meta["labels"][names.LABEL_POD_PROTECT] is None:
            found.append(f"{path}: {names.LABEL_POD_PROTECT} removed")
        conditions = ((body.get("status") or {}).get("conditions") or []) if isinstance(body, dict) else []
        found += [f"{path}: condition {c.get('type')} removed" for c in conditions if c.get("$patch") == "delete"]
    return found


def test_a_listing_that_lies_while_jobs_run_marks_nothing_and_is_forgotten_in_one_pass(
    rig: OperatorRig, proxy: FaultProxy, readyz: str
) -> None:
    rig.settle()
    written = len(rig.kube.writes)
    with proxy.injecting(FAULT, NodesGone()):
        rig.tempt()
        for _ in range(LYING_PASSES):
            rig.step()
        answer = httpx.get(readyz, timeout=10)
    lied = [e for e in proxy.exchanges if e.fault == FAULT and e.request.method == "GET"
            and e.request.endpoint.startswith("node/")]  # fmt: skip
    assert lied, "slurm_sync never asked about a node: the lie was not told"
    assert marks_and_removals(rig.kube.writes[written:]) == []
    assert answer.status_code == 503, answer.text
    assert f"node {BUSY_NODE}: missing from Slurm's node listing, yet its job listing shows job(s) " in answer.text
    assert f"{rig.scene.job}" in answer.text and "contradicting answers" in answer.text

    after = len(proxy.exchanges)
    rig.step()  # the first pass once slurmrestd tells the truth again
    listings = [e for e in proxy.exchanges[after:] if e.request.method == "GET" and e.request.endpoint == "nodes"]
    assert [(dict(e.request.query).get("update_time"), e.status) for e in listings] == [(None, 200)]
    drains = [e.request for e in proxy.exchanges[after:] if e.forwarded and e.request.is_write
              and e.request.endpoint == f"node/{SPARE_NODE}" and b'"DRAIN"' in e.request.body]  # fmt: skip
    assert drains, f"{SPARE_NODE} was not drained in the first pass after the fault: the emptied view stayed"
    assert rig.ready()[0], rig.ready()[1]
    rig.survived()
    assert rig.judge.wrongs == [] and rig.judge.failures == []

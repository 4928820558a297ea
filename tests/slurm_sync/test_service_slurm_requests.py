"""The slurmrestd requests an idle pass makes, on the real Slurm lab (issue 30): the node listing and the job
listing, each a "nothing changed since" answer, and no ping while the cluster's lone slurmctld pod is
labelled active (the ping's only use when the listing answered is moving that label). With a second
slurmctld pod (a backup) every pass pings again, and so does one whose node listing failed. Each request
is counted at the cluster's client (an httpx event hook)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from slinky_common import names
from tests.slurm_sync.kubefixtures import NS, controller_pod
from tests.slurm_sync.servicerig import Rig

pytestmark = pytest.mark.slurm


@pytest.fixture
def sent(rig: Rig) -> Iterator[list[str]]:
    """Each request the cluster's client sends, as ``METHOD /path`` (without the REST version)."""
    assert rig.service.run_pass()
    seen: list[str] = []
    client = rig.service.clusters.handles[f"{NS}/slurm"].client

    def record(request: httpx.Request) -> None:
        seen.append(f"{request.method} {request.url.path.split('/', 3)[-1]}")

    client._http.event_hooks["request"].append(record)
    yield seen


def is_slurmctld(pod: dict) -> bool:
    return pod["metadata"]["labels"].get(names.LABEL_NAME) == "slurmctld"


def idle_passes(rig: Rig, sent: list[str], count: int) -> list[str]:
    sent.clear()
    for _ in range(count):
        assert rig.service.run_pass()
    return list(sent)


def test_an_idle_pass_asks_for_the_two_listings_and_no_ping(rig: Rig, sent: list[str]) -> None:
    assert idle_passes(rig, sent, 2), "settled"
    (ctld,) = [p for (kind, _, _), p in rig.kube.objects.items() if kind == "pods" and is_slurmctld(p)]
    assert ctld["metadata"]["labels"].get(names.LABEL_ACTIVE_CONTROLLER) == "true", "labelled by the first pass"
    assert idle_passes(rig, sent, 5) == ["GET nodes/", "GET jobs/"] * 5


def test_a_second_slurmctld_pod_has_every_pass_ping(rig: Rig, sent: list[str]) -> None:
    rig.kube.add("pods", controller_pod("slurm-backup"))
    assert idle_passes(rig, sent, 3) == ["GET nodes/", "GET jobs/", "GET ping/"] * 3

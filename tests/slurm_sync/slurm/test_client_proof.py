"""What the client treats as proof, against the real slurmrestd (Slurm 26.05) with injected wrong
answers: "not found" is only Slurm's per-object answer, and an answer of another cluster is refused
before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from slurm_sync.slurm.client import SlurmClient
from slurm_sync.slurm.errors import SlurmNotFound, SlurmUnavailable, SlurmWrongCluster
from slurm_sync.slurm.types import NodeUpdate
from tests.fixtures.slurm import SlurmLab
from tests.slurm_sync.inject import Injector, answer, rename_cluster, slurm_meta

pytestmark = pytest.mark.slurm


def lab_cluster(slurm_lab: SlurmLab) -> str:
    out = slurm_lab.run("scontrol", "show", "config", check=True).stdout
    return next(line.split("=", 1)[1].strip() for line in out.splitlines() if line.startswith("ClusterName"))


@pytest.fixture
def injector() -> Injector:
    return Injector()


@pytest.fixture
def client(slurm_lab: SlurmLab, injector: Injector) -> Iterator[SlurmClient]:
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30, transport=injector) as c:
        yield c


def test_a_missing_node_is_not_found_only_on_slurms_own_answer(client: SlurmClient) -> None:
    assert client.get_node("n2").name == "n2"
    with pytest.raises(SlurmNotFound, match="no node 'no-such-node'"):
        client.get_node("no-such-node")


def test_a_200_without_the_node_is_not_proof(client: SlurmClient, injector: Injector, slurm_lab: SlurmLab) -> None:
    injector.rules.append(
        answer("GET", "/node/n2", 200, {"nodes": [], "errors": [], "meta": slurm_meta(lab_cluster(slurm_lab))})
    )
    with pytest.raises(SlurmUnavailable) as info:
        client.get_node("n2")
    assert not isinstance(info.value, SlurmNotFound)


def test_a_missing_job_is_404_with_2017_and_an_empty_200_is_not_gone(
    client: SlurmClient, injector: Injector, slurm_lab: SlurmLab
) -> None:
    with pytest.raises(SlurmNotFound) as real:
        client.get_job(99_999_999)
    assert real.value.status == 404 and 2017 in real.value.numbers
    injector.rules.append(
        answer("GET", "/job/99999998", 200, {"jobs": [], "errors": [], "meta": slurm_meta(lab_cluster(slurm_lab))})
    )
    with pytest.raises(SlurmUnavailable, match="not proof") as fake:
        client.get_job(99_999_998)
    assert not isinstance(fake.value, SlurmNotFound)


def test_the_client_learns_the_cluster_and_matches_it_in_any_case(slurm_lab: SlurmLab, client: SlurmClient) -> None:
    name = lab_cluster(slurm_lab)
    client.ping()
    assert client.cluster == name
    with SlurmClient(slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30, cluster=name.upper()) as bound:
        assert bound.ping().controllers


def test_a_client_bound_to_another_cluster_reads_nothing_and_writes_nothing(slurm_lab: SlurmLab) -> None:
    injector = Injector()
    with SlurmClient(
        slurm_lab.rest_url, lambda: slurm_lab.token, timeout=30, cluster="other", transport=injector
    ) as bound:
        with pytest.raises(SlurmWrongCluster, match=f"serves Slurm cluster '{lab_cluster(slurm_lab)}', not 'other'"):
            bound.list_nodes()
        with pytest.raises(SlurmWrongCluster):
            bound.update_node("n3", NodeUpdate(state=("DRAIN",), reason="slurm-operator: wrong cluster"))
        with pytest.raises(SlurmWrongCluster):
            bound.get_job(99_999_999)  # another cluster's "not found" is no answer about ours
    assert injector.writes() == []
    assert "DRAIN" not in slurm_lab.run("scontrol", "show", "node", "n3", check=True).stdout


def test_a_slurmrestd_that_changes_cluster_is_refused(
    slurm_lab: SlurmLab, client: SlurmClient, injector: Injector
) -> None:
    client.ping()  # pins the lab's name
    injector.rules.append(rename_cluster("cluster-b"))
    with pytest.raises(SlurmWrongCluster):
        client.list_nodes()
    with pytest.raises(SlurmWrongCluster):
        client.update_node("n3", NodeUpdate(state=("DRAIN",), reason="slurm-operator: wrong cluster"))
    assert injector.writes() == []


def test_an_answer_naming_no_cluster_is_refused_once_bound(
    slurm_lab: SlurmLab, client: SlurmClient, injector: Injector
) -> None:
    client.ping()
    injector.rules.append(answer("GET", "/nodes/", 200, {"nodes": [], "errors": [], "meta": {}}))
    with pytest.raises(SlurmWrongCluster, match="names no Slurm cluster"):
        client.list_nodes()

"""A drain intent's epoch (docs/architecture.md §4.1): the NodeSet hook lets a condemned pod go only on the drained
mark of its current intent, never on one left from an intent it withdrew (model/drain.pml, -DNO_EPOCH)."""

from __future__ import annotations

from slinky_common import names
from tests.hooks.nodeset.builders import INTENT_EPOCH, children, nodeset, observed, request, sync

OLD = {"replicas": 1, "slurmd": {"image": "slurmd:1"}}
# a new image: the replacement registers as the old pod did, so a drained mark is enough (no record deletion)
NEW = {"replicas": 1, "updateStrategy": {"rollingUpdate": {"maxUnavailable": 1}}, "slurmd": {"image": "slurmd:2"}}


def epochs(resp: dict) -> dict[str, str]:
    return {i["name"]: i[names.DRAIN_EPOCH] for i in resp["status"][names.STATUS_DRAINING_PODS]}


def with_version(parent: dict, version: str) -> dict:
    parent["metadata"]["resourceVersion"] = version
    return parent


def test_an_intent_takes_the_nodesets_resource_version_and_keeps_it_while_it_stands(client):
    old = children(sync(client, request(nodeset(**OLD))))["gpu-0"]
    first = sync(client, request(nodeset(**NEW), pods=[observed(old)]))
    assert epochs(first) == {"gpu-0": INTENT_EPOCH}
    later = sync(client, request(with_version(nodeset(status=first["status"], **NEW), "52"), pods=[observed(old)]))
    assert epochs(later) == {"gpu-0": INTENT_EPOCH}, "a standing intent keeps its epoch"


def test_a_pod_goes_on_the_mark_of_its_intent(client):
    old = children(sync(client, request(nodeset(**OLD))))["gpu-0"]
    first = sync(client, request(nodeset(**NEW), pods=[observed(old)]))
    drained = observed(old, slurm=("Idle", "Drain"), drained=INTENT_EPOCH)
    assert children(sync(client, request(nodeset(status=first["status"], **NEW), pods=[drained]))) == {}


def test_an_intent_given_again_does_not_go_on_the_mark_of_the_one_withdrawn(client):
    """The race the model found: condemned (epoch 40), marked drained for it; the intent withdrawn (published:
    a rollback), and given again (the update re-applied, the NodeSet at resourceVersion 57) before slurm_sync
    carried out the withdrawal, which lifts the drain under the old mark. The pod stays until slurm_sync marks it
    drained for the new intent. Before the epoch the hook let it go on the old mark, and a job could start on
    its node as the pod was deleted."""
    old = children(sync(client, request(nodeset(**OLD))))["gpu-0"]
    first = sync(client, request(nodeset(**NEW), pods=[observed(old)]))
    stale = observed(old, slurm=("Idle", "Drain"), drained=INTENT_EPOCH)
    withdrawn = sync(client, request(with_version(nodeset(status=first["status"], **OLD), "51"), pods=[stale]))
    assert epochs(withdrawn) == {} and list(children(withdrawn)) == ["gpu-0"]
    again = sync(client, request(with_version(nodeset(status=withdrawn["status"], **NEW), "57"), pods=[stale]))
    assert epochs(again) == {"gpu-0": "57"}
    assert list(children(again)) == ["gpu-0"], "let go on the drained mark of an intent it had withdrawn"
    marked = observed(old, slurm=("Idle", "Drain"), drained="57")
    assert children(sync(client, request(nodeset(status=again["status"], **NEW), pods=[marked]))) == {}


def test_a_mark_without_an_epoch_lets_no_condemned_pod_go(client):
    """A plain mark (a cordon's drain, or one written before marks carried an epoch) answers no NodeSet intent:
    the pod goes once slurm_sync marks it for the published one, a pass later."""
    old = children(sync(client, request(nodeset(**OLD))))["gpu-0"]
    first = sync(client, request(nodeset(**NEW), pods=[observed(old)]))
    plain = observed(old, slurm=("Idle", "Drain"), drained=names.DRAINED_NO_EPOCH)
    assert list(children(sync(client, request(nodeset(status=first["status"], **NEW), pods=[plain])))) == ["gpu-0"]


def test_an_intent_published_without_an_epoch_goes_on_the_plain_mark(client):
    """Published by a hook before epochs, or through a CRD that prunes the field: slurm_sync writes the plain mark
    for it, and the pod goes on that, as before epochs (an upgrade never stalls a drain)."""
    old = children(sync(client, request(nodeset(**OLD))))["gpu-0"]
    first = sync(client, request(nodeset(**NEW), pods=[observed(old)]))
    for item in first["status"][names.STATUS_DRAINING_PODS]:
        del item[names.DRAIN_EPOCH]
    plain = observed(old, slurm=("Idle", "Drain"), drained=names.DRAINED_NO_EPOCH)
    assert children(sync(client, request(nodeset(status=first["status"], **NEW), pods=[plain]))) == {}

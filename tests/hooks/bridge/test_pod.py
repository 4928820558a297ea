"""The pod decorator over HTTP: deterministic strict JSON, error annotations, groups, customize,
finalize, and the hook side of vectors 13, 16 and 25-28 plus slurm-bridge #42/#43."""

from __future__ import annotations

import copy
import json

import pytest

from hooks.app import create_app
from slinky_common import names
from tests.hooks.bridge.builders import NS, body, container, obj, owner_ref, pod, request, slurmjob

PLACEHOLDER, GROUP, ERROR = (
    names.ANNOTATION_PLACEHOLDER_JOB,
    names.ANNOTATION_PLACEHOLDER_GROUP,
    names.ANNOTATION_JOB_ERROR,
)


@pytest.fixture(scope="module")
def client():
    return create_app().test_client()


def post(client, route, payload):
    resp = client.post(f"/bridge/pod/{route}", json=payload)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    json.loads(resp.get_data(), parse_constant=lambda c: pytest.fail(f"non-strict JSON {c}"))
    return resp


def sync(client, target, *rel):
    return post(client, "sync", body(request(target, *rel))).get_json()["annotations"]


def test_same_request_same_bytes_and_sorted_compact_job(client):
    target = pod(annotations=slurmjob(account="a", qos="q"), containers=[container(requests={"cpu": "2"})])
    payload = body(request(target))
    first, second = post(client, "sync", payload).get_data(), post(client, "sync", payload).get_data()
    assert first == second
    text = json.loads(first)["annotations"][PLACEHOLDER]
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def test_malformed_annotation_publishes_error_then_fix_removes_it(client):
    broken = sync(client, pod(annotations=slurmjob(timelimit="ten")))
    assert broken[PLACEHOLDER] is None and broken[GROUP] is None
    assert "slurmjob.slinky.slurm.net/timelimit='ten'" in broken[ERROR]
    fixed = sync(client, pod(annotations=slurmjob(timelimit="10")))
    assert fixed[ERROR] is None and json.loads(fixed[PLACEHOLDER])["time_limit"]["number"] == 10


def test_v16_changed_annotations_change_the_pending_job(client):
    before = sync(client, pod(annotations=slurmjob(qos="low")))
    after = sync(client, pod(annotations=slurmjob(qos="high")))
    assert before[GROUP] == after[GROUP] and before[PLACEHOLDER] != after[PLACEHOLDER]


@pytest.mark.parametrize(
    "settled",
    [
        pytest.param({"spec": {"nodeName": "n1"}}, id="bound"),
        pytest.param({"status": {"phase": "Succeeded"}}, id="succeeded"),
        pytest.param({"status": {"phase": "Failed"}}, id="failed"),
    ],
)
def test_bound_or_finished_pods_keep_their_job_unchanged(client, settled):
    target = pod(annotations=slurmjob(qos="changed-after-allocation"))
    for key, value in settled.items():
        target[key] |= value
    assert sync(client, target) == {}


def test_job_with_parallelism_gives_one_single_node_job_per_pod(client):
    """Slinky's Job translation is one pod per Slurm job; gangs need a PodGroup."""
    job = obj(
        "batch/v1", "Job", "j", spec={"parallelism": 3, "template": {"spec": {}}}, annotations=slurmjob(account="a")
    )
    pods = [pod(f"j-{i}", owner=owner_ref(job)) for i in range(3)]
    outs = [sync(client, p, job, *pods) for p in pods]
    assert len({o[GROUP] for o in outs}) == 3
    for p, out in zip(pods, outs, strict=True):
        body_ = json.loads(out[PLACEHOLDER])
        assert body_["nodes"] == "1" and json.loads(body_["admin_comment"]) == {
            "pods": [f"{NS}/{p['metadata']['name']}"]
        }


def _gang_members(kind):
    if kind == "coscheduling":
        group = obj("scheduling.x-k8s.io/v1alpha1", "PodGroup", "pg", spec={"minMember": 3})
        return group, [pod(n, labels={names.LABEL_COSCHEDULING_POD_GROUP: "pg"}) for n in ("w-c", "w-a", "w-b")]
    if kind == "built-in":
        group = obj(
            "scheduling.k8s.io/v1alpha2", "PodGroup", "pg", spec={"schedulingPolicy": {"gang": {"minCount": 3}}}
        )
        return group, [pod(n, spec={"schedulingGroup": {"podGroupName": "pg"}}) for n in ("w-c", "w-a", "w-b")]
    group = obj("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", "w", spec={"leaderWorkerTemplate": {"size": 3}})
    labels = {names.LABEL_LWS_NAME: "w", names.LABEL_LWS_GROUP_KEY: "k", names.LABEL_LWS_GROUP_INDEX: "0"}
    return group, [pod(n, labels=labels) for n in ("w-c", "w-a", "w-b")]


@pytest.mark.parametrize("kind", ["coscheduling", "built-in", "lws"])
def test_groups_give_one_job_listing_every_member_sorted(client, kind):
    group, members = _gang_members(kind)
    outs = [sync(client, m, group, *members) for m in members]
    assert len({(o[PLACEHOLDER], o[GROUP]) for o in outs}) == 1, "every member publishes the same job"
    body_ = json.loads(outs[0][PLACEHOLDER])
    assert body_["nodes"] == "3"
    assert json.loads(body_["admin_comment"]) == {"pods": [f"{NS}/w-a", f"{NS}/w-b", f"{NS}/w-c"]}


@pytest.mark.parametrize("kind", ["coscheduling", "built-in", "lws"])
def test_gang_short_after_a_member_ends_withdraws_the_job(client, kind):
    group, members = _gang_members(kind)
    members[2]["status"]["phase"] = "Failed"
    out = sync(client, members[0], group, *members)
    assert out[PLACEHOLDER] is None and "waiting for the rest" in out[ERROR]


def test_no_required_nodes_ever(client):
    """slurm-bridge #42/#43: listing every node in required_nodes made all jobs NODE_FAIL."""
    group, members = _gang_members("coscheduling")
    assert "required_nodes" not in json.loads(sync(client, members[0], group, *members)[PLACEHOLDER])


# --- customize ---------------------------------------------------------------------------------------


def customize(client, target):
    return post(client, "customize", {"controller": {}, "parent": target}).get_json()["relatedResources"]


def test_customize_bare_pod_needs_nothing(client):
    assert customize(client, pod()) == []


def test_customize_names_owner_and_group_objects(client):
    job = obj("batch/v1", "Job", "j")
    target = pod(owner=owner_ref(job), labels={names.LABEL_JOBSET_NAME: "js", names.LABEL_COSCHEDULING_POD_GROUP: "pg"})
    assert customize(client, target) == [
        {"apiVersion": "batch/v1", "resource": "jobs", "namespace": NS, "names": ["j"]},
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "resource": "jobsets", "namespace": NS, "names": ["js"]},
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "resource": "podgroups", "namespace": NS, "names": ["pg"]},
        {
            "apiVersion": "v1",
            "resource": "pods",
            "namespace": NS,
            "labelSelector": {"matchLabels": {names.LABEL_COSCHEDULING_POD_GROUP: "pg"}},
        },
    ]


def test_customize_lws_and_built_in_pod_group(client):
    _, (lws_pod, *_) = _gang_members("lws")
    kinds = [(r["resource"], r.get("names")) for r in customize(client, lws_pod)]
    assert kinds == [("leaderworkersets", ["w"]), ("pods", None)]
    _, (built_in_pod, *_) = _gang_members("built-in")
    rules = customize(client, built_in_pod)
    assert [(r["apiVersion"], r["resource"]) for r in rules] == [
        ("scheduling.k8s.io/v1alpha2", "podgroups"),
        ("scheduling.k8s.io/v1alpha2", "workloads"),
        ("v1", "pods"),
    ]
    assert all(r["namespace"] == NS for r in rules)


def test_customize_depends_only_on_what_a_generation_fixes(client):
    """Metacontroller caches customize per generation: labels slurm_sync adds must not matter."""
    target = pod(labels={names.LABEL_COSCHEDULING_POD_GROUP: "pg"})
    later = copy.deepcopy(target)
    later["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = "9"
    later["metadata"]["annotations"] = {names.ANNOTATION_SLURM_NODE: "n1"}
    assert customize(client, target) == customize(client, later)


# --- finalize (vectors 13, 25-28 hook side) ------------------------------------------------------------


def _deleting(job_id=None, released=None):
    target = pod(phase="Succeeded")
    target["metadata"]["deletionTimestamp"] = "2025-06-03T15:20:00Z"
    if job_id:
        target["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = job_id
    if released:
        target["metadata"]["annotations"] = {names.ANNOTATION_JOB_RELEASED: released}
    return target


@pytest.mark.parametrize(
    ("job_id", "released", "finalized"),
    [
        pytest.param(None, None, True, id="never-had-a-job"),
        pytest.param("42", None, False, id="v13-v26-job-recorded-held"),
        pytest.param("42", "41", False, id="stale-release-of-another-job-held"),
        pytest.param("42", "42", True, id="v27-released-by-slurm-sync"),
    ],
)
def test_finalize_holds_until_slurm_sync_releases_the_job(client, job_id, released, finalized):
    resp = post(client, "finalize", body(request(_deleting(job_id, released), finalizing=True))).get_json()
    assert resp["finalized"] is finalized
    assert resp["annotations"] == {PLACEHOLDER: None, GROUP: None, ERROR: None}
    assert "resyncAfterSeconds" not in resp


def test_example_requests_are_answered(client):
    from pathlib import Path

    examples = Path(__file__).resolve().parents[3] / "examples" / "requests"
    sync_out = client.post("/bridge/pod/sync", data=(examples / "bridge-pod-sync.json").read_bytes()).get_json()
    job = json.loads(sync_out["annotations"][PLACEHOLDER])
    assert (job["name"], job["account"], job["time_limit"]["number"]) == ("job-sleep-single", "physics", 5)
    fin = client.post("/bridge/pod/finalize", data=(examples / "bridge-pod-finalize.json").read_bytes()).get_json()
    assert fin["finalized"] is False  # job 42 recorded, not yet released


# --- missing inputs keep the published job (slurm_sync cancels a PENDING job nobody publishes) ----------


def _published(target, out, job_id="42"):
    """`target` as Metacontroller and slurm_sync leave it after `out` was applied and the job submitted."""
    later = copy.deepcopy(target)
    later["metadata"]["annotations"] = {
        **(later["metadata"].get("annotations") or {}),
        **{k: v for k, v in out.items() if v is not None},
    }
    later["metadata"]["labels"][names.LABEL_SLURM_JOB_ID] = job_id
    return later


def _applied(target, out):
    """The pod's annotations after Metacontroller merged `out` (null deletes, unlisted untouched)."""
    current = dict(target["metadata"].get("annotations") or {})
    for key, value in out.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = value
    return current


def _owned_cases():
    job = obj("batch/v1", "Job", "j", spec={"template": {"spec": {}}}, annotations=slurmjob(account="a"))
    yield "job", pod("j-0", owner=owner_ref(job)), [job], []
    jobset = obj("jobset.x-k8s.io/v1alpha2", "JobSet", "js", annotations=slurmjob(account="a"))
    js_pod = pod("js-0", owner=owner_ref(job), labels={names.LABEL_JOBSET_NAME: "js"})
    yield "jobset", js_pod, [jobset, job], []
    rs = obj("apps/v1", "ReplicaSet", "rs", annotations=slurmjob(account="a"))
    yield "replicaset", pod("rs-0", owner=owner_ref(rs)), [rs], []
    for kind in ("coscheduling", "built-in", "lws"):
        group, members = _gang_members(kind)
        yield kind, members[0], [group], members[1:]


@pytest.mark.parametrize(
    ("target", "owners", "members"), [pytest.param(t, o, m, id=i) for i, t, o, m in _owned_cases()]
)
def test_missing_related_owner_keeps_the_published_job(client, target, owners, members):
    """A related object absent from the request (cache lag) is no reason to withdraw the body:
    slurm_sync would cancel the PENDING job that no live pod publishes any more."""
    first = sync(client, target, *owners, *members)
    assert first[PLACEHOLDER] and first[ERROR] is None
    published = _published(target, first)
    before = published["metadata"]["annotations"]
    for missing in owners:
        rest = [o for o in owners if o is not missing]
        out = sync(client, published, *rest, *members)
        assert _applied(published, out) == before, f"{missing['kind']} missing changed {out}"
    assert _applied(published, sync(client, published, *members)) == before


@pytest.mark.parametrize(
    ("target", "owners", "members"),
    [pytest.param(t, o, m, id=i) for i, t, o, m in _owned_cases() if i != "coscheduling"],
)
def test_missing_related_owner_of_an_unpublished_pod_says_why(client, target, owners, members):
    out = sync(client, target, *members)
    assert out[PLACEHOLDER] is None and "was not found" in out[ERROR]


def test_a_real_change_still_withdraws_a_published_job(client):
    """Members gone or a broken annotation are the group's own change: the body goes."""
    group, members = _gang_members("lws")
    published = _published(members[0], sync(client, members[0], group, *members))
    ended = copy.deepcopy(members[2])
    ended["status"]["phase"] = "Failed"
    short = sync(client, published, group, members[1], ended)
    assert short[PLACEHOLDER] is None and short[GROUP] is None and "waiting for the rest" in short[ERROR]
    broken = copy.deepcopy(group)
    broken["metadata"]["annotations"] = slurmjob(timelimit="ten")
    bad = sync(client, published, broken, *members[1:])
    assert bad[PLACEHOLDER] is None and "timelimit" in bad[ERROR]

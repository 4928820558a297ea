"""Which pods share one Slurm job and whose annotations describe it (hooks/bridge/workload.py): the customize
rules, each step of `resolve`'s precedence as the Group it gives, and the GroupNotReady / RelatedMissing
messages for a workload that cannot be described yet."""

from __future__ import annotations

from typing import Any

import pytest

from hooks.bridge import workload
from hooks.bridge.workload import Group, GroupNotReady, RelatedMissing
from slinky_common import names, quantity
from slinky_common.jsontypes import JSON
from tests.hooks.bridge.builders import NS, obj, owner_ref, pod, request, slurmjob, with_changes

JOB_API, JOBSET_API, LWS_API = "batch/v1", "jobset.x-k8s.io/v1alpha2", "leaderworkerset.x-k8s.io/v1"
COSCHED_API, SCHED_API = "scheduling.x-k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2"


def job(name: str = "j", *, spec: JSON | None = None, annotations: dict[str, str] | None = None) -> JSON:
    return obj(JOB_API, "Job", name, spec=spec, annotations=annotations)


def lws_pod(name: str, group_key: str = "gk", index: str = "0", **kw: Any) -> JSON:
    labels = {names.LABEL_LWS_NAME: "lws", names.LABEL_LWS_GROUP_KEY: group_key, names.LABEL_LWS_GROUP_INDEX: index}
    return pod(name, labels=labels, **kw)


def cosched_pod(name: str, group: str = "pg", **kw: Any) -> JSON:
    return pod(name, labels={names.LABEL_COSCHEDULING_POD_GROUP: group}, **kw)


def built_in_pod(name: str, group: str = "pg", **kw: Any) -> JSON:
    return pod(name, spec={"schedulingGroup": {"podGroupName": group}}, **kw)


# --- kinds and small readers ------------------------------------------------------------------------------------


def test_type_keys_are_metacontrollers() -> None:
    assert [k.type_key for k in (workload.POD, workload.JOB, workload.JOBSET, workload.COSCHEDULING_POD_GROUP)] == [
        "Pod.v1",
        "Job.batch/v1",
        "JobSet.jobset.x-k8s.io/v1alpha2",
        "PodGroup.scheduling.x-k8s.io/v1alpha1",
    ]


@pytest.mark.parametrize(
    ("spec", "group"),
    [
        ({}, None),
        ({"schedulingGroup": None}, None),
        ({"schedulingGroup": {}}, None),
        ({"schedulingGroup": {"podGroupName": ""}}, None),
        ({"schedulingGroup": {"podGroupName": "pg"}}, "pg"),
    ],
)
def test_scheduling_group(spec: JSON, group: str | None) -> None:
    assert workload.scheduling_group({"spec": spec}) == group
    assert workload.scheduling_group({}) is None


def test_controller_ref_is_the_first_named_controlling_reference() -> None:
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm"}
    unnamed = {"apiVersion": JOB_API, "kind": "Job", "controller": True}
    controlling = {"apiVersion": JOB_API, "kind": "Job", "name": "j", "controller": True}
    second = {"apiVersion": JOB_API, "kind": "Job", "name": "k", "controller": True}
    target = {"metadata": {"ownerReferences": [plain, unnamed, controlling, second]}}
    assert workload.controller_ref(target) == controlling
    assert workload.controller_ref({"metadata": {"ownerReferences": [plain]}}) is None
    assert workload.controller_ref({"metadata": {}}) is None
    assert workload.controller_ref({}) is None


@pytest.mark.parametrize(
    ("api_version", "kind", "expected"),
    [
        ("batch/v1", "Job", "jobs"),
        ("apps/v1", "ReplicaSet", "replicasets"),
        ("apps/v1", "StatefulSet", "statefulsets"),
        ("apps/v1", "DaemonSet", "daemonsets"),
        ("v1", "ReplicationController", "replicationcontrollers"),
        ("apps/v1", "Deployment", None),  # never a pod's controller
        ("batch/v2", "Job", None),  # an unknown version cannot be fetched by resource name
        ("example.com/v1", "Custom", None),
        (None, "Job", None),
        ("batch/v1", 7, None),
    ],
)
def test_fetchable_owner(api_version: object, kind: object, expected: str | None) -> None:
    ref = {"apiVersion": api_version, "kind": kind, "name": "owner", "controller": True}
    found = workload.fetchable_owner({"metadata": {"ownerReferences": [ref]}})
    want = None if expected is None else (expected, "owner")
    assert (None if found is None else (found[0].resource, found[1])) == want


def test_fetchable_owner_of_a_job_is_the_job_kind_itself() -> None:
    found = workload.fetchable_owner(pod(owner=owner_ref(job())))
    assert found is not None and found[0] is workload.JOB and found[1] == "j"
    assert workload.fetchable_owner(pod()) is None


@pytest.mark.parametrize(
    ("phase", "deleting", "live"),
    [
        ("Pending", False, True),
        ("Running", False, True),
        ("Unknown", False, True),
        (None, False, True),
        ("Succeeded", False, False),
        ("Failed", False, False),
        ("Running", True, False),
    ],
)
def test_is_live(phase: str | None, deleting: bool, live: bool) -> None:
    target: JSON = {"metadata": {"name": "p"}, "status": {"phase": phase}}
    if deleting:
        target["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert workload.is_live(target) is live


def test_group_lists_its_members_as_namespace_slash_name() -> None:
    group = Group(key="k", source="s", annotations={}, members=[pod("a"), pod("b", ns="other")])
    assert group.pods == [f"{NS}/a", "other/b"]


# --- customize ----------------------------------------------------------------------------------------------------


def test_a_bare_pod_needs_no_related_object() -> None:
    assert workload.related_rules(pod()) == []


def test_rules_name_each_object_the_pod_points_at_in_a_stable_order() -> None:
    labels = {
        names.LABEL_JOBSET_NAME: "js",
        names.LABEL_LWS_NAME: "lws",
        names.LABEL_LWS_GROUP_KEY: "gk",
        names.LABEL_COSCHEDULING_POD_GROUP: "cpg",
    }
    target = pod(labels=labels, owner=owner_ref(job()), spec={"schedulingGroup": {"podGroupName": "bpg"}})
    by_label = {"apiVersion": "v1", "resource": "pods", "namespace": NS}
    assert workload.related_rules(target) == [
        {"apiVersion": JOB_API, "resource": "jobs", "namespace": NS, "names": ["j"]},
        {"apiVersion": JOBSET_API, "resource": "jobsets", "namespace": NS, "names": ["js"]},
        {"apiVersion": LWS_API, "resource": "leaderworkersets", "namespace": NS, "names": ["lws"]},
        {**by_label, "labelSelector": {"matchLabels": {names.LABEL_LWS_GROUP_KEY: "gk"}}},
        {"apiVersion": COSCHED_API, "resource": "podgroups", "namespace": NS, "names": ["cpg"]},
        {**by_label, "labelSelector": {"matchLabels": {names.LABEL_COSCHEDULING_POD_GROUP: "cpg"}}},
        {"apiVersion": SCHED_API, "resource": "podgroups", "namespace": NS, "names": ["bpg"]},
        {"apiVersion": SCHED_API, "resource": "workloads", "namespace": NS},
        {
            **by_label,
            "labelSelector": {"matchExpressions": [{"key": names.LABEL_BRIDGE_MANAGED, "operator": "Exists"}]},
        },
    ]


def test_an_lws_pod_without_a_group_key_asks_for_no_group_pods() -> None:
    target = pod(labels={names.LABEL_LWS_NAME: "lws"})
    assert workload.related_rules(target) == [
        {"apiVersion": LWS_API, "resource": "leaderworkersets", "namespace": NS, "names": ["lws"]}
    ]


def test_an_unknown_controller_is_not_asked_for() -> None:
    cron = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "c", "uid": "u"}
    assert workload.related_rules(pod(owner=cron)) == []


# --- resolve: the pod alone and its controllers -------------------------------------------------------------------


def test_a_bare_pod_is_a_one_node_one_task_job_of_its_own_annotations() -> None:
    target = pod(annotations=slurmjob(account="a"))
    assert workload.resolve(request(target)) == Group(
        key=f"Pod/{NS}/p",
        source=f"Pod {NS}/p",
        annotations=slurmjob(account="a"),
        members=[target],
        max_nodes=1,
        tasks_per_node=1,
    )


@pytest.mark.parametrize(
    ("deadline", "minutes"),
    [(None, None), (0, None), (1, 1), (60, 1), (61, 2), (3600, 60)],
)
def test_a_jobs_deadline_is_its_time_limit_rounded_up_to_minutes(deadline: int | None, minutes: int | None) -> None:
    owner = job(spec={} if deadline is None else {"activeDeadlineSeconds": deadline})
    assert workload.resolve(request(pod(owner=owner_ref(owner)), owner)).time_limit == minutes


def test_a_job_pod_is_its_own_job_with_the_jobs_annotations_and_template_limits() -> None:
    limits = {"cpu": "1500m", "memory": "1536Mi"}
    owner = job(spec={"template": {"spec": {"resources": {"limits": limits}}}}, annotations=slurmjob(qos="high"))
    target = pod(owner=owner_ref(owner), annotations=slurmjob(qos="ignored"))
    assert workload.resolve(request(target, owner)) == Group(
        key=f"Pod/{NS}/p",
        source=f"Job {NS}/j",
        annotations=slurmjob(qos="high"),
        members=[target],
        min_nodes=1,
        base_cpus=2,
        base_memory_mib=1536,
    )


def test_zero_template_limits_leave_the_base_unset() -> None:
    owner = job(spec={"template": {"spec": {"resources": {"limits": {"cpu": "0", "memory": "1Ki"}}}}})
    group = workload.resolve(request(pod(owner=owner_ref(owner)), owner))
    assert (group.base_cpus, group.base_memory_mib) == (None, None)  # 1Ki is 0 whole MiB


def test_a_bad_template_limit_names_the_job_and_field() -> None:
    owner = job(spec={"template": {"spec": {"resources": {"limits": {"memory": "lots"}}}}})
    with pytest.raises(quantity.BadQuantity) as caught:
        workload.resolve(request(pod(owner=owner_ref(owner)), owner))
    assert str(caught.value) == f"Job {NS}/j spec.template.spec.resources.limits: 'lots' is not a Kubernetes quantity"


def test_a_limit_slurm_cannot_hold_stays_out_of_range() -> None:
    owner = job(spec={"template": {"spec": {"resources": {"limits": {"cpu": "70000"}}}}})
    with pytest.raises(quantity.OutOfRange, match=rf"^Job {NS}/j spec\.template\.spec\.resources\.limits: 70000 CPUs"):
        workload.resolve(request(pod(owner=owner_ref(owner)), owner))


def test_a_missing_job_is_related_missing_naming_kind_object_and_version() -> None:
    with pytest.raises(RelatedMissing) as caught:
        workload.resolve(request(pod(owner=owner_ref(job()))))
    assert str(caught.value) == f"Job {NS}/j (batch/v1) was not found"
    assert isinstance(caught.value, GroupNotReady)


def test_a_job_of_the_same_name_in_another_namespace_is_not_the_owner() -> None:
    elsewhere = obj(JOB_API, "Job", "j", ns="other")
    req = request(pod(owner=owner_ref(job())))
    req.related["Job.batch/v1"] = {f"{NS}/j": elsewhere}
    with pytest.raises(RelatedMissing, match="was not found"):
        workload.resolve(req)


def test_related_objects_keyed_by_name_alone_are_found() -> None:
    owner = job(annotations=slurmjob(account="a"))
    req = request(pod(owner=owner_ref(owner)))
    req.related["Job.batch/v1"] = {"j": owner}
    assert workload.resolve(req).source == f"Job {NS}/j"


def test_a_jobset_pod_takes_the_jobsets_annotations_and_its_jobs_limits() -> None:
    jobset = obj(JOBSET_API, "JobSet", "js", annotations=slurmjob(account="js"))
    child = job("js-0", spec={"activeDeadlineSeconds": 30}, annotations=slurmjob(account="job"))
    target = pod(owner=owner_ref(child), labels={names.LABEL_JOBSET_NAME: "js"})
    group = workload.resolve(request(target, jobset, child))
    assert (group.key, group.source, group.annotations) == (f"Pod/{NS}/p", f"JobSet {NS}/js", slurmjob(account="js"))
    assert (group.min_nodes, group.time_limit) == (1, 1)


def test_a_jobset_pod_needs_its_jobset_and_a_controlling_job() -> None:
    target = pod(labels={names.LABEL_JOBSET_NAME: "js"})
    with pytest.raises(RelatedMissing, match=rf"^JobSet {NS}/js \(jobset\.x-k8s\.io/v1alpha2\) was not found$"):
        workload.resolve(request(target))
    jobset = obj(JOBSET_API, "JobSet", "js")
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(target, jobset))
    assert str(caught.value) == f"pod {NS}/p of JobSet js has no controlling Job"
    assert not isinstance(caught.value, RelatedMissing)


def test_an_unsupported_controller_lends_its_annotations_to_a_one_pod_job() -> None:
    rs = obj("apps/v1", "ReplicaSet", "rs", annotations=slurmjob(account="rs"))
    target = pod(owner=owner_ref(rs), annotations=slurmjob(account="pod"))
    group = workload.resolve(request(target, rs))
    assert (group.key, group.source, group.annotations) == (
        f"Pod/{NS}/p",
        f"ReplicaSet {NS}/rs",
        slurmjob(account="rs"),
    )
    assert (group.min_nodes, group.max_nodes, group.tasks_per_node) == (None, 1, 1)
    with pytest.raises(RelatedMissing, match=rf"^ReplicaSet {NS}/rs \(apps/v1\) was not found$"):
        workload.resolve(request(target))


def test_a_controller_of_unknown_kind_leaves_the_pod_as_its_own_source() -> None:
    custom = {"apiVersion": "example.com/v1", "kind": "Trainer", "name": "t", "uid": "u"}
    target = pod(owner=custom, annotations=slurmjob(account="pod"))
    group = workload.resolve(request(target))
    assert (group.source, group.annotations) == (f"Pod {NS}/p", slurmjob(account="pod"))


# --- resolve: gangs -----------------------------------------------------------------------------------------------


def test_an_lws_group_is_one_job_of_its_live_members_sorted_by_name() -> None:
    lws = obj(LWS_API, "LeaderWorkerSet", "lws", spec={"leaderWorkerTemplate": {"size": 3}}, annotations={"a": "1"})
    target = lws_pod("lws-1-b", index="1")
    members = [lws_pod("lws-1-c", index="1"), lws_pod("lws-1-a", index="1")]
    others = [
        lws_pod("lws-1-d", index="1", phase="Succeeded"),
        lws_pod("lws-0-a", group_key="other"),
        lws_pod("lws-1-x", index="1", ns="elsewhere"),
    ]
    group = workload.resolve(request(target, lws, *members, *others))
    assert group == Group(
        key=f"LeaderWorkerSet/{NS}/lws-1",
        source=f"LeaderWorkerSet {NS}/lws",
        annotations={"a": "1"},
        members=[members[1], target, members[0]],
        job_name="lws-1",
        min_nodes=3,
        max_nodes=3,
        tasks_per_node=1,
    )


def test_an_lws_of_default_size_is_a_one_pod_group() -> None:
    lws = obj(LWS_API, "LeaderWorkerSet", "lws")
    group = workload.resolve(request(lws_pod("lws-0"), lws))
    assert (group.job_name, group.min_nodes, group.max_nodes, len(group.members)) == ("lws-0", 1, 1, 1)


def test_an_lws_group_short_of_pods_or_labels_is_not_ready() -> None:
    lws = obj(LWS_API, "LeaderWorkerSet", "lws", spec={"leaderWorkerTemplate": {"size": 2}})
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(lws_pod("lws-0"), lws, lws_pod("lws-0-1", phase="Failed")))
    assert str(caught.value) == f"LeaderWorkerSet group {NS}/lws-0 has 1 of its 2 pods; waiting for the rest"
    unlabelled = pod(labels={names.LABEL_LWS_NAME: "lws"})
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(unlabelled, lws))
    assert str(caught.value) == (
        f"pod of LeaderWorkerSet {NS}/lws lacks the {names.LABEL_LWS_GROUP_KEY} or {names.LABEL_LWS_GROUP_INDEX} label"
    )


def test_a_coscheduling_pod_group_gives_min_member_to_all_members_and_its_min_resources() -> None:
    spec = {"minMember": 2, "minResources": {"cpu": "2500m", "memory": "3Gi"}}
    pg = obj(COSCHED_API, "PodGroup", "pg", spec=spec, annotations=slurmjob(account="pg"))
    target, other, third = cosched_pod("b"), cosched_pod("a"), cosched_pod("c")
    group = workload.resolve(request(target, pg, other, third, cosched_pod("z", group="another")))
    assert group == Group(
        key=f"PodGroup.scheduling.x-k8s.io/{NS}/pg",
        source=f"PodGroup {NS}/pg",
        annotations=slurmjob(account="pg"),
        members=[other, target, third],
        min_nodes=2,
        max_nodes=3,
        tasks_per_node=1,
        base_cpus=3,
        base_memory_mib=3072,
    )


def test_a_coscheduling_pod_group_without_min_member_has_no_minimum() -> None:
    pg = obj(COSCHED_API, "PodGroup", "pg")
    group = workload.resolve(request(cosched_pod("a"), pg))
    assert (group.min_nodes, group.max_nodes, group.base_cpus, group.base_memory_mib) == (None, 1, None, None)


@pytest.mark.parametrize("phase", ["Running", "Unknown", "Failed", "Finished"])
def test_a_coscheduling_pod_group_past_scheduling_submits_nothing(phase: str) -> None:
    pg = obj(COSCHED_API, "PodGroup", "pg", status={"phase": phase})
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(cosched_pod("a"), pg))
    assert str(caught.value) == f"PodGroup {NS}/pg status is {phase}; no new job is submitted for it"


def test_a_coscheduling_gang_short_of_min_member_counts_only_live_pods() -> None:
    pg = obj(COSCHED_API, "PodGroup", "pg", spec={"minMember": 3}, status={"phase": "Pending"})
    gone = with_changes(cosched_pod("b"), deletionTimestamp="2024-01-01T00:00:00Z")
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(cosched_pod("a"), pg, gone, cosched_pod("c")))
    assert str(caught.value) == f"PodGroup {NS}/pg has 2 of its minMember 3 pods; waiting for the rest"


def test_a_bad_min_resources_value_names_the_pod_group() -> None:
    pg = obj(COSCHED_API, "PodGroup", "pg", spec={"minResources": {"cpu": "x"}})
    with pytest.raises(quantity.BadQuantity, match=rf"^PodGroup {NS}/pg spec\.minResources: 'x' is not"):
        workload.resolve(request(cosched_pod("a"), pg))


def test_a_missing_coscheduling_pod_group_falls_through_unless_the_pod_published_it() -> None:
    rs = obj("apps/v1", "ReplicaSet", "rs")
    target = cosched_pod("a", owner=owner_ref(rs))
    assert workload.resolve(request(target, rs)).source == f"ReplicaSet {NS}/rs"
    published = with_changes(
        target, annotations={names.ANNOTATION_PLACEHOLDER_GROUP: f"PodGroup.scheduling.x-k8s.io/{NS}/pg"}
    )
    with pytest.raises(RelatedMissing) as caught:
        workload.resolve(request(published, rs))
    assert str(caught.value) == f"PodGroup {NS}/pg (scheduling.x-k8s.io/v1alpha1) was not found"
    other_group = with_changes(target, annotations={names.ANNOTATION_PLACEHOLDER_GROUP: f"Pod/{NS}/a"})
    assert workload.resolve(request(other_group, rs)).source == f"ReplicaSet {NS}/rs"


def test_a_built_in_pod_group_merges_annotations_pod_group_then_controller_then_workload() -> None:
    wl = obj(SCHED_API, "Workload", "wl", annotations={"k": "workload", "w": "1"})
    pg = obj(
        SCHED_API,
        "PodGroup",
        "pg",
        spec={"workloadRef": {"workloadName": "wl"}, "schedulingPolicy": {"gang": {"minCount": 2}}},
        annotations={"k": "pod-group", "p": "1"},
    )
    owner = job(annotations={"k": "job", "j": "1"})
    target, other = built_in_pod("b", owner=owner_ref(owner)), built_in_pod("a")
    unrelated = pod("c")  # a bridge pod of the namespace outside the group
    group = workload.resolve(request(target, pg, owner, wl, other, unrelated))
    assert group == Group(
        key=f"PodGroup.scheduling.k8s.io/{NS}/pg",
        source=f"PodGroup {NS}/pg < Job {NS}/j < Workload {NS}/wl",
        annotations={"k": "workload", "p": "1", "j": "1", "w": "1"},
        members=[other, target],
        job_name="pg",
        min_nodes=2,
        max_nodes=2,
        tasks_per_node=1,
    )


def test_a_built_in_pod_group_finds_its_workload_through_the_template_reference() -> None:
    wl = obj(SCHED_API, "Workload", "wl", annotations={"from": "workload"})
    pg = obj(SCHED_API, "PodGroup", "pg", spec={"podGroupTemplateRef": {"workload": {"workloadName": "wl"}}})
    group = workload.resolve(request(built_in_pod("a"), pg, wl))
    assert (group.source, group.annotations) == (f"PodGroup {NS}/pg < Workload {NS}/wl", {"from": "workload"})


def test_a_built_in_pod_group_wins_over_every_other_membership() -> None:
    pg = obj(SCHED_API, "PodGroup", "pg")
    cpg = obj(COSCHED_API, "PodGroup", "pg")
    target = pod(labels={names.LABEL_COSCHEDULING_POD_GROUP: "pg"}, spec={"schedulingGroup": {"podGroupName": "pg"}})
    assert workload.resolve(request(target, pg, cpg)).key == f"PodGroup.scheduling.k8s.io/{NS}/pg"


def test_a_built_in_gang_short_of_min_count_or_missing_objects_is_not_ready() -> None:
    pg = obj(SCHED_API, "PodGroup", "pg", spec={"schedulingPolicy": {"gang": {"minCount": 2}}})
    with pytest.raises(GroupNotReady) as caught:
        workload.resolve(request(built_in_pod("a"), pg))
    assert str(caught.value) == f"PodGroup {NS}/pg has 1 of the 2 pods its gang needs; waiting for the rest"
    with pytest.raises(RelatedMissing, match=rf"^PodGroup {NS}/pg \(scheduling\.k8s\.io/v1alpha2\) was not found$"):
        workload.resolve(request(built_in_pod("a")))
    with_workload = obj(SCHED_API, "PodGroup", "pg", spec={"workloadRef": {"workloadName": "wl"}})
    with pytest.raises(RelatedMissing, match=rf"^Workload {NS}/wl \(scheduling\.k8s\.io/v1alpha2\) was not found$"):
        workload.resolve(request(built_in_pod("a"), with_workload))

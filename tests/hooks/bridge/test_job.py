"""slurm-bridge behaviour, translation vectors 1-12 (pod/workload -> placeholder job), through the pod hook's
pure `publish` so that resolution, resources and annotations are exercised together."""

from __future__ import annotations

import json

import pytest

from hooks.bridge import pod as pod_hook
from slinky_common import names
from tests.hooks.bridge.builders import (
    NS,
    container,
    job_of,
    obj,
    owner_ref,
    pod,
    request,
    slurmjob,
)

JOB_API, JOBSET_API, LWS_API = "batch/v1", "jobset.x-k8s.io/v1alpha2", "leaderworkerset.x-k8s.io/v1"
COSCHED_API, WORKLOAD_API = "scheduling.x-k8s.io/v1alpha1", "scheduling.k8s.io/v1alpha2"


def publish(target, *rel, controller=None):
    return pod_hook.publish(request(target, *rel, controller=controller))


def job(target, *rel):
    return job_of(publish(target, *rel))


def error(target, *rel) -> str:
    out = publish(target, *rel)
    assert out[names.ANNOTATION_PLACEHOLDER_JOB] is None and out[names.ANNOTATION_PLACEHOLDER_GROUP] is None
    return out[names.ANNOTATION_JOB_ERROR]


def test_v01_bare_pod_with_account_and_ids():
    body = job(pod(annotations=slurmjob(account="test1", group_id="1000", user_id="1000")))
    assert (body["account"], body["group_id"], body["user_id"]) == ("test1", "1000", "1000")
    assert (body["maximum_nodes"], body["tasks_per_node"], body["nodes"]) == (1, 1, "1")
    assert "minimum_nodes" not in body and "name" not in body


def test_v01_slinky_example_body_exactly_minus_required_nodes():
    """slurm-bridge's submitted body for pod-single, except required_nodes (deliberately dropped)."""
    target = pod(
        "pod-single",
        annotations=slurmjob(job_name="pod-single", timelimit="1"),
        containers=[container(requests={"cpu": "1", "memory": "100Mi"}, limits={"cpu": "1", "memory": "100Mi"})],
    )
    assert job(target) == {
        "flags": ["EXTERNAL_JOB"],
        "current_working_directory": "/tmp",
        "admin_comment": '{"pods":["slurm-bridge/pod-single"]}',
        "name": "pod-single",
        "partition": "slurm-bridge",
        "mcs_label": "kubernetes",
        "cpus_per_task": 1,
        "memory_per_node": {"infinite": False, "number": 100, "set": True},
        "nodes": "1",
        "maximum_nodes": 1,
        "tasks_per_node": 1,
        "priority": {"set": False},
        "time_limit": {"infinite": False, "number": 1, "set": True},
        "shared": ["none"],
    }


@pytest.mark.parametrize(
    ("pods", "cpus", "memory"),
    [
        pytest.param(
            [[container(requests={"cpu": "1", "memory": "100Mi"}, limits={"cpu": "2", "memory": "200Mi"})]],
            2,
            200,
            id="v02-limits-over-requests",
        ),
        pytest.param(
            [
                [container(requests={"cpu": "1", "memory": "100Mi"}, limits={"cpu": "2", "memory": "400Mi"})],
                [container()],
                [container(requests={"cpu": "8", "memory": "100Mi"}, limits={"cpu": "2", "memory": "200Mi"})],
            ],
            8,
            400,
            id="v02-max-over-three-pods",
        ),
        pytest.param([[container()]], None, None, id="v02-no-resources-unset"),
        pytest.param(
            [
                [
                    container(
                        requests={"deviceclass.resource.kubernetes.io/dra.cpu": "4"},
                        limits={"deviceclass.resource.kubernetes.io/dra.cpu": "4"},
                    )
                ]
            ],
            4,
            None,
            id="v02-dra-cpu",
        ),
        pytest.param([[container(requests={"cpu": "500m", "memory": "1.5Mi"})]], 1, 1, id="cpu-ceil-memory-floor"),
        pytest.param(
            [[container(requests={"cpu": "1"}), container("side", requests={"cpu": "2", "memory": "1Gi"})]],
            3,
            1024,
            id="containers-of-one-pod-add-up",
        ),
    ],
)
def test_v02_cpus_and_memory_from_the_largest_pod(pods, cpus, memory):
    members = [pod(f"m{i}", labels={names.LABEL_COSCHEDULING_POD_GROUP: "g"}, containers=c) for i, c in enumerate(pods)]
    group = obj(COSCHED_API, "PodGroup", "g", spec={"minMember": 1})
    body = job(members[0], group, *members)
    assert body.get("cpus_per_task") == cpus
    assert body["memory_per_node"] == (
        {"set": False} if memory is None else {"set": True, "infinite": False, "number": memory}
    )


GPU = "deviceclass.resource.kubernetes.io/gpu.nvidia.com"


@pytest.mark.parametrize(
    ("limits", "gres"),
    [
        pytest.param([{"nvidia.com/gpu": "1"}], "gres/gpu=1", id="v03-nvidia-1"),
        pytest.param([{"nvidia.com/gpu": "2"}], "gres/gpu=2", id="v03-nvidia-2"),
        pytest.param([{"amd.com/gpu": "2"}, {"amd.com/gpu": "1"}], "gres/gpu=2", id="v03-amd-max-across-pods"),
        pytest.param([{GPU: "1"}], "gres/gpu:gpu.nvidia.com=1", id="v03-dra-class"),
        pytest.param([{GPU: "1"}, {GPU: "2"}], "gres/gpu:gpu.nvidia.com=2", id="v03-dra-class-max"),
        pytest.param([{"deviceclass.resource.kubernetes.io/dra.cpu": "2"}], None, id="v03-dra-cpu-no-gres"),
    ],
)
def test_v03_gpus_become_gres(limits, gres):
    members = [
        pod(f"m{i}", labels={names.LABEL_COSCHEDULING_POD_GROUP: "g"}, containers=[container(limits=lim)])
        for i, lim in enumerate(limits)
    ]
    body = job(members[0], obj(COSCHED_API, "PodGroup", "g"), *members)
    assert body.get("tres_per_node") == gres


def test_v04_full_annotation_set():
    annotations = slurmjob(
        cpu_per_task="200m",
        mem_per_node="1Gi",
        max_nodes="4",
        min_nodes="2",
        priority="100",
        timelimit="30",
        qos="high",
        reservation="training",
        licenses="mathlib",
        wckey="key",
        partition="slurm-bridge",
        gres="gres/gpu=2",
        constraints="foo",
    )
    body = job(pod(annotations=annotations, containers=[container(limits={"nvidia.com/gpu": "1", "cpu": "8"})]))
    assert body["cpus_per_task"] == 1 and body["memory_per_node"]["number"] == 1024
    assert (body["maximum_nodes"], body["minimum_nodes"]) == (4, 2)
    assert body["priority"] == {"set": True, "infinite": False, "number": 100}
    assert body["time_limit"]["number"] == 30
    assert {
        k: body[k] for k in ("qos", "reservation", "licenses", "wckey", "partition", "tres_per_node", "constraints")
    } == {
        "qos": "high",
        "reservation": "training",
        "licenses": "mathlib",
        "wckey": "key",
        "partition": "slurm-bridge",
        "tres_per_node": "gres/gpu=2",
        "constraints": "foo",
    }


@pytest.mark.parametrize("key", ["cpu-per-task", "max-nodes", "mem-per-node", "timelimit", "priority", "min-nodes"])
@pytest.mark.parametrize("bad", ["abc", "1.5x", " 3"])
def test_v05_malformed_annotation_gives_error_and_no_job(key, bad):
    message = error(pod("p", annotations={names.SLURMJOB_PREFIX + key: bad}))
    assert f"{names.SLURMJOB_PREFIX}{key}={bad!r}" in message and "Pod slurm-bridge/p" in message


def test_v05_int32_overflow_and_every_bad_annotation_reported():
    message = error(pod(annotations=slurmjob(timelimit="2147483648", priority="x")))
    assert "timelimit='2147483648': out of the int32 range" in message
    assert "priority='x': not a base-10 integer" in message


@pytest.mark.parametrize(
    ("value", "shared"),
    [
        pytest.param("false", [], id="v06-false"),
        pytest.param(" FALSE ", [], id="v06-trimmed-any-case"),
        pytest.param("true", ["none"], id="v06-true"),
        pytest.param(None, ["none"], id="v06-absent"),
        pytest.param("no", ["none"], id="v06-anything-else"),
    ],
)
def test_v06_exclusive(value, shared):
    annotations = slurmjob(exclusive=value) if value is not None else {}
    assert job(pod(annotations=annotations))["shared"] == shared


def _job(name="j", deadline=None, annotations=None, owner=None, template_limits=None):
    spec = {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if template_limits:
        spec["template"]["spec"]["resources"] = {"limits": template_limits}
    return obj(JOB_API, "Job", name, annotations=annotations, spec=spec, owner=owner)


@pytest.mark.parametrize(
    ("deadline", "limit"),
    [
        pytest.param(90, {"set": True, "infinite": False, "number": 2}, id="v07-90s-is-2min"),
        pytest.param(0, {"set": False}, id="v07-0-unset"),
        pytest.param(60, {"set": True, "infinite": False, "number": 1}, id="v07-60s-is-1min"),
    ],
)
def test_v07_job_deadline_and_min_nodes(deadline, limit):
    j = _job(deadline=deadline)
    body = job(pod(owner=owner_ref(j)), j)
    assert body["time_limit"] == limit
    assert body["minimum_nodes"] == 1 and "tasks_per_node" not in body and "maximum_nodes" not in body


def test_v07_job_pod_level_limits_are_the_base_and_pod_annotations_ignored():
    j = _job(template_limits={"cpu": "3", "memory": "2Gi"}, annotations=slurmjob(account="from-job"))
    body = job(pod(owner=owner_ref(j), annotations=slurmjob(account="from-pod")), j)
    assert (body["cpus_per_task"], body["memory_per_node"]["number"], body["account"]) == (3, 2048, "from-job")


def test_v08_jobset_is_root_and_only_its_annotations_count():
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "uid-d"}
    jobset = obj(JOBSET_API, "JobSet", "js", annotations=slurmjob(account="js-account"), owner=deployment)
    child = _job("js-workers-0", deadline=120, annotations=slurmjob(account="job-account"), owner=owner_ref(jobset))
    target = pod(owner=owner_ref(child), labels={names.LABEL_JOBSET_NAME: "js"}, annotations=slurmjob(account="pod"))
    out = publish(target, jobset, child)
    assert job_of(out)["account"] == "js-account" and job_of(out)["time_limit"]["number"] == 2
    assert out[names.ANNOTATION_PLACEHOLDER_GROUP] == f"Pod/{NS}/p"  # JobSets are per pod, not gangs


def test_v08_job_under_unsupported_controller_is_root():
    cronjob = {"apiVersion": "batch/v1", "kind": "CronJob", "name": "cron", "uid": "uid-cron"}
    j = _job(annotations=slurmjob(account="job"), owner=cronjob)
    assert job(pod(owner=owner_ref(j)), j)["account"] == "job"


def test_v08_missing_supported_owner_is_an_error():
    j = _job()
    assert "Job slurm-bridge/j (batch/v1) was not found" in error(pod(owner=owner_ref(j)))


def test_v08_unsupported_controller_lends_its_annotations():
    rs = obj("apps/v1", "ReplicaSet", "rs", annotations=slurmjob(qos="rs-qos"))
    body = job(pod(owner=owner_ref(rs)), rs)
    assert body["qos"] == "rs-qos" and body["maximum_nodes"] == 1


def test_v08_unknown_controller_kind_falls_back_to_the_pod():
    custom = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "uid-t"}
    assert job(pod(owner=custom, annotations=slurmjob(qos="pod-qos")))["qos"] == "pod-qos"


def _lws_pods(count, size_label="1"):
    labels = {names.LABEL_LWS_NAME: "foo", names.LABEL_LWS_GROUP_KEY: "lws", names.LABEL_LWS_GROUP_INDEX: size_label}
    return [pod(f"foo-{size_label}-{i}", labels=labels) for i in range(count)]


def test_v09_leader_worker_set_group():
    lws = obj(
        LWS_API,
        "LeaderWorkerSet",
        "foo",
        spec={"leaderWorkerTemplate": {"size": 2}},
        annotations=slurmjob(account="lws"),
    )
    members = _lws_pods(2)
    out = publish(members[1], lws, *members)
    body = job_of(out)
    assert (body["name"], body["minimum_nodes"], body["maximum_nodes"], body["tasks_per_node"], body["nodes"]) == (
        "foo-1",
        2,
        2,
        1,
        "2",
    )
    assert body["account"] == "lws"
    assert json.loads(body["admin_comment"]) == {"pods": [f"{NS}/foo-1-0", f"{NS}/foo-1-1"]}
    assert out[names.ANNOTATION_PLACEHOLDER_GROUP] == f"LeaderWorkerSet/{NS}/foo-1"


def test_v09_leader_worker_set_short_of_pods_is_an_error():
    lws = obj(LWS_API, "LeaderWorkerSet", "foo", spec={"leaderWorkerTemplate": {"size": 2}})
    members = _lws_pods(1)
    assert "has 1 of its 2 pods" in error(members[0], lws, *members)


def _cosched(phase=None, **spec):
    return obj(COSCHED_API, "PodGroup", "pg", spec=spec, status={"phase": phase} if phase else None)


def test_v10_coscheduling_pod_group():
    group = _cosched(minMember=1, minResources={"cpu": "22", "memory": "1Mi"})
    members = [pod(f"w{i}", labels={names.LABEL_COSCHEDULING_POD_GROUP: "pg"}) for i in range(3)]
    body = job(members[0], group, *members)
    assert (body["cpus_per_task"], body["memory_per_node"]["number"]) == (22, 1)
    assert (body["minimum_nodes"], body["maximum_nodes"], body["tasks_per_node"], body["nodes"]) == (1, 3, 1, "3")


@pytest.mark.parametrize("phase", ["Running", "Unknown", "Failed", "Finished"])
def test_v10_coscheduling_phase_stops_submission(phase):
    group = _cosched(phase, minMember=1)
    target = pod(labels={names.LABEL_COSCHEDULING_POD_GROUP: "pg"})
    assert f"status is {phase}" in error(target, group)


def test_v10_coscheduling_min_member_gate_counts_live_pods_of_the_namespace():
    group = _cosched(minMember=3)
    label = {names.LABEL_COSCHEDULING_POD_GROUP: "pg"}
    members = [pod("a", labels=label), pod("b", labels=label, phase="Succeeded"), pod("c", labels=label, ns="other")]
    assert "has 1 of its minMember 3 pods" in error(members[0], group, *members)


def test_v10_coscheduling_label_without_pod_group_falls_through_to_owner():
    j = _job(annotations=slurmjob(account="job"))
    body = job(pod(owner=owner_ref(j), labels={names.LABEL_COSCHEDULING_POD_GROUP: "absent"}), j)
    assert body["account"] == "job" and body["minimum_nodes"] == 1


def _built_in(workload=None, min_count=None, annotations=None):
    spec = {}
    if workload:
        spec["podGroupTemplateRef"] = {"workload": {"workloadName": workload}}
    if min_count is not None:
        spec["schedulingPolicy"] = {"gang": {"minCount": min_count}}
    return obj(WORKLOAD_API, "PodGroup", "pg", spec=spec, annotations=annotations)


def _built_in_pods(count, owner=None):
    return [pod(f"g{i}", spec={"schedulingGroup": {"podGroupName": "pg"}}, owner=owner) for i in range(count)]


@pytest.mark.parametrize(
    ("with_workload", "workload_name", "limit", "name"),
    [
        pytest.param(True, None, 30, "pg", id="v11-workload-beats-job-and-podgroup"),
        pytest.param(False, None, 5, "pg", id="v11-job-beats-podgroup-name-is-podgroup"),
        pytest.param(True, "from-workload", 30, "from-workload", id="v11-workload-job-name-overrides"),
    ],
)
def test_v11_built_in_pod_group_annotation_precedence(with_workload, workload_name, limit, name):
    j = _job(annotations=slurmjob(timelimit="5"))
    workload_annotations = slurmjob(timelimit="30") | (slurmjob(job_name=workload_name) if workload_name else {})
    workload = obj(WORKLOAD_API, "Workload", "wl", annotations=workload_annotations)
    group = _built_in(workload="wl" if with_workload else None, annotations=slurmjob(timelimit="10"))
    members = _built_in_pods(2, owner=owner_ref(j))
    body = job(members[0], group, j, workload, *members)
    assert body["time_limit"]["number"] == limit and body["name"] == name
    assert (body["minimum_nodes"], body["maximum_nodes"], body["nodes"], body["tasks_per_node"]) == (2, 2, "2", 1)


def test_v11_built_in_gang_min_count():
    members = _built_in_pods(1)
    assert "has 1 of the 2 pods its gang needs" in error(members[0], _built_in(min_count=2), *members)
    members = _built_in_pods(2)
    assert job(members[0], _built_in(min_count=2), *members)["nodes"] == "2"


def test_v11_built_in_missing_workload_is_an_error():
    members = _built_in_pods(1)
    assert "Workload slurm-bridge/wl" in error(members[0], _built_in(workload="wl"), *members)


@pytest.mark.parametrize(
    ("pods", "expected"),
    [
        pytest.param([], '{"pods":[]}', id="v12-empty"),
        pytest.param(["a/b", "c/d"], '{"pods":["a/b","c/d"]}', id="v12-exact-compact"),
    ],
)
def test_v12_admin_comment_format(pods, expected):
    from hooks.bridge.job import admin_comment

    assert admin_comment(pods) == expected


def test_settings_come_from_the_decorator_controller():
    controller = {
        "metadata": {"annotations": {names.ANNOTATION_SETTING_PARTITION: "gpu", names.ANNOTATION_SETTING_MCS_LABEL: ""}}
    }
    body = job_of(publish(pod(), controller=controller))
    assert body["partition"] == "gpu" and "mcs_label" not in body
    assert job_of(publish(pod(annotations=slurmjob(partition="debug")), controller=controller))["partition"] == "debug"

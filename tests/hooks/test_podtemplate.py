"""Strategic merge of user pod templates: the Kubernetes rules users know from `kubectl patch`."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from hooks.podtemplate import apply_pod_template, merge_container, merge_pod_spec, merge_service_spec

BASE = {
    "containers": [
        {
            "name": "slurmd",
            "image": "slurmd:25.11",
            "args": ["-Z"],
            "env": [{"name": "POD_CPUS", "value": "0"}, {"name": "A", "value": "1"}],
            "ports": [{"name": "slurmd", "containerPort": 6818, "protocol": "TCP"}],
            "volumeMounts": [{"name": "etc", "mountPath": "/etc/slurm", "readOnly": True}],
            "livenessProbe": {
                "httpGet": {"path": "/livez", "port": "slurmd"},
                "failureThreshold": 6,
                "periodSeconds": 10,
            },
            "securityContext": {"privileged": True, "capabilities": {"add": ["SYS_ADMIN"]}},
        },
        {"name": "logfile", "image": "alpine"},
    ],
    "volumes": [{"name": "etc", "projected": {"sources": [{"secret": {"name": "k"}}]}}],
    "tolerations": [{"key": "a", "operator": "Exists"}],
    "enableServiceLinks": False,
}


def test_containers_merge_by_name_and_keep_order():
    merged = merge_pod_spec(
        BASE, {"containers": [{"name": "slurmd", "image": "custom:1"}, {"name": "sidecar", "image": "s"}]}
    )
    assert [c["name"] for c in merged["containers"]] == ["slurmd", "logfile", "sidecar"]
    slurmd = merged["containers"][0]
    assert slurmd["image"] == "custom:1"
    assert slurmd["args"] == ["-Z"]  # untouched fields survive
    assert slurmd["ports"] == BASE["containers"][0]["ports"]


def test_env_merges_by_name_and_mounts_by_mount_path():
    merged = merge_pod_spec(
        BASE,
        {
            "containers": [
                {
                    "name": "slurmd",
                    "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                    "volumeMounts": [
                        {"name": "other", "mountPath": "/etc/slurm"},
                        {"name": "data", "mountPath": "/data"},
                    ],
                }
            ]
        },
    )
    slurmd = merged["containers"][0]
    assert slurmd["env"] == [
        {"name": "POD_CPUS", "value": "0"},
        {"name": "A", "value": "2"},
        {"name": "B", "value": "3"},
    ]
    assert slurmd["volumeMounts"] == [
        {"name": "other", "mountPath": "/etc/slurm", "readOnly": True},
        {"name": "data", "mountPath": "/data"},
    ]


def test_ports_merge_by_container_port_and_volumes_by_name():
    merged = merge_pod_spec(
        BASE,
        {
            "containers": [
                {"name": "slurmd", "ports": [{"containerPort": 6818, "hostPort": 6818}, {"containerPort": 22}]}
            ],
            "volumes": [{"name": "etc", "projected": {"defaultMode": 0o600}}, {"name": "scratch", "emptyDir": {}}],
        },
    )
    assert merged["containers"][0]["ports"] == [
        {"name": "slurmd", "containerPort": 6818, "protocol": "TCP", "hostPort": 6818},
        {"containerPort": 22},
    ]
    assert merged["volumes"][0]["projected"] == {"sources": [{"secret": {"name": "k"}}], "defaultMode": 0o600}
    assert merged["volumes"][1] == {"name": "scratch", "emptyDir": {}}


def test_lists_without_merge_key_are_replaced():
    merged = merge_pod_spec(BASE, {"tolerations": [{"key": "b", "operator": "Exists"}]})
    assert merged["tolerations"] == [{"key": "b", "operator": "Exists"}]
    assert merge_pod_spec(BASE, {"containers": [{"name": "slurmd", "args": ["-v"]}]})["containers"][0]["args"] == ["-v"]


def test_null_deletes_and_directives_work():
    merged = merge_pod_spec(
        BASE,
        {
            "enableServiceLinks": None,
            "containers": [
                {"name": "logfile", "$patch": "delete"},
                {"name": "slurmd", "securityContext": {"$patch": "replace", "runAsUser": 0}},
            ],
        },
    )
    assert "enableServiceLinks" not in merged
    assert [c["name"] for c in merged["containers"]] == ["slurmd"]
    assert merged["containers"][0]["securityContext"] == {"runAsUser": 0}
    assert "$patch" not in str(merged)


def test_deleting_an_absent_item_is_harmless():
    merged = merge_pod_spec(BASE, {"volumes": [{"name": "nope", "$patch": "delete"}]})
    assert merged["volumes"] == BASE["volumes"]


def test_user_probe_handler_replaces_ours_but_keeps_thresholds():
    merged = merge_pod_spec(
        BASE, {"containers": [{"name": "slurmd", "livenessProbe": {"exec": {"command": ["true"]}}}]}
    )
    probe = merged["containers"][0]["livenessProbe"]
    assert probe == {"exec": {"command": ["true"]}, "failureThreshold": 6, "periodSeconds": 10}


def test_user_lifecycle_handler_replaces_ours():
    base = {"name": "c", "lifecycle": {"preStop": {"exec": {"command": ["a"]}}}}
    merged = merge_container(base, {"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}})
    assert merged["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}


def test_nested_maps_merge():
    merged = merge_pod_spec(BASE, {"containers": [{"name": "slurmd", "securityContext": {"runAsUser": 0}}]})
    assert merged["containers"][0]["securityContext"] == {
        "privileged": True,
        "capabilities": {"add": ["SYS_ADMIN"]},
        "runAsUser": 0,
    }


def test_inputs_are_never_modified():
    base, user = copy.deepcopy(BASE), {"containers": [{"name": "slurmd", "env": [{"name": "A", "value": "9"}]}]}
    frozen_user = copy.deepcopy(user)
    merged = merge_pod_spec(base, user)
    merged["containers"][0]["env"].append({"name": "X"})
    assert base == BASE and user == frozen_user


def test_container_override_appends_args_and_keeps_name():
    merged = merge_container(
        BASE["containers"][0],
        {"name": "renamed", "args": ["-vvv"], "image": "x", "resources": {"limits": {"cpu": "2"}}},
    )
    assert merged["name"] == "slurmd"
    assert merged["args"] == ["-Z", "-vvv"]
    assert merged["image"] == "x"
    assert merged["resources"] == {"limits": {"cpu": "2"}}
    assert merge_container(BASE["containers"][0], None) == BASE["containers"][0]


def test_pod_template_metadata_ours_win():
    base = {
        "metadata": {"labels": {"app": "slurmd"}, "annotations": {"h": "1"}},
        "spec": {"containers": [{"name": "a"}]},
    }
    user = {
        "metadata": {"labels": {"app": "evil", "team": "x"}, "annotations": {"h": "2", "note": "n"}},
        "spec": {"hostNetwork": True},
    }
    merged = apply_pod_template(base, user)
    assert merged["metadata"] == {"labels": {"team": "x", "app": "slurmd"}, "annotations": {"h": "1", "note": "n"}}
    assert merged["spec"] == {"containers": [{"name": "a"}], "hostNetwork": True}
    assert apply_pod_template(base, None) == base


def test_service_ports_merge_by_port():
    base = {"selector": {"a": "b"}, "ports": [{"name": "ctld", "port": 6817, "targetPort": "ctld"}]}
    merged = merge_service_spec(base, {"type": "NodePort", "ports": [{"port": 6817, "nodePort": 30017}]})
    assert merged == {
        "selector": {"a": "b"},
        "type": "NodePort",
        "ports": [{"name": "ctld", "port": 6817, "targetPort": "ctld", "nodePort": 30017}],
    }


NAMES = st.sampled_from(["a", "b", "c", "slurmd"])
ENV = st.lists(
    st.fixed_dictionaries({"name": NAMES, "value": st.text(max_size=3)}), max_size=4, unique_by=lambda e: e["name"]
)
CONTAINER = st.fixed_dictionaries(
    {"name": NAMES}, optional={"image": st.text(max_size=4), "env": ENV, "workingDir": st.text(max_size=3)}
)
SPEC = st.fixed_dictionaries(
    {},
    optional={
        "containers": st.lists(CONTAINER, max_size=3, unique_by=lambda c: c["name"]),
        "hostNetwork": st.booleans(),
        "nodeSelector": st.dictionaries(NAMES, st.text(max_size=3), max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(base=SPEC, patch=SPEC)
def test_merge_properties(base, patch):
    merged = merge_pod_spec(base, patch)
    assert merge_pod_spec(merged, patch) == merged  # applying the same patch twice changes nothing
    assert merge_pod_spec(base, {}) == base
    by_name = {c["name"]: c for c in merged.get("containers", [])}
    assert len(by_name) == len(merged.get("containers", []))  # merge keys stay unique
    for container in patch.get("containers", []):
        for key, value in container.items():
            if key != "env":
                assert by_name[container["name"]][key] == value  # the patch's scalars win
        for env in container.get("env", []):
            assert env in by_name[container["name"]]["env"]
    for container in base.get("containers", []):
        assert container["name"] in by_name  # nothing of ours is lost without a delete directive

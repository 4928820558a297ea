"""Pod fields the API server would refuse (hooks/podschema.py): the schema file is Kubernetes' own, the checks it
lacks are added, and every kind that renders pods from a user's fields answers InvalidSpec instead of a workload
the API server refuses, keeping every child as last applied.

The schema file is rewritten only on purpose (after a kubernetes-validate upgrade, say):
`UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/hooks/test_podschema.py`, then review the diff.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import jsonschema
import pytest

from hooks import podschema
from hooks.app import create_app
from slinky_common import names
from tests.hooks.kinds import accounting, controller, loginset, restapi
from tests.support.hooks import as_observed, assert_invalid_spec, by_kind, condition_of, related
from tests.support.kube import SCHEMA_ROOT, validate_builtin

SOMETIMES = 'Unsupported value: "Sometimes": supported values: "Always", "IfNotPresent", "Never"'


def extract() -> dict[str, Any]:
    """PodTemplateSpec and every definition it refers to, from kubernetes-validate's non-strict bundle,
    without descriptions and `x-kubernetes-*` annotations (nothing a validator reads)."""
    bundle = SCHEMA_ROOT / f"v{podschema.KUBERNETES_VERSION}.0-local" / "_definitions.json"
    definitions = json.loads(bundle.read_text())["$defs"]
    wanted: set[str] = set()
    todo = [podschema.TEMPLATE_DEFINITION]
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            todo += _references(definitions[name])
    return {"$defs": {name: _lean(definitions[name]) for name in sorted(wanted)}}


def _references(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"].rpartition("/")[2]] if isinstance(node.get("$ref"), str) else []
        return found + [ref for value in node.values() for ref in _references(value)]
    if isinstance(node, list):
        return [ref for item in node for ref in _references(item)]
    return []


def _lean(node: Any, in_properties: bool = False) -> Any:
    if isinstance(node, dict):
        return {
            key: _lean(value, key == "properties" and not in_properties)
            for key, value in node.items()
            if in_properties or (key != "description" and not key.startswith("x-kubernetes-"))
        }
    if isinstance(node, list):
        return [_lean(item) for item in node]
    return node


def test_the_schema_file_is_kubernetes_validates_pod_template_schema():
    text = json.dumps(extract(), indent=1, sort_keys=True) + "\n"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        podschema.SCHEMA_FILE.write_text(text)
    assert podschema.SCHEMA_FILE.read_text() == text, "UPDATE_GOLDEN=1 rewrites hooks/podschema.json on purpose"


def test_the_bundled_schema_alone_takes_sometimes_so_the_enum_is_ours():
    """The reason for ENUMS: the OpenAPI schema has no enum for imagePullPolicy (nor ranges, nor quantity syntax)."""
    raw = extract()
    validator = jsonschema.Draft202012Validator({**raw, "$ref": f"#/$defs/{podschema.TEMPLATE_DEFINITION}"})
    assert validator.is_valid(template(imagePullPolicy="Sometimes", ports=[{"containerPort": 70000}]))
    assert podschema.template_problems(template(imagePullPolicy="Sometimes")) == (
        f'spec.containers[0] (container "slurmd").imagePullPolicy: {SOMETIMES}',
    )


def test_every_added_check_names_a_field_of_the_schema():
    raw = extract()["$defs"]
    for table in (podschema.ENUMS, podschema.RANGES, podschema.REQUIRED):
        for definition, fields in table.items():
            for field in fields:
                assert field in raw[definition]["properties"], f"{definition}.{field}"
    for definition, required in podschema.REQUIRED.items():  # each one the schema requires as well
        assert set(required) <= set(raw[definition].get("required", [])), definition


def template(**slurmd: Any) -> dict[str, Any]:
    container = {"name": "slurmd", "image": "slurmd:25.11", **slurmd}
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container]}}


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"imagePullPolicy": "Sometimes"}, f'spec.containers[0] (container "slurmd").imagePullPolicy: {SOMETIMES}'),
        (
            {"ports": [{"containerPort": 70000}]},
            'spec.containers[0] (container "slurmd").ports[0].containerPort: Invalid value: 70000: '
            "must be between 1 and 65535, inclusive",
        ),
        (
            {"ports": [{"containerPort": 80, "protocol": "HTTP"}]},
            'spec.containers[0] (container "slurmd").ports[0].protocol: Unsupported value: "HTTP": '
            'supported values: "TCP", "UDP", "SCTP"',
        ),
        (
            {"ports": [{"containerPort": "80"}]},
            'spec.containers[0] (container "slurmd").ports[0].containerPort: Invalid value: "80": '
            "must be of type integer",
        ),
        (
            {"resources": {"limits": {"memory": "2 Gi"}}},
            'spec.containers[0] (container "slurmd").resources.limits.memory: Invalid value: "2 Gi": quantities must '
            "match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
        ),
        ({"env": [{"value": "1"}]}, 'spec.containers[0] (container "slurmd").env[0].name: Required value'),
        (
            {"readinessProbe": {"tcpSocket": {"port": 1.5}}},
            'spec.containers[0] (container "slurmd").readinessProbe.tcpSocket.port: Invalid value: 1.5: '
            "must be of type string or integer",
        ),
    ],
)
def test_a_refused_value_is_named_by_its_path_and_the_api_servers_words(change, problem):
    assert podschema.template_problems(template(**change)) == (problem,)


def test_what_the_api_server_takes_is_no_problem():
    fine = template(
        imagePullPolicy="IfNotPresent",
        ports=[{"containerPort": 6818, "protocol": "TCP", "hostPort": 0}],
        resources={"limits": {"cpu": 2, "memory": "2Gi"}, "requests": {"cpu": "500m", "memory": "1.5e9"}},
        terminationMessagePolicy=None,
        aFieldOfANewerKubernetes={"any": "thing"},  # dropped with a warning, not refused
    )
    fine["spec"]["containers"][0]["lifecycle"] = {"preStop": {"sleep": {}}}  # the schema's lists "require" seconds
    fine["spec"]["containers"][0]["livenessProbe"] = {"httpGet": {"port": 80, "httpHeaders": [{"name": "X"}]}}
    fine["spec"].update(restartPolicy="", dnsPolicy="None", tolerations=[{"operator": "Exists"}])
    assert podschema.template_problems(fine) == ()


def test_a_workloads_pods_restart_always():
    never = template()
    never["spec"]["restartPolicy"] = "Never"
    assert podschema.template_problems(never) == ()
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "s"}, "spec": {"template": never}}
    assert podschema.workload_problems(sts) == (
        'spec.template.spec.restartPolicy: Unsupported value: "Never": supported values: "Always"',
    )


def test_every_problem_is_reported_and_the_summary_is_bounded():
    bad = template(imagePullPolicy="Sometimes", ports=[{"containerPort": 0}])
    assert len(podschema.template_problems(bad)) == 2
    assert podschema.summary(str(i) for i in range(7)) == "0; 1; 2; 3; 4; and 2 more"


def test_a_template_is_validated_once_per_process(monkeypatch):
    calls = []
    real = podschema._problems
    monkeypatch.setattr(podschema, "_verdicts", {})
    monkeypatch.setattr(podschema, "_problems", lambda *args: calls.append(1) or real(*args))
    bad = template(imagePullPolicy="Sometimes")
    first = podschema.template_problems(bad)
    assert podschema.template_problems(copy.deepcopy(bad)) == first and len(calls) == 1
    assert podschema.template_problems(template()) == () and len(calls) == 2


def test_the_verdict_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(podschema, "_verdicts", {})
    for image in range(podschema.VERDICT_CACHE + 10):
        podschema.template_problems(template(image=f"slurmd:{image}"))
    assert len(podschema._verdicts) == podschema.VERDICT_CACHE


# --- every kind that renders a workload from a user's pod fields --------------------------------------------------


@pytest.fixture()
def client():
    return create_app().test_client()


# (hook segment, a valid CR, the same CR with refused pod fields, related objects, what the condition names)
WORKLOADS = [
    (
        "restapi",
        restapi.restapi_cr(),
        restapi.restapi_cr(slurmrestd={"imagePullPolicy": "Sometimes"}),
        related(restapi.controller()),
        "Deployment slurm-restapi (set in spec.template or in the container's override, spec.<container name>): "
        f'spec.template.spec.containers[0] (container "slurmrestd").imagePullPolicy: {SOMETIMES}',
    ),
    (
        "controller",
        controller.controller(),
        controller.controller(
            template={"spec": {"containers": [{"name": "slurmctld", "ports": [{"containerPort": 68170}]}]}}
        ),
        related(*controller.keys()),
        'spec.template.spec.containers[0] (container "slurmctld").ports[1].containerPort: Invalid value: 68170',
    ),
    (
        "loginset",
        loginset.loginset_cr(),
        loginset.loginset_cr(login={"resources": {"requests": {"memory": "1 GB"}}}),
        loginset.inputs(),
        'spec.template.spec.containers[0] (container "login").resources.requests.memory: Invalid value: "1 GB"',
    ),
    (
        "accounting",
        accounting.accounting_cr(),
        accounting.accounting_cr(slurmdbd={"imagePullPolicy": "sometimes"}),
        accounting.secrets(),
        'spec.template.spec.containers[0] (container "slurmdbd").imagePullPolicy: Unsupported value: "sometimes"',
    ),
]


@pytest.mark.parametrize(("segment", "good", "bad", "rel", "needle"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_refused_pod_fields_are_an_invalid_spec_that_keeps_every_child(client, segment, good, bad, rel, needle):
    message = assert_invalid_spec(client, segment, good, bad, rel, needle)
    assert message.startswith("the API server would refuse the pod template of ")


@pytest.mark.parametrize(("segment", "good", "bad", "rel", "needle"), WORKLOADS, ids=[w[0] for w in WORKLOADS])
def test_the_running_workload_is_kept_exactly_as_applied(client, segment, good, bad, rel, needle):
    applied = client.post(f"/{segment}/sync", json=_request(good, None, rel)).get_json()
    later = client.post(f"/{segment}/sync", json=_request(bad, as_observed(applied["children"]), rel)).get_json()
    workloads = {k: v for k, v in by_kind(applied).items() if k.split("/")[0] in podschema.WORKLOAD_KINDS}
    assert workloads and {k: by_kind(later)[k] for k in workloads} == workloads
    for child in later["children"]:
        assert validate_builtin(child) == [], child["metadata"]["name"]
    assert needle in condition_of(later, names.CONDITION_INVALID_SPEC)["message"]


def _request(parent: dict, children: dict | None, rel: dict) -> dict:
    return {"controller": {}, "parent": parent, "children": children or {}, "related": rel, "finalizing": False}

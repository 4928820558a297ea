"""Each chart's values.schema.json refuses, at `helm template` (and so at `helm install`, `upgrade` and `lint`),
a value its consumer cannot take, naming the value's path, where before it rendered and the pod crash-looped;
the defaults, the repository's example values and the values users pass today still render.

helm names a value by its JSON pointer: `hooks.workers` is `at '/hooks/workers'` in helm's message."""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.charts import helm

Obj = dict[str, Any]
CHARTS = ("slurm-operator", "slurm", "slurm-bridge")
SCHEMA_ERROR = "values don't meet the specifications of the schema(s)"
# The example values files of the repository, and the chart each is for.
EXAMPLES = {
    "examples/values/slurm-bridge-partition.yaml": "slurm",
    "tests/charts/slinky_forms.yaml": "slurm",
}


def template(chart: str, *args: str) -> str:
    """`helm template` of charts/<chart> with these --set/-f arguments: the rendered text."""
    return helm._run(
        ["template", chart, str(helm.CHARTS / chart), "-n", "slinky", "--kube-version", helm.KUBE_VERSION, *args]
    )


def refusal(chart: str, *args: str) -> list[str]:
    """The lines of helm's message refusing these arguments."""
    with pytest.raises(helm.HelmFailed) as failed:
        template(chart, *args)
    return [line.strip() for line in str(failed.value).splitlines()]


def schema(chart: str) -> Obj:
    return json.loads((helm.CHARTS / chart / "values.schema.json").read_text())


# --- what the schemas are --------------------------------------------------------------------------


@pytest.mark.parametrize("chart", CHARTS)
def test_each_chart_has_a_schema_in_a_draft_helm_4_reads(chart: str) -> None:
    assert schema(chart)["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema(chart)["type"] == "object"


def _resolve(root: Obj, node: Obj) -> Obj:
    """`node` with its $ref to $defs followed (its own keywords, e.g. description, kept)."""
    while "$ref" in node:
        target = root["$defs"][node["$ref"].removeprefix("#/$defs/")]
        node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _child(root: Obj, node: Obj, key: str) -> Obj | None:
    """The schema of `key` under `node`: a property's, a pattern's or the additional properties'."""
    for branch in [node, *node.get("anyOf", [])]:
        branch = _resolve(root, branch)
        if key in branch.get("properties", {}):
            return _resolve(root, branch["properties"][key])
        for pattern, sub in branch.get("patternProperties", {}).items():
            if re.search(pattern, key):
                return _resolve(root, sub)
        if isinstance(branch.get("additionalProperties"), dict):
            return _resolve(root, branch["additionalProperties"])
    return None


def _free_form(node: Obj) -> bool:
    """A map the schema keeps open (resources, labels, podSpec ...): what is inside is not the chart's."""
    return not ({"properties", "patternProperties", "anyOf"} & set(node)) and "additionalProperties" not in node


def _without_a_rule(root: Obj, values: Any, node: Obj | None, path: str) -> list[str]:
    if node is None or not {"type", "anyOf", "enum", "const"} & set(node):
        return [path]
    if not isinstance(values, dict) or _free_form(node):
        return []
    return [
        missing
        for key, value in values.items()
        for missing in _without_a_rule(root, value, _child(root, node, key), f"{path}.{key}".lstrip("."))
    ]


@pytest.mark.parametrize("chart", CHARTS)
def test_every_value_of_values_yaml_has_a_rule(chart: str) -> None:
    """A value added to values.yaml gets its type (at least) in the schema too; a free-form map (resources,
    nodeSelector, podSpec ...) is one value."""
    root = schema(chart)
    values = yaml.safe_load((helm.CHARTS / chart / "values.yaml").read_text())
    assert _without_a_rule(root, values, root, "") == []


# --- what still renders ----------------------------------------------------------------------------


@pytest.mark.parametrize("chart", CHARTS)
def test_the_defaults_render(chart: str) -> None:
    kinds = {doc["kind"] for doc in helm.render(chart)}
    assert {"Deployment", "Controller"} & kinds


def test_every_example_values_file_is_tried() -> None:
    assert {f"examples/values/{p.name}" for p in (helm.REPO / "examples" / "values").glob("*.yaml")} <= set(EXAMPLES)


@pytest.mark.parametrize(("path", "chart"), sorted(EXAMPLES.items()))
def test_the_repositorys_example_values_render(path: str, chart: str) -> None:
    assert template(chart, "-f", str(helm.REPO / path))


def test_the_values_getting_started_gives_render() -> None:
    page = (helm.REPO / "docs" / "getting-started.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", page, re.S)
    assert blocks
    for block in blocks:
        with tempfile.TemporaryDirectory() as tmp:
            values = Path(tmp) / "values.yaml"
            values.write_text(block)
            assert "kind: Controller" in template("slurm", "-f", str(values), "--set", "nodesets.cpu.replicas=2")


ACCEPTED = [
    ("slurm-operator", "--set", "hooks.workers="),  # "" = one per core (HOOKS_WORKERS)
    ("slurm-operator", "--set", "hooks.workers=8"),
    ("slurm-operator", "--set", "hooks.logLevel=DEBUG"),  # gunicorn and logs.configure take any case
    ("slurm-operator", "--set", "hooks.logLevel=Critical"),
    ("slurm-operator", "--set", "slurmSync.logLevel=debug"),  # slurm_sync upper-cases it
    ("slurm-operator", "--set", "slurmSync.logLevel=Warning"),
    ("slurm-operator", "--set", "image.tag=26"),  # --set makes a number of it
    ("slurm-operator", "--set", "image.pullPolicy=Never"),
    ("slurm-operator", "--set", "slurmSync.pollInterval=2.5"),
    ("slurm-operator", "--set-json", "slurmSync.pollInterval=0.5"),
    ("slurm-operator", "--set", "hooks.pdb.minAvailable=50%"),
    ("slurm-operator", "--set", "propagatedNodeConditions=KernelDeadlock\\,GPUProblem"),  # Slinky's string form
    ("slurm-operator", "--set", "hooks.port=1"),
    ("slurm-operator", "--set", "slurmSync.port=65535"),
    ("slurm-bridge", "--set", "hooks.workers="),
    ("slurm-bridge", "--set", "slurmSync.logLevel=error"),
    ("slurm-bridge", "--set", "sharedConfig.slurmRestApi=https://[fd00::1]:6820"),
    ("slurm-bridge", "--set", "token.lifetime=1h30m"),
    ("slurm-bridge", "--set", "sharedConfig.slurmJwtSecretNamespace="),
    ("slurm", "--set", "nodesets.cpu.replicas=null"),  # left to whoever scales the NodeSet
    ("slurm", "--set", "nodesets.cpu.partition=null"),
    ("slurm", "--set", "nodesets.cpu.slurmd.image=registry.example.com/slurmd:26.05"),  # Slinky's string form
    ("slurm", "--set", "controller.persistence.storageClassName=-"),
    ("slurm", "--set", "restapi.pdb.enabled=true,restapi.pdb.maxUnavailable=50%"),
    ("slurm", "--set", "imagePullPolicy="),
    ("slurm", "--set", "prologScriptRefs={site-prolog}"),
    ("slurm", "--set", "asciiArt=false"),  # a Slinky key this chart ignores
]


@pytest.mark.parametrize(("chart", "flag", "value"), ACCEPTED, ids=[f"{c}:{v}" for c, _, v in ACCEPTED])
def test_values_users_pass_today_still_render(chart: str, flag: str, value: str) -> None:
    assert template(chart, flag, value)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"operator": {"logLevel": "LOUD"}}, "operator.logLevel (a value of Slinky's slurm-operator chart)"),
        ({"webhook": {"replicas": -1}}, "webhook.replicas (a value of Slinky's slurm-operator chart)"),
        ({"imagePullPolicy": "Sometimes"}, 'must be Always, IfNotPresent or Never, got "Sometimes"'),
        ({"operator": {"imagePullPolicy": "Sometimes"}}, 'must be Always, IfNotPresent or Never, got "Sometimes"'),
    ],
)
def test_slinkys_operator_keys_keep_the_charts_own_message(values: Obj, message: str) -> None:
    with pytest.raises(helm.HelmFailed) as failed:
        helm.render("slurm-operator", values)
    assert message in str(failed.value) and SCHEMA_ERROR not in str(failed.value)


# --- what is refused, naming the value -------------------------------------------------------------

REFUSED = [
    # chart, flag, assignment, the value's path as helm names it, what helm says of it
    ("slurm-operator", "--set", "hooks.workers=abc", "/hooks/workers", "got string, want integer"),
    ("slurm-operator", "--set", "hooks.workers=0", "/hooks/workers", "minimum: got 0, want 1"),
    ("slurm-operator", "--set-json", "hooks.workers=1.5", "/hooks/workers", "got number, want integer"),
    ("slurm-operator", "--set", "hooks.timeout=0", "/hooks/timeout", "minimum: got 0, want 1"),
    ("slurm-operator", "--set", "hooks.logLevel=LOUD", "/hooks/logLevel", "'LOUD' does not match pattern"),
    ("slurm-operator", "--set", "hooks.logLevel=warn", "/hooks/logLevel", "'warn' does not match pattern"),
    ("slurm-operator", "--set", "hooks.port=70000", "/hooks/port", "maximum: got 70,000, want 65,535"),
    ("slurm-operator", "--set", "hooks.port=0", "/hooks/port", "minimum: got 0, want 1"),
    ("slurm-operator", "--set", "hooks.port=null", "/hooks", "missing property 'port'"),
    ("slurm-operator", "--set", "hooks.replicas=-1", "/hooks/replicas", "minimum: got -1, want 0"),
    ("slurm-operator", "--set", "hooks.accessLog=yes", "/hooks/accessLog", "got string, want boolean"),
    ("slurm-operator", "--set", "hooks.pdb.minAvailable=half", "/hooks/pdb/minAvailable", "'anyOf' failed"),
    ("slurm-operator", "--set", "hooks.wrokers=4", "/hooks", "additional properties 'wrokers' not allowed"),
    ("slurm-operator", "--set", "image.pullPolicy=Sometimes", "/image/pullPolicy", "value must be one of"),
    ("slurm-operator", "--set", "image.repository=", "/image/repository", "minLength: got 0, want 1"),
    ("slurm-operator", "--set", "slurmSync.logLevel=LOUD", "/slurmSync/logLevel", "'LOUD' does not match pattern"),
    ("slurm-operator", "--set", "slurmSync.logLevel=", "/slurmSync/logLevel", "'' does not match pattern"),
    ("slurm-operator", "--set", "slurmSync.logLevel=NOTSET", "/slurmSync/logLevel", "'NOTSET' does not match"),
    ("slurm-operator", "--set", "slurmSync.port=70000", "/slurmSync/port", "maximum: got 70,000, want 65,535"),
    ("slurm-operator", "--set", "slurmSync.replicas=-1", "/slurmSync/replicas", "minimum: got -1, want 0"),
    ("slurm-operator", "--set", "slurmSync.pollInterval=0", "/slurmSync/pollInterval", "exclusiveMinimum"),
    ("slurm-operator", "--set", "slurmSync.slurmTimeout=soon", "/slurmSync/slurmTimeout", "want number"),
    ("slurm-operator", "--set", "slurmSync.kubeApiBurst=0", "/slurmSync/kubeApiBurst", "minimum: got 0, want 1"),
    ("slurm-operator", "--set", "slurmSync.kubeApiQps=-1", "/slurmSync/kubeApiQps", "minimum: got -1, want 0"),
    ("slurm-operator", "--set", "slurmSync.tokenLifetime=5m", "/slurmSync/tokenLifetime", "want integer"),
    ("slurm-operator", "--set", "slurmSync.tokenUser=", "/slurmSync/tokenUser", "minLength: got 0, want 1"),
    (
        "slurm-operator",
        "--set",
        "slurmSync.leaderElection.leaseDuration=0",
        "/slurmSync/leaderElection/leaseDuration",
        "exclusiveMinimum",
    ),
    (
        "slurm-operator",
        "--set",
        "slurmSync.pdb.unhealthyPodEvictionPolicy=Never",
        "/slurmSync/pdb/unhealthyPodEvictionPolicy",
        "value must be one of 'IfHealthyBudget', 'AlwaysAllow'",
    ),
    ("slurm-operator", "--set", "slurmSync.namespaces={Team_A}", "/slurmSync/namespaces/0", "does not match pattern"),
    ("slurm-operator", "--set", "namespaceOverride=Ops", "/namespaceOverride", "does not match pattern"),
    (
        "slurm-operator",
        "--set",
        "metrics.serviceMonitor.interval=30 seconds",
        "/metrics/serviceMonitor/interval",
        "does not match pattern",
    ),
    ("slurm-operator", "--set", "controllers.enabled=maybe", "/controllers/enabled", "want boolean"),
    ("slurm-bridge", "--set", "hooks.workers=abc", "/hooks/workers", "got string, want integer"),
    ("slurm-bridge", "--set", "hooks.logLevel=LOUD", "/hooks/logLevel", "'LOUD' does not match pattern"),
    ("slurm-bridge", "--set", "hooks.port=70000", "/hooks/port", "maximum: got 70,000, want 65,535"),
    ("slurm-bridge", "--set", "hooks.replicas=-1", "/hooks/replicas", "minimum: got -1, want 0"),
    ("slurm-bridge", "--set", "image.pullPolicy=Sometimes", "/image/pullPolicy", "value must be one of"),
    ("slurm-bridge", "--set", "slurmSync.logLevel=LOUD", "/slurmSync/logLevel", "'LOUD' does not match pattern"),
    ("slurm-bridge", "--set", "slurmSync.port=70000", "/slurmSync/port", "maximum: got 70,000, want 65,535"),
    ("slurm-bridge", "--set", "slurmSync.replicas=-1", "/slurmSync/replicas", "minimum: got -1, want 0"),
    ("slurm-bridge", "--set", "admission.port=70000", "/admission/port", "maximum: got 70,000, want 65,535"),
    ("slurm-bridge", "--set", "admission.port=null", "/admission", "missing property 'port'"),
    ("slurm-bridge", "--set", "admission.timeoutSeconds=31", "/admission/timeoutSeconds", "maximum: got 31, want 30"),
    ("slurm-bridge", "--set", "admission.failurePolicy=Retry", "/admission/failurePolicy", "value must be one of"),
    (
        "slurm-bridge",
        "--set",
        "admission.managedNamespaces={Team_A}",
        "/admission/managedNamespaces/0",
        "does not match pattern",
    ),
    (
        "slurm-bridge",
        "--set",
        "sharedConfig.slurmRestApi=slurm-restapi.slurm:6820",
        "/sharedConfig/slurmRestApi",
        "does not match pattern",
    ),
    ("slurm-bridge", "--set", "token.lifetime=15 minutes", "/token/lifetime", "does not match pattern"),
    ("slurm-bridge", "--set", "certManager.duration=5y", "/certManager/duration", "does not match pattern"),
    ("slurm-bridge", "--set", "releaseFinalizers=yes", "/releaseFinalizers", "want boolean"),
    ("slurm", "--set", "imagePullPolicy=Sometimes", "/imagePullPolicy", "value must be one of"),
    (
        "slurm",
        "--set",
        "nodesetDefaults.slurmd.imagePullPolicy=Sometimes",
        "/nodesetDefaults/slurmd/imagePullPolicy",
        "value must be one of",
    ),
    ("slurm", "--set", "restapi.replicas=-1", "/restapi/replicas", "minimum: got -1, want 0"),
    ("slurm", "--set", "restapi.replicas=two", "/restapi/replicas", "got string, want integer"),
    ("slurm", "--set", "nodesets.cpu.replicas=-1", "/nodesets/cpu/replicas", "minimum: got -1, want 0"),
    ("slurm", "--set", "nodesets.cpu.scalingMode=Deployment", "/nodesets/cpu/scalingMode", "value must be one of"),
    ("slurm", "--set", "nodesets.cpu.ordinalPadding=11", "/nodesets/cpu/ordinalPadding", "maximum: got 11, want 10"),
    ("slurm", "--set", "nodesets.CPU.replicas=1", "/nodesets", "additional properties 'CPU' not allowed"),
    ("slurm", "--set", "nodesets.cpu.elastic.maxReplicas=0", "/nodesets/cpu/elastic/maxReplicas", "minimum"),
    ("slurm", "--set", "nodesets.cpu.elastic.max=4", "/nodesets/cpu/elastic", "additional properties 'max'"),
    ("slurm", "--set", "loginsets.users.replicas=-1", "/loginsets/users/replicas", "minimum: got -1, want 0"),
    (
        "slurm",
        "--set",
        "loginsets.users.service.spec.type=Public",
        "/loginsets/users/service/spec/type",
        "value must be one of",
    ),
    (
        "slurm",
        "--set",
        "accounting.storageConfig.port=70000",
        "/accounting/storageConfig/port",
        "maximum: got 70,000, want 65,535",
    ),
    ("slurm", "--set", "controller.ha.backups=0", "/controller/ha/backups", "minimum: got 0, want 1"),
    (
        "slurm",
        "--set",
        "controller.persistence.accessModes={ReadWriteSometimes}",
        "/controller/persistence/accessModes/0",
        "value must be one of",
    ),
    ("slurm", "--set", "controller.service.spec.type=Public", "/controller/service/spec/type", "value must be one of"),
    ("slurm", "--set", "priorityClass.value=2000000000", "/priorityClass/value", "maximum"),
    ("slurm", "--set", "clusterName=" + "c" * 41, "/clusterName", "maxLength: got 41, want 40"),
    ("slurm", "--set-json", 'configFiles={"gres.conf": 1}', "/configFiles/gres.conf", "got number, want string"),
    ("slurm", "--set", "partitions.all.nodesets=ALL", "/partitions/all/nodesets", "got string, want array"),
]


@pytest.mark.parametrize(
    ("chart", "flag", "value", "pointer", "rule"), REFUSED, ids=[f"{c}:{v}" for c, _, v, _, _ in REFUSED]
)
def test_a_bad_value_is_refused_naming_it(chart: str, flag: str, value: str, pointer: str, rule: str) -> None:
    lines = refusal(chart, flag, value)
    assert any(SCHEMA_ERROR in line for line in lines), lines
    about_it = [line for line in lines if f"at '{pointer}': " in line]
    assert about_it and any(rule in line for line in about_it), lines


def test_the_operator_names_hooks_workers_and_why() -> None:
    """The issue's own example: the pod crash-looped with a traceback; now the install is refused."""
    lines = refusal("slurm-operator", "--set", "hooks.workers=abc")
    start = lines.index("slurm-operator:")
    assert [line for line in lines[start + 1 :] if line] == [
        "- at '/hooks/workers': 'anyOf' failed",
        "- at '/hooks/workers': got string, want integer",
        "- at '/hooks/workers': value must be ''",  # the other form it may take: "" (one per core)
    ]


def test_helm_lint_refuses_a_bad_value_too() -> None:
    with pytest.raises(helm.HelmFailed, match=r"at '/hooks/logLevel'"):
        helm.lint("slurm-bridge", {"hooks": {"logLevel": "LOUD"}})

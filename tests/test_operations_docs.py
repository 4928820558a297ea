"""docs/operations.md: every command in it is one a user can run against what we ship.

helm commands render with the real helm (same chart, namespace and values); kubectl commands name
only kinds, objects, labels, annotations, fields and conditions that exist in the CRDs, the
rendered charts and slinky_common/names.py; make targets exist; curl asks a port the page forwarded, for a
path the process serves. A command of any other program fails the test, so none goes unchecked.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from functools import cache
from typing import Any

import pytest
import yaml

from slinky_common import names, slurmstate
from slurm_sync import __main__ as slurm_sync_cli
from tests.charts import helm
from tests.support.operationsdoc import DOC, PLACEHOLDERS, ROOT, Command, commands

PROGRAMS = ("kubectl", "helm", "make", "curl")
BUILTIN_KINDS = {
    "node": "Node",
    "nodes": "Node",
    "pod": "Pod",
    "pods": "Pod",
    "pvc": "PersistentVolumeClaim",
    "secret": "Secret",
    "crd": "CustomResourceDefinition",
    "crds": "CustomResourceDefinition",
    "deploy": "Deployment",
    "svc": "Service",
    "leases": "Lease",
    "compositecontrollers": "CompositeController",
    "decoratorcontrollers": "DecoratorController",
    "events": "Event",
    "resourceclaims": "ResourceClaim",
}
# Paths each process serves outside the hook routes (hooks/app.py, slurm_sync/service.py).
SERVED_PATHS = {"/metrics", "/healthz", "/readyz"}
Obj = dict[str, Any]


def _by(program: str) -> list[Command]:
    return [c for c in commands() if c.words[0] == program]


@cache
def crds() -> dict[str, Obj]:
    """Every CRD by each name kubectl accepts for it (plural, singular, kind, short names)."""
    out: dict[str, Obj] = {}
    for path in (ROOT / "crds").glob("*.yaml"):
        crd = yaml.safe_load(path.read_text())
        spelled = crd["spec"]["names"]
        for name in (spelled["plural"], spelled["singular"], spelled["kind"].lower(), *spelled.get("shortNames", [])):
            out[name] = crd
    return out


@cache
def releases() -> dict[tuple[str, str], list[Obj]]:
    """(release, namespace) -> rendered objects, for every `helm install` of the page."""
    return {(c.words[2], c.option("-n") or ""): render(c) for c in _by("helm") if c.words[1] == "install"}


def render(command: Command) -> list[Obj]:
    """`helm install|upgrade` as `helm template` with the same chart, namespace and --set values."""
    release, chart, namespace = command.words[2], command.words[3], command.option("-n") or "default"
    sets = [PLACEHOLDERS.get(w, w) for w in command.words if w.startswith("image.")]
    sets = [re.sub("|".join(map(re.escape, PLACEHOLDERS)), lambda m: PLACEHOLDERS[m.group(0)], s) for s in sets]
    args = [
        "template",
        release,
        str(ROOT / chart),
        "-n",
        namespace,
        "--kube-version",
        helm.KUBE_VERSION,
        "--api-versions",
        "metacontroller.k8s.io/v1alpha1",
    ]
    for value in sets:
        args += ["--set", value]
    out = subprocess.run([str(helm.helm()), *args], capture_output=True, text=True, check=True).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def rendered(namespace: str | None = None) -> Iterator[Obj]:
    for (_, release_ns), objects in releases().items():
        for obj in objects:
            ns = obj["metadata"].get("namespace", release_ns)
            if (
                namespace is None
                or ns == namespace
                or ("namespace" not in obj["metadata"] and obj["kind"] != "Namespace")
            ):
                yield obj


def name_values() -> set[str]:
    return {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str)}


# The label of Metacontroller's pods: its manifests/production and, by its chart's name, its Helm chart.
METACONTROLLER_POD_LABELS = {
    ("app.kubernetes.io/name", "metacontroller"),
    ("app.kubernetes.io/name", "metacontroller-helm"),
}


def metacontroller_crds() -> set[str]:
    """Metacontroller's CRD names, as the labs' stand-ins carry them (hack/cluster/metacontroller-crds.yaml)."""
    docs = yaml.safe_load_all((ROOT / "hack/cluster/metacontroller-crds.yaml").read_text())
    return {d["metadata"]["name"] for d in docs if d}


def labels_everywhere() -> set[tuple[str, str]]:
    pairs: set[tuple[str, str]] = set()
    for obj in rendered():
        pairs |= set((obj["metadata"].get("labels") or {}).items())
        pairs |= set((obj.get("spec", {}).get("template", {}).get("metadata", {}).get("labels") or {}).items())
    return pairs


def _unescape_path(path: str) -> list[str]:
    """`.metadata.annotations.a\\.b/c` -> ["metadata", "annotations", "a.b/c"]."""
    return [p.replace("\0", ".") for p in path.replace("\\.", "\0").strip(".").split(".")]


def jsonpaths(command: Command) -> list[list[str]]:
    """The absolute field paths of a jsonpath output (subscripts dropped); fields inside a
    `{range}` are relative to its items and left out."""
    text = next((w.split("=", 1)[1] for w in command.words if w.startswith("jsonpath=")), "")
    paths, in_range = [], False
    for expr in re.findall(r"\{([^}]*)\}", text):
        if expr == "end":
            in_range = False
        elif expr.startswith("range "):
            paths.append(_unescape_path(re.sub(r"\[[^\]]*\]", "", expr[len("range ") :])))
            in_range = True
        elif expr.startswith(".") and not in_range:
            paths.append(_unescape_path(re.sub(r"\[[^\]]*\]", "", expr)))
    return paths


# --- the tests ------------------------------------------------------------------------------


def test_every_command_is_of_a_program_this_test_checks() -> None:
    assert len(commands()) > 30
    assert {c.words[0] for c in commands()} <= set(PROGRAMS), [c.line for c in commands() if c.words[0] not in PROGRAMS]


@pytest.mark.parametrize(
    "command", [c for c in _by("helm") if c.words[1] in ("install", "upgrade")], ids=lambda c: c.line
)
def test_helm_install_and_upgrade_render_with_the_real_helm(command: Command) -> None:
    objects = render(command)
    assert objects
    images = {
        c["image"] for o in objects if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
    }
    if any(w.startswith("image.") for w in command.words):
        assert images == {"registry.example/slinky-metacontroller:1.0.0"}


def test_helm_upgrade_and_uninstall_name_an_installed_release() -> None:
    for command in _by("helm"):
        assert command.words[1] in ("install", "upgrade", "uninstall"), command.line
        assert (command.words[2], command.option("-n")) in releases(), command.line


def test_make_targets_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for command in _by("make"):
        for target in command.words[1:]:
            assert re.search(rf"^{re.escape(target)}:", makefile, re.M), command.line


def _kinds(word: str) -> list[str]:
    return word.split(",")


def _check_kind_and_names(command: Command, words: list[str]) -> None:
    namespace = command.option("-n")
    kind_word, *object_names = words
    if "/" in kind_word:  # deploy/<name>, svc/<name>
        kind_word, object_names = kind_word.split("/", 1)[0], [w.split("/", 1)[1] for w in words]
    for kind in _kinds(kind_word):
        assert kind in BUILTIN_KINDS or kind in crds(), f"{command.line}: unknown kind {kind}"
    kind = _kinds(kind_word)[0]
    for name in (n for n in object_names if not n.startswith("<") and not n.startswith("-")):
        if kind in ("crd", "crds"):
            assert name in {c["metadata"]["name"] for c in crds().values()} | metacontroller_crds(), command.line
        elif kind in crds():
            assert name in {
                o["metadata"]["name"] for o in rendered(namespace) if o["kind"] == crds()[kind]["spec"]["names"]["kind"]
            }, command.line
        elif kind not in ("pod", "node", "nodes"):
            expected = BUILTIN_KINDS[kind]
            assert name in {o["metadata"]["name"] for o in rendered(namespace) if o["kind"] == expected}, command.line


def _object_words(command: Command) -> list[str]:
    """The kind and object words of a kubectl command (flags and their values left out)."""
    verb_index = 2 if command.words[1] in ("rollout", "port-forward") and command.words[1] == "rollout" else 1
    words, skip = [], False
    for word in command.words[verb_index + 1 :]:
        if skip:
            skip = False
        elif word in ("-n", "-l", "-o", "-c", "-p", "--type", "-f", "--field-selector"):
            skip = True
        elif not word.startswith("-"):
            words.append(word)
    return words


@pytest.mark.parametrize("command", _by("kubectl"), ids=lambda c: c.line)
def test_kubectl_names_what_exists(command: Command) -> None:
    verb = command.words[1]
    assert verb in (
        "get", "describe", "logs", "delete", "patch", "annotate", "label", "rollout", "port-forward", "apply", "wait"
    ), command.line  # fmt: skip
    if verb == "wait":
        condition = next(w for w in command.words if w.startswith("--for=")).removeprefix("--for=condition=")
        assert condition in name_values(), f"{command.line}: no condition {condition}"
    words = _object_words(command)
    if verb in ("annotate", "label"):  # kind, object, then key=value (set) or key- (remove) each
        for change in words[2:]:
            key = change.split("=", 1)[0].removesuffix("-")
            assert key in name_values(), f"{command.line}: {key} is not defined in slinky_common/names.py"
        words = words[:2]
    if verb == "apply":
        path = command.option("-f")
        assert path in ("crds/", "dist/install.yaml", "dist/install-bridge.yaml"), command.line
        assert (ROOT / path).is_dir() or ("dist/" in path and path.split("/")[1] in (ROOT / "Makefile").read_text())
    elif verb == "port-forward":
        _check_kind_and_names(command, words[:1])
        (port,) = words[1:]
        (service,) = [
            o
            for o in rendered(command.option("-n"))
            if o["kind"] == "Service" and o["metadata"]["name"] == words[0].split("/")[1]
        ]
        assert int(port) in {p["port"] for p in service["spec"]["ports"]}, command.line
    elif verb == "logs" and not words:  # by label: every replica, each line named by --prefix
        assert command.option("-l") and "--prefix" in command.words, command.line
    elif verb == "logs" and words[0].startswith("<"):
        container = command.option("-c")
        assert container in ("slurmd",), command.line  # the NodeSet pod's container (hooks/nodeset/pods.py)
    else:
        _check_kind_and_names(command, words)
    if (selector := command.option("-l")) and " in (" in selector:  # a set: Metacontroller's own labels
        key, _, values = selector.partition(" in (")
        assert {(key, v) for v in values.rstrip(")").split(",")} == METACONTROLLER_POD_LABELS, command.line
    elif selector:
        key, _, value = selector.partition("=")
        assert key in name_values() or (key, value) in labels_everywhere(), command.line
        if value:
            assert (key, value) in labels_everywhere(), command.line
    for path in jsonpaths(command):
        _check_field(command, words[0].split(",")[0], path)
    if field := command.option("--field-selector"):
        key, _, reason = field.partition("=")
        sources = "".join(f.read_text() for f in (ROOT / "slurm_sync").rglob("*.py"))
        assert key == "reason" and f'"{reason}"' in sources, command.line  # an Event reason slurm_sync posts


def _check_field(command: Command, kind: str, path: list[str]) -> None:
    if path[0] == "items":  # a list: the fields of its items
        path = path[1:]
    if path[:2] in (["metadata", "annotations"], ["metadata", "labels"]):
        assert path[2] in name_values(), f"{command.line}: {path[2]} is not defined in slinky_common/names.py"
    elif kind in crds() and path[0] in ("status", "spec"):
        schema = crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        for part in path:
            schema = schema["properties"][part]  # KeyError: no such field in the CRD
    else:
        assert path[:2] in (["status", "conditions"], ["metadata", "finalizers"]), command.line


def test_port_forwarded_paths_are_served() -> None:
    forwarded = {c.words[-1] for c in _by("kubectl") if c.words[1] == "port-forward"}
    for command in _by("curl"):
        match = re.fullmatch(r"localhost:(\d+)(/\S*)", command.words[-1])
        assert match and match.group(1) in forwarded and match.group(2) in SERVED_PATHS, command.line


def test_prose_names_exist() -> None:
    """Labels, annotations, finalizers, conditions, metrics and defaults the text names outside commands."""
    text = DOC.read_text()
    for key in re.findall(r"[a-z]+(?:\.[a-z]+)*\.slinky\.slurm\.net/[a-z-]*[a-z]", text):  # "key-" removes key
        assert key in name_values() or key.startswith("metacontroller.io/"), key
    decorators = {o["metadata"]["name"] for o in _bridge_objects() if o["kind"] == "DecoratorController"}
    for finalizer in re.findall(r"metacontroller\.io/decoratorcontroller-([a-z-]+)", text):
        assert finalizer in decorators, finalizer
    for state in re.findall(r"`SlurmNodeState(\w+)`", text):
        assert f"SlurmNodeState{state}" in {
            slurmstate.condition_type(s) for s in (*slurmstate.BASE_STATES, *slurmstate.FLAG_STATES)
        }
    for condition in re.findall(r"`(\w+)=(?:True|False)`", text):
        assert condition in name_values(), condition
    metric_sources = (ROOT / "hooks/metrics.py").read_text() + (ROOT / "slurm_sync/metrics.py").read_text()
    for metric in re.findall(r"`(slinky_\w+|slurm_sync_\w+)", text):
        # a Counter defined as "x" is scraped as x_total, the name a user sees
        assert f'"{metric}"' in metric_sources or f'"{metric.removesuffix("_total")}"' in metric_sources, metric
    grace = re.search(r"`--nodeset-deletion-grace` \(default (\d+) s\)", text)
    assert grace and float(grace.group(1)) == slurm_sync_cli.parse_args([]).nodeset_deletion_grace
    assert "WrongSlurmCluster" in (ROOT / "slurm_sync/service.py").read_text()


def _bridge_objects() -> list[Obj]:
    return next(objs for (release, _), objs in releases().items() if release == "slurm-bridge")

"""A composite request decoded against its shape (hooks/requestjson.py) is the strict JSON parse minus managedFields.

The shaped decoder is the fast path of every CompositeController sync and finalize request;
`contract.load_json_object` (orjson) is the authority. Whatever the authority refuses, the fast
path refuses with the authority's message; whatever it accepts, the fast path gives the same data,
key order included, without the observed objects' `metadata.managedFields` and without fields that
no object our CompositeControllers watch can have (checked here against the Kubernetes schemas).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hooks import contract, requestjson
from hooks.app import create_app
from slinky_common.errors import BadHookRequest
from tests.support import kube

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "requests"
RECORDED = Path(__file__).parent / "responses" / "requests"
COMPOSITE = re.compile(r"(controller|nodeset|loginset|restapi|accounting|token)-(sync|finalize)")


def parsed(body: bytes) -> Any:
    """The authority's parse: what the fast path gives when the request does not fit its shape."""
    return contract.load_json_object(body)


def reference(body: bytes) -> Any:
    """What the fast path must give for a request that fits its shape: the authority's parse minus
    what the fast path leaves out (a request that does not fit makes this raise)."""
    data = contract.load_json_object(body)
    view = {k: v for k, v in data.items() if k in requestjson.COMPOSITE_FIELDS}
    for key in ("children", "related"):
        groups = view.get(key)
        if isinstance(groups, dict):
            view[key] = {t: None if g is None else {n: _observed(o) for n, o in g.items()} for t, g in groups.items()}
    return view


def _observed(obj: dict[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in obj.items() if k in requestjson.OBSERVED_FIELDS}
    if "metadata" in view:
        view["metadata"] = {k: v for k, v in view["metadata"].items() if k in requestjson.METADATA_FIELDS}
    return view


def outcome(load: Any, body: bytes) -> tuple[str, str]:
    try:
        data = load(body)
    except BadHookRequest as err:
        return "400", str(err)
    except (AttributeError, TypeError):  # reference(): not of the composite request's shape
        return "no view", ""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)  # to write out the deepest edge cases; decoding ran under the default limit
    try:
        return "ok", json.dumps(data)  # text: key order counts
    finally:
        sys.setrecursionlimit(limit)


def assert_same(body: bytes, fits: bool | None = None) -> None:
    """The fast path answers as the authority; with the view when the request fits the shape (`fits`
    None: either), with the whole parse when it does not."""
    got = outcome(requestjson.load_composite_request, body)
    view, whole = outcome(reference, body), outcome(parsed, body)
    if got[0] == "400" or whole[0] == "400":
        assert got == whole
    elif fits is None:
        assert got in (view, whole)
    else:
        assert got == (view if fits else whole)


def composite_requests() -> list[Path]:
    found = [p for p in sorted(EXAMPLES.glob("*.json")) if COMPOSITE.fullmatch(p.stem)]
    found += [p for p in sorted(RECORDED.glob("*.json")) if COMPOSITE.match(p.stem)]
    return found


@pytest.mark.parametrize("path", composite_requests(), ids=lambda p: p.stem)
def test_every_example_and_recorded_request_decodes_as_the_authority_minus_managed_fields(path: Path) -> None:
    assert_same(path.read_bytes(), fits=not path.stem.endswith(("--not-json", "--no-parent")) or None)


def test_managed_fields_are_what_is_left_out_of_a_pod() -> None:
    body = orjson.dumps(
        {
            "parent": {"kind": "NodeSet"},
            "children": {
                "Pod.v1": {
                    "slurm/a": {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "a", "managedFields": [{"manager": "x"}], "uid": "u"},
                        "spec": {"managedFields": 1},
                        "status": {},
                    }
                }
            },
        }
    )
    pod = requestjson.load_composite_request(body)["children"]["Pod.v1"]["slurm/a"]
    assert pod == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "a", "uid": "u"},
        "spec": {"managedFields": 1},
        "status": {},
    }


# Bodies the authority refuses or reads in its own way; the fast path must agree on each.
EDGES = {
    "empty": b"",
    "not json": b'{"parent": {"kind": "NodeSet"}\n',
    "top-level list": b"[]",
    "top-level null": b"null",
    "NaN": b'{"parent": NaN}',
    "Infinity": b'{"parent": {"x": Infinity}}',
    "1e400": b'{"parent": 1e400}',
    "lone surrogate": b'{"parent": "\\ud800"}',
    "lone low surrogate": b'{"children": {"P": {"a": {"metadata": {"name": "\\udc00"}}}}}',
    "invalid utf-8": b'{"parent": "\xff"}',
    "utf-8 surrogate": b'{"parent": "\xed\xa0\x80"}',
    "BOM": b'\xef\xbb\xbf{"parent": 1}',
    "trailing data": b'{"parent": 1} x',
    "leading zero": b'{"parent": 01}',
    "control character": b'{"parent": "a\x01b"}',
    "duplicate keys": b'{"parent": 1, "parent": {"kind": "NodeSet"}}',
    "duplicate metadata keys": b'{"children": {"P": {"a": {"metadata": {"name": "a", "name": "b"}}}}}',
    "null children": b'{"children": null, "related": {"P": null}}',
    "children a list": b'{"children": []}',
    "unknown top-level key": b'{"parent": 1, "extra": {"a": 1}, "finalizing": true}',
    "unknown object field": b'{"children": {"P": {"a": {"kind": "P", "rules": [1], "metadata": {"x": 1}}}}}',
    "-0.0 and 1e-400": b'{"parent": [-0.0, 1e-400, -0, 0.1, 2.2250738585072011e-308]}',
    "depth 1,000": b'{"parent": ' + b"[" * 1000 + b"]" * 1000 + b"}",
    "depth 1,100": b'{"parent": ' + b"[" * 1100 + b"]" * 1100 + b"}",
    "depth 1,100 in a child": b'{"children": {"P": {"a": {"spec": ' + b"[" * 1100 + b"]" * 1100 + b"}}}}",
    "depth 1,100 in managedFields": b'{"children": {"P": {"a": {"metadata": {"managedFields": '
    + b"[" * 1100
    + b"]" * 1100
    + b"}}}}}",
    "not UTF-8 in managedFields": b'{"children": {"P": {"a": {"metadata": {"managedFields": ["\x80"]}}}}}'.replace(
        b"\\x80", b"\x80"
    ),
    "a UTF-8 surrogate in an unknown field": b'{"zzz": "\xed\xa0\x80", "parent": 1}'.replace(
        b"\\xed\\xa0\\x80", b"\xed\xa0\x80"
    ),
    "valid UTF-8": '{"parent": "é", "children": {"P": {"a": {"metadata": {"managedFields": ["ü"]}}}}}'.encode(),
    "u64 max": b'{"parent": [18446744073709551615, -9223372036854775808]}',
}


@pytest.fixture
def server_recursion_limit() -> Iterator[None]:
    """The interpreter's default recursion limit, as the hook server runs (hypothesis raises it in tests)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(limit)


@pytest.mark.parametrize("body", EDGES.values(), ids=EDGES.keys())
def test_edge_bodies_get_the_authoritys_answer(body: bytes, server_recursion_limit: None) -> None:
    assert_same(body)


# Requests the shape does not fit: parsed whole, and the contract names the field.
MISFITS = {
    "child null": b'{"children": {"P": {"a": null}}}',
    "child a string": b'{"children": {"P": {"a": "x"}}}',
    "metadata null": b'{"children": {"P": {"a": {"metadata": null, "managedFields": 1}}}}',
    "metadata a list": b'{"related": {"P": {"a": {"metadata": []}}}}',
}


@pytest.mark.parametrize("body", MISFITS.values(), ids=MISFITS.keys())
def test_a_request_the_shape_does_not_fit_is_parsed_whole(body: bytes) -> None:
    assert_same(body, fits=False)


def test_valid_utf8_is_checked_in_pieces_and_decoded_on_the_fast_path() -> None:
    head = b'{"parent": ["'
    padding = b"x" * ((1 << 16) - 2 - len(head) - len(b'", "'))  # the emoji's 4 bytes across the first piece's end
    body = head + padding + b'", "' + "😀é".encode() + b'"]}'
    assert body.index("😀".encode()) == (1 << 16) - 2
    assert requestjson.load_composite_request(body)["parent"][1] == "😀é"
    assert_same(body, fits=True)
    broken = body.replace("😀".encode(), "😀".encode()[:3])
    assert_same(broken, fits=False)


# Corners judged differently by the fast path: pinned so that a change shows.


def test_integers_beyond_64_bits_are_read_exactly_where_orjson_reads_floats() -> None:
    body = b'{"parent": [18446744073709551616, -9223372036854775809]}'
    assert requestjson.load_composite_request(body)["parent"] == [18446744073709551616, -9223372036854775809]
    assert contract.load_json_object(body)["parent"] == [1.8446744073709552e19, -9.223372036854776e18]


@pytest.fixture(scope="module")
def strict_client() -> Any:
    """The hook server with every request read whole by the strict parser."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(requestjson, "load_composite_request", contract.load_json_object)
        return create_app().test_client()


def with_number(stem: str, path: list[str], number: str) -> bytes:
    """An example request with the number written as `number` at `path`."""
    data = json.loads((EXAMPLES / f"{stem}.json").read_text())
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = "@@number@@"
    return json.dumps(data).replace('"@@number@@"', number).encode()


# (request, path, number): Go writes a float64 of 2^64 or 1e20 as these integers (a field our CRDs
# keep as written), and 2^64 where Kubernetes types an int64 (the shape checks refuse it).
BIG_INTEGERS = [
    ("nodeset-sync", ["parent", "spec", "slurmd", "resources", "limits", "memory"], "100000000000000000000"),
    ("nodeset-sync", ["parent", "spec", "slurmd", "resources", "limits", "cpu"], "18446744073709552000"),
    ("nodeset-finalize", ["parent", "spec", "slurmd", "resources", "limits", "cpu"], "18446744073709552000"),
    ("nodeset-sync", ["parent", "metadata", "generation"], "18446744073709551616"),
    (
        "loginset-sync",
        ["children", "Deployment.apps/v1", "slurm/slurm-login", "status", "replicas"],
        "-9223372036854775809",
    ),
    (
        "controller-sync",
        ["children", "StatefulSet.apps/v1", "slurm/slurm-controller", "spec", "replicas"],
        "18446744073709551616",
    ),
]


@pytest.mark.parametrize(("stem", "path", "number"), BIG_INTEGERS, ids=lambda v: v if isinstance(v, str) else None)
def test_an_integer_beyond_64_bits_gets_the_strict_parses_answer(
    stem: str, path: list[str], number: str, strict_client: Any
) -> None:
    body = with_number(stem, path, number)
    route = "/" + stem.replace("-", "/")
    fast = create_app().test_client().post(route, data=body)
    strict = strict_client.post(route, data=body)
    assert (fast.status_code, fast.data) == (strict.status_code, strict.data)
    assert fast.status_code in (200, 400)


def test_an_integer_beyond_the_double_range_that_a_hook_reads_is_judged_by_the_hook() -> None:
    body = with_number("nodeset-sync", ["parent", "spec", "replicas"], "1" + "0" * 400)
    with pytest.raises(BadHookRequest, match="infinity"):
        contract.load_json_object(body)
    answer = create_app().test_client().post("/nodeset/sync", data=body)
    assert answer.status_code == 200
    assert "replicas" in json.dumps(answer.get_json()["status"]["conditions"])


@pytest.mark.parametrize("where", ["managedFields", "unknown field"])
def test_a_number_beyond_the_double_range_in_skipped_text_is_not_refused(where: str) -> None:
    skipped = b'"metadata": {"managedFields": [1e400]}' if where == "managedFields" else b'"rules": [1e400]'
    body = b'{"children": {"P": {"a": {' + skipped + b"}}}}"
    with pytest.raises(BadHookRequest, match="infinity"):
        contract.load_json_object(body)
    assert requestjson.load_composite_request(body) == {
        "children": {"P": {"a": {"metadata": {}} if where == "managedFields" else {}}}
    }


def test_nesting_deeper_than_orjsons_limit_is_not_refused_once_the_recursion_limit_was_raised() -> None:
    body = b'{"parent": ' + b"[" * 1030 + b"]" * 1030 + b"}"
    with pytest.raises(BadHookRequest, match="depth limit exceeded"):
        contract.load_json_object(body)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(2500)
    try:
        value, depth = requestjson.load_composite_request(body)["parent"], 0
    finally:
        sys.setrecursionlimit(limit)
    while value:
        value, depth = value[0], depth + 1
    assert depth == 1029


KEYS = st.sampled_from(
    ["apiVersion", "kind", "metadata", "spec", "status", "data", "rules", "name", "managedFields", "uid", "x"]
)
VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS | st.text(max_size=3), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(KEYS, VALUES | st.dictionaries(KEYS, VALUES, max_size=4), max_size=6)
GROUPS = st.none() | st.dictionaries(st.text(max_size=3), st.none() | OBJECTS | VALUES, max_size=3)
REQUESTS = st.dictionaries(
    st.sampled_from(["controller", "parent", "children", "related", "finalizing", "attachments"]),
    st.none() | st.dictionaries(st.sampled_from(["Pod.v1", "Secret.v1", ""]), GROUPS, max_size=2) | VALUES,
    max_size=5,
)


@settings(max_examples=400, deadline=None)
@given(REQUESTS)
def test_random_requests_decode_as_the_authority_minus_what_is_left_out(request: Any) -> None:
    assert_same(orjson.dumps(request))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=40), st.integers(min_value=0, max_value=200))
def test_corrupted_bytes_get_the_authoritys_answer(noise: bytes, at: int) -> None:
    body = (EXAMPLES / "nodeset-sync.json").read_bytes()
    at = at * len(body) // 200
    assert_same(body[:at] + noise + body[at + len(noise) :])


# --- nothing our CompositeControllers watch loses a field ------------------------------------------

KINDS = {  # resource -> (apiVersion, kind) of every resource a CompositeController of ours watches
    "pods": ("v1", "Pod"),
    "services": ("v1", "Service"),
    "secrets": ("v1", "Secret"),
    "configmaps": ("v1", "ConfigMap"),
    "persistentvolumeclaims": ("v1", "PersistentVolumeClaim"),
    "nodes": ("v1", "Node"),
    "statefulsets": ("apps/v1", "StatefulSet"),
    "deployments": ("apps/v1", "Deployment"),
    "poddisruptionbudgets": ("policy/v1", "PodDisruptionBudget"),
    "controllers": ("slinky.slurm.net/v1beta1", "Controller"),
    "nodesets": ("slinky.slurm.net/v1beta1", "NodeSet"),
    "loginsets": ("slinky.slurm.net/v1beta1", "LoginSet"),
    "restapis": ("slinky.slurm.net/v1beta1", "RestApi"),
    "accountings": ("slinky.slurm.net/v1beta1", "Accounting"),
    "tokens": ("slinky.slurm.net/v1beta1", "Token"),
}
# The chart adds ServiceMonitor children (monitoring.coreos.com/v1; no schema here) to the Controller's.
SERVICE_MONITOR_FIELDS = {"apiVersion", "kind", "metadata", "spec"}


def watched_resources() -> set[str]:
    """Children of every CompositeController manifest, and every related resource a composite hook asks for."""
    found: set[str] = set()
    for path in sorted((ROOT / "compositecontrollers").glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CompositeController":
                found |= {child["resource"] for child in doc["spec"]["childResources"]}
    client = create_app().test_client()
    for path in sorted(EXAMPLES.glob("*-customize.json")):
        if not path.stem.startswith("bridge-"):
            answer = client.post("/" + path.stem.replace("-", "/"), data=path.read_bytes()).get_json()
            found |= {rule["resource"] for rule in answer["relatedResources"]}
    for path in sorted((ROOT / "hooks").rglob("*.py")):
        if "bridge" not in path.parts:  # the bridge's hooks are DecoratorControllers, read whole
            found |= set(re.findall(r'"resource": "(\w+)"', path.read_text()))
            found |= set(re.findall(r'_by_name\([^,]+, "(\w+)"', path.read_text()))
    return found


def top_level_fields(api_version: str, kind: str) -> set[str]:
    if api_version.startswith("slinky.slurm.net/"):
        schema = kube._crd_schemas(str(ROOT / "crds"))[(api_version, kind)]
    else:
        group, _, version = api_version.rpartition("/")
        stem = f"{kind.lower()}-{group.split('.')[0]}-{version}" if group else f"{kind.lower()}-{version}"
        schema = json.loads((kube._schema_dir(kube.DEFAULT_K8S_VERSION) / f"{stem}.json").read_text())
    return set(schema["properties"])


def test_every_watched_resource_is_known_here() -> None:
    resources = watched_resources()
    assert {"pods", "nodes", "controllers", "secrets"} <= resources
    assert resources <= set(KINDS)


@pytest.mark.parametrize("resource", sorted(KINDS))
def test_no_field_of_a_watched_kind_is_left_out(resource: str) -> None:
    fields = top_level_fields(*KINDS[resource])
    assert fields - requestjson.OBSERVED_FIELDS == set()


def test_only_managed_fields_are_left_out_of_metadata() -> None:
    definitions = json.loads((kube._schema_dir(kube.DEFAULT_K8S_VERSION) / "_definitions.json").read_text())
    meta = set(definitions["$defs"][kube.OBJECT_META]["properties"])
    assert meta - requestjson.METADATA_FIELDS == {"managedFields"}
    assert SERVICE_MONITOR_FIELDS <= requestjson.OBSERVED_FIELDS


def test_the_request_keeps_every_field_of_metacontrollers_sync_request() -> None:
    assert {"controller", "parent", "children", "related", "finalizing"} == requestjson.COMPOSITE_FIELDS

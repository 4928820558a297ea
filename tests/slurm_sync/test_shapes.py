"""What keeps slurm_sync's memory near its floor (docs/architecture.md §7): Slurm listings and Kubernetes
listing pages decoded into the fields read or kept (slurm_sync/shapes.py), and each string a watched
collection repeats kept once."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec
import orjson
import pytest

from slurm_sync.cache import NODE_PAGE, POD_PAGE, trim_node, trim_pod
from slurm_sync.informer import SharedStrings
from slurm_sync.slurm import client
from slurm_sync.slurm.types import JOB_FIELDS, NODE_FIELDS, parse_job, parse_node


class Recording(Mapping[str, Any]):
    """A JSON object that records which keys its reader asked for."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data, self.read = data, set[str]()

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.data.get(key, default)

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return key in self.data

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("a parser that iterates an object could read any field")

    def __len__(self) -> int:
        return len(self.data)


def node(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "state": ["IDLE", "DRAIN"], "reason": "maint ☃", "reason_set_by_user": "root",
        "comment": '{"podName":"' + name + '"}', "features": ["gpu"], "active_features": "gpu,x",
        "cpus": 64, "real_memory": 257000, "alloc_cpus": 0, "alloc_memory": 0, "partitions": ["all"],
        "address": "10.0.0.1", "hostname": name, "topology": "", "reservation": "",
        "energy": {"average_watts": 0, "current_watts": {"set": True, "infinite": False, "number": 0}},
        "tres": "cpu=64", "boot_time": {"set": True, "infinite": False, "number": 1}, **extra,
    }  # fmt: skip


def job(job_id: int) -> dict[str, Any]:
    return {
        "job_id": job_id, "name": "train", "job_state": ["RUNNING"], "state_reason": "None", "nodes": "n[1-2]",
        "batch_host": "n1", "partition": "all", "user_name": "alice", "user_id": 1000, "admin_comment": "",
        "comment": "", "flags": ["EXTERNAL_JOB"], "start_time": {"set": True, "infinite": False, "number": 5},
        "time_limit": {"set": True, "infinite": False, "number": 60}, "end_time": {"set": True, "number": 9},
        "account": "physics", "gres_detail": ["gpu:2"], "tres_req_str": "cpu=2",
    }  # fmt: skip


def listing(key: str, items: list[Any]) -> dict[str, Any]:
    meta = {"slurm": {"cluster": "c1", "version": {"major": "26", "minor": "05", "micro": "5"}}}
    return {key: items, "last_update": {"set": True, "number": 7}, "meta": meta, "errors": [], "warnings": [],
            "last_backfill": {"set": True, "number": 1}}  # fmt: skip


def expanded(answer: Any, key: str) -> Any:
    """A listing's typed answer as the client reads it: each object's JSON text decoded (slurm_sync/slurm/items.py)."""
    decode = client._decode_node if key == "nodes" else client._decode_job
    if not isinstance(answer, dict) or not isinstance(answer.get(key), list):
        return answer
    return {**answer, key: [decode(bytes(i)) if isinstance(i, msgspec.Raw) else i for i in answer[key]]}


def test_the_parsers_read_only_the_fields_a_listing_is_decoded_into() -> None:
    for parse, fields, obj in ((parse_node, NODE_FIELDS, node("n1")), (parse_job, JOB_FIELDS, job(3))):
        recording = Recording(obj)
        parse(recording)
        assert recording.read == set(fields)


@pytest.mark.parametrize(
    ("decode", "key", "items", "parse"),
    [
        (client._decode_nodes, "nodes", [node("n1"), node("n2", reason="")], parse_node),
        (client._decode_jobs, "jobs", [job(1), job(2)], parse_job),
    ],
)
def test_a_listing_decodes_to_the_whole_answer_without_the_fields_no_parser_reads(
    decode: Any, key: str, items: list[Any], parse: Any
) -> None:
    content = json.dumps(listing(key, items)).encode("ascii")  # non-ASCII text as \\u escapes
    whole, typed = client._decode(content), expanded(decode(content), key)
    assert whole is not None and typed is not None
    assert set(typed) == {key, "last_update", "meta", "errors", "warnings"}
    assert {k: v for k, v in typed.items() if k != key} == {
        k: v for k, v in whole.items() if k not in (key, "last_backfill")
    }
    fields = NODE_FIELDS if key == "nodes" else JOB_FIELDS
    assert typed[key] == [{f: i[f] for f in fields if f in i} for i in whole[key]]
    assert [parse(i) for i in typed[key]] == [parse(i) for i in whole[key]]


@pytest.mark.parametrize(
    "content",
    [
        b"[1, 2]",  # not an object
        b'{"nodes": 3}',  # not a list
        b'{"nodes": [1]}',  # not a list of objects
        b'{"nodes": null, "errors": [{"error_number": 1}]}',
        b"not json",
        b'{"nodes": [{"name": "\xff"}]}',  # not UTF-8
        '{"nodes": [{"name": "n1", "reason": "ménage"}], "meta": {}}'.encode(),  # not ASCII: the strict way
    ],
)
def test_an_answer_the_shape_does_not_fit_gets_the_strict_verdict(content: bytes) -> None:
    assert expanded(client._decode_nodes(content), "nodes") == client._decode(content)


def test_the_corners_judged_differently_are_the_documented_ones() -> None:
    """No slurmrestd sends them; listing_decoder's docstring names them."""
    skipped_huge = b'{"nodes": [{"name": "n1"}], "x": [1, 2.5e999]}'
    assert client._decode(skipped_huge) is None
    assert expanded(client._decode_nodes(skipped_huge), "nodes") == {"nodes": [{"name": "n1"}]}
    wide = b'{"nodes": [{"name": "n1", "cpus": 100000000000000000000}]}'
    assert client._decode(wide) == {"nodes": [{"name": "n1", "cpus": 1e20}]}  # a float, which parse_node refuses
    assert expanded(client._decode_nodes(wide), "nodes") == {"nodes": [{"name": "n1", "cpus": 100000000000000000000}]}


def test_a_node_listing_through_the_client_is_parsed_from_the_typed_decoding() -> None:
    import httpx

    answer = listing("nodes", [node("n1"), node("n2")])
    answer["nodes"][0]["reason"] = "maint"

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.45/nodes/": {}}})
        return httpx.Response(200, content=orjson.dumps(answer))

    slurm = client.SlurmClient("http://slurmrestd", lambda: "t", transport=httpx.MockTransport(handle))
    got = slurm.list_nodes()
    assert [n.name for n in got.items] == ["n1", "n2"]
    assert got.items[0] == parse_node(answer["nodes"][0])
    assert got.last_update == 7


def test_shared_strings_keep_one_copy_of_each_value_and_change_no_value() -> None:
    strings = SharedStrings()
    first = orjson.loads(b'{"a": {"status": "True", "list": ["x", "True", {"m": "True"}]}, "n": 1}')
    second = orjson.loads(b'{"a": {"status": "True", "list": ["x", "True", {"m": "True"}]}, "n": 1}')
    expected = orjson.loads(orjson.dumps(first))
    assert strings.share(first) == expected
    assert strings.share(second) == expected
    assert second["a"]["status"] is first["a"]["status"]
    assert second["a"]["list"][2]["m"] is first["a"]["status"]
    assert second["a"]["list"][0] is first["a"]["list"][0]


def test_the_shared_table_is_rebuilt_from_the_store_once_it_has_doubled() -> None:
    strings = SharedStrings()
    store = [strings.share({"rv": "0", "status": "True"})]
    strings.listed()
    for version in range(1, 1_100):  # each event brings a new resourceVersion
        store = [strings.share({"rv": str(version), "status": "True"})]
        strings.prune(store)
    assert len(strings._table) < 1_100  # rebuilt: the old versions are gone
    latest = strings.share({"rv": "x", "status": "True"})
    assert latest["status"] is store[0]["status"]  # still shared with what the store holds


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p-0", "namespace": "ns", "uid": "u", "resourceVersion": "9",
                     "labels": {"a": "b"}, "annotations": {"x": "y"},
                     "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]},
        "spec": {"hostname": "p-0", "nodeName": "w1", "schedulerName": "slurm-bridge",
                 "containers": [{"name": "slurmd", "image": "slurmd:26.05", "args": ["-Z"]}],
                 "volumes": [{"name": "v", "emptyDir": {}}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                   "containerStatuses": [{"name": "slurmd", "ready": True}], "podIP": "10.0.0.1"},
    }  # fmt: skip


def _node() -> dict[str, Any]:
    return {
        "metadata": {"name": "w1", "labels": {"kubernetes.io/hostname": "w1"}, "annotations": {"n": "1"}},
        "spec": {"unschedulable": True, "taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.1.0.0/24"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                   "images": [{"names": ["a"], "sizeBytes": 1}], "nodeInfo": {"kernelVersion": "6.8"}},
    }  # fmt: skip


@pytest.mark.parametrize(("decode", "obj", "trimmed"), [(POD_PAGE, _pod, trim_pod), (NODE_PAGE, _node, trim_node)])
def test_a_page_decodes_to_what_the_cache_keeps_of_each_object(decode: Any, obj: Any, trimmed: Any) -> None:
    page = {"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "5", "continue": "c"}, "items": [obj()]}
    content = orjson.dumps(page)
    typed, whole = decode(content), orjson.loads(content)
    assert typed["metadata"] == whole["metadata"]
    assert [trimmed(o) for o in typed["items"]] == [trimmed(o) for o in whole["items"]]
    assert "images" not in typed["items"][0]["status"] and "containerStatuses" not in typed["items"][0]["status"]
    not_ascii = content.replace(b'"a"', '"ä"'.encode())  # valid UTF-8: decoded by its shape as well
    assert [trimmed(o) for o in decode(not_ascii)["items"]] == [trimmed(o) for o in orjson.loads(not_ascii)["items"]]
    assert "images" not in decode(not_ascii)["items"][0]["status"]
    with pytest.raises(orjson.JSONDecodeError, match="UTF-8"):  # not UTF-8: the strict decoder's verdict
        decode(content.replace(b'"a"', b'"\xff"'))
    assert decode(b'{"items": [{"spec": null}]}') == {"items": [{"spec": None}]}  # the shape does not fit

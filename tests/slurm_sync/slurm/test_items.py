"""A listing's unchanged objects are not decoded again (slurm_sync/slurm/items.py, issue 28): an object whose
JSON text is unchanged is the last answer's very object; any change in its text, a field the parser reads or
not, parses it anew; and through the client a node listing where one node changed parses that one node."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import orjson
import pytest

from slurm_sync.slurm import client
from slurm_sync.slurm.errors import SlurmMalformed
from slurm_sync.slurm.items import ItemMemo
from slurm_sync.slurm.types import parse_node


def raws(*objs: Any) -> list[msgspec.Raw]:
    """The objects as a listing's answer leaves them: their JSON text, unparsed."""
    answer = msgspec.json.decode(orjson.dumps({"nodes": list(objs)}), type=dict[str, list[msgspec.Raw]])
    return answer["nodes"]


def node(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "state": ["IDLE"], **fields}


def memo() -> ItemMemo[Any]:
    return ItemMemo(client._decode_node, parse_node, "nodes")


def test_an_unchanged_object_is_the_last_answers_very_object() -> None:
    items = memo()
    first = items(raws(node("n1"), node("n2")))
    second = items(raws(node("n1"), node("n2", reason="maint")))
    assert second[0] is first[0] and second[1] is not first[1]
    assert second[1] == parse_node(node("n2", reason="maint"))
    assert items.parsed == 3


def test_any_change_of_the_text_parses_anew_even_of_a_field_no_parser_reads() -> None:
    items = memo()
    first = items(raws(node("n1", cpu_load=10)))
    second = items(raws(node("n1", cpu_load=11)))
    assert second[0] is not first[0] and second[0] == first[0]
    assert items.parsed == 2


def test_only_the_last_answer_is_remembered() -> None:
    items = memo()
    items(raws(node("n1")))
    items(raws(node("n2")))
    items(raws(node("n1")))
    assert items.parsed == 3


def test_an_answer_decoded_whole_is_parsed_as_it_is() -> None:
    assert memo()([node("n1")]) == (parse_node(node("n1")),)


def test_an_object_that_is_not_one_is_named() -> None:
    with pytest.raises(SlurmMalformed, match=r"nodes\[1\] is int"):
        memo()(raws(node("n1"), 3))


def test_a_listing_through_the_client_parses_only_the_node_that_changed() -> None:
    nodes = [node(f"n{i}") for i in range(50)]
    answer: dict[str, Any] = {"nodes": nodes, "last_update": {"set": True, "number": 7}, "meta": {}, "errors": []}

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/openapi/v3":
            return httpx.Response(200, json={"paths": {"/slurm/v0.0.45/nodes/": {}}})
        return httpx.Response(200, content=orjson.dumps(answer))

    slurm = client.SlurmClient("http://slurmrestd", lambda: "t", transport=httpx.MockTransport(handle))
    watch = slurm.node_watch()
    before = watch.poll()
    nodes[7] = node("n7", state=["IDLE", "DRAIN"], reason="maint")
    answer["last_update"]["number"] = 8
    after = watch.poll()
    assert after.changed == {"n7"} and after.items["n7"].reason == "maint"
    assert all(after.items[n] is before.items[n] for n in before.items if n != "n7")
    assert slurm._node_items.parsed == 51

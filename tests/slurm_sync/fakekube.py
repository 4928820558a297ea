"""A tiny stateful kube-apiserver on pytest-httpserver, just enough for slurm_sync's calls:
list/get pods (equality label selectors), nodes, secrets, PVCs, our CRs; patch pods (strategic merge of
labels, annotations and conditions), pods/status and CRs (merge patch of annotations), and JSON patches
(test, replace, remove, add on top-level metadata fields; a failed test is a 422 as on a real apiserver);
create events (events.k8s.io/v1, generateName honoured).
Every write is recorded as (method, path, content type, body) for the tests to inspect."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from typing import Any

from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

JSON = dict[str, Any]
_PATH = re.compile(
    r"^/(?:api/v1|apis/slinky\.slurm\.net/v1beta1|apis/events\.k8s\.io/v1)(?:/namespaces/(?P<ns>[^/]+))?/(?P<kind>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>status))?$"
)


@dataclass
class FakeKube:
    objects: dict[tuple[str, str, str], JSON] = field(default_factory=dict)  # (kind plural, ns, name)
    writes: list[tuple[str, str, str, JSON]] = field(default_factory=list)
    unlisted: set[tuple[str, str, str]] = field(
        default_factory=set
    )  # served by GET, left out of lists (a lagging cache)

    def add(self, plural: str, obj: JSON) -> None:
        meta = obj["metadata"]
        meta.setdefault("resourceVersion", "1")
        self.objects[(plural, meta.get("namespace", ""), meta["name"])] = obj

    def get(self, plural: str, ns: str, name: str) -> JSON:
        return self.objects[(plural, ns, name)]

    def install(self, server: HTTPServer) -> None:
        server.expect_request(re.compile(".*")).respond_with_handler(self.handle)

    def handle(self, request: Request) -> Response:
        match = _PATH.match(request.path)
        if not match:
            return _json({"kind": "Status", "code": 404}, 404)
        plural, ns, name = match["kind"], match["ns"], match["name"]
        if request.method == "POST" and name is None:
            body = json.loads(request.get_data())
            self.writes.append(("POST", request.path, request.headers.get("Content-Type", ""), body))
            meta = body.setdefault("metadata", {})
            meta.setdefault("name", f"{meta.get('generateName', 'obj-')}{len(self.writes)}")
            self.add(plural, body)
            return _json(body, 201)
        if request.method == "GET" and name is None:
            wanted = dict(kv.split("=", 1) for kv in request.args.get("labelSelector", "").split(",") if kv)
            items = [
                o for (p, n, key_name), o in sorted(self.objects.items())
                if p == plural and (ns is None or n == ns) and (p, n, key_name) not in self.unlisted
                and all((o["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())
            ]  # fmt: skip
            return _json({"kind": "List", "apiVersion": "v1", "items": items})
        obj = self.objects.get((plural, ns or "", name))
        if obj is None:
            return _json({"kind": "Status", "code": 404, "reason": "NotFound"}, 404)
        if request.method == "GET":
            return _json(obj)
        if request.method == "PATCH" and request.headers.get("Content-Type", "").startswith(
            "application/json-patch+json"
        ):
            ops = json.loads(request.get_data())
            self.writes.append(("PATCH", request.path, request.headers.get("Content-Type", ""), ops))
            if not _json_patch(obj, ops):
                return _json({"kind": "Status", "code": 422, "reason": "Invalid"}, 422)
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
            return _json(obj)
        if request.method == "PATCH":
            body = json.loads(request.get_data())
            self.writes.append(("PATCH", request.path, request.headers.get("Content-Type", ""), body))
            merge_metadata(obj, body.get("metadata") or {})
            if match["sub"] == "status":
                merge_conditions(obj, (body.get("status") or {}).get("conditions") or [])
            obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
            return _json(obj)
        return _json({"kind": "Status", "code": 405}, 405)


def _json(body: JSON, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


def merge_metadata(obj: JSON, patch: JSON) -> None:
    for field_name in ("labels", "annotations"):
        current = obj["metadata"].setdefault(field_name, {})
        for key, value in (patch.get(field_name) or {}).items():
            if value is None:
                current.pop(key, None)
            else:
                current[key] = value


def merge_conditions(obj: JSON, items: list[JSON]) -> None:
    """Strategic merge by the ``type`` key, with ``$patch: delete``."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    for item in items:
        index = next((i for i, c in enumerate(conditions) if c["type"] == item["type"]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del conditions[index]
        elif index is None:
            conditions.append(copy.deepcopy(item))
        else:
            conditions[index].update(item)


def _json_patch(obj: JSON, ops: list[JSON]) -> bool:
    """RFC 6902 on `/metadata/<field>` paths, atomically: False (nothing applied) when a test fails."""
    patched = copy.deepcopy(obj)
    for op in ops:
        _, section, key = op["path"].split("/")
        target = patched[section]
        if op["op"] == "test":
            if target.get(key) != op["value"]:
                return False
        elif op["op"] in ("replace", "add"):
            target[key] = op["value"]
        elif op["op"] == "remove":
            if key not in target:
                return False
            del target[key]
    obj.clear()
    obj.update(patched)
    return True

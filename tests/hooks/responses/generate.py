"""Writes the extra requests of tests/hooks/test_responses.py into requests/ (run by hand, never by the tests).

    .venv/bin/python tests/hooks/responses/generate.py

The examples (examples/requests/) show one ordinary request per route; these add what the speed
work of the NodeSet hook must not change: a steady-state resync as `make bench` sends it (pods
observed with every server field and a Go-written last-applied annotation), every kind of
last-applied annotation the hook must not believe or must read through (another object's, not
JSON, not strict JSON, not an object, Go's escapes, whitespace, duplicate keys, exponent
numbers), a scale-in with drained, busy and deadline-carrying pods, a sync without its
Controller, a finalize, and malformed requests. The files are stored, so the comparison never
depends on this script or on bench/ staying the same.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from bench import nodeset_sync as b  # noqa: E402 - the repository root goes on the path first
from hooks.app import create_app  # noqa: E402
from slinky_common import names  # noqa: E402

JSON = dict[str, Any]
EPOCH = "90000"  # the epoch of the published drain intents (the NodeSet's resourceVersion then; it is 90210 now)
REQUESTS = Path(__file__).with_name("requests")
LAST_APPLIED = names.ANNOTATION_LAST_APPLIED
# The pinned clock of tests/hooks/test_responses.py is 2025-06-02T10:00:00Z.
PAST = "2025-06-02T09:30:00Z"
FUTURE = "2025-06-02T11:00:00Z"


def desired_pods(replicas: int, **spec: Any) -> tuple[list[JSON], JSON]:
    """The pods a first sync creates, and that sync's status."""
    client = create_app().test_client()
    parent = b.nodeset_parent(replicas)
    parent["spec"].update(spec)
    first = b._post(client, {"controller": {}, "parent": parent, "children": {}, "related": related()})
    pods = sorted((c for c in first["children"] if c["kind"] == "Pod"), key=lambda c: c["metadata"]["name"])
    return pods, first["status"]


def related(with_controller: bool = True) -> JSON:
    controllers = {f"{b.NS}/{b.CLUSTER}": b.controller_cr()} if with_controller else {}
    return {f"Controller.{names.API_VERSION}": controllers, "Secret.v1": {}}


def resync(pods: list[JSON], status: JSON, replicas: int, with_controller: bool = True, **spec: Any) -> JSON:
    parent = b.nodeset_parent(replicas, status=status)
    parent["spec"].update(spec)
    return {
        "controller": {"metadata": {"name": "slurm-operator-nodeset"}},
        "parent": parent,
        "children": {"Pod.v1": {f"{b.NS}/{p['metadata']['name']}": p for p in pods}, "PersistentVolumeClaim.v1": {}},
        "related": related(with_controller),
        "finalizing": False,
    }


def lean(pod: JSON) -> JSON:
    """Without managedFields: these cases are about annotations, and the files stay small."""
    pod["metadata"].pop("managedFields", None)
    return pod


def steady() -> JSON:
    pods, status = desired_pods(6)
    return resync([b.observed_pod(p, i) for i, p in enumerate(pods)], status, 6)


def annotation_edges() -> JSON:
    """One pod per kind of last-applied annotation (None: none at all, as server-side apply leaves it)."""
    go = b.go_json
    edges: list[Callable[[JSON], str | None]] = [
        lambda desired: go(desired),  # believed as Go wrote it
        lambda desired: go({**desired, "metadata": {**desired["metadata"], "name": "gpu-0"}}),  # another pod's
        lambda desired: "{not json",
        lambda desired: go(desired)[:-1] + ',"x":NaN}',
        lambda desired: "[]",
        lambda desired: go({**desired, "kind": "Service"}),
        lambda desired: go({k: v for k, v in desired.items() if k != "apiVersion"}),
        lambda desired: go({**desired, "metadata": "gpu-7"}),
        lambda desired: orjson.dumps(desired, option=orjson.OPT_INDENT_2).decode(),  # whitespace
        lambda desired: '{"kind":"Pod",' + go(desired)[1:],  # a duplicate key
        lambda desired: go(desired).replace('"failureThreshold":6', '"failureThreshold":6e0'),
        lambda desired: go(desired).replace('"name":"slurmd"', '"name":"slurm\\u0064"'),
        lambda desired: None,
        lambda desired: go(desired),  # Go's escapes of <, > and &, non-ASCII text, a control character
    ]
    pods, status = desired_pods(len(edges))
    note = {"name": "NOTE", "value": 'a<b && c>d \u00e9 \u2028 \u0001 \\ "q"'}
    pods[-1]["spec"]["containers"][0]["env"].append(note)
    observed = []
    for index, (pod, edge) in enumerate(zip(pods, edges, strict=True)):
        seen = lean(b.observed_pod(pod, index))
        written = edge(pod)
        if written is None:
            del seen["metadata"]["annotations"][LAST_APPLIED]
        else:
            seen["metadata"]["annotations"][LAST_APPLIED] = written
        observed.append(seen)
    return resync(observed, status, len(edges))


def scale_in() -> JSON:
    """Scale 6 -> 2 with minReadySeconds: idle+drained (goes), busy+drained (kept, named inconsistent),
    a passed deadline+drained (goes), a deadline not passed+absent (kept); the clock is read."""
    pods, status = desired_pods(6)
    observed = [lean(b.observed_pod(p, i)) for i, p in enumerate(pods)]
    marks: dict[int, dict[str, str]] = {
        2: {names.ANNOTATION_DRAINED: EPOCH},
        3: {names.ANNOTATION_DRAINED: EPOCH, names.ANNOTATION_POD_DEADLINE: PAST},
        4: {names.ANNOTATION_SLURM_NODE_ABSENT: "true", names.ANNOTATION_POD_DEADLINE: FUTURE},
        5: {names.ANNOTATION_DRAINED: EPOCH},
    }
    for index, mark in marks.items():
        observed[index]["metadata"]["annotations"].update(mark)
        observed[index]["metadata"]["labels"].pop(names.LABEL_POD_PROTECT, None)
        observed[index]["status"]["conditions"] = observed[index]["status"]["conditions"][:-1]
    observed[4]["metadata"]["labels"][names.LABEL_POD_PROTECT] = "true"
    status[names.STATUS_DRAINING_PODS] = [
        {"name": f"{b.NODESET}-{i}", "reason": "scale-in", names.DRAIN_EPOCH: EPOCH} for i in (2, 3, 4, 5)
    ]
    return resync(observed, status, 2, minReadySeconds=30)


def no_controller() -> JSON:
    pods, status = desired_pods(3)
    return resync([lean(b.observed_pod(p, i)) for i, p in enumerate(pods)], status, 3, with_controller=False)


def finalize() -> JSON:
    body = no_controller()
    body["related"] = related()
    body["finalizing"] = True
    body["parent"]["metadata"]["deletionTimestamp"] = PAST
    first = next(iter(body["children"]["Pod.v1"].values()))
    first["metadata"]["annotations"][names.ANNOTATION_DRAINED] = EPOCH
    intent = {"name": first["metadata"]["name"], "reason": "NodeSet deleted", names.DRAIN_EPOCH: EPOCH}
    body["parent"].setdefault("status", {})[names.STATUS_DRAINING_PODS] = [intent]
    return body


def bad_shape() -> JSON:
    body = no_controller()
    pod = next(iter(body["children"]["Pod.v1"].values()))
    pod["spec"]["containers"][0]["name"] = 7
    return body


def without_parent() -> JSON:
    body = no_controller()
    del body["parent"]
    return body


CASES: dict[str, Callable[[], JSON]] = {
    "nodeset-sync--steady": steady,
    "nodeset-sync--annotation-edges": annotation_edges,
    "nodeset-sync--scale-in": scale_in,
    "nodeset-sync--no-controller": no_controller,
    "nodeset-finalize--drain": finalize,
    "nodeset-sync--bad-shape": bad_shape,
    "nodeset-sync--no-parent": without_parent,
}


def main() -> None:
    REQUESTS.mkdir(exist_ok=True)
    for name, build in CASES.items():
        (REQUESTS / f"{name}.json").write_bytes(orjson.dumps(copy.deepcopy(build())) + b"\n")
    (REQUESTS / "nodeset-sync--not-json.json").write_bytes(b'{"parent": {"kind": "NodeSet"\n')


if __name__ == "__main__":
    main()

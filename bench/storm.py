"""slurm_sync in a storm of change (issue 28): every Slurm node's state changes at once, at 5,000 and 20,000
nodes; how long until every pod reflects it, against a bare client sending the same writes (docs/architecture.md
§7, §4.8).

The cluster and its fakes are the slurm_sync suite's (bench/slurm_sync_fakes.py: the fake API server in a child
process, the fake slurmrestd in this one). The real ``OperatorLoop`` with the production reader (watches) settles;
then every node flips at once in Slurm (a busy node goes idle, an idle node takes a job: its pod needs its
``pod-protect`` label), and the loop runs as the service runs it (a pass, then the next once the watch events of
its writes are in) until a pass writes nothing. Both sides send without a rate limit (``--kube-api-qps 0``): the
figure is slurm_sync's own cost, the limit being the operator's choice.

* Time to reflect: from the flip to the end of the last pass that wrote; every pod is then checked to show its
  node's new state (its ``pod-protect`` label and its busy or idle condition).
* The floor: the storm's writes and Events (as the API server received them) sent again by a bare client,
  with the loop's concurrency (``loop.WRITERS`` workers) through the same client stack (``Kube``: the
  deadlines, the connection pool), on the same fake API server, the loop's watches still open (the fake
  streams each write to them as in the storm: the same work on both sides but the loop's own). Budget: time
  to reflect at most 1.5x the floor's time for the same requests.
* The first ``pod-protect`` label of a node that just took a job: when the API server received it, from the
  flip. Budget: within 2 s (pods that protect a job go first: ``plan.write_order``).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

from bench.measure import Budget, Report, fmt_ratio
from bench.slurm_sync import caught_up, kube_client, make_loop, settle
from bench.slurm_sync_fakes import (
    _PATH,
    NS,
    FakeSlurmrestd,
    ServerProcess,
    layout,
    slurm_job,
    slurm_node,
)
from slinky_common import names

JSON = dict[str, Any]
TITLE = "slurm_sync in a storm: every Slurm node's state changes at once, 5,000 and 20,000 nodes"
SIZES = (5_000, 20_000)
REFLECT_RATIO = 1.5  # time to reflect / the bare client's time for the same writes
FIRST_PROTECT_S = 2.0  # from the flip to the first pod-protect label of a newly busy node
STORM_PASSES = 6  # a storm not written within this many passes is a failure of the suite
SLURM_URL = "http://slurmrestd.slurm.svc:6820"


@dataclass
class Storm:
    """One size's storm."""

    size: int
    reflect_s: float = 0.0
    writes: int = 0
    events: int = 0  # Events posted during the storm (what a pod's protection changing tells its users)
    passes: list[int] = field(default_factory=list)  # Kubernetes writes of each pass, the quiet one last
    first_protect_s: float = float("nan")
    floor_s: float = float("nan")
    wrong_pods: list[str] = field(default_factory=list)  # pods not showing their node's new state

    @property
    def ratio(self) -> float:
        return self.reflect_s / self.floor_s


def flip(slurmd: FakeSlurmrestd) -> dict[str, bool]:
    """Every node's state changes at once: busy nodes go idle, idle ones take a job. Each node's new busyness."""
    busy = {}
    for name, node in slurmd.nodes.items():
        now_busy = node["state"] == ["IDLE"]
        alloc = 64 if now_busy else 0
        node |= {
            "state": ["ALLOCATED" if now_busy else "IDLE"],
            "alloc_cpus": alloc,
            "alloc_idle_cpus": 64 - alloc,
            "alloc_memory": alloc * 4000,
            "tres_used": f"cpu={alloc}",
        }
        busy[name] = now_busy
    slurmd.changed()
    return busy


def measure(size: int) -> Storm:
    storm = Storm(size)
    server = ServerProcess(size)
    try:
        slots = layout(size)
        slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in slots}, [slurm_job(s) for s in slots if s.busy])
        loop = make_loop(server.url, SLURM_URL, slurmd, watched=True)
        try:
            settle(loop)
            seen, events_seen = len(server.writes()), len(server.events())
            started = time.monotonic()
            busy = flip(slurmd)
            ended = started
            while not storm.passes or storm.passes[-1]:
                if len(storm.passes) >= STORM_PASSES:
                    raise RuntimeError(f"the storm was not written within {STORM_PASSES} passes: {storm.passes}")
                if storm.passes:
                    caught_up(loop)
                result = loop.run()
                storm.passes.append(result.kube_writes)
                if result.kube_writes or result.slurm_writes:
                    ended = time.monotonic()
            writes, events = server.writes()[seen:], server.events()[events_seen:]
            storm.reflect_s, storm.writes, storm.events = ended - started, len(writes), len(events)
            protects = [w["at"] for w in writes if _labels(w).get(names.LABEL_POD_PROTECT) == "true"]
            storm.first_protect_s = min(protects) - started if protects else float("nan")
            storm.wrong_pods = wrong_pods(server, busy)
            sent = sorted(writes + events, key=lambda w: w["at"])  # as the API server received them
            storm.floor_s = floor(server, sent)  # the loop's watches open: the same watch events streamed
        finally:
            loop.close()
    finally:
        server.close()
    return storm


def _labels(write: JSON) -> JSON:
    return (write["body"].get("metadata") or {}).get("labels") or {}


def wrong_pods(server: ServerProcess, busy: dict[str, bool]) -> list[str]:
    """Pods whose label or conditions do not show their node's new state."""
    wrong = []
    for item in orjson.loads(server.get(f"/api/v1/namespaces/{NS}/pods"))["items"]:
        name = item["metadata"]["name"]
        if name not in busy:
            continue
        protected = (item["metadata"].get("labels") or {}).get(names.LABEL_POD_PROTECT) == "true"
        shown = {c["type"] for c in item["status"].get("conditions") or [] if c.get("status") == "True"}
        wanted = "SlurmNodeStateAllocated" if busy[name] else "SlurmNodeStateIdle"
        if protected != busy[name] or wanted not in shown:
            wrong.append(name)
    return wrong


def floor(server: ServerProcess, writes: list[JSON]) -> float:
    """Seconds a bare client takes to send ``writes`` again with the loop's concurrency and client stack."""
    from slurm_sync.kube import Kube
    from slurm_sync.operator.loop import WRITERS

    kube = Kube(kube_client(server.url, "floor"))

    def send(write: JSON) -> None:
        if write["path"].startswith("/apis/events.k8s.io/"):
            kube.create_event(NS, write["body"])
            return
        match = _PATH.match(write["path"])
        assert match is not None
        if match["kind"] == "pods" and match["sub"]:
            kube.patch_pod_status(NS, match["name"], write["body"])
        elif match["kind"] == "pods":
            kube.patch_pod(NS, match["name"], write["body"])
        else:
            group, version = names.API_VERSION.split("/")
            kube.custom.patch_namespaced_custom_object(
                group, version, NS, match["kind"], match["name"], write["body"], _preload_content=False
            )

    with ThreadPoolExecutor(WRITERS) as pool:
        started = time.monotonic()
        list(pool.map(send, writes))
        return time.monotonic() - started


def run(quick: bool = False) -> Report:
    storms = [measure(size) for size in (SIZES[:1] if quick else SIZES)]
    report = Report(title=TITLE, columns=["measure", *(f"{s.size:,} nodes" for s in storms)])

    def row(label: str, cell: Any) -> None:
        report.rows.append([label, *(cell(s) for s in storms)])

    row("Kubernetes writes of the storm (patches + Events)", lambda s: f"{s.writes:,} + {s.events:,}")
    row("time to reflect (flip -> last writing pass ends)", lambda s: f"{s.reflect_s:.1f} s")
    row("requests a second", lambda s: f"{(s.writes + s.events) / s.reflect_s:,.0f}")
    row("floor: the same requests, bare client, same concurrency", lambda s: f"{s.floor_s:.1f} s")
    row("time to reflect / floor", lambda s: fmt_ratio(s.ratio))
    row("first pod-protect of a newly busy node, from the flip", lambda s: f"{s.first_protect_s * 1e3:.0f} ms")
    row("pods not showing their node's new state", lambda s: str(len(s.wrong_pods)))
    for s in storms:
        report.notes.append(
            f"{s.size:,}: Kubernetes writes per pass {s.passes} (the last one quiet); pods wrong: "
            f"{', '.join(s.wrong_pods[:5]) or 'none'}."
        )
    report.notes.append("Both sides without a rate limit (--kube-api-qps 0); the fakes run in a child process.")
    for s in storms:
        size = f"{s.size:,} nodes"
        report.budgets += [
            Budget(f"storm: time to reflect / floor, {size}", s.ratio, REFLECT_RATIO),
            Budget(f"storm: first pod-protect from the flip, {size}", s.first_protect_s, FIRST_PROTECT_S, " s"),
            Budget(f"storm: pods not showing their node's new state, {size}", float(len(s.wrong_pods)), 0, ""),
        ]
    return report

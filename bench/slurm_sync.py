"""slurm_sync's passes over 500, 5,000 and 20,000 Slurm nodes: the watch-based pass against the old full
re-list, measured in the same run, and how its costs grow from 500 to 20,000 nodes (docs/architecture.md §7,
§4.8; issues 5, 15 and 28).

Per size, one cluster (bench/slurm_sync_fakes.py: as many worker pods, Kubernetes Nodes and Slurm
nodes, one running job per busy node) behind a fake API server and slurmrestd in a child process. The
real ``OperatorLoop`` runs through the real Kubernetes client and the real ``SlurmClient`` (the JWT key
Secret is not read in an idle pass: the service reads it only when a token is due):

* subject: the production reader, ``CachedKube`` (watches; slurm_sync/cache.py);
* peer: the old reader, ``Kube``, listing every pod, NodeSet and Node on every pass.

Figures:

* CPU per idle pass (``time.process_time`` of this process; the fakes run elsewhere), subject and peer
  interleaved; budget: subject <= 0.1x peer.
* API server requests: list requests the subject makes after its start (budget: none), and the bytes
  the API server sends per minute while nothing changes (a pass every 10 s, the default poll).
* Peak memory: the peak RSS (``VmHWM``) of a fresh process that only runs the loop against the same fakes
  over HTTP: start, settle, three idle passes, then three passes after Slurm's listing changed, each
  reading it whole with everything else in memory (what every pass after a Slurm change does, and the
  peak of a running service). Against a floor measured in the same run: a bare process, the same
  interpreter and modules, holding exactly the state slurm_sync must hold at once, nothing else: every
  object of the Kubernetes collections the loop reads (worker and slurmctld pods, Nodes, NodeSets) as
  its page arrives, reduced to what the cache keeps (the cache's own decoding, trim and shared
  strings: the fields a decision reads), and with those held, Slurm's node and job listings read once
  as the client reads them. What the loop holds beyond that is its own cost: the views, the plans kept
  between passes, the previous Slurm listing (to find what changed), the watch threads and what the
  allocator keeps of the pages decoded in them. Budget: at most 1.6x the floor at 5,000 and 20,000
  nodes (measured 1.2x and 1.4x; the same loop before its listings were decoded into what it reads
  and its strings shared was 1.7x and 2.4x this floor). The old re-list is printed beside it as a peer
  (it holds every listing whole).
* Reaction: the time from an administrator's ``pod-cordon`` annotation (a PATCH to the API server) to
  the Slurm DRAIN call, with the loop run as the service runs it (``run_passes``, 10 s poll interval)
  and at rest; budget: at most 1 s, every sample. Reported too: the same right after another node
  changed in Slurm, when the pass must also read Slurm's whole node listing.
* Scaling (issue 28): a pass costs what changed, not the cluster's size. Budgets: the idle pass's CPU at
  20,000 nodes at most 2x that at 500 (a pass that reads what a pass with nothing to do read is not made),
  and the reaction right after a Slurm change (p50) at 20,000 nodes at most 3x that at 500 (slurmrestd
  sends the whole listing on any change: it is read, but only the changed nodes are decoded and parsed).
* Writes: none in unchanged passes; an administrator's drain of one node writes only that node's pod
  and its NodeSet's hook-input touch, and the pass after writes nothing.
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from bench.measure import Budget, Report, fmt_ns, fmt_ratio, peak_rss_bytes
from bench.slurm_sync_fakes import (
    _PATH,
    CLIENT_HEADER,
    CLUSTER,
    NS,
    FakeSlurmrestd,
    ServerProcess,
    Slot,
    layout,
    nodesets,
    slurm_job,
    slurm_node,
    touch_slurm,
)
from slinky_common import names

if TYPE_CHECKING:  # slurm_sync is imported where used, as in the other suites
    from slurm_sync.operator.loop import OperatorLoop

JSON = dict[str, Any]
REPO = Path(__file__).resolve().parents[1]
TITLE = "slurm_sync passes, 500 to 20,000 Slurm nodes: watch-based cache vs the old full re-list"
SIZES = (500, 5_000, 20_000)
REACTION_SCALING = 3.0  # pod-cordon -> DRAIN right after a Slurm change, p50: 20,000 nodes / 500 nodes
IDLE_SCALING = 2.0  # idle pass CPU, p50: 20,000 nodes / 500 nodes (a pass costs what changed: issue 28)
SETTLE_PASSES = 3
POLL_INTERVAL = 10.0  # the service's default: a minute of idling is six passes
ADMIN_REASON = "maint: replace DIMM B2 (ticket 4711)"
LATENCY_SAMPLES = 5
IDLE_RATIO = 0.1
MEMORY_RATIO = {5_000: 1.6, 20_000: 1.6}  # peak RSS, watch-based / floor (see the docstring)
REACTION_LIMIT_S = 1.0
RESYNC_TIMEOUT = 600.0  # how long a pass waits for a watch's re-list before the suite gives up
MEMORY_ATTEMPTS = 2  # a memory run whose watches re-listed (two listings held at once) is made again
ROUND_ATTEMPTS = 3  # an idle round during which a watch re-listed is made again


# --- the loops ----------------------------------------------------------------------------------


def kube_client(url: str, tag: str) -> Any:
    """The official client on ``url``, its requests counted by the fake under ``tag``."""
    from kubernetes import client

    config = client.Configuration()
    config.host = url
    api = client.ApiClient(config)
    api.set_default_header(CLIENT_HEADER, tag)
    return api


def slurm_client(url: str, slurmd: FakeSlurmrestd | None) -> Any:
    """A SlurmClient on the fake slurmrestd: in this process (``slurmd``) or over HTTP."""
    from slurm_sync.slurm.client import SlurmClient

    slurm = SlurmClient(url, lambda: "bench-token")
    if slurmd is not None:
        slurm._http.close()
        slurm._http = httpx.Client(base_url=slurm.base_url, transport=httpx.MockTransport(slurmd.handle))
    return slurm


@dataclass
class Loop:
    """One OperatorLoop and its reader; ``run()`` is one pass as the service makes it."""

    loop: OperatorLoop
    kube: Any
    wakeup: Any = None
    resyncs: int = 0  # passes that found a watch re-listing (they write nothing) and were made again

    def run(self) -> Any:
        """One pass. A pass that finds a watch re-listing (after a 410 or a broken stream: ``NotSynced``,
        it writes nothing) is counted and made again once the re-list is in, as the service's next pass
        is: a re-list is a figure of the run (``relists``), not a failed suite."""
        result, unsynced = self.synced_pass(RESYNC_TIMEOUT)
        self.resyncs += unsynced
        return result

    def synced_pass(self, timeout: float) -> tuple[Any, int]:
        """The first pass that could read everything, and how many before it could not (``NotSynced``)."""
        deadline, unsynced = time.perf_counter() + timeout, 0
        while True:
            result = self.loop.run_pass()
            if result.ok:
                return result, unsynced
            if not result.errors or not all("NotSynced" in error for error in result.errors):
                raise RuntimeError(f"pass failed: {result.errors}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the watches did not sync within {timeout:.0f} s: {result.errors}")
            unsynced += 1
            self.wakeup.wait(5.0, threading.Event())  # the listing's end wakes it

    def relists(self) -> int:
        """Listings the watches made after their first (a 410, a broken stream): 0 for the old reader."""
        cache = getattr(self.kube, "cache", None)
        return sum(informer.relists for informer in cache.informers()) if cache is not None else 0

    def informer_lists(self) -> int:
        """List requests the watches' informers made (their listings' pages), 0 for the old reader."""
        return int(getattr(self.kube, "lists", 0))

    def close(self) -> None:
        self.loop.close()
        if hasattr(self.kube, "cache"):
            self.kube.cache.close()


def make_loop(kube_url: str, slurm_url: str, slurmd: FakeSlurmrestd | None, watched: bool) -> Loop:
    """The loop with the production reader (``watched``: watches) or the old one (a list every pass)."""
    from slurm_sync.kube import Kube
    from slurm_sync.metrics import Metrics
    from slurm_sync.operator.loop import OperatorLoop
    from slurm_sync.wake import Wakeup

    metrics = Metrics()
    api = kube_client(kube_url, "watch" if watched else "relist")
    wakeup = Wakeup()
    kube = counted_cached_kube(api, metrics, wakeup) if watched else Kube(api)
    loop = OperatorLoop(CLUSTER, NS, CLUSTER, slurm_client(slurm_url, slurmd), kube, metrics)
    return Loop(loop, kube, wakeup)


def counted_cached_kube(api: Any, metrics: Any, wakeup: Any) -> Any:
    """The production reader, ``CachedKube``, with its informers' list requests counted (``lists``): it
    lists only through them, a pass reads the cache; so the API server's list count minus these is what
    the passes listed (the budget: none), and these after the start are the watches' re-lists (a figure)."""
    from slurm_sync.cache import CachedKube, KubeCache
    from slurm_sync.kube import Page

    class CountedCachedKube(CachedKube):
        def __init__(self) -> None:
            super().__init__(api, metrics.count_kube_write, cache=KubeCache(wakeup.set))
            self.lists = 0
            self._counting = threading.Lock()  # informers list in threads of their own

        def _count_list(self) -> None:
            with self._counting:
                self.lists += 1

        def list_pods_page(self, *args: Any, **kwargs: Any) -> Page:
            self._count_list()
            return super().list_pods_page(*args, **kwargs)

        def list_nodes_page(self, *args: Any, **kwargs: Any) -> Page:
            self._count_list()
            return super().list_nodes_page(*args, **kwargs)

        def list_custom_page(self, *args: Any, **kwargs: Any) -> Page:
            self._count_list()
            return super().list_custom_page(*args, **kwargs)

    return CountedCachedKube()


def start(loop: Loop, timeout: float = 900.0) -> Any:
    """The first pass that could read everything (for the watches: once their first listings are in; a
    pass before reports them not synced and writes nothing)."""
    return loop.synced_pass(timeout)[0]


def settle(loop: Loop) -> list[tuple[int, int]]:
    """Passes from the start until one writes nothing: (k8s, Slurm) writes of each."""
    result = start(loop)
    writes = [(result.kube_writes, result.slurm_writes)]
    while writes[-1] != (0, 0):
        if len(writes) >= SETTLE_PASSES:
            raise RuntimeError(f"no quiet pass within {SETTLE_PASSES} passes: (k8s, Slurm) writes {writes}")
        caught_up(loop)
        result = loop.run()
        writes.append((result.kube_writes, result.slurm_writes))
    return writes


def caught_up(loop: Loop) -> None:
    """As the service does after writing: the next pass starts when the watch events of its own writes
    have arrived (they wake it), so it plans from what it wrote, not from before."""
    from slurm_sync.wake import SETTLE

    if loop.wakeup is not None:
        loop.wakeup.wait(5.0, threading.Event())
        time.sleep(SETTLE)


# --- peak memory, in a fresh process --------------------------------------------------------------


def memory_child() -> None:
    """``python -c 'import bench.slurm_sync as b; b.memory_child()' <kube url> <slurm url> <watch|relist>``:
    start the loop, settle it, make three idle passes, then three passes that each read Slurm's whole
    node listing (it changed) with everything else in memory, as every pass after a Slurm change does;
    print the peak RSS, the settling writes and those of the last passes."""
    kube_url, slurm_url, mode = sys.argv[1:4]
    loop = make_loop(kube_url, slurm_url, None, watched=mode == "watch")
    started = time.perf_counter()
    settled = settle(loop)
    seconds = time.perf_counter() - started
    for _ in range(3):
        loop.run()
    relisted = []
    for _ in range(3):
        touch_slurm(slurm_url)
        result = loop.run()
        relisted.append(result.kube_writes + result.slurm_writes)
    watch_relists = loop.relists()
    loop.close()
    print(json.dumps({"peak_mb": peak_rss_bytes() / 1e6, "settle": settled, "start_seconds": seconds,
                      "relisted_writes": relisted, "relists": watch_relists, "resyncs": loop.resyncs}))  # fmt: skip


def floor_child() -> None:
    """``python -c 'import bench.slurm_sync as b; b.floor_child()' <kube url> <slurm url>``: the memory floor.

    A bare process (this interpreter, the modules the loop imports) that holds what slurm_sync must hold at
    once and nothing else: each Kubernetes collection the loop reads (worker pods, slurmctld pods, Nodes,
    NodeSets), page by page as it arrives, each object decoded and reduced to what the cache keeps (the
    cache's own page decoding, trim and shared strings: the fields a decision reads), all held; then, with
    those held, Slurm's node and job listings read once (the answers decoded and parsed as the client
    does). No threads, no views, no plans, no watch. Prints its peak RSS."""
    from slurm_sync.cache import NODE_PAGE, POD_PAGE, trim, trim_node, trim_pod
    from slurm_sync.kube import Kube
    from slurm_sync.operator.loop import CONTROLLER_APP

    make_loop_imports()
    kube_url, slurm_url = sys.argv[1:3]
    kube = Kube(kube_client(kube_url, "floor"))
    workers, controllers = {names.LABEL_CLUSTER: CLUSTER}, {names.LABEL_NAME: CONTROLLER_APP,
                                                              names.LABEL_INSTANCE: CLUSTER}  # fmt: skip
    held: list[object] = [
        held_collection(lambda token: kube.list_pods_page(NS, workers, token, POD_PAGE), trim_pod),
        held_collection(lambda token: kube.list_pods_page(NS, controllers, token, POD_PAGE), trim_pod),
        held_collection(lambda token: kube.list_nodes_page(token, NODE_PAGE), trim_node),
        held_collection(lambda token: kube.list_custom_page("nodesets", NS, token), trim),
    ]
    slurm = slurm_client(slurm_url, None)
    held += [slurm.list_nodes(), slurm.list_jobs()]
    print(json.dumps({"peak_mb": peak_rss_bytes() / 1e6, "objects": sum(len(h) for h in held[:4])}))  # type: ignore


def held_collection(lister: Callable[[str], Any], transform: Callable[[JSON], JSON]) -> list[JSON]:
    """Every page of a listing, each object reduced as the cache reduces it."""
    from slurm_sync.informer import SharedStrings

    strings, items, token = SharedStrings(), [], ""
    while True:
        page = lister(token)
        items += [strings.share(transform(obj)) for obj in page.items]
        token = page.next_token
        if not token:
            return items


def make_loop_imports() -> None:
    """The modules ``make_loop`` imports, so that the floor's interpreter holds the same code."""
    import slurm_sync.cache
    import slurm_sync.metrics
    import slurm_sync.operator.loop
    import slurm_sync.wake  # noqa: F401


def peak_memory(server: ServerProcess, mode: str) -> JSON:
    """The peak of a fresh process: the loop (``watch``, ``relist``) or the floor (``floor``). A run whose
    watches re-listed (a 410 or a broken stream, as on a loaded machine) held the old and the new listing
    at once for a while, so its peak is not the figure budgeted: it is made again, up to
    ``MEMORY_ATTEMPTS`` runs; the re-lists of every run are reported (``relists``, ``attempts``)."""
    runs: list[JSON] = []
    while len(runs) < MEMORY_ATTEMPTS and (not runs or runs[-1].get("relists")):
        runs.append(memory_run(server, mode))
    return runs[-1] | {"relists": sum(run.get("relists", 0) for run in runs), "attempts": len(runs)}


def memory_run(server: ServerProcess, mode: str) -> JSON:
    """One fresh process of ``peak_memory``: what it printed."""
    child = "floor_child()" if mode == "floor" else "memory_child()"
    done = subprocess.run(
        [sys.executable, "-c", f"import bench.slurm_sync as b; b.{child}", server.url, server.slurm_url, mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the memory run ({mode}) failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- measuring ------------------------------------------------------------------------------------


@dataclass
class Sample:
    cpu_ns: float
    wall_ns: float


def sample(fn: Callable[[], object]) -> tuple[Sample, Any]:
    gc.collect()
    c0, w0 = time.process_time_ns(), time.perf_counter_ns()
    result = fn()
    c1, w1 = time.process_time_ns(), time.perf_counter_ns()
    return Sample(c1 - c0, w1 - w0), result


def median_cpu(samples: list[Sample]) -> float:
    return statistics.median(s.cpu_ns for s in samples)


def _write_target(write: JSON) -> str:
    match = _PATH.match(write["path"])
    assert match is not None
    kind = {"pods": "pod", "nodesets": "nodeset"}.get(match["kind"], match["kind"])
    return f"{kind} {match['name']}" + ("/status" if match["sub"] else "")


@dataclass
class Scale:
    """Everything measured at one size."""

    size: int
    watch: list[Sample] = field(default_factory=list)
    relist: list[Sample] = field(default_factory=list)
    slurm_poll: list[Sample] = field(default_factory=list)
    idle_seconds: float = 0.0
    watch_sent: Counter[str] = field(default_factory=Counter)  # during the idle rounds
    relist_sent: Counter[str] = field(default_factory=Counter)
    lists_after_start: int = 0  # by the passes: the API server's count less the informers' own
    relists: int = 0  # the watches' re-lists after the start (410, broken stream), and their list requests
    relist_requests: int = 0
    rounds_redone: int = 0  # idle rounds made again because a watch re-listed during them
    resyncs: int = 0  # passes that found a watch re-listing and were made again
    unchanged_writes: int = 0
    memory: dict[str, JSON] = field(default_factory=dict)
    settled: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    latencies: list[float] = field(default_factory=list)  # from a loop at rest
    latencies_busy: list[float] = field(default_factory=list)  # right after Slurm's listing changed
    per_change: list[int] = field(default_factory=list)
    targets: Counter[str] = field(default_factory=Counter)
    stray: list[str] = field(default_factory=list)
    after_quiet: int = 0

    @property
    def ratio(self) -> float:
        return median_cpu(self.watch) / median_cpu(self.relist)

    @property
    def memory_ratio(self) -> float:
        return float(self.memory["watch"]["peak_mb"] / self.memory["floor"]["peak_mb"])

    def per_minute(self, sent: Counter[str], tag: str, passes: int) -> float:
        """Bytes a minute of idling costs at the default poll: what the API server sent the client over the
        idle rounds (its passes' requests and, for the watches, their events), per pass, times six."""
        return sent[f"{tag} bytes"] / passes * (60 / POLL_INTERVAL)


def measure(size: int, quick: bool) -> Scale:
    scale = Scale(size)
    server = ServerProcess(size)
    try:
        for mode in ("floor", "watch", "relist"):
            scale.memory[mode] = peak_memory(server, mode)
        scale.unchanged_writes += sum(scale.memory["watch"]["relisted_writes"])
        slurmd = FakeSlurmrestd({s.pod: slurm_node(s) for s in layout(size)}, [slurm_job(s) for s in layout(size)
                                                                               if s.busy])  # fmt: skip
        subject = make_loop(server.url, "http://slurmrestd.slurm.svc:6820", slurmd, watched=True)
        peer = make_loop(server.url, "http://slurmrestd.slurm.svc:6820", slurmd, watched=False)
        try:
            scale.settled = {"watch": settle(subject), "relist": settle(peer)}
            started, relists, informer_lists = server.sent(), subject.relists(), subject.informer_lists()
            idle_rounds(scale, subject, peer, slurmd, server, 3 if quick or size > 10_000 else 7)
            changes(scale, subject, slurmd, server, size)
            reaction(scale, subject, slurmd, server, size, 2 if quick else LATENCY_SAMPLES)
            scale.relists, scale.resyncs = subject.relists() - relists, subject.resyncs
            scale.relist_requests = subject.informer_lists() - informer_lists
            scale.lists_after_start = server.sent()["watch list"] - started["watch list"] - scale.relist_requests
        finally:
            subject.close()
            peer.close()
    finally:
        server.close()
    return scale


def idle_rounds(scale: Scale, subject: Loop, peer: Loop, slurmd: FakeSlurmrestd, server: ServerProcess,
                rounds: int) -> None:  # fmt: skip
    """Interleaved idle passes of both loops, and the unchanged Slurm poll alone."""
    nodes, jobs = subject.loop.slurm.node_watch(), subject.loop.slurm.job_watch()
    nodes.poll(), jobs.poll()

    def slurm_poll() -> object:  # what an idle pass asks (the lone slurmctld pod is labelled: no ping)
        return nodes.poll(), jobs.poll()

    writes_before = len(server.writes())
    before, started = server.sent(), time.perf_counter()
    for _ in range(rounds):
        watched, relisted = idle_pair(scale, subject, peer)
        scale.watch.append(watched)
        scale.relist.append(relisted)
        scale.slurm_poll.append(sample(slurm_poll)[0])
    scale.idle_seconds = time.perf_counter() - started
    sent = server.sent()
    sent.subtract(before)
    scale.watch_sent = Counter({k: v for k, v in sent.items() if k.startswith("watch ")})
    scale.relist_sent = Counter({k: v for k, v in sent.items() if k.startswith("relist ")})
    scale.unchanged_writes += len(server.writes()) - writes_before


def idle_pair(scale: Scale, subject: Loop, peer: Loop) -> tuple[Sample, Sample]:
    """An idle pass of each loop, back to back. Made again (up to ``ROUND_ATTEMPTS`` times) when a watch
    re-listed meanwhile: the subject's CPU then holds a listing (its informers run in this process), and
    the figure is the cost of an idle pass; the re-list itself is counted (``relists``)."""
    for _ in range(ROUND_ATTEMPTS):
        before = subject.relists() + subject.resyncs
        samples = []
        for loop in (subject, peer):
            taken, result = sample(loop.run)
            samples.append(taken)
            scale.unchanged_writes += result.kube_writes + result.slurm_writes
        if subject.relists() + subject.resyncs == before:
            break
        scale.rounds_redone += 1
    return samples[0], samples[1]


def idle_picks(size: int, count: int, skip: int) -> list[Slot]:
    """``count`` idle slots spread over the NodeSets (``skip`` shifts the choice)."""
    picks = []
    for nodeset, _ in nodesets(size):
        mine = [s for s in layout(size) if s.nodeset == nodeset and not s.busy]
        picks += mine[len(mine) // 2 + skip :: max(1, len(mine) // 8)][: max(1, count // 4 + 1)]
    return picks[:count]


def changes(scale: Scale, subject: Loop, slurmd: FakeSlurmrestd, server: ServerProcess, size: int) -> None:
    """One idle node per NodeSet drained by an administrator: only its pod and NodeSet are written."""
    seen = len(server.writes())
    for slot in idle_picks(size, 4, 0):
        slurmd.admin_drain(slot.pod, ADMIN_REASON)
        result = subject.run()
        new = server.writes()[seen:]
        seen += len(new)
        allowed = {
            f"pod {slot.pod}": "pod <pod> (metadata)",
            f"pod {slot.pod}/status": "pod <pod>/status",
            f"nodeset {slot.nodeset}": "nodeset <its NodeSet>",
        }
        for write in new:
            target = _write_target(write)
            if target in allowed:
                scale.targets[allowed[target]] += 1
            else:
                scale.stray.append(f"after draining {slot.pod}: {target}")
        if len(new) != result.kube_writes:
            scale.stray.append(f"write count mismatch: HTTP {len(new)}, pass {result.kube_writes}")
        scale.per_change.append(len(new))
        caught_up(subject)
        after = subject.run()
        scale.after_quiet += after.kube_writes + after.slurm_writes
        seen = len(server.writes())
        pod = orjson.loads(server.get(f"/api/v1/namespaces/{NS}/pods/{slot.pod}"))
        types = {c["type"]: c.get("message") for c in pod["status"]["conditions"]}
        if types.get("SlurmNodeStateDrain") != ADMIN_REASON:
            scale.stray.append(f"pod {slot.pod} does not show the drain: {types}")
        if slurmd.nodes[slot.pod]["reason"] != ADMIN_REASON:
            scale.stray.append(f"the administrator's drain on {slot.pod} was changed")


def reaction(scale: Scale, subject: Loop, slurmd: FakeSlurmrestd, server: ServerProcess, size: int,
             samples: int) -> None:  # fmt: skip
    """The loop runs as the service runs it; an administrator cordons idle pods one at a time, each once the
    loop is at rest, and then each right after Slurm changed (the pass must read Slurm's whole listing)."""
    from slurm_sync.wake import run_passes

    stop, passes = threading.Event(), [0]

    def one_pass() -> None:
        passes[0] += 1
        try:
            subject.run()
        except RuntimeError as exc:  # reported as a problem; the loop goes on, as the service's does
            scale.stray.append(f"while reacting: {exc}")

    thread = threading.Thread(target=run_passes, args=(one_pass, subject.wakeup, POLL_INTERVAL, stop))
    thread.start()
    try:
        picks, others = idle_picks(size, 2 * samples, 1), idle_picks(size, samples, 2)
        for index, slot in enumerate(picks):
            at_rest(subject, passes)
            if index >= samples:  # another node changes in Slurm just before
                slurmd.admin_drain(others[index - samples].pod, ADMIN_REASON)
            started = time.perf_counter()
            body = {"metadata": {"annotations": {names.ANNOTATION_POD_CORDON: "true"}}}
            server.request("PATCH", f"/api/v1/namespaces/{NS}/pods/{slot.pod}", body)
            deadline = started + 30
            while slot.pod not in slurmd.drained_at and time.perf_counter() < deadline:
                time.sleep(0.001)
            latency = slurmd.drained_at.get(slot.pod, float("nan")) - started
            (scale.latencies if index < samples else scale.latencies_busy).append(latency)
    finally:
        stop.set()
        thread.join(60)


def at_rest(subject: Loop, passes: list[int], quiet: float = 1.0) -> None:
    """Wake the loop (it reads what Slurm did meanwhile) and wait until no pass has started for ``quiet`` s."""
    subject.wakeup.set()
    seen, since = -1, time.perf_counter()
    while time.perf_counter() - since < quiet:
        if passes[0] != seen:
            seen, since = passes[0], time.perf_counter()
        time.sleep(0.01)


# --- the report -----------------------------------------------------------------------------------


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f} MB"


def run(quick: bool = False) -> Report:
    scales = [measure(size, quick) for size in SIZES]
    report = Report(title=TITLE, columns=["measure", *(f"{s.size:,} nodes" for s in scales)])

    def row(label: str, cell: Callable[[Scale], str]) -> None:
        report.rows.append([label, *(cell(s) for s in scales)])

    row("idle pass CPU, watch-based (p50)", lambda s: fmt_ns(median_cpu(s.watch)))
    row("idle pass CPU, old full re-list (peer, p50)", lambda s: fmt_ns(median_cpu(s.relist)))
    row("idle pass CPU, watch / old", lambda s: fmt_ratio(s.ratio))
    row("  of which: unchanged Slurm poll (nodes 304 + jobs)", lambda s: fmt_ns(median_cpu(s.slurm_poll)))
    row("API list requests by passes after start, watch-based", lambda s: str(s.lists_after_start))
    row(
        "watch re-lists (410, broken stream): after start / memory runs",
        lambda s: f"{s.relists} ({s.relist_requests} requests) / {s.memory['watch']['relists']}",
    )
    row(
        "API requests per idle pass, watch / old",
        lambda s: (
            f"{(s.watch_sent['watch get'] + s.watch_sent['watch list']) / len(s.watch):g} / "
            f"{(s.relist_sent['relist get'] + s.relist_sent['relist list']) / len(s.relist):g}"
        ),
    )
    row("API bytes per idle minute, watch-based", lambda s: _mb(s.per_minute(s.watch_sent, "watch", len(s.watch))))
    row("API bytes per idle minute, old re-list", lambda s: _mb(s.per_minute(s.relist_sent, "relist", len(s.relist))))
    row("peak memory (RSS), watch-based", lambda s: f"{s.memory['watch']['peak_mb']:,.0f} MB")
    row("peak memory, floor (the state alone, bare process)", lambda s: f"{s.memory['floor']['peak_mb']:,.0f} MB")
    row("peak memory, watch-based / floor", lambda s: fmt_ratio(s.memory_ratio))
    row("peak memory (RSS), old re-list (peer)", lambda s: f"{s.memory['relist']['peak_mb']:,.0f} MB")
    row(
        "pod-cordon annotation -> Slurm DRAIN, p50 / max",
        lambda s: f"{statistics.median(s.latencies) * 1e3:.0f} / {max(s.latencies) * 1e3:.0f} ms",
    )
    row(
        "  the same right after Slurm changed, p50 / max",
        lambda s: f"{statistics.median(s.latencies_busy) * 1e3:.0f} / {max(s.latencies_busy) * 1e3:.0f} ms",
    )
    row("writes in unchanged passes (k8s + Slurm)", lambda s: str(s.unchanged_writes))
    row("admin drains one node: writes per change", lambda s: f"{statistics.median(s.per_change):.0f}")

    for s in scales:
        report.notes.append(
            f"{s.size:,}: {len(s.watch)} idle passes each, interleaved; settled in (k8s, Slurm) writes per pass "
            f"{s.settled}; memory runs (fresh process: start, settle, 3 idle passes, 3 passes re-reading Slurm's "
            f"listing): watch {_memory_note(s.memory['watch'])}, old {_memory_note(s.memory['relist'])}, floor "
            f"{s.memory['floor']['peak_mb']:,.0f} MB ({s.memory['floor']['objects']:,} Kubernetes objects held); "
            "reaction samples "
            + ", ".join(f"{x * 1e3:.0f}" for x in s.latencies)
            + " ms (after a Slurm change: "
            + ", ".join(f"{x * 1e3:.0f}" for x in s.latencies_busy)
            + " ms); admin drains write "
            + ", ".join(f"{t} x{n / max(1, len(s.per_change)):g}" for t, n in sorted(s.targets.items()))
            + f"; next pass after each: {s.after_quiet} writes; passes made again after finding a watch re-listing: "
            f"{s.resyncs}, idle rounds made again for it: {s.rounds_redone}, memory runs made: watch "
            f"{s.memory['watch']['attempts']}, old {s.memory['relist']['attempts']}."
        )
        report.notes.extend(f"STRAY ({s.size:,}): {problem}" for problem in s.stray[:5])
    report.notes.append(
        "CPU = time.process_time of this process (the fakes run in a child process). Bytes per idle minute: "
        "per-pass bytes x 6 (10 s poll); the "
        "watch-based figure also holds the watches' traffic over the idle rounds (bookmarks only: nothing changed). "
        "A watch's re-list (after a 410 or a broken stream, e.g. on a loaded machine) is counted above, not "
        "budgeted: the passes that find it under way write nothing and are made again once it is in, an idle "
        "round or a memory run it falls in is made again."
    )
    for s in scales:
        report.budgets += [
            Budget(f"idle pass CPU, watch vs old full re-list, {s.size:,} nodes", s.ratio, IDLE_RATIO),
            Budget(f"API list requests by passes after start, {s.size:,} nodes", float(s.lists_after_start), 0, ""),
            Budget(
                f"pod-cordon -> Slurm DRAIN call, slowest of {len(s.latencies)}, {s.size:,} nodes",
                max(s.latencies),
                REACTION_LIMIT_S,
                " s",
            ),
            Budget(f"writes in unchanged passes, {s.size:,} nodes", float(s.unchanged_writes), 0, ""),
            Budget(f"writes not for the changed node's pod or NodeSet, {s.size:,} nodes", float(len(s.stray)), 0, ""),
            Budget(f"writes in the pass after each change, {s.size:,} nodes", float(s.after_quiet), 0, ""),
        ]
        if s.size in MEMORY_RATIO:  # at 500 nodes the interpreter's own memory is most of both
            report.budgets.append(
                Budget(f"peak memory, watch-based / floor, {s.size:,} nodes", s.memory_ratio, MEMORY_RATIO[s.size])
            )
    small, large = scales[0], scales[-1]
    report.budgets += [
        Budget(
            f"pod-cordon -> DRAIN right after a Slurm change, p50, {large.size:,} / {small.size:,} nodes",
            statistics.median(large.latencies_busy) / statistics.median(small.latencies_busy),
            REACTION_SCALING,
        ),
        Budget(
            f"idle pass CPU, p50, {large.size:,} / {small.size:,} nodes",
            median_cpu(large.watch) / median_cpu(small.watch),
            IDLE_SCALING,
        ),
    ]
    return report


def _memory_note(run: JSON) -> str:
    return (
        f"{run['peak_mb']:,.0f} MB, started and settled in {run['start_seconds']:.1f} s ({run['settle']}), "
        f"writes in the passes that re-read Slurm's listing {run['relisted_writes']}"
    )

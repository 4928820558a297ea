"""The slurmrestd client against a faked HTTP server (pytest-httpserver): negotiation, error
classification, retries, token hygiene and the update_time watch. The real-Slurm side is in
test_client_roundtrips.py."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import orjson
import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from slurm_sync.slurm.client import (
    ListingWatch,
    RetryPolicy,
    SlurmClient,
    choose_version,
    interpret,
)
from slurm_sync.slurm.errors import (
    SlurmError,
    SlurmMalformed,
    SlurmNotFound,
    SlurmRejected,
    SlurmUnavailable,
    SlurmUnsupported,
)
from slurm_sync.slurm.types import Listing, NodeUpdate, SlurmVersion, parse_job, parse_node, parse_ping
from tests.slurm_sync.slurm.restanswers import TOKEN, V, meta, node, nodes_body, spec


def slurm_error(description: str, number: int, error: str = "") -> dict:
    return {
        "errors": [{"description": description, "error_number": number, "error": error, "source": "test"}],
        "warnings": [],
        "meta": meta(),
    }


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


@pytest.fixture
def server(httpserver: HTTPServer) -> HTTPServer:
    httpserver.expect_request("/openapi/v3").respond_with_json(spec("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45"))
    return httpserver


@pytest.fixture
def client(server: HTTPServer, sleeps: Sleeps) -> Iterator[SlurmClient]:
    with SlurmClient(server.url_for("/"), lambda: TOKEN, timeout=2.0, sleep=sleeps, jitter=lambda: 0.5) as c:
        yield c


def requests_to(server: HTTPServer, path: str) -> list[Request]:
    return [request for request, _ in server.log if request.path == path]


# --- negotiation ----------------------------------------------------------------------------


def test_negotiation_picks_the_newest_common_version(client: SlurmClient) -> None:
    assert client.api.version == "v0.0.45"
    assert client.api.offered == ("v0.0.42", "v0.0.43", "v0.0.44", "v0.0.45")


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [(("v0.0.42", "v0.0.43"), "v0.0.43"), (("v0.0.43", "v0.0.44"), "v0.0.44"), (("v0.0.45", "v0.0.46"), "v0.0.45")],
)
def test_negotiation_with_older_or_newer_servers(httpserver: HTTPServer, offered: tuple[str, ...], chosen: str) -> None:
    httpserver.expect_request("/openapi/v3").respond_with_json(spec(*offered))
    with SlurmClient(httpserver.url_for("/"), lambda: TOKEN) as client:
        assert client.api.version == chosen


def test_negotiation_fails_clearly_when_no_version_is_shared(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/openapi/v3").respond_with_json(spec("v0.0.40", "v0.0.41", "v0.0.42"))
    with SlurmClient(httpserver.url_for("/"), lambda: TOKEN) as client, pytest.raises(SlurmUnsupported) as info:
        client.ping()
    assert "v0.0.40, v0.0.41, v0.0.42" in str(info.value)
    assert "v0.0.45" in str(info.value)


def test_choose_version_with_nothing_offered() -> None:
    with pytest.raises(SlurmUnsupported, match=r"\(none\)"):
        choose_version([])


def test_requests_use_the_negotiated_version_path(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/ping/").respond_with_json(
        {
            "pings": [
                {"hostname": "ctld-0", "responding": True, "primary": True, "latency": 512, "status": "No error"}
            ],
            "meta": meta(),
            "errors": [],
        }
    )
    result = client.ping()
    assert result.slurm_version == SlurmVersion(26, 5, 5) and str(result.slurm_version) == "26.05.5"
    (ctld,) = result.controllers
    assert (ctld.hostname, ctld.pinged, ctld.primary, ctld.latency_us, ctld.mode) == ("ctld-0", "UP", True, 512, None)


def test_ping_v0_0_44_reports_mode_and_down_controllers() -> None:
    body = {
        "pings": [
            {"hostname": "a", "pinged": "UP", "responding": True, "primary": True, "mode": "primary", "latency": 9},
            {"hostname": "b", "pinged": "DOWN", "responding": False, "primary": False, "mode": "backup1", "latency": 0},
        ],
        "meta": meta(),
    }
    result = parse_ping(body)
    assert [(c.hostname, c.pinged, c.mode) for c in result.controllers] == [
        ("a", "UP", "primary"),
        ("b", "DOWN", "backup1"),
    ]
    assert [c.hostname for c in result.responding] == ["a"]


# --- auth headers and the token -------------------------------------------------------------


def test_token_header_only_and_user_name_only_when_configured(server: HTTPServer) -> None:
    server.expect_request(f"{V}/nodes/").respond_with_json(nodes_body(node("n1")))
    with SlurmClient(server.url_for("/"), lambda: TOKEN) as plain:
        plain.list_nodes()
    with SlurmClient(server.url_for("/"), lambda: TOKEN, user_name="slurm") as named:
        named.list_nodes()
    first, second = requests_to(server, f"{V}/nodes/")
    assert first.headers["X-SLURM-USER-TOKEN"] == TOKEN and "X-SLURM-USER-NAME" not in first.headers
    assert second.headers["X-SLURM-USER-TOKEN"] == TOKEN and second.headers["X-SLURM-USER-NAME"] == "slurm"


def test_token_provider_is_asked_on_every_request(server: HTTPServer) -> None:
    server.expect_request(f"{V}/nodes/").respond_with_json(nodes_body(node("n1")))
    tokens = iter(["tok-1", "tok-2", "tok-3"])
    with SlurmClient(server.url_for("/"), lambda: next(tokens)) as client:
        client.list_nodes()
        client.list_nodes()
    assert [r.headers["X-SLURM-USER-TOKEN"] for r in requests_to(server, f"{V}/nodes/")] == ["tok-2", "tok-3"]


def test_token_never_in_repr_exceptions_or_logs(
    server: HTTPServer, client: SlurmClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    # a misbehaving proxy that echoes the request headers back in its error page
    server.expect_request(f"{V}/nodes/").respond_with_data(f"bad gateway; saw token {TOKEN}", status=502)
    server.expect_request(f"{V}/node/n1", method="POST").respond_with_data(f"<html>{TOKEN}</html>", status=200)
    failures = []
    for call in (client.list_nodes, lambda: client.update_node("n1", NodeUpdate(state=("DRAIN",), reason="x"))):
        with pytest.raises(SlurmUnavailable) as info:
            call()
        failures.append(info.value)
    text = " ".join([repr(client)] + [f"{f} {f!r}" for f in failures])
    assert "<redacted>" in str(failures[0]) and "<redacted>" in str(failures[1])
    assert TOKEN not in text and "SECRET-PAYLOAD" not in text
    assert caplog.records, "the retries were logged"
    for record in caplog.records:
        assert "SECRET-PAYLOAD" not in record.getMessage()


# --- error classification -------------------------------------------------------------------


def test_a_200_that_carries_errors_is_an_error(server: HTTPServer, client: SlurmClient) -> None:
    body = nodes_body(node("n1"))
    body["errors"] = slurm_error("Unable to query nodes", 2002, "Access/permission denied")["errors"]
    server.expect_request(f"{V}/nodes/").respond_with_json(body)
    with pytest.raises(SlurmRejected) as info:
        client.list_nodes()
    assert info.value.status == 200 and info.value.numbers == {2002}
    assert "Unable to query nodes" in str(info.value) and "2002" in str(info.value)


def test_4xx_is_rejected_with_slurms_message(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/node/n1", method="POST").respond_with_json(
        slurm_error("Failure to update node n1", 2180, "Invalid node state transition"), status=422
    )
    with pytest.raises(SlurmRejected, match="Invalid node state transition") as info:
        client.update_node("n1", NodeUpdate(state=("RESUME",)))
    assert not isinstance(info.value, SlurmNotFound) and info.value.status == 422


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (500, slurm_error("Unknown flag", 9207, "Data parser unable to parse invalid flag"), SlurmRejected),
        (500, slurm_error("Unable to contact slurm controller", 1800), SlurmUnavailable),
        (200, slurm_error("Unable to contact slurm controller", 1800), SlurmUnavailable),
        (500, None, SlurmUnavailable),
        (404, slurm_error("Unable to query JobId=7", 2017, "Invalid job id specified"), SlurmNotFound),
        (422, slurm_error("Failure to delete node n9", 2018), SlurmNotFound),
        (401, None, SlurmRejected),
        # a 404 is "not found" only when Slurm's error numbers say so (a proxy, an ingress or a
        # half-started slurmrestd can answer 404 with JSON too): otherwise we learned nothing
        (404, {"errors": []}, SlurmUnavailable),
        (404, {"message": "not found"}, SlurmUnavailable),
        (404, {"errors": [{"description": "no such thing"}]}, SlurmUnavailable),
        (404, slurm_error("Access denied", 2002), SlurmRejected),
        (200, slurm_error("Unable to query JobId=7", 2017), SlurmNotFound),
    ],
)
def test_interpret_classifies(status: int, body: dict | None, kind: type) -> None:
    content = orjson.dumps(body) if body is not None else b"Authentication failure"
    with pytest.raises(kind) as info:
        interpret("GET x", status, content)
    assert type(info.value) is kind


def test_a_bare_404_for_a_job_is_not_job_gone(server: HTTPServer, client: SlurmClient) -> None:
    """bridge.read_jobs deletes the pods of a job it is told is gone: a 404 without Slurm's own
    "invalid job id" must stay unknown."""
    server.expect_request(f"{V}/job/7").respond_with_json({"errors": [], "warnings": []}, status=404)
    with pytest.raises(SlurmUnavailable) as info:
        client.get_job(7)
    assert not isinstance(info.value, SlurmRejected)


def test_slurm_down_behind_slurmrestd_is_unavailable_not_rejected(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/nodes/").respond_with_json(
        slurm_error("Unable to contact slurm controller (connect failure)", 1800), status=500
    )
    with pytest.raises(SlurmUnavailable) as info:
        client.list_nodes()
    assert not isinstance(info.value, SlurmRejected)
    assert len(requests_to(server, f"{V}/nodes/")) == 3  # retried: slurmctld may come back


@pytest.mark.parametrize(
    "content",
    [
        b"<html>502 Bad Gateway</html>",
        b'{"nodes": [',
        b"[]",
        b"null",
        b"",
        b'{"nodes": {"n1": {}}, "errors": []}',
        b'{"errors": []}',
        b'{"nodes": [{"name": "n1"}]}',
        b'{"nodes": [{"name": "n1", "state": "IDLE", "cpus": "four"}]}',
        b'{"nodes": [], "errors": "oops"}',
    ],
)
def test_garbage_or_wrongly_shaped_bodies_are_unavailable(
    server: HTTPServer, client: SlurmClient, content: bytes
) -> None:
    server.expect_request(f"{V}/nodes/").respond_with_data(content, content_type="application/json")
    with pytest.raises(SlurmMalformed) as info:  # a SlurmUnavailable: never "no nodes"
        client.list_nodes()
    assert isinstance(info.value, SlurmUnavailable) and not info.value.retryable


def test_unknown_endpoint_404_is_not_an_empty_answer_and_renegotiates(server: HTTPServer) -> None:
    server.clear()
    server.expect_oneshot_request("/openapi/v3").respond_with_json(spec("v0.0.45"))
    server.expect_request("/openapi/v3").respond_with_json(spec("v0.0.44"))  # slurmrestd was replaced
    server.expect_request(f"{V}/nodes/").respond_with_data("Unable to find requested URL endpoint.", status=404)
    server.expect_request("/slurm/v0.0.44/nodes/").respond_with_json(nodes_body(node("n1")))
    with SlurmClient(server.url_for("/"), lambda: TOKEN) as client:
        with pytest.raises(SlurmUnavailable, match="endpoint not served"):
            client.list_nodes()
        assert [n.name for n in client.list_nodes().items] == ["n1"]
        assert client.api.version == "v0.0.44"


def test_cancel_reports_per_job_errors(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/job/42", method="DELETE").respond_with_json(
        {
            "status": [{"error": {"string": "Invalid job id specified", "code": 2017, "message": ""}, "step_id": "42"}],
            "errors": [],
            "meta": meta(),
        }
    )
    with pytest.raises(SlurmNotFound, match="Invalid job id"):
        client.cancel_job(42)


def test_cancel_passes_the_signal(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/job/42", method="DELETE", query_string="signal=KILL").respond_with_json(
        {"status": [{"error": {"string": "No error", "code": 0}, "step_id": "42"}], "errors": []}
    )
    client.cancel_job(42, signal="KILL")
    assert len(requests_to(server, f"{V}/job/42")) == 1


# --- timeouts and retries -------------------------------------------------------------------


def test_503_then_200_is_retried_for_a_get(server: HTTPServer, client: SlurmClient, sleeps: Sleeps) -> None:
    server.expect_oneshot_request(f"{V}/nodes/").respond_with_data("busy", status=503)
    server.expect_request(f"{V}/nodes/").respond_with_json(nodes_body(node("n1")))
    listing = client.list_nodes()
    assert [n.name for n in listing.items] == ["n1"]
    assert len(requests_to(server, f"{V}/nodes/")) == 2
    assert sleeps == [pytest.approx(0.1)]  # jitter 0.5 x base 0.2


def test_a_submit_is_never_retried(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_oneshot_request(f"{V}/job/submit", method="POST").respond_with_data("busy", status=503)
    server.expect_request(f"{V}/job/submit", method="POST").respond_with_json({"job_id": 7, "errors": []})
    with pytest.raises(SlurmUnavailable):
        client.submit_external_job({"name": "x", "partition": "debug"})
    assert len(requests_to(server, f"{V}/job/submit")) == 1


def test_retries_are_bounded(server: HTTPServer, client: SlurmClient, sleeps: Sleeps) -> None:
    server.expect_request(f"{V}/nodes/").respond_with_data("down", status=503)
    with pytest.raises(SlurmUnavailable, match="HTTP 503"):
        client.list_nodes()
    assert len(requests_to(server, f"{V}/nodes/")) == 3
    assert sleeps == [pytest.approx(0.1), pytest.approx(0.2)]  # exponential


def test_backoff_is_capped_and_jittered() -> None:
    policy = RetryPolicy(attempts=10, base_delay=0.5, max_delay=4.0)
    assert [policy.delay(n, 1.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(3, 0.0) == 0.0 and policy.delay(3, 0.25) == 1.0


def test_idempotent_node_update_is_retried_but_resume_is_not(server: HTTPServer, client: SlurmClient) -> None:
    ok = {"errors": [], "warnings": [], "meta": meta()}
    for name in ("n1", "n2"):
        server.expect_oneshot_request(f"{V}/node/{name}", method="POST").respond_with_data("busy", status=503)
        server.expect_request(f"{V}/node/{name}", method="POST").respond_with_json(ok)
    client.update_node("n1", NodeUpdate(state=("DRAIN",), reason="slurm-operator: x"))
    with pytest.raises(SlurmUnavailable):
        client.update_node("n2", NodeUpdate(state=("RESUME",)))
    assert len(requests_to(server, f"{V}/node/n1")) == 2
    assert len(requests_to(server, f"{V}/node/n2")) == 1
    assert requests_to(server, f"{V}/node/n1")[-1].get_json() == {"state": ["DRAIN"], "reason": "slurm-operator: x"}


def test_timeout_is_unavailable(server: HTTPServer, sleeps: Sleeps) -> None:
    def slow(request: Request) -> Response:
        time.sleep(0.6)
        return Response("{}", content_type="application/json")

    server.expect_request(f"{V}/nodes/").respond_with_handler(slow)
    with SlurmClient(
        server.url_for("/"), lambda: TOKEN, timeout=0.2, retry=RetryPolicy(attempts=2), sleep=sleeps
    ) as client:
        client.negotiate()
        started = time.monotonic()
        with pytest.raises(SlurmUnavailable, match="timed out"):
            client.list_nodes()
    assert time.monotonic() - started < 1.5
    assert len(sleeps) == 1  # a GET that timed out was tried again once


def test_connection_refused_is_unavailable(sleeps: Sleeps) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with (
        SlurmClient(f"http://127.0.0.1:{port}", lambda: TOKEN, sleep=sleeps) as client,
        pytest.raises(SlurmUnavailable, match="ConnectError") as info,
    ):
        client.ping()
    assert TOKEN not in str(info.value)
    assert len(sleeps) == 2


# --- node and job shapes --------------------------------------------------------------------


def test_node_fields_and_state_semantics() -> None:
    n = parse_node(
        node(
            "n2",
            "MIXED",
            "DRAIN",
            reason="slurm-operator: scale-in",
            reason_set_by_user="slurm",
            comment='{"pod":"x"}',
            features=["n2", "k8s/gpu"],
            active_features=["n2"],
            cpus=4,
            real_memory=4000,
            alloc_cpus=1,
            alloc_memory=256,
            partitions=["debug"],
            address="10.0.0.2",
            hostname="slurm-0",
            topology="topo-switch:s1",
        )
    )
    assert n.base_state == "MIXED" and n.flags == {"DRAIN"}
    assert n.busy and n.draining and not n.drained
    assert (n.features, n.active_features, n.partitions) == (("n2", "k8s/gpu"), ("n2",), ("debug",))
    assert (n.cpus, n.real_memory, n.alloc_cpus, n.alloc_memory) == (4, 4000, 1, 256)
    assert (n.reason, n.reason_set_by_user, n.address, n.hostname, n.topology) == (
        "slurm-operator: scale-in",
        "slurm",
        "10.0.0.2",
        "slurm-0",
        "topo-switch:s1",
    )


def test_job_fields() -> None:
    job = parse_job(
        {
            "job_id": 9,
            "name": "pod-single",
            "job_state": ["RUNNING"],
            "nodes": "n2",
            "partition": "debug",
            "user_name": "slurm",
            "admin_comment": '{"pods":["default/demo"]}',
            "comment": "",
            "flags": ["EXTERNAL_JOB", "JOB_WAS_RUNNING"],
            "batch_host": "n2",
            "start_time": {"set": True, "infinite": False, "number": 1795311887},
            "time_limit": {"set": True, "infinite": True, "number": 0},
        }
    )
    assert job.external and job.state == {"RUNNING"} and job.nodes == "n2"
    assert job.start_time == 1795311887 and job.time_limit_minutes is None


def test_update_node_body_and_unsupported_fields(server: HTTPServer) -> None:
    server.clear()
    server.expect_request("/openapi/v3").respond_with_json(spec("v0.0.43", update_fields=("state", "reason")))
    with (
        SlurmClient(server.url_for("/"), lambda: TOKEN) as client,
        pytest.raises(SlurmUnsupported, match="topology_str"),
    ):
        client.update_node("n1", NodeUpdate(topology_str="topo-switch:s1"))
    assert not requests_to(server, "/slurm/v0.0.43/node/n1")
    update = NodeUpdate(state=("DRAIN",), reason="r", comment="", features=("k8s/a",), features_act=())
    assert update.body() == {
        "state": ["DRAIN"],
        "reason": "r",
        "comment": "",
        "features": ["k8s/a"],
        "features_act": [],
    }


def test_external_submit_body(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/job/submit", method="POST").respond_with_json(
        {"job_id": 9, "step_id": "batch", "job_submit_user_msg": "", "errors": [], "meta": meta()}
    )
    result = client.submit_external_job({"name": "pod-single", "partition": "debug", "flags": ["SPREAD_JOB"]})
    assert result.job_id == 9
    (request,) = requests_to(server, f"{V}/job/submit")
    assert request.get_json() == {
        "job": {"name": "pod-single", "partition": "debug", "flags": ["SPREAD_JOB", "EXTERNAL_JOB"]}
    }
    with pytest.raises(ValueError, match="script"):
        client.submit_external_job({"script": "#!/bin/sh\n"})


# --- update_time and the watch --------------------------------------------------------------


def test_node_listing_304_means_unchanged(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/nodes/", query_string="update_time=1000").respond_with_data("", status=304)
    listing = client.list_nodes(since=1000)
    assert listing == Listing((), 1000, unchanged=True)


def test_job_listing_without_last_update_means_unchanged(server: HTTPServer, client: SlurmClient) -> None:
    server.expect_request(f"{V}/jobs/", query_string="update_time=1000").respond_with_json(
        {
            "jobs": [],
            "last_update": {"set": True, "infinite": False, "number": 0},
            "errors": [],
            "warnings": [{"description": "No job changes since update_time[1000]"}],
        }
    )
    server.expect_request(f"{V}/jobs/").respond_with_json(
        {"jobs": [], "last_update": {"set": True, "infinite": False, "number": 1005}, "errors": []}
    )
    assert client.list_jobs(since=1000).unchanged
    everything = client.list_jobs()
    assert not everything.unchanged and everything.items == () and everything.last_update == 1005


def test_watch_reports_a_complete_view_and_what_changed(server: HTTPServer, client: SlurmClient) -> None:
    answers = iter(
        [
            (200, nodes_body(node("n1"), node("n2"), node("n3"), last_update=100)),
            (304, None),
            (200, nodes_body(node("n1"), node("n2", "IDLE", "DRAIN", reason="maint"), last_update=130)),
            (503, None),
            (503, None),
            (503, None),
        ]
    )
    seen: list[str | None] = []

    def handler(request: Request) -> Response:
        seen.append(request.args.get("update_time"))
        status, body = next(answers)
        return Response(orjson.dumps(body) if body else b"", status=status, content_type="application/json")

    server.expect_request(f"{V}/nodes/").respond_with_handler(handler)
    watch = client.node_watch()
    first = watch.poll()
    assert set(first.items) == {"n1", "n2", "n3"} and first.changed == {"n1", "n2", "n3"} and not first.removed
    second = watch.poll()
    assert second.items == first.items and not second.changed and not second.removed
    third = watch.poll()
    assert third.changed == {"n2"} and third.removed == {"n3"} and third.items["n2"].drained
    with pytest.raises(SlurmUnavailable):
        watch.poll()  # an outage leaves the last view for the next poll
    assert seen == [None, "100", "100", "130", "130", "130"]


@pytest.mark.parametrize("kind", ["nodes", "jobs"])
def test_an_unchanged_answer_without_a_previous_view_is_not_a_listing(
    server: HTTPServer, client: SlurmClient, kind: str
) -> None:
    """A 304 to a first poll (no update_time sent) says nothing about the cluster: it must not
    become an empty, authoritative view (every pod slurm-node-absent, every job gone)."""
    answers = iter(
        [(304, None), (200, {kind: [], "last_update": {"set": True, "infinite": False, "number": 7}, "errors": []})]
    )
    seen: list[str | None] = []

    def handler(request: Request) -> Response:
        seen.append(request.args.get("update_time"))
        status, body = next(answers)
        return Response(orjson.dumps(body) if body else b"", status=status, content_type="application/json")

    server.expect_request(f"{V}/{kind}/").respond_with_handler(handler)
    watch = client.node_watch() if kind == "nodes" else client.job_watch()
    with pytest.raises(SlurmMalformed, match="304"):
        watch.poll()
    assert watch.poll().last_update == 7  # the next poll lists everything (still no update_time)
    assert seen == [None, None]


def test_a_watch_refuses_an_unchanged_listing_before_it_has_a_view() -> None:
    """Whatever the fetch says, "unchanged" with nothing to be unchanged from is no answer."""
    answers = iter([Listing((), None, unchanged=True), Listing(("a",), 5, unchanged=False)])
    watch: ListingWatch[str, str] = ListingWatch(lambda since: next(answers), lambda item: item)
    with pytest.raises(SlurmMalformed, match="no previous view"):
        watch.poll()
    assert set(watch.poll().items) == {"a"}


def test_a_relisted_watch_asks_for_the_whole_listing_once_even_when_its_guard_asks() -> None:
    """A view found wrong is rebuilt from a whole listing: "not modified since" says nothing about it."""
    asked: list[int | None] = []

    def fetch(since: int | None) -> Listing[str]:
        asked.append(since)
        return Listing(("a",), 5, unchanged=False)

    watch: ListingWatch[str, str] = ListingWatch(fetch, lambda item: item)
    watch.poll()
    watch.poll()
    watch.relist()
    watch.poll()
    watch.poll(lambda before, now: watch.relist())  # a guard that finds the answer suspect
    watch.poll()
    assert asked == [None, 5, None, 5, None]


def _error_from(source: str, description: str, number: int) -> dict:
    return {
        "errors": [{"description": description, "error_number": number, "error": "", "source": source}],
        "warnings": [],
        "meta": meta(),
    }


@pytest.mark.parametrize(
    ("status", "body", "gone"),
    [
        (422, _error_from("_get_single_reservation", "Unable to find reservation r1", 9000), True),
        (200, _error_from("slurm_load_reservations()", "Unable to query reservations", 0), True),
        (422, _error_from("_get_single_reservation", "Unable to find reservation other", 9000), False),
        (422, _error_from("_op_handler_reservation", "Query empty or not RFC7320 compliant", 9000), False),
        (
            200,
            _error_from("slurm_load_reservations()", "Unable to query reservations", 1001),
            False,
        ),  # slurmctld unreachable
        (200, _error_from("somewhere else", "Unable to query reservations", 0), False),
    ],
    ids=["missing-among-others", "none-at-all", "another-name", "other-9000", "comm-error", "other-source"],
)
def test_only_slurms_own_answers_say_a_reservation_is_gone(
    server: HTTPServer, client: SlurmClient, status: int, body: dict, gone: bool
) -> None:
    server.expect_request(f"{V}/reservation/r1").respond_with_json(body, status=status)
    with pytest.raises(SlurmError) as info:
        client.get_reservation("r1")
    assert isinstance(info.value, SlurmNotFound) == gone

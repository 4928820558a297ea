"""The cluster lab's DNS stand-in (hack/cluster/lab/dns.py): Service and pod names as CoreDNS answers them.

Served on a free loopback port and asked as a resolver asks (dnspython's client, UDP and TCP).
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator
from typing import Any

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype
import pytest
from lab import dns as labdns

GATEWAY = "10.77.0.1"
Obj = dict[str, Any]


def pod(name: str, ip: str, labels: dict[str, str], ready: bool = True, **spec: str) -> Obj:
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name, "namespace": "slurm", "labels": labels},
        "spec": spec,
        "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": status}]},
    }


def service(name: str, selector: dict[str, str] | None, headless: bool = False, **spec: Any) -> Obj:
    body = {"selector": selector, "clusterIP": "None" if headless else "10.96.0.10", **spec}
    return {"metadata": {"name": name, "namespace": "slurm"}, "spec": body}


PODS = [
    pod("db-0", "10.77.0.20", {"app": "db"}),
    pod("ctld-0", "10.77.0.21", {"app": "ctld"}, hostname="ctld-0", subdomain="ctld"),
    pod("ctld-1", "10.77.0.22", {"app": "ctld"}, ready=False, hostname="ctld-1", subdomain="ctld"),
    pod("worker-0", "10.77.0.23", {"app": "worker"}, ready=False, hostname="worker-0", subdomain="workers"),
]
SERVICES = [
    service("mariadb", {"app": "db"}),
    service("idle", {"app": "nothing"}),
    service("ctld", {"app": "ctld"}, headless=True),
    service("workers", {"app": "worker"}, headless=True, publishNotReadyAddresses=True),
    service("empty", {"app": "nothing"}, headless=True),
    service("external", None),
]
RECORDS = labdns.cluster_records(SERVICES, PODS, GATEWAY)


@pytest.fixture(scope="module")
def server() -> Iterator[labdns.ClusterDns]:
    served = labdns.ClusterDns("127.0.0.1", port=0)
    served.update(RECORDS)
    stop = threading.Event()
    thread = threading.Thread(target=served.serve, args=(stop,), daemon=True)
    thread.start()
    yield served
    stop.set()
    thread.join(timeout=5)


def ask(server: labdns.ClusterDns, name: str, rdtype: str = "A", tcp: bool = False) -> dns.message.Message:
    query = dns.message.make_query(name, rdtype)
    send = dns.query.tcp if tcp else dns.query.udp
    return send(query, "127.0.0.1", port=server.port, timeout=5)


def addresses(reply: dns.message.Message) -> list[str]:
    return sorted(item.to_text() for rrset in reply.answer for item in rrset)


def test_a_clusterip_service_is_its_ready_endpoints_address(server: labdns.ClusterDns) -> None:
    reply = ask(server, "mariadb.slurm.svc.cluster.local")
    assert reply.rcode() == dns.rcode.NOERROR and reply.flags & dns.flags.AA
    assert addresses(reply) == ["10.77.0.20"]


def test_a_clusterip_service_without_a_ready_endpoint_is_the_gateway_that_refuses(server: labdns.ClusterDns) -> None:
    assert addresses(ask(server, "idle.slurm.svc.cluster.local")) == [GATEWAY]


def test_a_headless_service_is_its_ready_endpoints_each_by_its_hostname(server: labdns.ClusterDns) -> None:
    assert addresses(ask(server, "ctld.slurm.svc.cluster.local")) == ["10.77.0.21"]
    assert addresses(ask(server, "ctld-0.ctld.slurm.svc.cluster.local")) == ["10.77.0.21"]
    assert ask(server, "ctld-1.ctld.slurm.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN, "not ready"
    assert ask(server, "empty.slurm.svc.cluster.local").rcode() == dns.rcode.NXDOMAIN


def test_publish_not_ready_addresses_names_endpoints_before_they_are_ready(server: labdns.ClusterDns) -> None:
    assert addresses(ask(server, "worker-0.workers.slurm.svc.cluster.local")) == ["10.77.0.23"]


def test_an_endpoints_address_points_back_at_its_name(server: labdns.ClusterDns) -> None:
    reply = ask(server, "21.0.77.10.in-addr.arpa", "PTR")
    assert addresses(reply) == ["ctld-0.ctld.slurm.svc.cluster.local."]


def test_names_are_matched_without_regard_to_case(server: labdns.ClusterDns) -> None:
    assert addresses(ask(server, "MariaDB.Slurm.svc.cluster.local")) == ["10.77.0.20"]


def test_a_known_name_asked_for_ipv6_has_no_answer_and_is_no_error(server: labdns.ClusterDns) -> None:
    reply = ask(server, "mariadb.slurm.svc.cluster.local", "AAAA")
    assert (reply.rcode(), reply.answer) == (dns.rcode.NOERROR, [])


@pytest.mark.parametrize(
    "name",
    [
        "mariadb.slurm",  # what the search list tries last: the cluster domain is not implied
        "external.slurm.svc.cluster.local",  # no selector: its endpoints are not the lab's to know
        "elastic-0.slurm-workers-slurm.slurm.svc.cluster.local",
        "nosuch",
    ],
)
def test_any_other_name_is_nxdomain_at_once(server: labdns.ClusterDns, name: str) -> None:
    reply = ask(server, name)
    assert reply.rcode() == dns.rcode.NXDOMAIN and reply.answer == []
    assert reply.question[0].name.to_text(omit_final_dot=True) == name, "the question echoed"


def test_tcp_is_answered_as_udp(server: labdns.ClusterDns) -> None:
    assert addresses(ask(server, "ctld.slurm.svc.cluster.local", tcp=True)) == ["10.77.0.21"]


def test_a_name_never_vanishes_while_services_churn(server: labdns.ClusterDns) -> None:
    """The bug this server replaced: a hosts file rewritten in place had, between truncate and write, no names."""
    stop = threading.Event()

    def churn() -> None:
        extra = 0
        while not stop.is_set():
            extra += 1
            services = SERVICES + [service(f"churn-{i}", {"app": "db"}) for i in range(extra % 50)]
            server.update(labdns.cluster_records(services, PODS, GATEWAY))
            stop.wait(0.0005)  # let the server's threads in: a rewrite every half millisecond

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    try:
        answers = [addresses(ask(server, "mariadb.slurm.svc.cluster.local")) for _ in range(300)]
    finally:
        stop.set()
        writer.join(timeout=5)
        server.update(RECORDS)
    assert answers == [["10.77.0.20"]] * 300


@pytest.mark.parametrize(
    "packet",
    [
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x05abc",  # a name cut short
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\0\x01\0\x01",  # a pointer loop
    ],
)
def test_a_malformed_query_gets_formerr(packet: bytes) -> None:
    reply = labdns.answer(packet, RECORDS)
    assert reply is not None
    ident, flags, *counts = struct.unpack_from("!HHHHHH", reply)
    assert (ident, flags & 0x800F, counts) == (7, 0x8001, [0, 0, 0, 0])


def test_a_query_of_two_questions_gets_formerr() -> None:
    query = dns.message.make_query("a.", "A")
    query.question.append(dns.message.make_query("b.", "A").question[0])
    reply = dns.message.from_wire(labdns.answer(query.to_wire(), RECORDS) or b"")
    assert reply.rcode() == dns.rcode.FORMERR


def test_noise_and_responses_are_not_answered() -> None:
    assert labdns.answer(b"\x00\x01", RECORDS) is None
    response = dns.message.make_response(dns.message.make_query("x.", "A")).to_wire()
    assert labdns.answer(response, RECORDS) is None


def test_resolv_conf_is_the_kubelets_for_cluster_first() -> None:
    assert labdns.resolv_conf("slurm", "10.77.0.1").splitlines() == [
        "search slurm.svc.cluster.local svc.cluster.local cluster.local",
        "nameserver 10.77.0.1",
        "options ndots:5",
    ]

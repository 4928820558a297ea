"""The cluster lab's DNS stand-in (hack/cluster/lab/dns.py): any name is answered NXDOMAIN at once.

Served on a free loopback port; the queries are built as glibc's resolver sends them.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest
from lab import dns


def query(name: str, ident: int = 0x1234, qtype: int = 1) -> bytes:
    """A standard recursive query for ``name`` (glibc sets RD), one question of class IN."""
    labels = b"".join(bytes([len(part)]) + part.encode() for part in name.split("."))
    return struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0) + labels + b"\0" + struct.pack("!HH", qtype, 1)


@pytest.fixture
def server() -> Iterator[dns.NxdomainServer]:
    served = dns.NxdomainServer("127.0.0.1", port=0)
    stop = threading.Event()
    thread = threading.Thread(target=served.serve, args=(stop,), daemon=True)
    thread.start()
    yield served
    stop.set()
    thread.join(timeout=5)


def ask(server: dns.NxdomainServer, packet: bytes) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(5)
        sock.sendto(packet, ("127.0.0.1", server.port))
        return sock.recv(4096)


def test_an_unknown_name_is_answered_nxdomain_with_its_question(server: dns.NxdomainServer) -> None:
    sent = query("elastic-0.slurm-workers-slurm.slurm.svc.cluster.local", ident=0xBEEF, qtype=28)
    reply = ask(server, sent)
    ident, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", reply)
    assert ident == 0xBEEF
    assert flags & 0x8000, "a response"
    assert flags & 0x000F == 3, "NXDOMAIN"
    assert flags & 0x0100, "recursion desired echoed"
    assert (qd, an, ns, ar) == (1, 0, 0, 0)
    assert reply[12:] == sent[12:], "the question echoed so the resolver matches it"


def test_a_query_with_an_edns_record_gets_the_question_alone(server: dns.NxdomainServer) -> None:
    opt = b"\0" + struct.pack("!HHIH", 41, 1232, 0, 0)  # the OPT pseudo-record glibc adds with `options edns0`
    sent = query("nosuch") + opt
    sent = sent[:10] + struct.pack("!H", 1) + sent[12:]  # arcount 1
    reply = ask(server, sent)
    assert struct.unpack_from("!HHHHHH", reply)[3:] == (0, 0, 0)
    assert reply[12:] == query("nosuch")[12:]


@pytest.mark.parametrize(
    "packet",
    [
        struct.pack("!HHHHHH", 7, 0x0100, 2, 0, 0, 0) + query("a")[12:] + query("b")[12:],  # two questions
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x05abc",  # a name cut short
        struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\0\x01\0\x01",  # a pointer as first name
    ],
)
def test_a_malformed_query_gets_formerr(server: dns.NxdomainServer, packet: bytes) -> None:
    ident, flags, *counts = struct.unpack_from("!HHHHHH", ask(server, packet))
    assert (ident, flags & 0x800F, counts) == (7, 0x8001, [0, 0, 0, 0])


def test_noise_and_responses_are_not_answered() -> None:
    assert dns.answer(b"\x00\x01") is None
    assert dns.answer(struct.pack("!HHHHHH", 1, 0x8183, 1, 0, 0, 0) + query("x")[12:]) is None


def test_resolv_conf_is_the_kubelets_for_cluster_first() -> None:
    assert dns.resolv_conf("slurm", "10.77.0.1").splitlines() == [
        "search slurm.svc.cluster.local svc.cluster.local cluster.local",
        "nameserver 10.77.0.1",
        "options ndots:5",
    ]

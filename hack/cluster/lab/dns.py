"""The lab's cluster DNS: Service and pod names answered as CoreDNS's kubernetes plugin answers them.

A pod's /etc/hosts holds only what the kubelet writes there (itself); every other name comes from here,
over UDP and TCP on the lab bridge's gateway, which every pod's resolv.conf names (`resolv_conf`):

- a ClusterIP Service `svc.ns.svc.cluster.local`: one address, a ready endpoint's (the lab has no
  virtual IPs) or, with none ready, the gateway's, where connections are refused as kube-proxy rejects
  them;
- a headless Service: every ready endpoint's address (every endpoint's with publishNotReadyAddresses),
  and `host.svc.ns.svc.cluster.local` for each endpoint whose hostname and subdomain name it, with its
  PTR record;
- any other name: NXDOMAIN at once; a known name asked for another type: no answer (NODATA).

The records are replaced whole, by one assignment, whenever the agent sees a change: a lookup never
meets a half-written table. (Rewriting each pod's hosts file in place did: a lookup between the truncate
and the write found no name, and slurmdbd lost its database: "Unknown server host 'mariadb'".) Without
this server a pod's resolver asks the host's nameserver, unreachable from the lab, and each unknown name
costs 20 s of timeouts; Slurm's daemons block on such lookups (a powered-down node, a peer whose pod is
gone) where a cluster's DNS answers in milliseconds.
"""

from __future__ import annotations

import ipaddress
import logging
import socketserver
import struct
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dns.exception
import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import dns.rdatatype
import dns.rrset

Obj = dict[str, Any]
DOMAIN = "cluster.local"
TTL = 5  # CoreDNS's kubernetes plugin's default
FORMERR_FLAGS = 0x8000 | dns.rcode.FORMERR  # a response, FORMERR


@dataclass(frozen=True)
class Records:
    """Addresses by name and names by address, lower-case, without the final dot."""

    addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    pointers: Mapping[str, str] = field(default_factory=dict)


def resolv_conf(namespace: str, nameserver: str) -> str:
    """A pod's /etc/resolv.conf as the kubelet writes it (dnsPolicy ClusterFirst)."""
    search = f"{namespace}.svc.{DOMAIN} svc.{DOMAIN} {DOMAIN}"
    return f"search {search}\nnameserver {nameserver}\noptions ndots:5\n"


def _ready(pod: Obj) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod.get("status", {}).get("conditions", []))


def endpoints(svc: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The Service's endpoint pods, as its EndpointSlice would list them (ready ones unless it publishes all)."""
    selector = svc["spec"].get("selector") or {}
    ns = svc["metadata"]["namespace"]
    members = [
        p for p in pods
        if p["metadata"]["namespace"] == ns and p.get("status", {}).get("podIP")
        and p["metadata"].get("deletionTimestamp") is None
        and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]  # fmt: skip
    if svc["spec"].get("publishNotReadyAddresses"):
        return members
    return [p for p in members if _ready(p)]


def cluster_records(services: Iterable[Obj], pods: Iterable[Obj], gateway: str) -> Records:
    """Every Service's and headless endpoint's records (Services without a selector have none here)."""
    pods = list(pods)
    addresses: dict[str, tuple[str, ...]] = {}
    pointers: dict[str, str] = {}
    for svc in services:
        if not svc["spec"].get("selector"):
            continue
        name = f"{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc.{DOMAIN}".lower()
        members = endpoints(svc, pods)
        if svc["spec"].get("clusterIP") != "None":
            addresses[name] = (members[0]["status"]["podIP"] if members else gateway,)
            continue
        if not members:
            continue
        addresses[name] = tuple(p["status"]["podIP"] for p in members)
        for member in members:
            host = member["spec"].get("hostname")
            if host and member["spec"].get("subdomain") == svc["metadata"]["name"]:
                fqdn = f"{host}.{name}".lower()
                addresses[fqdn] = (member["status"]["podIP"],)
                pointers[ipaddress.ip_address(member["status"]["podIP"]).reverse_pointer] = fqdn
    return Records(addresses, pointers)


def _formerr(query: bytes) -> bytes | None:
    """FORMERR for a query that could not be read, when it has an id to answer; None for noise."""
    if len(query) < 12:
        return None
    ident, flags = struct.unpack_from("!HH", query)
    if flags & dns.flags.QR:
        return None
    return struct.pack("!HHHHHH", ident, FORMERR_FLAGS | (flags & dns.flags.RD), 0, 0, 0, 0)


def answer(query: bytes, records: Records) -> bytes | None:
    """The reply to one query in wire format; None for what is not a query (a response, noise)."""
    try:
        msg = dns.message.from_wire(query)
    except (dns.exception.DNSException, ValueError):
        return _formerr(query)
    if msg.flags & dns.flags.QR:
        return None
    reply = dns.message.make_response(msg)
    reply.flags |= dns.flags.RA
    if msg.opcode() != dns.opcode.QUERY or len(msg.question) != 1:
        reply.set_rcode(dns.rcode.FORMERR if len(msg.question) != 1 else dns.rcode.NOTIMP)
        return reply.to_wire()
    question = msg.question[0]
    name = question.name.to_text(omit_final_dot=True).lower()
    if name in records.addresses:
        reply.flags |= dns.flags.AA
        if question.rdtype in (dns.rdatatype.A, dns.rdatatype.ANY):
            reply.answer.append(dns.rrset.from_text_list(question.name, TTL, "IN", "A", records.addresses[name]))
    elif name in records.pointers:
        reply.flags |= dns.flags.AA
        if question.rdtype in (dns.rdatatype.PTR, dns.rdatatype.ANY):
            reply.answer.append(dns.rrset.from_text(question.name, TTL, "IN", "PTR", records.pointers[name] + "."))
    else:
        reply.set_rcode(dns.rcode.NXDOMAIN)
    return reply.to_wire()


class _UdpServer(socketserver.ThreadingUDPServer):
    allow_reuse_address = True  # a lab started again at once binds the same port
    daemon_threads = True


class _TcpServer(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


class ClusterDns:
    """The server: UDP and TCP on ``address``:``port`` (53; 0 picks a free one, for tests)."""

    def __init__(self, address: str, port: int = 53, log: logging.Logger | None = None) -> None:
        self.records = Records()
        self.log = log or logging.getLogger("lab.dns")
        served = self

        class Udp(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                data, sock = self.request
                reply = answer(data, served.records)
                if reply is not None:
                    sock.sendto(reply, self.client_address)

        class Tcp(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                while (head := self.rfile.read(2)) and len(head) == 2:
                    reply = answer(self.rfile.read(struct.unpack("!H", head)[0]), served.records)
                    if reply is None:
                        return
                    self.wfile.write(struct.pack("!H", len(reply)) + reply)

        self.udp = _UdpServer((address, port), Udp)
        self.tcp = _TcpServer((address, self.port), Tcp)

    @property
    def port(self) -> int:
        return int(self.udp.server_address[1])

    def update(self, records: Records) -> None:
        """Replace every record at once (one reference assignment: readers see the old table or the new)."""
        self.records = records

    def serve(self, stop: threading.Event) -> None:
        """Answer until ``stop`` is set, then close both sockets."""
        threads = [threading.Thread(target=s.serve_forever, args=(0.5,), daemon=True) for s in (self.udp, self.tcp)]
        for thread in threads:
            thread.start()
        stop.wait()
        for server in (self.udp, self.tcp):
            server.shutdown()
            server.server_close()

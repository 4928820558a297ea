"""The lab's cluster DNS: every name a pod may look up is in its hosts file (agent.hosts_file), so this
server answers every query NXDOMAIN at once, as CoreDNS answers a name that does not exist.

Without it a pod's resolver asks the host's nameserver, unreachable from the lab, and each unknown name
costs 20 s of timeouts (`getent hosts nosuch` in a lab pod); Slurm blocks on such lookups (a powered-down
node's name, a peer whose pod is gone) where on a real cluster the answer comes in milliseconds.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading

HEADER = struct.Struct("!HHHHHH")  # id, flags, qdcount, ancount, nscount, arcount
FLAG_RESPONSE = 0x8000
FLAG_RECURSION_DESIRED = 0x0100
FLAG_RECURSION_AVAILABLE = 0x0080
OPCODE_MASK = 0x7800
RCODE_FORMERR, RCODE_NXDOMAIN = 1, 3


def resolv_conf(namespace: str, nameserver: str) -> str:
    """A pod's /etc/resolv.conf as the kubelet writes it (dnsPolicy ClusterFirst)."""
    search = f"{namespace}.svc.cluster.local svc.cluster.local cluster.local"
    return f"search {search}\nnameserver {nameserver}\noptions ndots:5\n"


def question_end(query: bytes) -> int | None:
    """The offset just past the first question (name labels, type, class), None when malformed."""
    at = HEADER.size
    while at < len(query):
        length = query[at]
        if length == 0:
            end = at + 1 + 4
            return end if end <= len(query) else None
        if length & 0xC0:  # a pointer cannot appear in a query's first name
            return None
        at += 1 + length
    return None


def answer(query: bytes) -> bytes | None:
    """NXDOMAIN for a one-question query, FORMERR for anything else readable, None for noise."""
    if len(query) < HEADER.size:
        return None
    ident, flags, qdcount, _, _, _ = HEADER.unpack_from(query)
    if flags & FLAG_RESPONSE:
        return None
    base = FLAG_RESPONSE | (flags & (OPCODE_MASK | FLAG_RECURSION_DESIRED)) | FLAG_RECURSION_AVAILABLE
    end = question_end(query) if qdcount == 1 else None
    if end is None:
        return HEADER.pack(ident, base | RCODE_FORMERR, 0, 0, 0, 0)
    return HEADER.pack(ident, base | RCODE_NXDOMAIN, 1, 0, 0, 0) + query[HEADER.size : end]


class NxdomainServer:
    """UDP on ``address``:53 (the lab bridge's gateway, which every pod routes through)."""

    def __init__(self, address: str, port: int = 53, log: logging.Logger | None = None) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, port))
        self.sock.settimeout(0.5)
        self.log = log or logging.getLogger("lab.dns")

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def serve(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                query, peer = self.sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError as err:
                self.log.warning("dns: receive failed: %s", err)
                continue
            reply = answer(query)
            if reply is not None:
                self.sock.sendto(reply, peer)
        self.sock.close()

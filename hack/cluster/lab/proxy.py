"""The lab's stand-in for kube-proxy's rule for the `kubernetes` Service: pods reach the API server.

A pod's in-cluster client dials `KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT` (the kubelet sets both
in every container). In the lab that is the bridge's gateway, port 443, relayed byte for byte to the API
server on the host's loopback: TLS ends at the API server, whose certificate names the gateway
(hack/cluster/lib.sh passes `--alternate-ips`), so the client verifies it as in a cluster.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import socketserver
import threading

SERVICE_PORT = 443


class _Relay(socketserver.BaseRequestHandler):
    upstream: tuple[str, int]

    def handle(self) -> None:
        try:
            far = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            return  # the client sees the connection closed, as with no endpoint
        far.settimeout(None)
        self.request.settimeout(None)
        back = threading.Thread(target=_pump, args=(far, self.request), daemon=True)
        back.start()
        _pump(self.request, far)
        back.join()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    """Copy until the source ends, then end the sink's writing side (half-close, as TCP relays do)."""
    with contextlib.suppress(OSError):
        while data := source.recv(65536):
            sink.sendall(data)
    with contextlib.suppress(OSError):
        sink.shutdown(socket.SHUT_WR)


class ApiProxy:
    """Listens on ADDRESS:PORT (443, the Service's port) and relays each connection to the API server at UPSTREAM."""

    def __init__(self, address: str, upstream: tuple[str, int], log: logging.Logger | None = None,
                 port: int = SERVICE_PORT) -> None:  # fmt: skip
        handler = type("Relay", (_Relay,), {"upstream": upstream})
        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer((address, port), handler)
        self.server.daemon_threads = True
        self.address = self.server.server_address[:2]
        self.log = log or logging.getLogger("lab.proxy")
        self.log.info("kubernetes Service: %s:%d -> %s:%d", *self.address, *upstream)

    def serve(self, stop: threading.Event) -> None:
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.5}, daemon=True)
        thread.start()
        stop.wait()
        self.server.shutdown()
        self.server.server_close()

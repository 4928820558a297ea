"""Fallback load generator when `wrk` is not installed: one connection at a time, sequential.

    python bench/loadgen.py URL SECONDS [BODY_FILE]   # GET without a body file, POST with one

Runs in its own process (so it does not share the interpreter with the server or the runner)
and prints JSON: {"p50": ns, "p99": ns, "requests": n, "errors": n}. Like wrk, the latency of a
request is measured from sending it to having read the whole response; gunicorn's sync worker
closes every connection, so each request connects first (not counted, as in wrk).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit


def main(argv: list[str]) -> int:
    url, seconds = urlsplit(argv[1]), float(argv[2])
    body = Path(argv[3]).read_bytes() if len(argv) > 3 else None
    path = url.path or "/"
    if body is None:
        request = f"GET {path} HTTP/1.1\r\nHost: {url.netloc}\r\n\r\n".encode()
    else:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        request = head.encode() + body
    latencies: list[int] = []
    errors = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with socket.create_connection((url.hostname, url.port or 80)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            start = time.perf_counter_ns()
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):  # the server closes the connection after answering
                chunks.append(chunk)
            latencies.append(time.perf_counter_ns() - start)
        if not b"".join(chunks[:1]).startswith(b"HTTP/1.1 2"):
            errors += 1
    latencies.sort()

    def pct(q: float) -> float:
        return float(latencies[min(len(latencies) - 1, int(q / 100 * len(latencies)))]) if latencies else float("nan")

    print(json.dumps({"p50": pct(50), "p99": pct(99), "requests": len(latencies), "errors": errors}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))

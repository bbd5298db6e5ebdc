"""`python -m bench.worker_cpu [--requests N] [--rounds K]`: CPU a request of the worker's two paths.

The floor app (bench.floor_app) behind a pywsgi server with semula's handler, once with its lean
path (decision 0049) and once with it off (pywsgi's own path), in this process on gevent's sockets,
one client connection sending the 1.6 KB pair's request and reading each answer. Prints this
process's CPU a request (the client's included, the same for both), the least of K interleaved
rounds. No HTTP benchmark tool, no other process: the two paths' difference, not a server's rate.
"""

from __future__ import annotations

import argparse
import json
import time

from gevent import socket
from gevent.pywsgi import WSGIServer

from bench import floor_app, pair
from semula.worker import Handler


class _Log:
    """The part of gunicorn's logger the handler reads (also tests/unit/test_worker_lean.py's)."""

    class cfg:  # noqa: N801 - gunicorn's attribute
        keepalive = 2
        timeout = 30

    access_log_enabled = False

    def write(self, line: str) -> None:
        pass


class Lean(Handler):
    lean_enabled = True


class Pywsgi(Handler):
    lean_enabled = False


def cpu_per_request(handler: type, requests: int) -> float:
    body = json.dumps(pair.request_body()).encode()
    request = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%b" % (len(body), body)
    )
    server = WSGIServer(("127.0.0.1", 0), floor_app.app, handler_class=handler, log=None, error_log=None)
    server.log = _Log()
    server.start()
    conn = socket.create_connection(("127.0.0.1", server.server_port))
    try:
        started = time.process_time()
        for _ in range(requests):
            conn.sendall(request)
            received = b""
            while not received.endswith(b"}"):
                received += conn.recv(65536)
        return (time.process_time() - started) / requests * 1e6
    finally:
        conn.close()
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.worker_cpu", description=__doc__)
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    seen: dict[str, list[float]] = {"pywsgi's path": [], "lean path": []}
    for _ in range(args.rounds):
        seen["pywsgi's path"].append(cpu_per_request(Pywsgi, args.requests))
        seen["lean path"].append(cpu_per_request(Lean, args.requests))
    for name, values in seen.items():
        shown = ", ".join(f"{v:.0f}" for v in values)
        print(f"{name}: {min(values):.1f} µs CPU a request (least of {args.rounds}: {shown})")


if __name__ == "__main__":
    main()

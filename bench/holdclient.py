"""The held-calls client: N distinct chat completions sent at once over raw asyncio sockets.

A process of its own, so the bench process can answer through the service layer (blocking database
calls) without stalling the clients. It writes, per call, the HTTP status, the wall-clock time the
whole response arrived, and whether it carried the expected answer.

    python -m bench.holdclient URL PATH N TOKEN OUT.json [--deadline S] [--first K] [--source IP]
        [--budget FILE]

`--first` numbers the calls from K (several clients share one run's numbers). `--source` binds them
to a loopback address of their own: one source address has ~28,000 ephemeral ports towards one
server port (net.ipv4.ip_local_port_range), so 50,000 calls need two at least. `--budget` paces the
client: it starts a call only while it has started fewer than the number FILE holds (the bench
writes it from the host's held calls, so the calls sent and not yet taken stay a window: a burst of
50,000 connections overflows the listen backlog, and a SYN retried past the kernel's retries fails).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from bench import pair
from bench.common import raise_nofile

CONNECTS_AT_ONCE = 100  # a burst of 5,000 SYNs overflows the listen backlog and costs 1 s retries


def request_body(number: int) -> dict[str, Any]:
    """The recorded request with its last message made unique, so every call parks its own row."""
    body = pair.request_body()
    body["messages"][-1]["content"] += f" (ticket {number})"
    return body


def answer_text(number: int) -> str:
    return f"held answer {number}"


class Budget:
    """How many calls this client may have started (the number in a file the bench rewrites)."""

    def __init__(self, path: str | None):
        self.path = path
        self.started = 0

    async def take(self) -> None:
        while self.path is not None:
            try:
                with open(self.path) as f:
                    allowed = int(f.read().strip() or 0)
            except (OSError, ValueError):
                allowed = 0
            if self.started < allowed:
                break
            await asyncio.sleep(0.05)
        self.started += 1


async def call(
    host: str,
    port: int,
    head: bytes,
    body: bytes,
    number: int,
    gate: asyncio.Semaphore,
    source: str | None,
    budget: Budget,
) -> list:
    async with gate:
        await budget.take()
        local = (source, 0) if source else None
        reader, writer = await asyncio.open_connection(host, port, local_addr=local)
        writer.write(head + body)
        await writer.drain()
    try:
        data = await reader.read()  # Connection: close, so the response ends at EOF
        arrived = time.time()
    finally:
        writer.close()
    header, _, payload = data.partition(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1]) if header else 0
    ok = False
    if status == 200:
        # gevent may send the body chunked; the answer text is plain ASCII inside it either way.
        ok = json.dumps(answer_text(number)).encode() in payload
    return [status, arrived, ok]


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    url = urlsplit(args.url)
    host, port = url.hostname or "127.0.0.1", url.port or 80
    gate = asyncio.Semaphore(CONNECTS_AT_ONCE)
    budget = Budget(args.budget)
    tasks = []
    for number in range(args.first, args.first + args.n):
        body = json.dumps(request_body(number)).encode()
        head = (
            f"POST {args.path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {args.token}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        ).encode()
        tasks.append(asyncio.create_task(call(host, port, head, body, number, gate, args.source, budget)))
    done, pending = await asyncio.wait(tasks, timeout=args.deadline)
    for task in pending:
        task.cancel()
    results: dict[str, Any] = {}
    for number, task in enumerate(tasks, args.first):
        if task in done and task.exception() is None:
            results[str(number)] = task.result()
        elif task in done:
            results[str(number)] = [0, 0.0, False, type(task.exception()).__name__]
    return {"results": results, "unfinished": len(pending)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("path")
    parser.add_argument("n", type=int)
    parser.add_argument("token")
    parser.add_argument("out")
    parser.add_argument("--deadline", type=float, default=600)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--source", default=None)
    parser.add_argument("--budget", default=None)
    args = parser.parse_args()
    raise_nofile(args.n + 256)
    out = asyncio.run(main_async(args))
    with open(args.out, "w") as f:
        json.dump(out, f)
    sys.exit(0)


if __name__ == "__main__":
    main()

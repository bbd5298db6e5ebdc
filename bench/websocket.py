"""Responses API turns over a WebSocket (issue #47): the recorded pair's Responses request sent as
`response.create` turns on long-lived sockets, each turn timed from its send to its
`response.completed`.

wrk cannot speak WebSocket, so the turns are driven by the `websockets` library's asyncio client in
this process, CONNECTIONS sockets at once (wrk's connections for the HTTP rows), each sending its next
turn when the last one completed. The server's CPU per turn is measured as wrk's rows measure it per
request; the client's own CPU is reported beside it and left out of the `others` share, so the
runs' quiet-machine rules are wrk's.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any

from bench import pair
from bench.common import BenchError, machine_busy_seconds, median, percentile, wait_quiet
from bench.replay import ATTEMPTS, CONNECTIONS, OTHERS_LIMIT, PATIENCE, Target, settle

LABEL = "Responses, WebSocket turn"


def socket_url(target: Target) -> str:
    return target.url.replace("http://", "ws://", 1)


def turn_message() -> str:
    return json.dumps({"type": "response.create", **pair.responses_body()})


async def _one_turn(ws: Any, message: str) -> str:
    """Send one turn and read its events; the text its deltas carry."""
    await ws.send(message)
    text = []
    while True:
        event = json.loads(await ws.recv())
        kind = event["type"]
        if kind == "response.output_text.delta":
            text.append(event["delta"])
        elif kind == "response.completed":
            return "".join(text)
        elif kind == "error":
            raise BenchError(f"a turn failed: {event['error']}")


async def _drive(target: Target, seconds: float, sockets: int) -> tuple[list[float], int]:
    """Turns on `sockets` sockets for `seconds`: each turn's latency (s), and the turns that failed."""
    from websockets.asyncio.client import connect

    message = turn_message()
    latencies: list[float] = []
    failed = 0

    async def loop(ws: Any, until: float) -> None:
        nonlocal failed
        while time.monotonic() < until:
            started = time.perf_counter()
            try:
                text = await _one_turn(ws, message)
            except BenchError:
                failed += 1
                continue
            latencies.append(time.perf_counter() - started)
            if text != pair.ANSWER_TEXT:
                failed += 1

    opened = [
        await connect(socket_url(target), additional_headers=target.headers, max_size=None)
        for _ in range(sockets)
    ]
    try:
        until = time.monotonic() + seconds
        await asyncio.gather(*(loop(ws, until) for ws in opened))
    finally:
        for ws in opened:
            await ws.close()
    return latencies, failed


def check(target: Target) -> None:
    """One turn by hand: the recorded answer, or the benchmark would measure errors."""

    async def once() -> str:
        from websockets.asyncio.client import connect

        async with connect(socket_url(target), additional_headers=target.headers) as ws:
            return await _one_turn(ws, turn_message())

    if asyncio.run(once()) != pair.ANSWER_TEXT:
        raise BenchError(f"{target.name} answered something else than the recorded answer")


def run_turns(target: Target, duration: int) -> dict[str, float]:
    """One run of turns, with the figures run_wrk gives a wrk run (turns stand for requests)."""
    attempts = ATTEMPTS if PATIENCE > 0 else 1
    result: dict[str, float] = {}
    for attempt in range(1, attempts + 1):
        settle(target)
        if PATIENCE > 0:
            wait_quiet(patience=PATIENCE)
        machine0, client0 = machine_busy_seconds(), time.process_time()
        server0 = target.cpu_by_pid()
        latencies, failed = asyncio.run(_drive(target, duration, target.connections))
        server = sum(cpu - server0.get(pid, 0.0) for pid, cpu in target.cpu_by_pid().items())
        client = time.process_time() - client0
        machine = machine_busy_seconds() - machine0
        turns = len(latencies)
        result = {
            "rps": turns / duration,
            "p50_ms": 1000 * percentile(latencies, 50) if latencies else float("nan"),
            "p99_ms": 1000 * percentile(latencies, 99) if latencies else float("nan"),
            "cpu_us": 1e6 * server / turns if turns else float("nan"),
            "client_cpu_us": 1e6 * client / turns if turns else float("nan"),
            "non2xx": failed,
            "socket_errors": 0,
            "others": max(0.0, machine - server - client) / (duration * (os.cpu_count() or 1)),
        }
        if result["others"] <= OTHERS_LIMIT or attempt == attempts:
            break
    return result


def summary(target: Target) -> str:
    """The client's CPU per turn, beside the row (the server's is in the row)."""
    client = median([r.get("client_cpu_us", float("nan")) for r in target.rounds])
    return f"{target.name}: {CONNECTIONS} sockets; the client took {client:.0f} µs of CPU a turn."

"""Slow clients against a running server: how /healthz fares while N connections trickle their heads.

Each of N connections sends part of a request head and then one byte every EVERY seconds, as a
slowloris client does (the server's head deadline, SEMULA_HEADER_TIMEOUT, cuts each off after 60 s
by default). Once they are open, a probe opens a new connection every tenth of a second for SECONDS
and times a whole /healthz exchange. Prints how many trickling connections the server held open
through the probing, and the probes' p50, p99 and worst, and their failures.

    python -m bench.trickle URL --connections N [--every 5] [--seconds 20]

The client process needs N file descriptors (ulimit -n).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from urllib.parse import urlsplit

CONNECTS_AT_ONCE = 100  # a burst of thousands of SYNs overflows the listen backlog (1 s retries)
HEAD = b"GET /healthz HTTP/1.1\r\nHost: trickle\r\nX-Trickle: "


async def trickle(host: str, port: int, every: float, open_: list[int], stop: asyncio.Event) -> None:
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return
    open_[0] += 1
    try:
        writer.write(HEAD)
        while not stop.is_set():
            await writer.drain()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            if reader.at_eof():
                break
            writer.write(b"a")
    except OSError:
        pass
    finally:
        open_[0] -= 1
        writer.close()


async def probe(host: str, port: int) -> float | None:
    started = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 10)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
        answer = await asyncio.wait_for(reader.read(), 10)
        writer.close()
    except (OSError, TimeoutError):
        return None
    return time.perf_counter() - started if answer.startswith(b"HTTP/1.1 200 ") else None


async def run(url: str, connections: int, every: float, seconds: float) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    stop, open_ = asyncio.Event(), [0]
    tasks = []
    for start in range(0, connections, CONNECTS_AT_ONCE):
        tasks += [
            asyncio.create_task(trickle(host, port, every, open_, stop))
            for _ in range(min(CONNECTS_AT_ONCE, connections - start))
        ]
        await asyncio.sleep(0.05)
    await asyncio.sleep(1)
    opened = open_[0]
    times: list[float] = []
    failures = 0
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        taken = await probe(host, port)
        if taken is None:
            failures += 1
        else:
            times.append(taken)
        await asyncio.sleep(0.1)
    held = open_[0]
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    times.sort()
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))] if times else float("nan")
    print(
        f"trickling: {connections} asked, {opened} open before probing, {held} still open after; "
        f"/healthz: {len(times)} ok, {failures} failed, p50 {statistics.median(times) * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, worst {times[-1] * 1000:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.trickle", description=__doc__)
    parser.add_argument("url")
    parser.add_argument("--connections", type=int, required=True)
    parser.add_argument("--every", type=float, default=5.0, help="seconds between two trickled bytes")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to probe /healthz")
    args = parser.parse_args()
    asyncio.run(run(args.url, args.connections, args.every, args.seconds))


if __name__ == "__main__":
    main()

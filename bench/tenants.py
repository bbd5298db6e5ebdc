"""One tenant's heavy requests against another's small ones: how the small ones' p99 fares.

A default server (`semula serve`, 2 workers, SQLite) with two projects. Tenant `light` sends a small
Chat Completions request that replays a recording, on a new connection each time, a few a second;
tenant `heavy` sends, from HEAVY clients at once and back to back, Responses requests of ITEMS input
items (under the caps of decision 0063, so admitted: each is parsed, checked, fingerprinted and looked
up, and fails as a replay miss). The light tenant's latencies are taken in rounds, alone and with the
heavy load, alternated so that the machine's own noise falls on both; prints p50 and p99 of each and
the ratio of the p99s (issue #49's target: within 2x).

    python -m bench.tenants [--items 50000] [--heavy 1] [--seconds 10] [--rounds 3] [--src PATH]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

from bench.common import HOST, machine, percentile, semula_server
from semula.config import Settings
from semula.core import fingerprint as fp
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, pending, projects

LIGHT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "What is the capital of France?"}]}
LIGHT_EVERY = 0.05  # seconds between two light requests


def prepare(db_url: str) -> None:
    """The two projects, each with the recording its requests look up."""
    store = connect(db_url)
    migrate(store)
    ctx = Context(store, replace(Settings(), database_url=db_url), CLI)
    for name, fingerprint in (("light", None), ("heavy", "v1:heavy")):
        projects.create(ctx, {"name": name, "mode": "record"})
        row = projects.get_row(ctx, name)
        if fingerprint is None:
            fingerprint = fp.fingerprint(LIGHT)
        pending_id = pending.park(ctx, row, fingerprint, LIGHT, False)
        pending.answer(ctx, pending_id, {"content": "Paris."})
        projects.update(ctx, name, {"mode": "replay"})
    store.close()


def post(port: int, path: str, body: bytes) -> tuple[int, float]:
    """One request on a new connection: its status and how long the whole exchange took."""
    started = time.perf_counter()
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status, time.perf_counter() - started
    finally:
        conn.close()


def light_round(port: int, seconds: float) -> list[float]:
    body = json.dumps(LIGHT).encode()
    times = []
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        status, taken = post(port, "/p/light/v1/chat/completions", body)
        if status != 200:
            raise SystemExit(f"the light request got {status}")
        times.append(taken)
        time.sleep(LIGHT_EVERY)
    return times


def heavy_load(port: int, body: bytes, stop: threading.Event, done: list[float]) -> None:
    while not stop.is_set():
        status, taken = post(port, "/p/heavy/v1/responses", body)
        if status != 424:  # a replay miss: parsed, checked, fingerprinted, looked up
            raise SystemExit(f"the heavy request got {status}")
        done.append(taken)


def measure(
    port: int, heavy_body: bytes, clients: int, rounds: int, seconds: float
) -> tuple[list[float], ...]:
    """The light tenant's latencies alone and with `clients` heavy clients, in alternated rounds, and the
    heavy requests' own."""
    alone: list[float] = []
    loaded: list[float] = []
    heavy_done: list[float] = []
    for _ in range(rounds):
        alone += light_round(port, seconds)
        stop = threading.Event()
        threads = [
            threading.Thread(target=heavy_load, args=(port, heavy_body, stop, heavy_done), daemon=True)
            for _ in range(clients)
        ]
        for thread in threads:
            thread.start()
        time.sleep(1)  # the heavy load under way
        loaded += light_round(port, seconds)
        stop.set()
        for thread in threads:
            thread.join(120)
    return alone, loaded, heavy_done


def warm_up(port: int, heavy_body: bytes, workers: int) -> None:
    """Imports, the kept hit, and a heavy request in each worker (a worker starts its helper process at
    its first large body): a few at once, so that every worker gets one."""
    light_round(port, 2)
    stop = threading.Event()
    threads = [
        threading.Thread(target=heavy_load, args=(port, heavy_body, stop, []), daemon=True)
        for _ in range(2 * workers)
    ]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join(120)


def report(label: str, heavy: int, heavy_body: bytes, results: tuple[list[float], ...]) -> None:
    alone, loaded, heavy_done = results
    ms = 1000
    print(
        f"{label}heavy: {heavy} client(s), {len(heavy_body) / 1e6:.1f} MB a request, "
        f"{len(heavy_done)} done, median {percentile(heavy_done, 50) * ms:.0f} ms each"
    )
    print(
        f"{label}light alone:      {len(alone)} requests, p50 {percentile(alone, 50) * ms:.1f} ms, "
        f"p99 {percentile(alone, 99) * ms:.1f} ms"
    )
    print(
        f"{label}light with heavy: {len(loaded)} requests, p50 {percentile(loaded, 50) * ms:.1f} ms, "
        f"p99 {percentile(loaded, 99) * ms:.1f} ms"
    )
    print(f"{label}p99 ratio (with heavy / alone): {percentile(loaded, 99) / percentile(alone, 99):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.tenants", description=__doc__)
    parser.add_argument("--items", type=int, default=50_000, help="input items in each heavy request")
    parser.add_argument("--heavy", type=int, default=1, help="heavy clients at once")
    parser.add_argument("--seconds", type=float, default=10, help="seconds of each round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each kind, alternated")
    parser.add_argument(
        "--src", type=Path, help="another checkout's semula, measured in the same run, its rounds alternated"
    )
    args = parser.parse_args(argv)
    heavy_body = json.dumps(
        {"model": "gpt-4o", "input": [{"role": "user", "content": f"item {i}"} for i in range(args.items)]}
    ).encode()
    sources = {"": None} if args.src is None else {"this: ": None, f"{args.src}: ": args.src}
    results: dict[str, tuple[list[float], ...]] = {label: ([], [], []) for label in sources}
    with tempfile.TemporaryDirectory() as tmp:
        servers = {}
        try:
            for n, (label, src) in enumerate(sources.items()):
                db_url = f"sqlite:///{Path(tmp) / f'tenants{n}.db'}"
                if src is None:
                    prepare(db_url)
                else:  # migrated by that checkout's semula
                    code = "import sys; from bench.tenants import prepare; prepare(sys.argv[1])"
                    env = {**os.environ, "PYTHONPATH": str(src)}
                    subprocess.run([sys.executable, "-c", code, db_url], cwd=src, env=env, check=True)
                servers[label] = semula_server(f"tenants{n}", db_url, auth=False, src=src)
            ports = {label: int(url.rsplit(":", 1)[1]) for label, (_, url) in servers.items()}
            for port in ports.values():
                warm_up(port, heavy_body, 2)
            for _ in range(args.rounds):
                for label, port in ports.items():
                    got = measure(port, heavy_body, args.heavy, 1, args.seconds)
                    for kept, more in zip(results[label], got, strict=True):
                        kept += more
        finally:
            for server, _ in servers.values():
                server.stop()
    print(f"machine: {machine()}")
    for label, got in results.items():
        report(label, args.heavy, heavy_body, got)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

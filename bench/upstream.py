"""Latency that record-through adds over calling the provider directly (issue 6's benchmark).

    .venv/bin/python -m bench.upstream [--calls 500] [--db sqlite|postgres]

A fake provider on 127.0.0.1 answers at once. The same number of distinct prompts go (a) to
it directly and (b) through `semula serve` (one gevent worker) with record_through on, each
a miss that is forwarded, recorded as an entry and returned; the report is the difference of
the two latency distributions, sequential calls over keep-alive connections. Target: p50 <= 2 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import tempfile
import time
import urllib.parse
from pathlib import Path

import psycopg

from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, projects, tokens
from tests.fake_upstream import FakeUpstream
from tests.helpers import Server

KEY = "sk-bench-0123456789abcdefghijklmnop"
PG = "postgresql://postgres@127.0.0.1:5432/test"


def timed(url: str, headers: dict[str, str], count: int, tag: str) -> list[float]:
    """Sequential calls over one keep-alive connection, timed in ms. http.client rather than requests:
    requests spends ~1.7 ms of its own per call here, whose jitter would swamp the difference."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    out = []
    try:
        for i in range(count):
            body = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": f"{tag} {i}"}]})
            started = time.perf_counter()
            conn.request("POST", parts.path, body=body.encode(), headers=headers)
            response = conn.getresponse()
            data = response.read()
            out.append((time.perf_counter() - started) * 1000)
            if response.status != 200:
                raise RuntimeError(f"{url}: {response.status} {data[:200]!r}")
    finally:
        conn.close()
    return out


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    fake = FakeUpstream()
    with tempfile.TemporaryDirectory() as tmp:
        if args.db == "sqlite":
            url = f"sqlite:///{tmp}/bench.db"
        else:
            name = f"semula_bench_upstream_{int(time.time())}"
            with psycopg.connect(PG, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = PG.rsplit("/", 1)[0] + "/" + name
        store = connect(url, pool_size=1)
        migrate(store)
        settings = Settings.from_env({"SEMULA_DATABASE_URL": url, "SEMULA_UPSTREAM_KEY": KEY})
        ctx = Context(store, settings, CLI)
        projects.create(ctx, {"name": "bench", "record_through": True, "upstream_max_calls": 10 * args.calls})
        token = tokens.create(ctx, {"role": "admin"})["token"]
        store.close()
        server = Server(
            url,
            Path(tmp) / "server.log",
            workers=1,
            SEMULA_UPSTREAM_KEY=KEY,
            SEMULA_UPSTREAM_URL=fake.url,
            SEMULA_LOG_LEVEL="warning",
        ).start()
        try:
            json_headers = {"Content-Type": "application/json"}
            semula_headers = {**json_headers, "Authorization": f"Bearer {token}"}
            semula_url = server.url + "/p/bench/v1/chat/completions"
            timed(fake.url + "/chat/completions", json_headers, 50, "warm-direct")
            timed(semula_url, semula_headers, 50, "warm")
            direct = timed(fake.url + "/chat/completions", json_headers, args.calls, "direct")
            through = timed(semula_url, semula_headers, args.calls, "through")
            # The same prompts again are replay hits: what the HTTP hop into semula costs alone.
            replayed = timed(semula_url, semula_headers, args.calls, "through")
            server.stop()  # flushes the call log
            store = connect(url, pool_size=1)
            logged = sorted(
                r["duration_ms"]
                for r in store.all(
                    "calls_in_project",
                    project_id=projects.get_row(Context(store, settings, CLI), "bench")["id"],
                )
                if r["outcome"] == "forwarded"
            )[-args.calls :]
            store.close()
        finally:
            server.stop()
            fake.close()
            if args.db == "postgres":
                with psycopg.connect(PG, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)')
    d50, d99 = statistics.median(direct), pct(direct, 99)
    t50, t99 = statistics.median(through), pct(through, 99)
    print(f"record-through on {args.db}, {args.calls} sequential distinct misses:")
    print(f"  fake provider directly: p50 {d50:.2f} ms, p99 {d99:.2f} ms")
    print(f"  through semula:         p50 {t50:.2f} ms, p99 {t99:.2f} ms")
    print(f"  added by semula:        p50 {t50 - d50:.2f} ms, p99 {t99 - d99:.2f} ms (target p50 <= 2 ms)")
    print(
        f"  a replay hit of the same prompts: p50 {statistics.median(replayed):.2f} ms, "
        f"p99 {pct(replayed, 99):.2f} ms"
    )
    print(
        f"  semula's own time (call log, provider call in it): p50 {statistics.median(logged):.2f} ms, "
        f"p99 {pct(logged, 99):.2f} ms"
    )


if __name__ == "__main__":
    main()

"""`python -m bench.answerer`: what the answerer daemon adds to each call beyond its child's own runtime.

Parks calls in a project with the answerer on, runs the daemon in-process with a trivial child
(`echo`), and reports, per call, the time from the claim to the committed answer minus the child's
lifetime (its supervisor's start to exit, the call's processes killed; decision 0042): the overhead
(target <= 20 ms at p50). The supervisor's own start is in the child's column. Then calls per second
at concurrency 4. Polling latency is not overhead (a poll runs as soon as a slot frees) and is left out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import replace

from answerer import config as answerer_config
from answerer.daemon import Daemon, Timing
from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, pending, projects

PG_URL = os.environ.get("SEMULA_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


def park(ctx: Context, project: dict, count: int) -> list[str]:
    row = projects.get_row(ctx, project["name"])
    ids = []
    for i in range(count):
        request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"bench {i}"}]}
        ids.append(pending.park(ctx, row, f"v1:bench-{project['name']}-{i}", request, False))
    return ids


def run_round(ctx: Context, argv: list[str], calls: int, concurrency: int) -> tuple[list[Timing], float]:
    """Park `calls` calls, answer them all with a daemon at `concurrency`; the timings and the wall time."""
    settings = replace(ctx.settings, answerer_command=argv, answerer_concurrency=concurrency)
    ctx = Context(ctx.store, settings, CLI)
    project = projects.create(
        ctx, {"name": f"bench-{uuid.uuid4().hex[:8]}", "answerer": True, "max_misses": calls}
    )
    if None in park(ctx, project, calls):
        raise SystemExit("could not park every call")
    timings: list[Timing] = []
    done = threading.Event()

    def on_done(timing: Timing) -> None:
        timings.append(timing)
        if len(timings) >= calls:
            done.set()

    daemon = Daemon(ctx, answerer_config.from_settings(settings), on_done=on_done)
    thread = threading.Thread(target=daemon.run, daemon=True)
    started = time.monotonic()
    thread.start()
    if not done.wait(600):
        raise SystemExit("the daemon did not answer every call within 10 minutes")
    wall = time.monotonic() - started
    daemon.stop()
    thread.join(30)
    failed = [t for t in timings if t.result != "answered"]
    if failed:
        raise SystemExit(f"{len(failed)} calls were not answered ({failed[0].result})")
    return timings, wall


def report(name: str, ctx: Context, argv: list[str], calls: int) -> list[str]:
    # Warm-up: imports, the connection pool, the page cache for the child's binary.
    run_round(ctx, argv, 20, 1)
    serial, _ = run_round(ctx, argv, calls, 1)
    overhead = [(t.total - t.attempts) * 1000 for t in serial]
    child = [t.attempts * 1000 for t in serial]
    _, wall4 = run_round(ctx, argv, calls, 4)
    return [
        f"| {name} | {calls} | {percentile(overhead, 50):.1f} | {percentile(overhead, 90):.1f} | "
        f"{percentile(overhead, 99):.1f} | {percentile(child, 50):.1f} | {calls / wall4:.0f} |"
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.answerer", description=__doc__)
    parser.add_argument("--calls", type=int, default=300, help="calls per measured round")
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite and/or postgres")
    args = parser.parse_args(argv)
    echo = shutil.which("echo")
    if echo is None:
        raise SystemExit("no `echo` on PATH")
    child = [echo, "answer"]
    lines = [
        f"Trivial child: `{os.path.basename(echo)} answer`; {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, load average {os.getloadavg()[0]:.1f} at start",
        "",
        "| database | calls | overhead p50 ms | p90 | p99 | child p50 ms | calls/s at concurrency 4 |",
        "|---|---|---|---|---|---|---|",
    ]
    for db in (d.strip() for d in args.db.split(",") if d.strip()):
        if db == "sqlite":
            directory = tempfile.mkdtemp(prefix="semula-bench-answerer-")
            url = f"sqlite:///{directory}/semula.db"

            def cleanup(directory: str = directory) -> None:
                shutil.rmtree(directory, ignore_errors=True)

        elif db == "postgres":
            import psycopg

            name = f"semula_bench_answerer_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{name}"')
            url = f"{PG_URL.rpartition('/')[0]}/{name}"

            def cleanup(name: str = name) -> None:
                with psycopg.connect(PG_URL, autocommit=True) as conn:
                    conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        else:
            parser.error(f"unknown database {db!r}")
        store = connect(url, pool_size=8)
        try:
            migrate(store)
            ctx = Context(store, replace(Settings(), database_url=url), CLI)
            lines += report(db, ctx, child, args.calls)
        finally:
            store.close()
            cleanup()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

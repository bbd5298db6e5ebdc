"""Claims per second (issue 4): N claimer processes drain a queue of parked calls through claim_next.

    .venv/bin/python -m bench.claims [--db postgres,sqlite] [--calls 5000] [--claimers 8]

Each claimer is its own process (spawned) with its own connection, calling the service's claim_next
in a loop until it returns None, as `semula claim` / the REST claim does minus HTTP. The rate is
claims over the wall time from the first claim to the last; the run fails on any double claim or
lost call. Targets (issue 4): >= 1,000/s on PostgreSQL and >= 300/s on SQLite with 8 claimers.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BenchError, PostgresDatabase, machine, median, wait_quiet
from semula.config import Settings
from semula.core.ids import new_id
from semula.db import Store, connect
from semula.migrate import migrate
from semula.service import CLI, Context, Principal, dumps, projects
from semula.service import pending as pending_service

TARGETS = {"postgres": 1000, "sqlite": 300}
EDITOR = Principal(workspace_id="wsp_default", role="editor", scope="record", actor="tok_bench")


def fill(store: Store, project_id: str, calls: int) -> None:
    """Park `calls` distinct calls in one transaction."""
    request = dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "benchmark"}]})
    with store.transaction("wsp_default") as tx:
        for i in range(calls):
            tx.run(
                "insert_pending",
                id=new_id("pending"),
                workspace_id="wsp_default",
                project_id=project_id,
                fingerprint=f"v1:bench:{i}",
                model="gpt-4o-mini",
                request=request,
                stream=0,
                api="openai.chat",
                seq=1,
                max_misses=calls + 1,
                now=time.time(),
            )


def claimer(db_url: str, worker: str, start, out) -> None:
    store = connect(db_url, pool_size=1)
    ctx = Context(store, Settings(database_url=db_url), EDITOR)
    ids: list[str] = []
    latencies: list[float] = []
    try:
        store.one("ping")  # connected before the start line
        start.wait(120)
        first = time.perf_counter()
        while True:
            began = time.perf_counter()
            claimed = pending_service.claim_next(ctx, lease_seconds=300, worker=worker)
            if claimed is None:
                break
            latencies.append(time.perf_counter() - began)
            ids.append(claimed["id"])
        out.put((worker, first, time.perf_counter(), ids, latencies))
    finally:
        store.close()


def run_one(db: str, calls: int, claimers: int) -> dict[str, float | int | str]:
    with tempfile.TemporaryDirectory(prefix="semula-bench-claims-") as tmp:
        pg = PostgresDatabase().create() if db == "postgres" else None
        url = pg.url if pg else f"sqlite:///{Path(tmp) / 'claims.db'}"
        try:
            store = connect(url, pool_size=1)
            migrate(store)
            ctx = Context(store, Settings(database_url=url), CLI)
            project = projects.create(ctx, {"name": "bench", "max_misses": 1_000_000})
            fill(store, project["id"], calls)
            store.close()

            busy = wait_quiet()  # other work on the cores would skew the rate
            mp = multiprocessing.get_context("spawn")
            start, out = mp.Barrier(claimers), mp.Queue()
            procs = [mp.Process(target=claimer, args=(url, f"w{i}", start, out)) for i in range(claimers)]
            for p in procs:
                p.start()
            results = [out.get(timeout=600) for _ in procs]
            for p in procs:
                p.join(60)
                if p.exitcode != 0:
                    raise BenchError(f"a claimer exited with {p.exitcode}")
        finally:
            if pg:
                pg.drop()
    ids = [i for r in results for i in r[3]]
    latencies = sorted(x for r in results for x in r[4])
    elapsed = max(r[2] for r in results) - min(r[1] for r in results)
    return {
        "db": db,
        "claims": len(ids),
        "double": len(ids) - len(set(ids)),
        "lost": calls - len(set(ids)),
        "seconds": elapsed,
        "rate": len(ids) / elapsed,
        "p50_ms": median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1000 if latencies else 0.0,
        "spread": f"{min(len(r[3]) for r in results)}-{max(len(r[3]) for r in results)}",
        "busy": busy,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.claims", description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="postgres,sqlite", help="postgres and/or sqlite")
    parser.add_argument("--calls", type=int, default=5000, help="parked calls to drain")
    parser.add_argument("--claimers", type=int, default=8, help="claimer processes")
    parser.add_argument("--rounds", type=int, default=3, help="runs per database; the median is reported")
    args = parser.parse_args(argv)
    print(f"# claim_next, {args.claimers} claimer processes, {args.calls} calls\n\nMachine: {machine()}\n")
    print(
        "| database | claims/s (median) | runs | p50 ms | p99 ms | per claimer | double | lost "
        "| cores busy before | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    failed = False
    for db in (d.strip() for d in args.db.split(",") if d.strip()):
        try:
            runs = [run_one(db, args.calls, args.claimers) for _ in range(args.rounds)]
        except BenchError as exc:
            print(f"| {db} | skipped: {exc} |")
            continue
        best = sorted(runs, key=lambda r: r["rate"])[len(runs) // 2]
        rates = ", ".join(f"{r['rate']:.0f}" for r in runs)
        double, lost = sum(r["double"] for r in runs), sum(r["lost"] for r in runs)
        ok = double == 0 and lost == 0 and best["rate"] >= TARGETS[db]
        failed |= double > 0 or lost > 0
        print(
            f"| {db} | {best['rate']:.0f} | {rates} | {best['p50_ms']:.1f} | {best['p99_ms']:.1f} "
            f"| {best['spread']} | {double} | {lost} | {max(r['busy'] for r in runs):.0%} "
            f"| >= {TARGETS[db]} {'ok' if ok else 'MISSED'} |"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""First sight in process: the proxy's WSGI app, called directly, on bodies it has never seen that
each match one recording (no HTTP server, no client: semula's own cost of a first sight).

    .venv/bin/python -m bench.inprocess [--kib 88] [--requests 400] [--rounds 5] [--kept]
        [--db sqlite|postgres] [--src DIR]
    .venv/bin/python -m bench.inprocess --recordings 100000 --requests 30000 [--rounds 3]

`--recordings N`: the store holds N recordings of the 1.6 KB pair (bench.workloads' variants, as
workloads C and C100k), and each round sends the same --requests bodies (every N/requests-th
variant, byte for byte): the first round's are first sights, the second's second sights (the answer
kept), the third's kept hits while the worker's budget holds them. What a sight costs by its kind,
and whether the store's size changes it.

The store is a temporary database holding one recording (bench.workloads: the agent request of
about --kib KiB with its tools, or the 1.6 KB pair below 2 KiB): SQLite, or with `--db postgres` a
database of its own on SEMULA_BENCH_POSTGRES_URL's server. Every request gives it a `user` of its
own, outside the fingerprint, so it matches the recording but is never a kept hit (`--kept`: the
same body each time, so every request after the first is one). The call log is batched as in the
server. Prints microseconds per request for each round and the best, in wall-clock time and in CPU
of this process (on PostgreSQL the server's own CPU is not in it). `--src DIR` imports semula from
another checkout (say a worktree of an older commit), to compare two versions in one sitting.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
from dataclasses import replace
from typing import Any

from bench import workloads
from bench.common import PostgresDatabase

PATH = "/p/bench/v1/chat/completions"


def proxy_app(settings: Any, store: Any) -> Any:
    """The app with its call log batched, as `semula serve` runs it."""
    from semula.web import create_app

    app = create_app(settings, store)
    layer = app.wsgi_app
    while not hasattr(layer, "calllog"):
        layer = getattr(layer, "app", None) or layer.fallback
    layer.calllog.batched = True
    return app


def post_environ(raw: bytes, path: str = PATH) -> dict[str, Any]:
    """The WSGI environ of a JSON POST of `raw` to `path`."""
    return {
        "REQUEST_METHOD": "POST",
        "PATH_INFO": path,
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": "application/json",
        "wsgi.input": io.BytesIO(raw),
        "wsgi.url_scheme": "http",
        "SERVER_NAME": "bench",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
    }


def call(app: Any, raw: bytes) -> bytes:
    status: list[str] = []
    body = b"".join(app(post_environ(raw), lambda line, headers, exc_info=None: status.append(line)))
    if not status[0].startswith("200"):
        raise SystemExit(f"not a replay: {status[0]} {body[:300]!r}")
    return body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kib", type=int, default=88, help="request size in KiB (below 2: the 1.6 KB pair)")
    parser.add_argument("--requests", type=int, default=400, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--kept", action="store_true", help="one body repeated: kept hits, not first sights")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--src", default=None, help="import semula from this checkout instead")
    parser.add_argument(
        "--recordings", type=int, default=0, help="a store of this many 1.6 KB pairs; same bodies each round"
    )
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context, bundles, projects

    print(f"semula from {sys.modules['semula.config'].__file__.rsplit('/semula/', 1)[0]}")
    database = PostgresDatabase().create() if args.db == "postgres" else None
    try:  # the PostgreSQL database goes whatever happens: a failed run must not leave it behind
        with tempfile.TemporaryDirectory() as workdir:
            url = database.url if database else f"sqlite:///{workdir}/bench.db"
            store = connect(url, pool_size=2)
            migrate(store)
            settings = replace(Settings(), database_url=url, auth=False)
            ctx = Context(store, settings, CLI)
            projects.create(ctx, {"name": "bench", "mode": "replay"})
            if args.recordings:
                recordings = [workloads.pair_recording(variant) for variant in range(args.recordings)]
            elif args.kib >= 2:
                recordings = [workloads.agent_recording(args.kib * 1024)]
            else:
                recordings = [workloads.pair_recording(0)]
            bundle = {
                "bundle": {"format": "semula-bundle", "version": 1},
                "entries": [{"request": r.request, "response": r.response} for r in recordings],
            }
            bundles.import_bundle(ctx, "bench", io.BytesIO(json.dumps(bundle).encode()))
            app = proxy_app(settings, store)
            if args.recordings:
                step = max(1, args.recordings // args.requests)
                chosen = [json.dumps(r.request).encode() for r in recordings[::step][: args.requests]]
                # warm-up on bodies that are not measured: imports, caches, the first statements
                warm = [json.dumps({**r.request, "user": "warm-up"}).encode() for r in recordings[:1000]]
                rounds = [warm] + [chosen] * args.rounds
            else:
                total = args.requests * (args.rounds + 1)
                users = [f"u{0 if args.kept else i}" for i in range(total)]
                request = recordings[0].request
                bodies = [json.dumps({**request, "user": user}).encode() for user in users]
                rounds = [bodies[n * args.requests : (n + 1) * args.requests] for n in range(args.rounds + 1)]
            for raw in rounds[0]:  # warm-up: imports, caches, the first statements
                call(app, raw)
            results, cpus = [], []
            for batch in rounds[1:]:
                started, cpu = time.perf_counter(), time.process_time()
                for raw in batch:
                    call(app, raw)
                results.append((time.perf_counter() - started) / len(batch) * 1e6)
                cpus.append((time.process_time() - cpu) / len(batch) * 1e6)
            store.close()
    finally:
        if database:
            database.drop()
    if args.recordings:
        kinds = ["first sights", "second sights", "kept hits while held", *["again"] * args.rounds]
        print(f"{args.recordings:,} recordings, the same {len(rounds[1]):,} bodies each round:")
        for kind, wall, cpu in zip(kinds[: len(results)], results, cpus, strict=True):
            print(f"  {kind}: {wall:.1f} µs (CPU {cpu:.1f})")
        return
    spread = " ".join(f"{r:.0f}" for r in results)
    print(f"{len(rounds[1][0]):,} B request: {spread} µs; best {min(results):.0f}")
    print(f"  CPU of this process: {' '.join(f'{c:.0f}' for c in cpus)} µs; best {min(cpus):.0f}")


if __name__ == "__main__":
    main()

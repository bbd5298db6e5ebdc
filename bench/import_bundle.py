"""Import a large bundle and report time and peak memory (not a test; run by hand).

    .venv/bin/python bench/import_bundle.py --entries 10000,100000 --db sqlite,postgres

Each import runs in a fresh child process on a fresh database, so the child's peak RSS
(VmHWM) is the import's own. The bundle is generated to a temporary file first,
one entry at a time, with a realistic prompt and answer of a few hundred characters each.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

PG_URL = os.environ.get("SEMULA_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def request(i: int) -> dict:
    """Entry i's request: a system prompt and the customer's question."""
    system = "You are a helpful assistant for an online shop. Answer briefly and politely. " * 2
    return {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Customer {i} asks: where is my order number {i * 7919}?"},
        ],
        "temperature": 0,
    }


def write_bundle(path: Path, count: int) -> None:
    """A bundle of `count` distinct entries, written as `semula export` would write it."""
    from semula.core import answers, bundle_format, fingerprint

    items = []
    for i in range(count):
        request_ = request(i)
        response = answers.parse_answer(
            {"content": f"Order {i * 7919} left our warehouse yesterday and arrives in two days. " * 3},
            request_,
        )
        items.append((fingerprint.fingerprint(request_), request_, response))
    items.sort(key=lambda item: item[0])
    with open(path, "wb") as out:
        header = {"format": bundle_format.FORMAT, "version": bundle_format.VERSION}
        config = {"ignore_fields": [], "max_misses": 100, "normalize": [], "record_timeout": 300}
        out.write(f'{{\n  "bundle": {bundle_format.nested(header, 2)},\n'.encode())
        out.write(f'  "config": {bundle_format.nested(config, 2)},\n  "entries": [\n'.encode())
        for n, (fp, request_, response) in enumerate(items):
            entry = {
                "chunks": None,
                "fingerprint": fp,
                "pinned": False,
                "request": request_,
                "response": response,
                "review_status": "unreviewed",
            }
            out.write(("    " + bundle_format.nested(entry, 4) + (",\n" if n < count - 1 else "\n")).encode())
        out.write(b"  ]\n}\n")


def child(url: str, path: str) -> None:
    """Import the bundle into project `bench` and print what it cost, as JSON."""
    from semula.config import Settings
    from semula.db import connect
    from semula.service import CLI, Context, bundles

    store = connect(url, pool_size=2)
    ctx = Context(store, replace(Settings(), database_url=url), CLI)
    before = peak_rss_mb()
    runs = []
    for _ in range(2):  # The second import finds every entry unchanged: idempotence at scale.
        started = time.perf_counter()
        writing: list[float] = []

        def progress(stage: str, done: int, total: int | None, writing: list[float] = writing) -> None:
            if stage == "write" and not writing:
                writing.append(time.perf_counter())

        with open(path, "rb") as source:
            report = bundles.import_bundle(ctx, "bench", io.BufferedReader(source), progress=progress)
        end = time.perf_counter()
        read = (writing[0] if writing else end) - started
        runs.append({"seconds": round(end - started, 2), "read_s": round(read, 2), "report": report})
    store.close()
    print(json.dumps({"rss_before_mb": before, "peak_rss_mb": peak_rss_mb(), "runs": runs}))


def peak_rss_mb() -> float:
    """VmHWM, this process image's peak resident memory (ru_maxrss would count the parent's, before exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def fresh_database(db: str, workdir: Path) -> tuple[str, callable]:
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context, projects

    if db == "sqlite":
        url, drop = f"sqlite:///{workdir}/bench-{uuid.uuid4().hex[:6]}.db", lambda: None
    else:
        import psycopg

        name = f"semula_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = PG_URL.rpartition("/")[0] + "/" + name

        def drop() -> None:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    store = connect(url, pool_size=1)
    migrate(store)
    projects.create(Context(store, replace(Settings(), database_url=url), CLI), {"name": "bench"})
    store.close()
    return url, drop


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", default="10000,100000", help="bundle sizes, comma separated")
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite and/or postgres")
    parser.add_argument("--child", nargs=2, metavar=("URL", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child)
        return 0
    print("| entries | database | bundle MB | import s (read+check) | re-import s | peak RSS MB (at start) |")
    print("|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="semula-bench-") as tmp:
        workdir = Path(tmp)
        for count in (int(n) for n in args.entries.split(",")):
            path = workdir / f"bundle-{count}.json"
            write_bundle(path, count)
            size = path.stat().st_size / 1e6
            for db in (d.strip() for d in args.db.split(",") if d.strip()):
                url, drop = fresh_database(db, workdir)
                try:
                    out = subprocess.run(
                        [sys.executable, __file__, "--child", url, str(path)],
                        capture_output=True,
                        text=True,
                    )
                finally:
                    drop()
                if out.returncode:
                    print(out.stderr[-3000:], file=sys.stderr)
                    raise SystemExit(f"the import of {count} entries into {db} failed")
                result = json.loads(out.stdout)
                first, second = result["runs"]
                assert first["report"]["created"] == count and second["report"]["unchanged"] == count
                print(
                    f"| {count} | {db} | {size:.0f} | {first['seconds']} ({first['read_s']}) "
                    f"| {second['seconds']} "
                    f"| {result['peak_rss_mb']} ({result['rss_before_mb']}) |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())

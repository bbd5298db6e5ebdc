"""A 1,000-input embeddings batch, round trip through a real `semula serve` (gunicorn, 2 workers):
recorded (the project's `embeddings: synthetic` answers the miss), replayed as base64 (the SDK's
default) and as floats, exported, imported into a fresh project and replayed there. Reports the
time of each step (client wall time, medians of the rounds, each round a new batch) and the size
of the bundle and of the batch's entry in it.

`python -m bench.embeddings [--inputs 1000] [--dimensions 1536] [--rounds 3] [--db sqlite,postgres]`
"""

from __future__ import annotations

import argparse
import base64
import json
import shutil
import struct
import sys
import time
from dataclasses import replace
from typing import Any

import requests

from bench.common import OUT, BenchError, PostgresDatabase, machine, median, semula_server

MODEL = "text-embedding-3-small"
PROJECT = "bench"
TIMEOUT = 300


def texts(count: int, round_number: int) -> list[str]:
    """Distinct inputs of about 200 characters, as a RAG app's chunks would be."""
    line = "The quarterly report covers revenue, costs and the outlook for the next period. "
    return [f"round {round_number} chunk {i}: {line * 2}"[:200] for i in range(count)]


def prepare(db_url: str) -> str:
    """Migrate, create the project with synthetic embeddings, return an admin token."""
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context, projects, tokens

    store = connect(db_url, pool_size=2)
    try:
        migrate(store)
        ctx = Context(store, replace(Settings(), database_url=db_url), CLI)
        projects.create(ctx, {"name": PROJECT, "embeddings": "synthetic", "record_timeout": TIMEOUT})
        return tokens.create(ctx, {"role": "admin", "scope": "full", "name": "bench"})["token"]
    finally:
        store.close()


def timed(fn: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def post(url: str, headers: dict[str, str], body: dict[str, Any]) -> requests.Response:
    got = requests.post(url, json=body, headers=headers, timeout=TIMEOUT)
    if got.status_code != 200:
        raise BenchError(f"{url} answered {got.status_code}: {got.text[:300]}")
    got.content  # noqa: B018 - read it all inside the timing
    return got


def floats_of(data: list[dict[str, Any]]) -> list[tuple[float, ...]]:
    out = []
    for item in data:
        vector = item["embedding"]
        if isinstance(vector, str):
            raw = base64.b64decode(vector)
            vector = struct.unpack(f"<{len(raw) // 4}f", raw)
        out.append(tuple(vector))
    return out


def run_db(db: str, inputs: int, dimensions: int, rounds: int) -> dict[str, Any]:
    workdir = OUT / f"embeddings-{db}-{int(time.time())}"
    workdir.mkdir(parents=True)
    pg = PostgresDatabase().create() if db == "postgres" else None
    url = pg.url if pg else f"sqlite:///{workdir}/semula.db"
    process = None
    try:
        token = prepare(url)
        process, base = semula_server(f"embeddings-{db}", url, auth=True)
        headers = {"Authorization": f"Bearer {token}"}
        api = f"{base}/api/v1/projects"
        steps: dict[str, list[float]] = {}
        sizes: dict[str, int] = {}

        def note(step: str, seconds: float) -> None:
            steps.setdefault(step, []).append(seconds)

        for number in range(rounds):
            body = {"model": MODEL, "input": texts(inputs, number), "dimensions": dimensions}
            seconds, recorded = timed(lambda b=body: post(f"{base}/p/{PROJECT}/v1/embeddings", headers, b))
            note("record (synthetic, saved)", seconds)
            wanted = floats_of(recorded.json()["data"])
            for form in ("base64", "float"):
                replay_body = {**body, "encoding_format": form}
                seconds, got = timed(
                    lambda b=replay_body: post(f"{base}/p/{PROJECT}/v1/embeddings", headers, b)
                )
                if floats_of(got.json()["data"]) != wanted:
                    raise BenchError(f"the {form} replay differs from the recording")
                sizes[f"response as {form}, bytes"] = len(got.content)
                note(f"replay as {form}", seconds)
            seconds, exported = timed(
                lambda: requests.get(f"{api}/{PROJECT}/export", headers=headers, timeout=TIMEOUT)
            )
            note(f"export ({number + 1} entries)", seconds)
            bundle = exported.content
            copy = f"copy{number}"
            made = requests.post(api, json={"name": copy, "mode": "replay"}, headers=headers, timeout=30)
            if made.status_code != 201:
                raise BenchError(f"creating {copy}: {made.status_code} {made.text[:200]}")
            seconds, imported = timed(
                lambda c=copy, b=bundle: requests.post(
                    f"{api}/{c}/import", data=b, headers=headers, timeout=TIMEOUT
                )
            )
            if imported.status_code != 200:
                raise BenchError(f"import answered {imported.status_code}: {imported.text[:300]}")
            note(f"import ({number + 1} entries)", seconds)
            seconds, again = timed(lambda c=copy, b=body: post(f"{base}/p/{c}/v1/embeddings", headers, b))
            if floats_of(again.json()["data"]) != wanted:
                raise BenchError("the replay from the imported bundle differs from the recording")
            note("replay after import (float)", seconds)
        entries = json.loads(bundle)["entries"]
        sizes["bundle, bytes per batch entry"] = len(bundle) // len(entries)
        sizes["bundle, lines per batch entry"] = bundle.count(b"\n") // len(entries)
        return {"steps": steps, "sizes": sizes}
    finally:
        if process is not None:
            process.stop()
        if pg is not None:
            pg.drop()
        shutil.rmtree(workdir, ignore_errors=True)


def report(results: dict[str, dict[str, Any]], inputs: int, dimensions: int, rounds: int) -> str:
    lines = [
        f"One batch of {inputs} inputs × {dimensions} dimensions ({MODEL}); client wall time, median of "
        f"{rounds} rounds (each a new batch; export and import grow by one entry a round).",
        "",
        "| step | " + " | ".join(results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    first = next(iter(results.values()))
    for step in first["steps"]:
        cells = [f"{median(r['steps'][step]) * 1000:,.0f} ms" for r in results.values()]
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    for size in first["sizes"]:
        cells = [f"{r['sizes'][size]:,}" for r in results.values()]
        lines.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.embeddings", description=__doc__)
    parser.add_argument("--inputs", type=int, default=1000)
    parser.add_argument("--dimensions", type=int, default=1536)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--db", default="sqlite,postgres", help="sqlite and/or postgres")
    args = parser.parse_args(argv)
    results = {}
    try:
        for db in (d.strip() for d in args.db.split(",") if d.strip()):
            results[db] = run_db(db, args.inputs, args.dimensions, args.rounds)
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    command = " ".join(["python -m bench.embeddings", *(argv if argv is not None else sys.argv[1:])])
    print(f"Machine: {machine()}\nCommand: `{command}`\n")
    print(report(results, args.inputs, args.dimensions, args.rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())

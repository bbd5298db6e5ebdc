"""Held calls: 5,000 distinct misses held at once by one gevent worker, then answered from here.

Measured while holding: database queries per second (the worker's own poll counter from /metrics, and
on PostgreSQL also the database's transaction count, which sees every statement of every client since
the server runs in autocommit) and the worker's memory per held call (RSS delta / calls). Then every
call is answered through the service layer from this process, so only the poller can release them, and
the answer-to-release latency is taken client-side (answer's commit time in the row -> response fully
received) and from the server's semula_answer_release_seconds histogram.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from dataclasses import replace as dc_replace
from typing import Any

import requests

from bench import holdclient
from bench.common import (
    OUT,
    BenchError,
    PostgresDatabase,
    Process,
    percentile,
    raise_nofile,
    rss_kib,
    semula_server,
    wait_for,
)

PROJECT = "hold"
RECORD_TIMEOUT = 900
WINDOW = 20.0  # seconds of holding over which queries are counted
# PostgreSQL backends report their statistics up to 10 s after going idle (PGSTAT_IDLE_INTERVAL), so the
# window starts once the statements of the parking burst have surely been counted.
SETTLE = 12.0
POLL_INTERVAL = 0.2  # semula's default SEMULA_POLL_INTERVAL, set explicitly to report it


def metrics(url: str) -> dict[str, float]:
    """The unlabelled samples and histogram buckets of /metrics, by name (buckets as name{le})."""
    text = requests.get(url + "/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = re.match(r'^(\w+)(?:\{le="([^"]+)"\})?\s+(\S+)$', line)
        if match:
            name, le, value = match.groups()
            out[f"{name}{{{le}}}" if le else name] = float(value)
    return out


def histogram_quantile(samples: dict[str, float], name: str, q: float) -> str:
    """The upper bound of the bucket holding quantile q, as Prometheus would bound it."""
    buckets = sorted(
        (float(key[len(name) + 8 : -1]), value)
        for key, value in samples.items()
        if key.startswith(name + "_bucket{")
    )
    total = buckets[-1][1] if buckets else 0
    for bound, cumulative in buckets:
        if total and cumulative >= q * total:
            return f"≤ {bound * 1000:.0f} ms" if bound != float("inf") else "> last bucket"
    return "n/a"


def prepare(db_url: str, calls: int) -> tuple[Any, str]:
    """Migrate, create the record-mode project and a token; return the operator context and the secret."""
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context, projects, tokens

    store = connect(db_url, pool_size=2)
    migrate(store)
    ctx = Context(store, dc_replace(Settings(), database_url=db_url), CLI)
    projects.create(
        ctx, {"name": PROJECT, "mode": "record", "record_timeout": RECORD_TIMEOUT, "max_misses": calls + 100}
    )
    secret = tokens.create(ctx, {"role": "editor", "scope": "record", "project": PROJECT, "name": "hold"})
    return ctx, secret["token"]


def pending_id(ctx: Any, project_id: str, number: int) -> str:
    from semula.core import fingerprint as fp

    row = ctx.store.one(
        "pending_by_fingerprint",
        project_id=project_id,
        fingerprint=fp.fingerprint(holdclient.request_body(number)),
        seq=1,
    )
    if row is None:
        raise BenchError(f"held call {number} has no pending row")
    return row["id"]


def warm_up(ctx: Any, url: str, token: str, project_id: str) -> None:
    """One call parked, answered and released, then replayed: the worker has run every path once."""
    from semula.service import pending

    body = holdclient.request_body(-1)
    headers = {"Authorization": f"Bearer {token}"}
    with subprocess.Popen(  # the call blocks while held, so it runs beside us
        [
            sys.executable,
            "-c",
            "import sys, requests; r = requests.post(sys.argv[1], json=__import__('json').loads(sys.argv[2]),"
            " headers={'Authorization': sys.argv[3]}, timeout=60); sys.exit(r.status_code != 200)",
            f"{url}/p/{PROJECT}/v1/chat/completions",
            json.dumps(body),
            headers["Authorization"],
        ]
    ) as proc:
        wait_for(lambda: metrics(url).get("semula_held_calls") == 1, 30, "the warm-up call to park")
        pending.answer(ctx, pending_id(ctx, project_id, -1), holdclient.answer_text(-1))
        if proc.wait(60) != 0:
            raise BenchError("the warm-up call was not released with a 200")
    hit = requests.post(f"{url}/p/{PROJECT}/v1/chat/completions", json=body, headers=headers, timeout=10)
    if hit.status_code != 200:
        raise BenchError(f"the warm-up replay answered {hit.status_code}")


def tear_down(
    clients: list[subprocess.Popen[bytes]], server: Process | None, ctx: Any, pg: Any, workdir: Any
) -> None:
    """Stop what a held-calls run started: its clients, its server, its store, its database and files."""
    for client in clients:
        if client.poll() is None:
            client.kill()
            client.wait(10)
    if server is not None:
        server.stop()
    if ctx is not None:
        ctx.store.close()
    if pg is not None:
        pg.drop()
    shutil.rmtree(workdir, ignore_errors=True)


def run(*, db: str = "postgres", calls: int = 5000) -> str:
    from semula.service import pending, projects

    raise_nofile(2 * calls + 1024)
    pg = PostgresDatabase().create() if db == "postgres" else None
    workdir = OUT / f"hold-{db}-{int(time.time())}"
    workdir.mkdir(parents=True)
    db_url = pg.url if pg else f"sqlite:///{workdir}/semula.db"
    server: Process | None = None
    client: subprocess.Popen[bytes] | None = None
    ctx = None
    try:
        ctx, token = prepare(db_url, calls)
        project_id = projects.get_row(ctx, PROJECT)["id"]
        server, url = semula_server(
            f"hold-{db}", db_url, auth=True, workers=1, SEMULA_POLL_INTERVAL=str(POLL_INTERVAL)
        )
        (worker,) = server.children()
        warm_up(ctx, url, token, project_id)
        time.sleep(1)
        rss_before = rss_kib(worker)

        started = time.monotonic()
        client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.holdclient",
                url,
                f"/p/{PROJECT}/v1/chat/completions",
                str(calls),
                token,
                str(workdir / "client.json"),
                "--deadline",
                str(RECORD_TIMEOUT - 60),
            ]
        )
        wait_for(
            lambda: metrics(url).get("semula_held_calls") == calls, 300, f"{calls} held calls", interval=0.5
        )
        park_seconds = time.monotonic() - started
        time.sleep(SETTLE)
        rss_holding = rss_kib(worker)

        before, tx_before, t0 = metrics(url), pg.transactions() if pg else 0, time.monotonic()
        time.sleep(WINDOW)
        after, tx_after, t1 = metrics(url), pg.transactions() if pg else 0, time.monotonic()
        still_held = after.get("semula_held_calls")
        polls_per_s = (after["semula_poll_seconds_count"] - before["semula_poll_seconds_count"]) / (t1 - t0)
        poll_ms = 1000 * (
            (after["semula_poll_seconds_sum"] - before["semula_poll_seconds_sum"])
            / max(1.0, after["semula_poll_seconds_count"] - before["semula_poll_seconds_count"])
        )
        tx_per_s = (tx_after - tx_before) / (t1 - t0) if pg else None

        ids = [pending_id(ctx, project_id, n) for n in range(calls)]
        answered_at = time.monotonic()
        for number, pid in enumerate(ids):
            pending.answer(ctx, pid, holdclient.answer_text(number))
        answer_seconds = time.monotonic() - answered_at
        if client.wait(120) != 0:
            raise BenchError("the held-calls client failed")
        client = None
        resolved = {
            n: ctx.store.one("get_pending", id=pid, workspace_id="wsp_default")["resolved_at"]
            for n, pid in enumerate(ids)
        }
        out = json.loads((workdir / "client.json").read_text())
        results = out["results"]
        good = [n for n in range(calls) if str(n) in results and results[str(n)][0] == 200]
        good = [n for n in good if results[str(n)][2]]
        latencies = [results[str(n)][1] - resolved[n] for n in good]
        final = metrics(url)
    finally:
        tear_down([client] if client is not None else [], server, ctx, pg, workdir)

    per_call_kb = (rss_holding - rss_before) / calls
    lines = [
        f"{calls:,} distinct calls held at once by one gevent worker (`semula serve`, SEMULA_WORKERS=1, "
        f"{'PostgreSQL' if pg else 'SQLite'}, SEMULA_POLL_INTERVAL={POLL_INTERVAL}, auth on); "
        f"all parked in {park_seconds:.1f} s, answered from the bench process through the service layer "
        f"in {answer_seconds:.1f} s ({calls / answer_seconds:,.0f} answers/s).",
        "",
        "| measure | value | target |",
        "|---|---:|---:|",
        f"| poll queries per second while holding (worker's counter, {WINDOW:.0f} s) | {polls_per_s:.2f} "
        f"| ≤ {2 / POLL_INTERVAL:.0f} |",
    ]
    if tx_per_s is not None:
        lines.append(
            f"| all statements per second on the database while holding (pg_stat_database) | {tx_per_s:.2f} "
            f"| ≤ {2 / POLL_INTERVAL:.0f} |"
        )
    lines += [
        f"| mean duration of one poll over {calls:,} held ids | {poll_ms:.1f} ms | |",
        f"| answer-to-release p50, client-side | {1000 * percentile(latencies, 50):.0f} ms "
        f"| ≤ {1000 * POLL_INTERVAL:.0f} ms |",
        f"| answer-to-release p99, client-side | {1000 * percentile(latencies, 99):.0f} ms | |",
        f"| answer-to-release p50 / p99, server histogram | "
        f"{histogram_quantile(final, 'semula_answer_release_seconds', 0.5)} / "
        f"{histogram_quantile(final, 'semula_answer_release_seconds', 0.99)} | |",
        f"| worker RSS before → holding | {rss_before / 1024:.1f} → {rss_holding / 1024:.1f} MiB | |",
        f"| memory per held call | {per_call_kb:.1f} KiB | ≤ 50 KB |",
        f"| calls released with their answer (200) | {len(good):,} of {calls:,} | all |",
        f"| still held at the end of the window | {still_held:.0f} | {calls:,} |",
    ]
    return "\n".join(lines)

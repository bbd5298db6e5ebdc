"""Replay hits per API: the recorded pair as a Chat Completions request and as a Responses API request
of the same size, served by one semula process, measured side by side in interleaved rounds.

The target (issue #17): a Responses hit at >= 0.9 x the Chat Completions hit rate, on SQLite and
PostgreSQL. `python -m bench dialects [--db sqlite,postgres]`.
"""

from __future__ import annotations

import json
import shutil
import sys
import time

import requests

from bench import pair, replay
from bench.common import OUT, BenchError, PostgresDatabase, median, require_tool

TARGET = 0.9


def load(db_url: str) -> str:
    """Record both forms of the pair (the chat one as bench.replay does) and return a replay token."""
    from semula import dialects
    from semula.config import Settings
    from semula.db import connect
    from semula.service import CLI, Context, pending, projects

    token = replay.load_pair(db_url)
    store = connect(db_url, pool_size=2)
    try:
        ctx = Context(store, Settings(database_url=db_url), CLI)
        projects.update(ctx, replay.PROJECT, {"mode": "record"})
        row = projects.get_row(ctx, replay.PROJECT)
        body = pair.responses_body()
        responses = dialects.get(dialects.RESPONSES)
        fingerprint = responses.fingerprint(body, [], [])
        pending_id = pending.park(ctx, row, fingerprint, body, False, api=responses.name)
        assert pending_id is not None
        pending.answer(ctx, pending_id, {"content": pair.ANSWER_TEXT}, actor="import", summary="bench pair")
        projects.update(ctx, replay.PROJECT, {"mode": "replay"})
    finally:
        store.close()
    return token


def check(target: replay.Target, responses: bool) -> None:
    got = requests.post(target.url, data=target.body, headers=target.headers, timeout=10)
    if got.status_code != 200:
        raise BenchError(f"{target.name} answered {got.status_code}: {got.text[:300]}")
    data = got.json()
    text = data["output"][0]["content"][0]["text"] if responses else data["choices"][0]["message"]["content"]
    if text != pair.ANSWER_TEXT:
        raise BenchError(f"{target.name} answered something else than the recorded answer")


def run(
    *, duration: int = 10, rounds: int = 3, warmup: int = 5, dbs: tuple[str, ...] = ("sqlite", "postgres")
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    workdir = OUT / f"dialects-{int(time.time())}"
    workdir.mkdir(parents=True)
    targets: list[replay.Target] = []
    pg: PostgresDatabase | None = None
    try:
        for db in dbs:
            if db == "sqlite":
                url = f"sqlite:///{workdir}/semula.db"
            else:
                pg = PostgresDatabase().create()
                url = pg.url
            token = load(url)
            chat = replay.start_semula(
                f"{db}: Chat Completions", f"semula-{db}", url, token, database=pg if db != "sqlite" else None
            )
            chat.body = pair.request_bytes()
            chat.headers["Content-Type"] = "application/json"
            responses = replay.Target(
                f"{db}: Responses",
                chat.url.replace("/chat/completions", "/responses"),
                dict(chat.headers),
                process=None,
                database=None,
                body=json.dumps(pair.responses_body()).encode(),
            )
            responses.process = chat.process  # one server answers both: the CPU of each run is its own
            responses.database = chat.database
            for target, is_responses in ((chat, False), (responses, True)):
                check(target, is_responses)
                if warmup:
                    replay.warm_up(target, warmup)
                targets.append(target)
        for number in range(rounds):
            order = targets[number % len(targets) :] + targets[: number % len(targets)]
            for target in order:
                result = replay.run_wrk(target, duration)
                target.rounds.append(result)
                print(f"round {number + 1} {target.name}: {result['rps']:,.0f} req/s", file=sys.stderr)
        return report(targets, duration, rounds)
    finally:
        stopped = set()
        for target in targets:
            if target.process and id(target.process) not in stopped:
                stopped.add(id(target.process))
                target.process.stop()
        if pg is not None:
            pg.drop()
        shutil.rmtree(workdir, ignore_errors=True)


def report(targets: list[replay.Target], duration: int, rounds: int) -> str:
    lines = [
        f"Replay hits per API: wrk -t{replay.THREADS} -c{replay.CONNECTIONS} -d{duration}s --latency; the "
        f"pair as a {len(pair.request_bytes())} B Chat Completions request and a "
        f"{len(json.dumps(pair.responses_body()))} B Responses request; medians of {rounds} interleaved "
        "rounds.",
        "",
        "| server and API | req/s | p50 ms | p99 ms | server CPU µs/req | × Chat Completions |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    chat_rps: dict[str, float] = {}
    verdicts = []
    for t in targets:
        rps = median([r["rps"] for r in t.rounds])
        db, api = t.name.split(": ")
        if api == "Chat Completions":
            chat_rps[db] = rps
        ratio = rps / chat_rps[db] if db in chat_rps else float("nan")
        p50, p99 = median([r["p50_ms"] for r in t.rounds]), median([r["p99_ms"] for r in t.rounds])
        cpu = median([r["cpu_us"] for r in t.rounds])
        lines.append(f"| {t.name} | {rps:,.0f} | {p50:.2f} | {p99:.1f} | {cpu:.0f} | {ratio:.2f} |")
        if api == "Responses":
            verdict = "met" if ratio >= TARGET else "NOT met"
            verdicts.append(f"- {db}: Responses at {ratio:.2f} × Chat Completions: {verdict}")
    return "\n".join([*lines, "", f"Target: a Responses hit ≥ {TARGET} × a Chat Completions hit.", *verdicts])

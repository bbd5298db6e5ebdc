"""Replay hits in sessions (issue #21): the same request with and without a session in the base URL,
for a request with one answer and for one with a three-answer sequence, served by one semula
process and measured side by side in interleaved rounds.

The target: a single-answer hit in a session at >= 0.95 x the same hit without one (it is never
counted); the cost of a sequence hit in a session (one counter upsert and one answer read) is
reported. `python -m bench sessions [--db sqlite,postgres]`.
"""

from __future__ import annotations

import json

import requests

from bench import pair, replay, runs
from bench.common import BenchError, median, require_tool

TARGET = 0.95
ANSWERS = 3


def sequence_body() -> dict:
    """The pair's request with another last question: a fingerprint of its own."""
    body = pair.request_body()
    body["messages"][-1] = {**body["messages"][-1], "content": "And the step after that?"}
    return body


def load(db_url: str) -> str:
    """Record the pair (one answer) and a three-answer sequence; return a replay token."""
    from semula.core import fingerprint as fp
    from semula.service import pending, projects

    token = replay.load_pair(db_url)
    with replay.service(db_url) as ctx:
        projects.update(ctx, replay.PROJECT, {"mode": "record"})
        row = projects.get_row(ctx, replay.PROJECT)
        body = sequence_body()
        for seq in range(1, ANSWERS + 1):
            pending_id = pending.park(ctx, row, fp.fingerprint(body), body, False, seq=seq)
            assert pending_id is not None
            pending.answer(ctx, pending_id, {"content": f"{pair.ANSWER_TEXT} ({seq})"}, actor="import")
        projects.update(ctx, replay.PROJECT, {"mode": "replay"})
    return token


def targets_for(db: str, base: replay.Target) -> list[replay.Target]:
    out = []
    for request, body in (("one answer", pair.request_bytes()), ("3-answer sequence", None)):
        for session in (False, True):
            url = (
                base.url.replace(f"/p/{replay.PROJECT}/", f"/p/{replay.PROJECT}/s/bench/")
                if session
                else base.url
            )
            target = replay.Target(
                f"{db}: {request}, {'session' if session else 'no session'}",
                url,
                {**base.headers, "Content-Type": "application/json"},
                body=body if body is not None else json.dumps(sequence_body()).encode(),
            )
            target.process, target.database = base.process, base.database  # one server answers all
            out.append(target)
    return out


def check(target: replay.Target) -> None:
    got = requests.post(target.url, data=target.body, headers=target.headers, timeout=10)
    if got.status_code != 200 or not got.json()["choices"][0]["message"]["content"].startswith(
        pair.ANSWER_TEXT
    ):
        raise BenchError(f"{target.name} answered {got.status_code}: {got.text[:300]}")


def run(
    *, duration: int = 10, rounds: int = 3, warmup: int = 5, dbs: tuple[str, ...] = ("sqlite", "postgres")
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    targets: list[replay.Target] = []
    with runs.Run("sessions") as run:
        for db in dbs:
            url, pg = run.database(db)
            token = load(url)
            base = run.track(replay.start_semula(db, f"semula-{db}", url, token, database=pg))
            for target in targets_for(db, base):
                check(target)
                if warmup:
                    replay.warm_up(target, warmup)
                targets.append(target)
        runs.interleave(targets, rounds=rounds, duration=duration)
        return report(targets, duration, rounds)


def report(targets: list[replay.Target], duration: int, rounds: int) -> str:
    lines = [
        f"Replay hits with and without a session in the base URL: wrk -t{replay.THREADS} "
        f"-c{replay.CONNECTIONS} -d{duration}s --latency, the {len(pair.request_bytes())} B pair (one "
        f"answer) and a request of the same size with {ANSWERS} answers (one session for all of wrk's "
        f"connections, so past call {ANSWERS} every hit replays answer {ANSWERS}); medians of {rounds} "
        "interleaved rounds.",
        "",
        "| database, request, session | req/s | p50 ms | p99 ms | server CPU µs/req | × no session |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    plain: dict[str, float] = {}
    verdicts = []
    for t in targets:
        rps = median([r["rps"] for r in t.rounds])
        what, session = t.name.rsplit(", ", 1)
        if session == "no session":
            plain[what] = rps
        ratio = rps / plain[what] if what in plain else float("nan")
        p50, p99 = median([r["p50_ms"] for r in t.rounds]), median([r["p99_ms"] for r in t.rounds])
        cpu = median([r["cpu_us"] for r in t.rounds])
        lines.append(f"| {t.name} | {rps:,.0f} | {p50:.2f} | {p99:.1f} | {cpu:.0f} | {ratio:.2f} |")
        if session == "session" and "one answer" in what:
            verdict = "met" if ratio >= TARGET else "NOT met"
            verdicts.append(f"- {what}: in a session at {ratio:.2f} × without: {verdict}")
        elif session == "session":
            verdicts.append(f"- {what}: in a session at {ratio:.2f} × without (the cost of counting)")
    return "\n".join(
        [*lines, "", f"Target: a single-answer hit in a session ≥ {TARGET} × without.", *verdicts]
    )

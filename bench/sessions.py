"""Replay hits in sessions (issues #21 and #52): the same requests with and without a session in the
base URL, served by one semula process and measured side by side in interleaved rounds.

- **one answer**: the 1.6 KB pair; a session call of it is never counted (target: >= 0.95 x without).
- **3-answer sequence**: one request with three answers, sent by all of wrk's 50 connections in one
  session, so every call raises the same counter (target, issue #52: >= 0.5 x without).
- **50 sequences**: 50 such requests, each with three answers of its own, wrk's 50 connections
  cycling through them in one session: 50 counters (target, issue #52: >= 0.8 x without).

`python -m bench sessions [--db sqlite,postgres] [--before DIR]`: with `--before`, the semula of
another checkout (say `git archive` of the base commit, unpacked) serves the same rows from a
database of its own, interleaved with this checkout's, so a change is measured before and after in
one run.
"""

from __future__ import annotations

import json
from pathlib import Path

import requests

from bench import pair, replay, runs, sizes
from bench.common import BenchError, median, require_tool

TARGET = 0.95  # one answer, in a session
ONE_COUNTER, MANY_COUNTERS = 0.5, 0.8  # issue #52: 3-answer sequences in a session
ANSWERS = 3
SEQUENCES = 50  # the requests of the "50 sequences" rows
ROWS = ("one answer", "3-answer sequence", f"{SEQUENCES} sequences")


def sequence_body(number: int | None = None) -> dict:
    """The pair's request with another last question: a fingerprint of its own (of each `number`)."""
    body = pair.request_body()
    question = "And the step after that?" + (f" (part {number})" if number is not None else "")
    body["messages"][-1] = {**body["messages"][-1], "content": question}
    return body


def load(db_url: str) -> str:
    """Record the pair (one answer) and SEQUENCES + 1 three-answer sequences; return a replay token."""
    from semula.core import fingerprint as fp
    from semula.service import pending, projects

    token = replay.load_pair(db_url)
    with replay.service(db_url) as ctx:
        projects.update(ctx, replay.PROJECT, {"mode": "record"})
        row = projects.get_row(ctx, replay.PROJECT)
        for body in [sequence_body()] + [sequence_body(n) for n in range(SEQUENCES)]:
            for seq in range(1, ANSWERS + 1):
                pending_id = pending.park(ctx, row, fp.fingerprint(body), body, False, seq=seq)
                assert pending_id is not None
                pending.answer(ctx, pending_id, {"content": f"{pair.ANSWER_TEXT} ({seq})"}, actor="import")
        projects.update(ctx, replay.PROJECT, {"mode": "replay"})
    return token


def targets_for(label: str, base: replay.Target, workdir: Path) -> list[replay.Target]:
    bodies = workdir / "sequences.bodies"
    if not bodies.exists():
        bodies.write_text("".join(json.dumps(sequence_body(n)) + "\n" for n in range(SEQUENCES)))
    out = []
    for request in ROWS:
        for session in (False, True):
            url = (
                base.url.replace(f"/p/{replay.PROJECT}/", f"/p/{replay.PROJECT}/s/bench/")
                if session
                else base.url
            )
            body = {ROWS[0]: pair.request_bytes(), ROWS[1]: json.dumps(sequence_body()).encode()}.get(request)
            target = replay.Target(
                f"{label}: {request}, {'session' if session else 'no session'}",
                url,
                {**base.headers, "Content-Type": "application/json"},
                body=body if body is not None else json.dumps(sequence_body(0)).encode(),
            )
            if request == ROWS[2]:
                script = workdir / f"wrk-{label.replace(' ', '-')}-{int(session)}.lua"
                target.script = sizes.cycle_script(script, target, bodies)
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
    *,
    duration: int = 10,
    rounds: int = 3,
    warmup: int = 5,
    dbs: tuple[str, ...] = ("sqlite", "postgres"),
    before: Path | None = None,
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    targets: list[replay.Target] = []
    versions: list[tuple[str, Path | None]] = [("", None)] + ([(" (before)", before)] if before else [])
    with runs.Run("sessions") as run:
        for db in dbs:
            for suffix, src in versions:
                label = f"{db}{suffix}"
                url, pg = run.database(db)
                token = load(url)
                name = f"semula-{db}{'-before' if src else ''}"
                base = run.track(replay.start_semula(label, name, url, token, database=pg, src=src))
                for target in targets_for(label, base, run.workdir):
                    check(target)
                    if warmup:
                        replay.warm_up(target, warmup)
                    targets.append(target)
        runs.interleave(targets, rounds=rounds, duration=duration)
        return report(targets, duration, rounds, before)


def report(targets: list[replay.Target], duration: int, rounds: int, before: Path | None) -> str:
    lines = [
        f"Replay hits with and without a session in the base URL: wrk -t{replay.THREADS} "
        f"-c{replay.CONNECTIONS} -d{duration}s --latency, the {len(pair.request_bytes())} B pair (one "
        f"answer), a request of the same size with {ANSWERS} answers (one session for all of wrk's "
        f"connections, so past call {ANSWERS} every hit replays answer {ANSWERS}), and {SEQUENCES} such "
        f"requests cycled by the connections in one session; medians of {rounds} interleaved rounds."
        + (f" Rows marked (before): the semula of {before}." if before else ""),
        "",
        "| server, request, session | req/s | p50 ms | p99 ms | server CPU µs/req | × no session |",
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
        if session != "session":
            continue
        target = TARGET if ROWS[0] in what else ONE_COUNTER if ROWS[1] in what else MANY_COUNTERS
        verdict = "met" if ratio >= target else "NOT met"
        verdicts.append(f"- {what}: in a session at {ratio:.2f} × without (target ≥ {target}): {verdict}")
    return "\n".join(
        [
            *lines,
            "",
            f"Targets: a single-answer hit in a session ≥ {TARGET} × without; one 3-answer sequence "
            f"repeated in a session ≥ {ONE_COUNTER} ×, {SEQUENCES} of them ≥ {MANY_COUNTERS} ×.",
            *verdicts,
        ]
    )

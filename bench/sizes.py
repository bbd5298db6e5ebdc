"""Replay at realistic sizes (issue #22): workloads A, B, C and C100k against WireMock, a bare Flask
route and semula on SQLite and PostgreSQL, side by side in interleaved rounds.

`python -m bench sizes [--workloads A,B,C,C100k] [--db sqlite,postgres] [--rounds N] [--duration S]`

Each workload's recordings (bench.workloads) are written once, to a wrk body file, a JSON-lines file
the bare Flask route reads and a bundle semula imports (`semula import`'s service call); WireMock gets
one equalToJson stub per recording, up to --wiremock-max (it compares a request with every stub in
turn, so above that it would take the run's time by itself). Every wrk connection cycles through all
of a workload's bodies. After the rounds, the report gives the resident memory of each semula
server's gunicorn (master and 2 workers), the issue's memory target being for workload C100k.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import requests

from bench import replay, runs, workloads
from bench.common import BenchError, PostgresDatabase, read_through, require_tool, rss_kib
from bench.replay import Target
from bench.workloads import NONCE, Recording, Workload

WIREMOCK_MAX = 1_000
MEMORY_TARGET_MB = 300

# The lines of the Lua script wrk runs: each thread reads its share of the bodies (every body when
# there are fewer bodies than threads) and cycles through them. With a nonce, each request gets a
# value of its own in the nonce's place, unique across threads and runs.
LUA = """\
wrk.method = "POST"
{headers}
local path, threads, nonce = {path}, {threads}, {nonce}
local heads, tails, count, sent = {{}}, {{}}, 0, 0
local made = 0

function setup(thread)
  thread:set("number", made)
  made = made + 1
end

local function load(every)
  local n = 0
  for line in io.lines(path) do
    if every or n % threads == number then
      count = count + 1
      if nonce then
        local first, last = string.find(line, nonce, 1, true)
        heads[count], tails[count] = string.sub(line, 1, first - 1), string.sub(line, last + 1)
      else
        heads[count] = line
      end
    end
    n = n + 1
  end
end

function init(args)
  load(false)
  if count == 0 then load(true) end
  local uuid = io.open("/proc/sys/kernel/random/uuid")
  salt = uuid:read("*l") .. "-" .. number .. "-"
  uuid:close()
end

function request()
  sent = sent + 1
  local i = sent % count + 1
  if nonce then
    return wrk.format(nil, nil, nil, heads[i] .. salt .. sent .. tails[i])
  end
  return wrk.format(nil, nil, nil, heads[i])
end
"""


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def lua_string(text: str) -> str:
    return json.dumps(text)  # a JSON string of ASCII is a Lua string literal


def cycle_script(path: Path, target: Target, bodies: Path, nonce: str | None = None) -> Path:
    """A wrk script posting the bodies of a file (one JSON request a line) in turn, with target's headers."""
    headers = {"Content-Type": "application/json", **target.headers}
    lines = [f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items()]
    path.write_text(
        LUA.format(
            headers="\n".join(lines),
            path=lua_string(str(bodies)),
            threads=replay.THREADS,
            nonce=lua_string(nonce) if nonce else "nil",
        )
    )
    return path


@dataclass
class Files:
    """A workload's recordings as each server reads them."""

    bodies: Path  # one request a line, for wrk
    recordings: Path  # one {"request", "response"} a line, for the bare Flask route
    bundle: Path  # a semula bundle, for semula
    count: int
    first: Recording
    last: Recording
    request_bytes: int
    answer_bytes: int


def write_files(workdir: Path, name: str, recordings: Iterable[Recording], *, bodies: bool = True) -> Files:
    """Write the recordings once, to the three files the servers and wrk read (wrk's when `bodies`)."""
    bodies_path = workdir / f"{name}.bodies" if bodies else Path(os.devnull)
    lines, bundle = workdir / f"{name}.jsonl", workdir / f"{name}.bundle"
    count, first, last, size, answer = 0, None, None, 0, 0
    with bodies_path.open("wb") as b, lines.open("wb") as r, bundle.open("wb") as u:
        u.write(b'{"bundle":{"format":"semula-bundle","version":1},"entries":[\n')
        for item in recordings:
            raw = item.request_bytes()
            line = json.dumps({"request": item.request, "response": item.response}).encode()
            b.write(raw + b"\n")
            r.write(line + b"\n")
            u.write((b",\n" if count else b"") + line)
            first, last = first or item, item
            size, answer = size + len(raw), answer + len(json.dumps(item.response))
            count += 1
        u.write(b"\n]}\n")
    if first is None or last is None:
        raise BenchError(f"workload {name} has no recordings")
    return Files(bodies_path, lines, bundle, count, first, last, size // count, answer // count)


def stubs(files: Files) -> Iterator[dict[str, Any]]:
    with files.recordings.open("rb") as lines:
        for line in lines:
            item = json.loads(line)
            yield replay.stub(item["request"], json.dumps(item["response"]).encode())


def check(target: Target, recording: Recording) -> None:
    """One recording asked by hand: a 200 carrying its answer, or the run would measure errors."""
    raw = recording.request_bytes().replace(NONCE.encode(), b"check")
    headers = {"Content-Type": "application/json", **target.headers}
    got = requests.post(target.url, data=raw, headers=headers, timeout=30)
    if got.status_code != 200:
        raise BenchError(f"{target.name} answered {got.status_code}: {got.text[:300]}")
    if got.json()["choices"][0]["message"]["content"] != recording.answer_text():
        raise BenchError(f"{target.name} answered something else than the recorded answer")


def timed(what: str, loads: dict[str, float], action: Any) -> Any:
    started = time.perf_counter()
    out = action()
    loads[what] = time.perf_counter() - started
    print(f"loaded {what} in {loads[what]:.1f} s", file=sys.stderr)
    return out


def semula_targets(
    run: runs.Run, dbs: tuple[str, ...], bundle: Path, loads: dict[str, float], notes: list[str]
) -> list[Target]:
    """semula on each database, the bundle imported into a fresh one; PostgreSQL skipped if absent."""
    out = []
    for db in dbs:
        label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[db]
        try:
            url, pg = run.database(db)
        except BenchError as exc:
            if db != "postgres":
                raise
            notes.append(f"semula on PostgreSQL skipped: {' '.join(str(exc).split())}")
            continue
        token = timed(
            f"semula {label} (bundle import)", loads, lambda url=url: replay.load_bundle(url, bundle)
        )
        target = replay.start_semula(f"semula, {label}", f"semula-{db}", url, token, database=pg)
        target.warm = _warmer(url, pg, notes)
        out.append(run.track(target))
    return out


def _warmer(url: str, pg: PostgresDatabase | None, notes: list[str]) -> Callable[[], None]:
    """What brings a semula store back into memory before each of its runs.

    This machine kind's kernel pages out what was not touched for a minute (session 12 in
    bench/RESULTS.md), and with no swap only file pages can go: a store's file is dropped while
    semula waits through the other servers' runs and the imports, whereas the reference servers keep
    their recordings in their own memory. A server under steady load keeps its store in memory, so
    each run starts from that state: the SQLite file (and its WAL) read through, or PostgreSQL's
    tables and indexes read with pg_prewarm.
    """
    if pg is None:
        path = Path(url.removeprefix("sqlite:///"))
        return lambda: read_through(path, path.with_name(path.name + "-wal"))

    def prewarm() -> None:
        if pg.prewarm() is None and WARM_NOTE not in notes:
            notes.append(WARM_NOTE)

    return prewarm


WARM_NOTE = "pg_prewarm was not usable on PostgreSQL: its store was not read into memory before each run."


def memory(target: Target) -> tuple[float, str]:
    """The resident memory (MB) of a semula server, its gunicorn master and workers, and its parts."""
    assert target.process is not None and target.process.proc is not None
    master = target.process.proc.pid
    workers = target.process.children()
    sizes = [rss_kib(master) / 1024, *(rss_kib(pid) / 1024 for pid in workers)]
    parts = " + ".join(f"{mb:.0f}" for mb in sizes)
    return sum(sizes), f"{sum(sizes):.0f} MB ({parts}: master + {len(workers)} workers)"


def run_workload(
    workload: Workload, *, dbs: tuple[str, ...], rounds: int, duration: int, warmup: int, wiremock_max: int
) -> tuple[str, dict[str, dict[str, float]], dict[str, float]]:
    """One workload's table; also its medians by server and the RSS (MB) of each semula server."""
    loads: dict[str, float] = {}
    notes: list[str] = []
    with runs.Run(f"sizes-{workload.name}") as run:
        files = timed(
            "the recordings' files", loads, lambda: write_files(run.workdir, "w", workload.recordings())
        )
        targets: list[Target] = []
        if workload.count <= wiremock_max:
            wm = timed(
                f"WireMock ({plural(files.count, 'stub')})",
                loads,
                lambda: replay.start_wiremock(stubs(files)),
            )
            targets.append(run.track(wm))
        else:
            notes.append(
                f"WireMock skipped: {files.count:,} stubs is above --wiremock-max {wiremock_max:,} (it "
                "compares each request with every stub in turn; issue #22 measured 143 req/s at 1,000)."
            )
        flask = timed("the bare Flask route", loads, lambda: replay.start_flask(files.recordings))
        targets.append(run.track(flask))
        floor = timed("the floor", loads, lambda: replay.start_floor(files.recordings))
        targets.append(run.track(floor))
        targets += semula_targets(run, dbs, files.bundle, loads, notes)
        for target in targets:
            target.script = cycle_script(
                run.workdir / f"wrk-{len(target.name)}-{id(target)}.lua", target, files.bodies
            )
            check(target, files.first)
            check(target, files.last)
            if warmup:
                replay.warm_up(target, warmup)
        runs.interleave(targets, rounds=rounds, duration=duration)
        rss = {t.name: memory(t) for t in targets if t.name.startswith("semula")}
    lines = [
        f"### Workload {workload.name}: {workload.title}",
        "",
        f"{plural(files.count, 'recording')}, requests of {files.request_bytes:,} B and answers of "
        f"{files.answer_bytes:,} B on average; wrk -t{replay.THREADS} -c{replay.CONNECTIONS} -d{duration}s "
        "--latency, every connection cycling through all the bodies; "
        f"medians of {rounds} interleaved rounds.",
        "",
        *replay.table(targets),
        "",
        "The floor is the bare route's steps as a plain WSGI app on semula's own worker "
        "(bench/floor_app.py): "
        "what any replay server on this stack pays, with no authentication, database, log or checks.",
        "Before each of its runs, semula's store is read into memory (the SQLite file, or PostgreSQL's "
        "relations by pg_prewarm): this kernel pages out files idle for a minute, and a server under "
        "steady load keeps its store in memory.",
        "Loading: " + "; ".join(f"{what} {seconds:.1f} s" for what, seconds in loads.items()) + ".",
        *(f"{note}" for note in notes),
        "",
        "Resident memory after the rounds:",
        *(f"- {name}: {text}" for name, (_, text) in rss.items()),
    ]
    medians = {t.name: replay.summary(t) for t in targets}
    return "\n".join(lines), medians, {name: mb for name, (mb, _) in rss.items()}


def verdicts(results: dict[str, dict[str, dict[str, float]]], rss: dict[str, dict[str, float]]) -> list[str]:
    """Issue #22's targets, met or not, for what this run measured."""
    out = []

    def find(workload: str, prefix: str) -> dict[str, float] | None:
        return next((r for name, r in results.get(workload, {}).items() if name.startswith(prefix)), None)

    for name in results:
        wm, fl = find(name, "WireMock"), find(name, "bare")
        for db, label in (("SQLite", "semula, SQLite"), ("PostgreSQL", "semula, PostgreSQL")):
            r = find(name, label)
            if r is None:
                continue
            checks: list[tuple[str, bool | None]] = []
            if name in ("A", "A0"):
                least = 1.0 if db == "SQLite" else 0.8
                checks.append((f"≥ {least} × WireMock", r["rps"] >= least * wm["rps"] if wm else None))
                if db == "SQLite":
                    checks.append(("≥ 1.5 × bare Flask", r["rps"] >= 1.5 * fl["rps"] if fl else None))
                checks.append(("p99 ≤ 100 ms", r["p99_ms"] <= 100))
            else:
                checks.append(("≥ 1.5 × bare Flask", r["rps"] >= 1.5 * fl["rps"] if fl else None))
                checks.append(("p99 ≤ 50 ms", r["p99_ms"] <= 50))
            if name == "C100k":
                c = find("C", label)
                checks.append(("≥ 0.8 × its C rate", r["rps"] >= 0.8 * c["rps"] if c else None))
                mb = rss.get(name, {}).get(label)
                if mb is not None:
                    checks.append((f"RSS < {MEMORY_TARGET_MB} MB ({mb:.0f})", mb < MEMORY_TARGET_MB))
            said = ", ".join(
                f"{what}: {'-' if ok is None else 'met' if ok else 'NOT met'}" for what, ok in checks
            )
            out.append(f"- {name}, {label}: {said}")
    return out


def run(
    *,
    names: tuple[str, ...] = workloads.DEFAULT,
    dbs: tuple[str, ...] = runs.DATABASES,
    rounds: int = 3,
    duration: int = 10,
    warmup: int = 5,
    wiremock_max: int = WIREMOCK_MAX,
    limit: int | None = None,
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    unknown = set(names) - set(workloads.WORKLOADS)
    if unknown:
        raise BenchError(
            f"unknown workloads: {', '.join(sorted(unknown))} (choose among {', '.join(workloads.WORKLOADS)})"
        )
    sections, results, rss = [], {}, {}
    for name in names:
        workload = workloads.WORKLOADS[name]
        if limit is not None and workload.count > limit:
            workload = dc_replace(
                workload, count=limit, title=f"{workload.title}, cut to {limit:,} (--recordings)"
            )
        text, results[name], rss[name] = run_workload(
            workload,
            dbs=dbs,
            rounds=rounds,
            duration=duration,
            warmup=warmup,
            wiremock_max=wiremock_max,
        )
        sections += [text, ""]
    targets = [
        "Targets (issue #22): A: SQLite ≥ 1.0 × WireMock and ≥ 1.5 × bare Flask, PostgreSQL ≥ 0.8 × "
        "WireMock, p99 ≤ 100 ms; B, C: ≥ 1.5 × bare Flask, p99 ≤ 50 ms; C100k: ≥ 0.8 × C and under "
        f"{MEMORY_TARGET_MB} MB for master and 2 workers.",
        *verdicts(results, rss),
    ]
    return "\n".join(sections + targets)

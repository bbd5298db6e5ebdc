"""Replay hits per second: semula beside WireMock and a bare Flask route, all serving one recorded pair.

Each server gets the same 1.6 KB request from `wrk -t2 -c50 -d10s --latency`; rounds are interleaved
(every server once per round, the order rotated) and the report gives medians over the rounds.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from pathlib import Path
from typing import Any

import requests

from bench import pair, runs
from bench.common import (
    CACHE,
    HOST,
    OUT,
    BenchError,
    PostgresDatabase,
    Process,
    children_cpu_seconds,
    cpu_by_pid,
    free_port,
    machine_busy_seconds,
    median,
    require_tool,
    semula_server,
    wait_quiet,
)

PROJECT = "bench"
WIREMOCK_VERSION = "3.13.2"
CONNECTIONS, THREADS = 50, 2
WRK_TIMEOUT = "2s"
OTHERS_LIMIT = 0.10  # share of the cores that work other than server and wrk may take during a run
ATTEMPTS = 3
PATIENCE = 120.0  # seconds each run waits for a quiet machine; 0: neither wait nor run again (smoke runs)


@dataclass
class Target:
    name: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    process: Process | None = None
    database: PostgresDatabase | None = None  # its backends' CPU counts as the server's
    rounds: list[dict[str, float]] = field(default_factory=list)
    body: bytes | None = None  # what wrk posts; the recorded pair's request when None
    script: Path | None = None  # wrk's Lua script, when it is not the one made from `body`
    connections: int = CONNECTIONS  # wrk's -c
    # Run before each of its wrk runs, untimed: brings its store back into memory (sizes.semula_targets).
    warm: Callable[[], None] | None = None
    metrics_url: str | None = None  # semula's /metrics: the share of its hits answered kept, per run
    # What drives a run of it instead of wrk (with run_wrk's figures): bench.websocket's turns.
    runner: Callable[[Target, int], dict[str, float]] | None = None

    def cpu_by_pid(self) -> dict[int, float]:
        pids = self.process.pids() if self.process else []
        pids += self.database.backend_pids() if self.database else []
        return cpu_by_pid(pids)


@contextmanager
def service(db_url: str) -> Iterator[Any]:
    """A service-layer context (the CLI's principal) on a migrated database, closed afterwards."""
    from semula.config import Settings
    from semula.db import connect
    from semula.migrate import migrate
    from semula.service import CLI, Context

    store = connect(db_url, pool_size=2)
    try:
        migrate(store)
        yield Context(store, dc_replace(Settings(), database_url=db_url), CLI)
    finally:
        store.close()


def replay_token(ctx: Any) -> str:
    """Switch the project to replay mode; the secret of a replay-scope token bound to it (as CI uses)."""
    from semula.service import projects, tokens

    projects.update(ctx, PROJECT, {"mode": "replay"})
    made = tokens.create(ctx, {"role": "viewer", "scope": "replay", "project": PROJECT, "name": "bench"})
    return made["token"]


def load_pair(db_url: str) -> str:
    """Record the pair into a fresh project through the service layer, switch it to replay mode, and
    return the secret of a replay-scope token bound to it (what a CI job would use)."""
    from semula.core import fingerprint as fp
    from semula.service import pending, projects

    with service(db_url) as ctx:
        projects.create(ctx, {"name": PROJECT, "mode": "record"})
        body = pair.request_body()
        pending_id = pending.park(ctx, projects.get_row(ctx, PROJECT), fp.fingerprint(body), body, False)
        assert pending_id is not None
        pending.answer(ctx, pending_id, pair.completion(), actor="import", summary="bench pair")
        return replay_token(ctx)


def load_bundle(db_url: str, bundle: Path) -> str:
    """Import a bundle into a fresh project (`semula import`'s service call); return a replay token."""
    from semula.service import bundles, projects

    with service(db_url) as ctx:
        projects.create(ctx, {"name": PROJECT})
        with open(bundle, "rb") as source:
            bundles.import_bundle(ctx, PROJECT, source)
        return replay_token(ctx)


def wiremock_jar() -> Path:
    """The jar bundled by the npm package `wiremock`, installed into bench/.cache on first use."""
    jars = sorted((CACHE / "node_modules" / "wiremock" / "build").glob("wiremock-standalone-*.jar"))
    if not jars:
        npm = require_tool("npm", "install Node.js and npm to fetch WireMock (npm package `wiremock`)")
        CACHE.mkdir(parents=True, exist_ok=True)
        print(f"installing wiremock@{WIREMOCK_VERSION} into {CACHE} ...", file=sys.stderr)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", CACHE, f"wiremock@{WIREMOCK_VERSION}"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=300,
        )
        jars = sorted((CACHE / "node_modules" / "wiremock" / "build").glob("wiremock-standalone-*.jar"))
    if not jars:
        raise BenchError("npm installed `wiremock` but no wiremock-standalone jar was found in it")
    return jars[-1]


STUB_BATCH = 500  # stubs posted to WireMock's import at once


def stub(request: dict[str, Any], answer: bytes) -> dict[str, Any]:
    """WireMock's stub for one recording: the request's JSON as equalToJson, the answer as recorded."""
    return {
        "request": {
            "method": "POST",
            "url": "/v1/chat/completions",
            "bodyPatterns": [{"equalToJson": request}],
        },
        "response": {"status": 200, "headers": {"Content-Type": "application/json"}, "body": answer.decode()},
    }


def start_wiremock(stubs: Iterable[dict[str, Any]] | None = None) -> Target:
    """WireMock with one stub per recording (the pair's when none are given)."""
    java = require_tool("java", "install a Java 11+ runtime for WireMock")
    port = free_port()
    # No request journal: it would grow by every request of the run and time the JVM's GC, not WireMock.
    process = Process(
        "wiremock",
        [
            java,
            "-jar",
            str(wiremock_jar()),
            "--bind-address",
            HOST,
            "--port",
            str(port),
            "--disable-banner",
            "--no-request-journal",
            "--disable-request-logging",
        ],
    )
    url = f"http://{HOST}:{port}"
    process.start(url + "/__admin/health")
    try:
        batch: list[dict[str, Any]] = []
        for item in [stub(pair.request_body(), pair.answer_bytes())] if stubs is None else stubs:
            batch.append(item)
            if len(batch) == STUB_BATCH:
                _import_stubs(url, batch)
                batch = []
        if batch:
            _import_stubs(url, batch)
    except BaseException:
        process.stop()
        raise
    return Target("WireMock", url + "/v1/chat/completions", process=process)


def _import_stubs(url: str, stubs: list[dict[str, Any]]) -> None:
    response = requests.post(url + "/__admin/mappings/import", json={"mappings": stubs}, timeout=300)
    if response.status_code >= 300:
        raise BenchError(f"WireMock refused the stubs: {response.status_code} {response.text[:300]}")


def start_flask(recordings: Path | None = None) -> Target:
    """The bare Flask route, serving bench.pair or the recordings of a JSON-lines file."""
    label = "bare Flask route (gevent, 2 workers)"
    return _gunicorn("flask", label, "gevent", "bench.flask_app:app", recordings)


def start_floor(recordings: Path | None = None) -> Target:
    """The stack's floor (bench.floor_app): the bare route's steps as plain WSGI on semula's own worker."""
    label = "floor: plain WSGI on semula's worker"
    return _gunicorn("floor", label, "semula.worker.Worker", "bench.floor_app:app", recordings)


def _gunicorn(name: str, label: str, worker: str, app: str, recordings: Path | None) -> Target:
    """gunicorn with 2 workers of the given class serving a bench app on a free port."""
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "-k", worker, "-w", "2", "-b", f"{HOST}:{port}"]
    # A worker reads 100,000 recordings in ~13 s on a busy machine: more than gunicorn's 30 s allows it
    # before its first heartbeat would be, on a busier one.
    argv += ["--timeout", "300", "--log-level", "warning", app]
    env = {"SEMULA_BENCH_RECORDINGS": str(recordings)} if recordings else {}
    process = Process(name, argv, env=env)
    url = f"http://{HOST}:{port}"
    process.start(url + "/healthz", timeout=600)  # each worker reads every recording first
    return Target(label, url + "/v1/chat/completions", process=process)


def start_semula(
    label: str,
    name: str,
    db_url: str,
    token: str,
    *,
    auth: bool = True,
    database: PostgresDatabase | None = None,
    src: Path | None = None,
    **env: str,
) -> Target:
    process, url = semula_server(name, db_url, auth=auth, src=src, **env)
    headers = {"Authorization": f"Bearer {token}"} if auth else {}
    target = Target(label, f"{url}/p/{PROJECT}/v1/chat/completions", headers, process, database)
    target.metrics_url = f"{url}/metrics"
    return target


KEPT_SERIES = ('semula_proxy_calls_total{outcome="hit"}', "semula_kept_hits_total")


def hits_and_kept(target: Target) -> tuple[float, float] | None:
    """semula's replay hits and those of them answered kept, from /metrics (None: not semula, or a
    semula without the kept series)."""
    if target.metrics_url is None:
        return None
    text = requests.get(target.metrics_url, timeout=10).text
    values = {line.split()[0]: float(line.split()[-1]) for line in text.splitlines() if line[:1] != "#"}
    if KEPT_SERIES[1] not in values:
        return None
    return values.get(KEPT_SERIES[0], 0.0), values[KEPT_SERIES[1]]


def kept_share(target: Target, before: tuple[float, float] | None, served: int) -> float | None:
    """The share of the hits since `before` that were answered kept. Each worker writes its counts
    every 0.1 s: read until the hits counted reach the `served` wrk saw answered (a second at most)."""
    if before is None:
        return None
    deadline = time.monotonic() + 1.0
    while True:
        after = hits_and_kept(target)
        assert after is not None
        hits = after[0] - before[0]
        if hits >= served or time.monotonic() > deadline:
            return (after[1] - before[1]) / hits if hits else None
        time.sleep(0.05)


def check(target: Target) -> None:
    """One request by hand: a 200 carrying the recorded answer, or the benchmark would measure errors."""
    response = requests.post(
        target.url,
        data=pair.request_bytes(),
        headers={"Content-Type": "application/json", **target.headers},
        timeout=10,
    )
    if response.status_code != 200:
        raise BenchError(f"{target.name} answered {response.status_code}: {response.text[:300]}")
    content = response.json()["choices"][0]["message"]["content"]
    if content != pair.ANSWER_TEXT:
        raise BenchError(f"{target.name} answered something else than the recorded answer")


def wrk_script(target: Target) -> Path:
    if target.script is not None:
        return target.script
    lines = ['wrk.method = "POST"', 'wrk.headers["Content-Type"] = "application/json"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in target.headers.items()]
    lines.append(f"wrk.body = [==[{(target.body or pair.request_bytes()).decode()}]==]")
    path = OUT / f"wrk-{re.sub(r'[^a-z0-9]+', '-', target.name.lower())}.lua"
    path.write_text("\n".join(lines) + "\n")
    return path


_UNITS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text).groups()  # type: ignore[union-attr]
    return float(number) * _UNITS[unit]


def parse_wrk(output: str) -> dict[str, float]:
    rps = re.search(r"Requests/sec:\s+([\d.]+)", output)
    p50 = re.search(r"^\s+50%\s+(\S+)", output, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", output, re.M)
    if not (rps and p50 and p99):
        raise BenchError(f"cannot read wrk's output:\n{output}")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return {
        "rps": float(rps.group(1)),
        "p50_ms": _ms(p50.group(1)),
        "p99_ms": _ms(p99.group(1)),
        "non2xx": int(non2xx.group(1)) if non2xx else 0,
        "socket_errors": sum(int(n) for n in errors.groups()) if errors else 0,
    }


SETTLE_LIMIT = 30.0  # seconds a server may take to finish what an earlier run left queued
IDLE = 0.07  # share of one core below which a server counts as idle


def settle(target: Target) -> None:
    """Wait (boundedly) until the server has answered what an earlier run left queued: a slow server
    keeps working after wrk stops, and that work would count against the next run (of any target)."""
    deadline = time.monotonic() + SETTLE_LIMIT
    last = sum(target.cpu_by_pid().values())
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = sum(target.cpu_by_pid().values())
        if now - last <= IDLE * 0.3:
            return
        last = now


def run_wrk(target: Target, duration: int) -> dict[str, float]:
    """One wrk run, with the server's CPU time per request added to wrk's figures.

    Each run starts once the machine is quiet, and is repeated (boundedly) when other work took more
    than OTHERS_LIMIT of the cores meanwhile: whatever else runs on the two cores skews the row.
    """
    wrk = require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    argv = [wrk, f"-t{THREADS}", f"-c{target.connections}", f"-d{duration}s", "--latency"]
    argv += ["--timeout", WRK_TIMEOUT, "-s", str(wrk_script(target)), target.url]
    attempts = ATTEMPTS if PATIENCE > 0 else 1
    for attempt in range(1, attempts + 1):
        settle(target)
        if PATIENCE > 0:
            wait_quiet(patience=PATIENCE)
        if target.warm is not None:  # last: a long wait for quiet cores lets the store go cold again
            target.warm()
        counted = hits_and_kept(target)  # before the CPU is read: the scrape is not the run's
        machine0, wrk0 = machine_busy_seconds(), children_cpu_seconds()
        server0 = target.cpu_by_pid()
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 60, check=True)
        server = sum(cpu - server0.get(pid, 0.0) for pid, cpu in target.cpu_by_pid().items())
        wrk_cpu = children_cpu_seconds() - wrk0
        machine = machine_busy_seconds() - machine0
        result = parse_wrk(done.stdout)
        requests_done = result["rps"] * duration
        result["cpu_us"] = 1e6 * server / requests_done if requests_done else float("nan")
        result["client_cpu_us"] = 1e6 * wrk_cpu / requests_done if requests_done else float("nan")
        result["others"] = max(0.0, machine - server - wrk_cpu) / (duration * (os.cpu_count() or 1))
        kept = kept_share(target, counted, int(requests_done) - int(result["non2xx"]))
        if kept is not None:
            result["kept"] = kept
        if result["others"] <= OTHERS_LIMIT:
            break
        print(
            f"{target.name}: other work took {result['others']:.0%} of the cores during the run"
            + ("; running it again" if attempt < attempts else "; keeping it"),
            file=sys.stderr,
        )
    return result


JIT_WARMUP_MIN = 90  # seconds of load a JVM server gets at least: its rate climbs for a minute or more
JIT_WARMUP_LIMIT = 240  # seconds a JVM server may take to reach its steady rate
STEADY = 0.03  # after the minimum, two warm-up runs within 3% of each other: the rate has settled


def warm_up(target: Target, seconds: int) -> None:
    """One warm-up run; a JVM server runs again until its rate settles (its JIT compiles for a minute
    or more on a slow machine, and a test suite in front of it runs far longer than that). Two runs
    that agree early mean little: WireMock here went 4,900 -> 5,100 -> 6,200 -> 8,400 -> 10,100 req/s."""
    last = run_wrk(target, seconds)["rps"]
    if not target.name.startswith("WireMock"):
        return
    spent = seconds
    while spent < JIT_WARMUP_LIMIT:
        rate = run_wrk(target, seconds)["rps"]
        spent += seconds
        print(f"warming {target.name}: {rate:,.0f} req/s", file=sys.stderr)
        if spent >= JIT_WARMUP_MIN and abs(rate - last) <= STEADY * max(rate, last):
            return
        last = rate


def summary(target: Target) -> dict[str, float]:
    """A target's rounds in one row: medians of rate, latency and CPU; non-2xx and errors added up."""
    keys = ("rps", "p50_ms", "p99_ms", "cpu_us")
    return {k: median([r[k] for r in target.rounds]) for k in keys} | {
        "non2xx": sum(r["non2xx"] for r in target.rounds),
        "socket_errors": sum(r["socket_errors"] for r in target.rounds),
    }


def _round(result: dict[str, float]) -> str:
    kept = f", kept {result['kept']:.0%}" if "kept" in result else ""
    return f"{result['rps']:,.0f} ({result['others']:.0%}{kept})"


def table(targets: list[Target]) -> list[str]:
    """The markdown table of the targets' medians, × WireMock and × the bare Flask route among them."""
    rows = {t.name: summary(t) for t in targets}
    by_kind = {t.name.split(" ")[0]: rows[t.name] for t in targets}
    wiremock, flask = by_kind.get("WireMock"), by_kind.get("bare")
    lines = [
        "| server | req/s | p50 ms | p99 ms | × WireMock | × bare Flask | server CPU µs/req ¹ | non-2xx "
        "| socket errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in targets:
        r = rows[t.name]
        vs_wm = f"{r['rps'] / wiremock['rps']:.2f}" if wiremock else "-"
        vs_fl = f"{r['rps'] / flask['rps']:.2f}" if flask else "-"
        lines.append(
            f"| {t.name} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {vs_wm} | {vs_fl} "
            f"| {r['cpu_us']:.0f} | {r['non2xx']} | {r['socket_errors']} |"
        )
    lines += [
        "",
        "¹ CPU time of the server's processes (with PostgreSQL's backends for its database) per request,",
        "read from /proc before and after each wrk run.",
        "",
        "Per round (req/s, and the share of the cores other work took during the run; for semula, the "
        "share of its hits answered kept, read from its /metrics):",
    ]
    lines += [f"- {t.name}: " + ", ".join(_round(r) for r in t.rounds) for t in targets]
    return lines


def report(targets: list[Target], duration: int, rounds: int) -> str:
    rows = {t.name: summary(t) for t in targets}
    by_kind = {t.name.split(" ")[0]: rows[t.name] for t in targets}
    wiremock, flask = by_kind.get("WireMock"), by_kind.get("bare")
    lines = [
        f"Replay hits: wrk -t{THREADS} -c{CONNECTIONS} -d{duration}s --latency, POST of a "
        f"{len(pair.request_bytes())} B request answered by a {len(pair.answer_bytes())} B recording; "
        f"medians of {rounds} interleaved rounds.",
        "",
        *table(targets),
    ]
    semula = [t for t in targets if t.name.startswith("semula")]
    if semula and wiremock and flask:
        lines.append("")
        lines.append("Targets: semula ≥ 0.6 × WireMock req/s, ≥ 2 × the bare Flask route, p99 ≤ 100 ms.")
        for t in semula:
            r = rows[t.name]
            ok = r["rps"] >= 0.6 * wiremock["rps"] and r["rps"] >= 2 * flask["rps"] and r["p99_ms"] <= 100
            lines.append(f"- {t.name}: {'met' if ok else 'NOT met'}")
    return "\n".join(lines)


SERVERS = (
    "wiremock",
    "flask",
    "floor",
    "semula-sqlite",
    "semula-sqlite-noauth",
    "semula-postgres",
    "semula-postgres-notify",
)
# semula-postgres-notify: SEMULA_CHANGE_CHECK=notify (decision 0047), on the same database as
# semula-postgres when both run, so the two interleave in one run; the database's backends count
# for whichever is measured (the other is idle then).


def run(*, duration: int = 10, rounds: int = 3, warmup: int = 5, only: tuple[str, ...] = SERVERS) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    targets: list[Target] = []
    with runs.Run("replay") as run:
        if "wiremock" in only:
            targets.append(run.track(start_wiremock()))
        if "flask" in only:
            targets.append(run.track(start_flask()))
        if "floor" in only:
            targets.append(run.track(start_floor()))
        if {"semula-sqlite", "semula-sqlite-noauth"} & set(only):
            sqlite_url, _ = run.database("sqlite")
            token = load_pair(sqlite_url)
            if "semula-sqlite" in only:
                label = "semula, SQLite, auth on"
                targets.append(run.track(start_semula(label, "semula-sqlite", sqlite_url, token)))
            if "semula-sqlite-noauth" in only:
                label = "semula, SQLite, auth off"
                target = start_semula(label, "semula-sqlite-noauth", sqlite_url, token, auth=False)
                targets.append(run.track(target))
        if {"semula-postgres", "semula-postgres-notify"} & set(only):
            try:
                pg_url, pg = run.database("postgres")
            except BenchError as exc:  # the other rows are still worth having
                print(f"skipping the PostgreSQL rows: {exc}", file=sys.stderr)
            else:
                token = load_pair(pg_url)
                if "semula-postgres" in only:
                    label = "semula, PostgreSQL, auth on"
                    target = start_semula(label, "semula-postgres", pg_url, token, database=pg)
                    targets.append(run.track(target))
                if "semula-postgres-notify" in only:
                    label = "semula, PostgreSQL, auth on, notify"
                    target = start_semula(
                        label,
                        "semula-postgres-notify",
                        pg_url,
                        token,
                        database=pg,
                        SEMULA_CHANGE_CHECK="notify",
                    )
                    targets.append(run.track(target))
        for target in targets:
            check(target)
            if warmup:
                warm_up(target, warmup)
        runs.interleave(targets, rounds=rounds, duration=duration)
        text = report(targets, duration, rounds)
        data: dict[str, Any] = {t.name: t.rounds for t in targets}
        (OUT / "replay.json").write_text(json.dumps(data, indent=2))
        return text

"""Where a first sight's server CPU goes through HTTP (issue #52), against the floor in the same round.

    .venv/bin/python -m bench.sight_split [--kib 2,32,88] [--db sqlite,postgres] [--rounds 3]
        [--duration 4] [--variant NAME=VAR=VALUE ...]

One store holds bench.firstsight's probe of each size (the agent request with its 23 tools); the
floor (bench/floor_app.py on semula's worker) and `semula serve` on each database answer it, every
request with a `user` of its own (a first sight every time), wrk -t2 -c4 for --duration seconds,
the servers one after another in each round. Around each run the CPU of every task (thread) of the
server's processes and of its database's backends is read from /proc, utime and stime apart, so
the report splits a request's CPU by where it was spent: the workers' event loop thread (the
request's own work, gevent, the call log's buffering), their native threads (SQLite's call-log
inserts, offloaded), the gunicorn master, PostgreSQL's backends. On PostgreSQL it adds what
pg_stat_database counted per request (transactions, rows fetched and inserted).

Unlike `bench firstsight` nothing waits for a quiet machine: every figure is a ratio to the floor
measured in the same round, or a CPU time, which another process's load moves far less than a
rate. `--variant NAME=VAR=VALUE` adds a semula of each database started with that environment
variable (say `nolog=SEMULA_CALL_LOG_HITS=0`, the call log's share).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import time
from pathlib import Path

from bench import firstsight, replay, runs, sizes
from bench.common import BenchError, median
from bench.replay import Target
from bench.workloads import NONCE

TICK = os.sysconf("SC_CLK_TCK")
LOOP, NATIVE = "workers' event loop", "workers' native threads"
MASTER, BACKENDS = "gunicorn master", "database backends"
FLUSHED = 0.7  # s: past the call log's flush interval (0.5 s)
PG_COUNTS = ("xact_commit", "tup_fetched", "tup_inserted")


def task_cpu(pids: list[int]) -> dict[tuple[int, int], tuple[str, float, float]]:
    """Each live task of these processes: its name, utime and stime in seconds."""
    out = {}
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                name = (task / "comm").read_text().strip()
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                continue
            out[(pid, int(task.name))] = (name, int(fields[11]) / TICK, int(fields[12]) / TICK)
    return out


def pg_counts(target: Target) -> dict[str, int]:
    if target.database is None:
        return {}
    import psycopg

    with psycopg.connect(target.database.url, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT {', '.join(PG_COUNTS)} FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    return dict(zip(PG_COUNTS, row, strict=True))


def role(target: Target, pid: int, tid: int, backends: set[int]) -> str:
    if pid in backends:
        return BACKENDS
    assert target.process is not None and target.process.proc is not None
    if pid == target.process.proc.pid:
        return MASTER
    return LOOP if pid == tid else NATIVE


def measure(target: Target, duration: int) -> tuple[int, dict[str, tuple[float, float]], dict[str, float]]:
    """One wrk run: requests answered, CPU seconds (user, system) by role, PostgreSQL counts a request."""
    counts0 = pg_counts(target)
    backends = set(target.database.backend_pids() if target.database else [])
    pids = target.process.pids() if target.process else []
    before = task_cpu(pids + sorted(backends))
    argv = ["wrk", "-t2", f"-c{target.connections}", f"-d{duration}s", "--timeout", "2s"]
    done = subprocess.run(
        [*argv, "-s", str(target.script), target.url], capture_output=True, text=True, check=True
    )
    time.sleep(FLUSHED)  # the call log's last batch of the run is the run's
    backends |= set(target.database.backend_pids() if target.database else [])
    pids = sorted(set(pids) | set(target.process.pids() if target.process else []))
    after = task_cpu(pids + sorted(backends))
    found = re.search(r"(\d+) requests in", done.stdout)
    if found is None or "Non-2xx" in done.stdout:
        raise BenchError(f"{target.name}: wrk saw errors or no count:\n{done.stdout}")
    requests = int(found[1])
    split: dict[str, tuple[float, float]] = {}
    for key, (_, user, system) in after.items():
        _, user0, system0 = before.get(key, ("", 0.0, 0.0))
        name = role(target, *key, backends)
        u, s = split.get(name, (0.0, 0.0))
        split[name] = (u + user - user0, s + system - system0)
    counts1 = pg_counts(target)
    per = {name: (counts1[name] - counts0[name]) / requests for name in counts0} if requests else {}
    return requests, split, per


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kib", default="2,32,88")
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=int, default=4)
    parser.add_argument("--variant", action="append", default=[], help="NAME=VAR=VALUE")
    args = parser.parse_args()
    request_sizes = tuple(int(k) * 1024 for k in args.kib.split(","))
    variants: list[tuple[str, dict[str, str]]] = [("", {})]
    for variant in args.variant:
        label, variable, value = variant.split("=", 2)
        variants.append((label, {variable: value}))
    results: dict[tuple[int, str], list[tuple[int, dict[str, tuple[float, float]], dict[str, float]]]] = {}
    with runs.Run("sight-split") as run:
        files = sizes.write_files(run.workdir, "all", firstsight.recordings(1, request_sizes), bodies=False)
        servers = [run.track(replay.start_floor(files.recordings))]
        for db in args.db.split(","):
            for label, env in variants:
                url, pg = run.database(db)
                token = replay.load_bundle(url, files.bundle)
                name = f"semula {db}" + (f" ({label})" if label else "")
                server = replay.start_semula(name, f"semula-{db}", url, token, database=pg, **env)
                servers.append(run.track(server))
        targets = []
        for size in request_sizes:
            bodies = run.workdir / f"probe-{size}.bodies"
            bodies.write_bytes(firstsight.probe(size, 0).request_bytes() + b"\n")
            for server in servers:
                target = Target(
                    server.name, server.url, dict(server.headers), server.process, server.database
                )
                target.connections = firstsight.CONNECTIONS
                script = run.workdir / f"wrk-{size}-{len(targets)}.lua"
                target.script = sizes.cycle_script(script, target, bodies, NONCE)
                sizes.check(target, firstsight.probe(size, 0))
                replay.settle(target)
                measure(target, 1)  # warm-up
                targets.append((size, target))
        for number in range(args.rounds):
            for size, target in targets:
                replay.settle(target)  # what the run before left queued (the call log's flush)
                got = measure(target, args.duration)
                results.setdefault((size, target.name), []).append(got)
                cpu = sum(u + s for u, s in got[1].values())
                load = Path("/proc/loadavg").read_text().split()[0]
                what = f"round {number + 1}, {size // 1024} KiB, {target.name}"
                print(f"{what}: {1e6 * cpu / got[0]:.0f} µs (load {load})", flush=True)
    print(report(results, request_sizes, [s.name for s in servers], args))


def report(results, request_sizes, names, args) -> str:  # noqa: ANN001 - this module's own tables
    lines = [
        f"Server CPU per first sight, µs (median of {args.rounds} rounds; wrk -t2 -c{firstsight.CONNECTIONS} "
        f"-d{args.duration}s; × floor: each round's ratio to the floor's run of that round, then the median)",
        "",
        "| KiB | server | total | × floor | event loop (user/sys) | native threads | master | backends "
        "| per request on PostgreSQL |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for size in request_sizes:
        floor = results[(size, names[0])]
        floor_cpu = [sum(u + s for u, s in split.values()) / n for n, split, _ in floor]
        for name in names:
            rounds = results[(size, name)]
            totals = [sum(u + s for u, s in split.values()) / n for n, split, _ in rounds]
            ratio = median([t / f for t, f in zip(totals, floor_cpu, strict=True)])

            def part(role: str, rounds=rounds) -> str:  # noqa: ANN001
                user = median([split.get(role, (0.0, 0.0))[0] / n * 1e6 for n, split, _ in rounds])
                system = median([split.get(role, (0.0, 0.0))[1] / n * 1e6 for n, split, _ in rounds])
                return f"{user:.0f}/{system:.0f}"

            counts = ", ".join(
                f"{key} {median([per[key] for _, _, per in rounds]):.2f}" for key in rounds[0][2]
            )
            lines.append(
                f"| {size // 1024} | {name} | {1e6 * median(totals):.0f} | {ratio:.2f} | "
                f"{part(LOOP)} | {part(NATIVE)} | {part(MASTER)} | {part(BACKENDS)} | {counts} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()

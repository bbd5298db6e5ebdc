"""First sight (issue #22): server CPU per request for requests semula has not seen before, each of
which matches a recording, over request size x recordings in the store, semula against the bare
Flask route. `python -m bench firstsight [--counts 1,1000,10000,100000] [--sizes 2,8,32,128]`.

For each count, one store holds, for each size, up to PROBES agent requests of that size
(bench.workloads.agent_request) and fills the rest with the 1.6 KB pair's variants. wrk cycles through
one size's probes, and gives every request a `user` of its own (unique across threads and runs):
`user` is left out of the fingerprint, so each request matches its recording, but its bytes are new,
so it is never a kept hit (those are kept under the exact body). The bare Flask route leaves the same
fields out of its key. A count smaller than the sizes times one probe still holds one probe per size.

Server CPU is read from /proc (utime + stime of the server's processes and, on PostgreSQL, of its
database's backends) before and after each wrk run (wrk -c4, once the server has finished what the
run before left queued), divided by the requests wrk completed: what the machine paid per request,
gevent's loop, the call log's flushes and the database included.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

from bench import replay, runs, sizes, workloads
from bench.common import BenchError, median, require_tool
from bench.replay import Target
from bench.workloads import NONCE, Recording

COUNTS = (1, 1_000, 10_000, 100_000)
SIZES = (2 * 1024, 8 * 1024, 32 * 1024, 128 * 1024)
PROBES = 64  # distinct recordings per size the requests go round
# Few connections: a test suite replays mostly one call at a time, and a slow cell (128 KB on a slow
# path) then answers what it was sent instead of queueing it past wrk's timeout; the CPU of the
# requests still in flight when a run ends is at most this many requests' worth.
CONNECTIONS = 4


def probes_per_size(count: int, n_sizes: int) -> int:
    return max(1, min(PROBES, count // n_sizes))


def probe(size: int, variant: int, tools: bool = True) -> Recording:
    """An agent request of about `size`, its `user` the nonce (without `tools`, no tool definitions)."""
    request = workloads.agent_request(size, variant, tools=tools)
    request["user"] = NONCE  # each request of the run puts a value of its own here
    return Recording(request, workloads.answer(request, variant))


def recordings(count: int, request_sizes: tuple[int, ...], tools: bool = True) -> Iterator[Recording]:
    """The store for one count: the probes of every size, then the pair's variants up to count."""
    per_size = probes_per_size(count, len(request_sizes))
    for size in request_sizes:
        yield from (probe(size, variant, tools) for variant in range(per_size))
    yield from (workloads.pair_recording(v) for v in range(max(0, count - per_size * len(request_sizes))))


def run_count(
    count: int,
    request_sizes: tuple[int, ...],
    *,
    dbs: tuple[str, ...],
    rounds: int,
    duration: int,
    warmup: int,
    tools: bool,
) -> tuple[dict[tuple[int, str], list[dict[str, float]]], list[str], dict[int, int]]:
    """Measure every size against one store of `count` recordings; the rounds by (size, server)."""
    loads: dict[str, float] = {}
    notes: list[str] = []
    per_size = probes_per_size(count, len(request_sizes))
    with runs.Run(f"firstsight-{count}") as run:
        files = sizes.timed(
            f"the files of {sizes.plural(count, 'recording')}",
            loads,
            lambda: sizes.write_files(
                run.workdir, "all", recordings(count, request_sizes, tools), bodies=False
            ),
        )
        bodies, actual = {}, {}
        for size in request_sizes:
            bodies[size] = run.workdir / f"probes-{size}.bodies"
            made = [probe(size, v, tools) for v in range(per_size)]
            bodies[size].write_bytes(b"".join(r.request_bytes() + b"\n" for r in made))
            actual[size] = len(made[0].request_bytes())
        servers = [run.track(replay.start_flask(files.recordings))]
        servers.append(run.track(replay.start_floor(files.recordings)))
        servers += sizes.semula_targets(run, dbs, files.bundle, loads, notes)
        targets: list[tuple[int, Target]] = []
        for size in request_sizes:
            for server in servers:
                target = Target(
                    server.name, server.url, dict(server.headers), server.process, server.database
                )
                target.connections = CONNECTIONS
                target.script = sizes.cycle_script(
                    run.workdir / f"wrk-{size}-{len(targets)}.lua", target, bodies[size], NONCE
                )
                sizes.check(target, probe(size, per_size - 1, tools))
                if warmup:
                    replay.run_wrk(target, warmup)
                targets.append((size, target))
        print(f"{sizes.plural(count, 'recording')}: measuring {len(targets)} runs per round", file=sys.stderr)
        runs.interleave([t for _, t in targets], rounds=rounds, duration=duration)
    notes += [
        f"{sizes.plural(count, 'recording')}: loading "
        + "; ".join(f"{w} {s:.1f} s" for w, s in loads.items())
    ]
    return {(size, t.name): t.rounds for size, t in targets}, notes, actual


def run(
    *,
    counts: tuple[int, ...] = COUNTS,
    request_sizes: tuple[int, ...] = SIZES,
    dbs: tuple[str, ...] = runs.DATABASES,
    rounds: int = 3,
    duration: int = 10,
    warmup: int = 2,
    tools: bool = True,
) -> str:
    require_tool("wrk", "install it with `apt-get install -y wrk` (Debian/Ubuntu)")
    if not counts or not request_sizes or min(counts) < 1 or min(request_sizes) < 1024:
        raise BenchError("firstsight needs counts of at least 1 and sizes of at least 1 KiB")
    results: dict[tuple[int, int, str], list[dict[str, float]]] = {}
    notes: list[str] = []
    actual: dict[int, int] = {}
    for count in counts:
        measured, said, actual = run_count(
            count, request_sizes, dbs=dbs, rounds=rounds, duration=duration, warmup=warmup, tools=tools
        )
        results |= {(count, size, name): rounds_ for (size, name), rounds_ in measured.items()}
        notes += said
    servers = list(dict.fromkeys(name for _, _, name in results))
    flask = next(name for name in servers if name.startswith("bare"))
    others = [name for name in servers if name != flask]  # the floor and semula on each database
    header = [
        "request",
        "recordings",
        *(f"{n} µs/req" for n in servers),
        *(f"{n} × Flask CPU" for n in others),
    ]
    header.append("non-2xx + errors")
    lines = [
        f"Server CPU per request on first sight: wrk -t{replay.THREADS} -c{CONNECTIONS} "
        f"-d{duration}s per run, medians of {rounds} interleaved rounds; every request new to semula (a "
        "`user` of its own, outside the fingerprint) and matching a recording. CPU read from /proc of the "
        "server's processes (and, on PostgreSQL, its database's backends) around each run, per request "
        "completed." + ("" if tools else " The agent requests define no tools (--no-tools)."),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---:|" * len(header),
    ]
    for size in request_sizes:
        for count in counts:
            cpu = {n: median([r["cpu_us"] for r in results[(count, size, n)]]) for n in servers}
            bad = sum(r["non2xx"] + r["socket_errors"] for n in servers for r in results[(count, size, n)])
            cells = [f"{actual.get(size, size):,} B", f"{count:,}", *(f"{cpu[n]:.0f}" for n in servers)]
            cells += [f"{cpu[n] / cpu[flask]:.2f}" for n in others]
            lines.append("| " + " | ".join([*cells, str(bad)]) + " |")
    lines += [
        "",
        f"Each store holds up to {PROBES} recordings per size measured (one when the count is smaller than "
        "the sizes), the rest being the 1.6 KB pair's variants. Target (issue #22): first sight of the 88 KB "
        "request ≤ 250 µs of server CPU. The floor is the bare route's steps as a plain WSGI app on semula's "
        "own worker (bench/floor_app.py): the part of that target no change to semula can go below.",
        *(f"- {note}" for note in notes),
    ]
    return "\n".join(lines)

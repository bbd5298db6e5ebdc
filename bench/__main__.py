"""`python -m bench [replay|hold|heldscale|dialects|sessions|sizes|firstsight|replaystart] [options]`:
run semula's benchmarks and print a report."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench import (
    dialects,
    firstsight,
    heldscale,
    hold,
    replay,
    replay_start,
    runs,
    sessions,
    sizes,
    workloads,
)
from bench.common import OUT, BenchError, machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "which",
        nargs="*",
        help="of replay, hold, heldscale, dialects, sessions, sizes, firstsight, replaystart "
        "(default: replay hold)",
    )
    parser.add_argument("--duration", type=int, default=10, help="seconds of each wrk run")
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds of wrk runs; replaystart: starts per row"
    )
    parser.add_argument("--warmup", type=int, default=5, help="seconds of warm-up per server (0: none)")
    parser.add_argument(
        "--servers", default=",".join(replay.SERVERS), help=f"replay servers, of {', '.join(replay.SERVERS)}"
    )
    parser.add_argument("--calls", type=int, default=5000, help="calls held at once (hold, heldscale)")
    parser.add_argument(
        "--per-worker",
        type=int,
        default=12_500,
        help="held calls per worker (heldscale: the workers it starts)",
    )
    parser.add_argument(
        "--db",
        default="postgres,sqlite",
        help="databases for hold, dialects, sessions, sizes, firstsight: postgres,sqlite",
    )
    parser.add_argument(
        "--patience",
        type=float,
        default=replay.PATIENCE,
        help="seconds each wrk run waits for the machine to be quiet (0: no wait, no rerun; smoke runs)",
    )
    parser.add_argument(
        "--workloads",
        default=",".join(workloads.DEFAULT),
        help=f"sizes: of {', '.join(workloads.WORKLOADS)} (issue #22)",
    )
    parser.add_argument(
        "--wiremock-max",
        type=int,
        default=sizes.WIREMOCK_MAX,
        help="sizes: the most recordings WireMock is loaded with; above, its row is skipped",
    )
    parser.add_argument(
        "--recordings", type=int, default=None, help="sizes: cut every workload to this many (smoke runs)"
    )
    parser.add_argument(
        "--counts",
        default=",".join(str(n) for n in firstsight.COUNTS),
        help="firstsight: recordings in the store",
    )
    parser.add_argument(
        "--sizes",
        default=",".join(str(n // 1024) for n in firstsight.SIZES),
        help="firstsight: request sizes in KiB",
    )
    parser.add_argument(
        "--no-tools", action="store_true", help="firstsight: agent requests without tool definitions"
    )
    parser.add_argument(
        "--before",
        type=Path,
        default=None,
        help="sessions: also serve the semula of this checkout (an older commit), interleaved",
    )
    parser.add_argument(
        "--bundle-entries",
        default=",".join(str(n) for n in replay_start.COUNTS),
        help="replaystart: entries in the bundles `semula replay` starts with",
    )
    args = parser.parse_args(argv)
    replay.PATIENCE = args.patience

    def numbers(text: str, option: str) -> tuple[int, ...]:
        try:
            return tuple(int(n) for n in text.split(",") if n.strip())
        except ValueError:
            parser.error(f"{option} takes whole numbers separated by commas, not {text!r}")

    which = args.which or ["replay", "hold"]
    if set(which) - {
        "replay",
        "hold",
        "heldscale",
        "dialects",
        "sessions",
        "sizes",
        "firstsight",
        "replaystart",
    }:
        parser.error(
            "choose among: replay, hold, heldscale, dialects, sessions, sizes, firstsight, replaystart"
        )
    command = " ".join(["python -m bench", *(argv if argv is not None else sys.argv[1:])])
    sections = [
        f"# semula benchmarks, {time.strftime('%Y-%m-%d %H:%M')}",
        "",
        f"Machine: {machine()}",
        f"Command: `{command}`",
    ]
    try:
        if "replay" in which:
            servers = tuple(s.strip() for s in args.servers.split(",") if s.strip())
            unknown = set(servers) - set(replay.SERVERS)
            if unknown:
                parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
            text = replay.run(duration=args.duration, rounds=args.rounds, warmup=args.warmup, only=servers)
            sections += ["", "## Replay", "", text]
        dbs = runs.parse_dbs(args.db)
        if "dialects" in which:
            text = dialects.run(duration=args.duration, rounds=args.rounds, warmup=args.warmup, dbs=dbs)
            sections += ["", "## Replay hits per API", "", text]
        if "sessions" in which:
            text = sessions.run(
                duration=args.duration, rounds=args.rounds, warmup=args.warmup, dbs=dbs, before=args.before
            )
            sections += ["", "## Replay hits in sessions", "", text]
        if "sizes" in which:
            text = sizes.run(
                names=tuple(w.strip() for w in args.workloads.split(",") if w.strip()),
                dbs=dbs,
                rounds=args.rounds,
                duration=args.duration,
                warmup=args.warmup,
                wiremock_max=args.wiremock_max,
                limit=args.recordings,
            )
            sections += ["", "## Replay at realistic sizes", "", text]
        if "firstsight" in which:
            text = firstsight.run(
                counts=numbers(args.counts, "--counts"),
                request_sizes=tuple(1024 * n for n in numbers(args.sizes, "--sizes")),
                dbs=dbs,
                rounds=args.rounds,
                duration=args.duration,
                warmup=min(args.warmup, 2),
                tools=not args.no_tools,
            )
            sections += ["", "## First sight: server CPU per request", "", text]
        if "replaystart" in which:
            text = replay_start.run(numbers(args.bundle_entries, "--bundle-entries"), runs=args.rounds)
            sections += ["", "## `semula replay`: start to first hit", "", text]
        if "hold" in which:
            for db in dbs:
                try:
                    text = hold.run(db=db, calls=args.calls)
                except BenchError as exc:
                    if db != "postgres":
                        raise
                    text = f"Skipped: {exc}"  # PostgreSQL is optional; SQLite is not
                sections += ["", f"## Held calls ({db})", "", text]
        if "heldscale" in which:
            for db in dbs:
                text = heldscale.run(db=db, calls=args.calls, per_worker=args.per_worker)
                sections += ["", f"## Held calls at a host's scale ({db})", "", text]
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # the runs have stopped their servers and dropped their databases
        print("bench: interrupted; servers stopped, temporary databases and files removed", file=sys.stderr)
        return 130
    report = "\n".join(sections) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

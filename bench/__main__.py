"""`python -m bench [replay|hold|dialects|sessions] [options]`: run semula's benchmarks and print a report."""

from __future__ import annotations

import argparse
import sys
import time

from bench import dialects, hold, replay, sessions
from bench.common import OUT, BenchError, machine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("which", nargs="*", help="replay and/or hold (default: both)")
    parser.add_argument("--duration", type=int, default=10, help="seconds of each wrk run (replay)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (replay)")
    parser.add_argument("--warmup", type=int, default=5, help="seconds of warm-up per server (replay)")
    parser.add_argument(
        "--servers", default=",".join(replay.SERVERS), help=f"replay servers, of {', '.join(replay.SERVERS)}"
    )
    parser.add_argument("--calls", type=int, default=5000, help="calls held at once (hold)")
    parser.add_argument(
        "--db", default="postgres,sqlite", help="databases for hold and dialects: postgres,sqlite"
    )
    args = parser.parse_args(argv)
    which = args.which or ["replay", "hold"]
    if set(which) - {"replay", "hold", "dialects", "sessions"}:
        parser.error("choose among: replay, hold, dialects, sessions")
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
        if "dialects" in which:
            dbs = tuple(d.strip() for d in args.db.split(",") if d.strip())
            text = dialects.run(duration=args.duration, rounds=args.rounds, warmup=args.warmup, dbs=dbs)
            sections += ["", "## Replay hits per API", "", text]
        if "sessions" in which:
            dbs = tuple(d.strip() for d in args.db.split(",") if d.strip())
            text = sessions.run(duration=args.duration, rounds=args.rounds, warmup=args.warmup, dbs=dbs)
            sections += ["", "## Replay hits in sessions", "", text]
        if "hold" in which:
            for db in (d.strip() for d in args.db.split(",") if d.strip()):
                try:
                    text = hold.run(db=db, calls=args.calls)
                except BenchError as exc:
                    if db != "postgres":
                        raise
                    text = f"Skipped: {exc}"  # PostgreSQL is optional; SQLite is not
                sections += ["", f"## Held calls ({db})", "", text]
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 1
    report = "\n".join(sections) + "\n"
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "report.md").write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

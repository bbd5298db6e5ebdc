"""The run loop every wrk benchmark shares: databases and servers made for one run and undone after it
(on an error, Ctrl-C or SIGTERM too), and interleaved rounds of wrk over the targets."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import sys
import time
from types import FrameType, TracebackType
from typing import TYPE_CHECKING

from bench.common import OUT, BenchError, PostgresDatabase, Process

if TYPE_CHECKING:
    from bench.replay import Target

DATABASES = ("sqlite", "postgres")


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through every `with Run(...)`, which cleans up


class Run:
    """A work directory, PostgreSQL databases and server processes, all removed or stopped on exit."""

    _numbers = itertools.count()

    def __init__(self, name: str):
        self.workdir = OUT / f"{name}-{int(time.time())}-{os.getpid()}-{next(self._numbers)}"
        self.processes: list[Process] = []
        self.databases: list[PostgresDatabase] = []
        self._sqlite = itertools.count()
        self._previous: object = None

    def __enter__(self) -> Run:
        self.workdir.mkdir(parents=True)
        try:
            self._previous = signal.signal(signal.SIGTERM, _terminated)
        except ValueError:  # not the main thread: Ctrl-C and errors still clean up
            self._previous = None
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for process in reversed(self.processes):
            try:
                process.stop()
            except Exception as error:  # noqa: BLE001 - stop the others whatever happens to one
                print(f"bench: could not stop {process.name}: {error}", file=sys.stderr)
        for database in self.databases:
            try:
                database.drop()
            except Exception as error:  # noqa: BLE001 - drop the others; say which one is left
                print(f"bench: could not drop PostgreSQL database {database.name}: {error}", file=sys.stderr)
        shutil.rmtree(self.workdir, ignore_errors=True)  # SQLite databases and generated bodies
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)  # type: ignore[arg-type]

    def database(self, db: str) -> tuple[str, PostgresDatabase | None]:
        """A fresh, empty database of this kind: its URL, and the PostgreSQL database when it is one."""
        if db == "sqlite":
            return f"sqlite:///{self.workdir}/semula-{next(self._sqlite)}.db", None
        if db == "postgres":
            pg = PostgresDatabase().create()
            self.databases.append(pg)
            return pg.url, pg
        raise BenchError(f"unknown database {db!r}: choose among {', '.join(DATABASES)}")

    def track(self, target: Target) -> Target:
        """Stop this target's server at the end of the run (once, when targets share a server)."""
        if target.process is not None and all(p is not target.process for p in self.processes):
            self.processes.append(target.process)
        return target


def parse_dbs(text: str) -> tuple[str, ...]:
    dbs = tuple(d.strip() for d in text.split(",") if d.strip())
    unknown = set(dbs) - set(DATABASES)
    if unknown:
        raise BenchError(f"unknown databases: {', '.join(sorted(unknown))} (choose among sqlite, postgres)")
    return dbs


def interleave(targets: list[Target], *, rounds: int, duration: int) -> None:
    """Run wrk against every target once per round, the order rotated each round; results in t.rounds."""
    from bench.replay import run_wrk

    for number in range(rounds):
        order = targets[number % len(targets) :] + targets[: number % len(targets)]
        for target in order:
            result = (target.runner or run_wrk)(target, duration)
            target.rounds.append(result)
            print(
                f"round {number + 1} {target.name}: {result['rps']:,.0f} req/s, "
                f"p50 {result['p50_ms']:.2f} ms, p99 {result['p99_ms']:.1f} ms",
                file=sys.stderr,
            )

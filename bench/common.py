"""What both benchmarks share: the tools they need, servers as process groups, PostgreSQL databases."""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

from tests import helpers

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "bench" / ".cache"
OUT = ROOT / "bench" / "out"
PG_URL = os.environ.get("SEMULA_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
HOST = "127.0.0.1"


class BenchError(Exception):
    """The benchmark cannot run here; the message says what is missing."""


def require_tool(name: str, hint: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"`{name}` is not installed: {hint}")
    return path


def raise_nofile(wanted: int) -> int:
    """Raise this process's open-file limit (inherited by the servers it starts) towards wanted."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


free_port = helpers.free_port  # on 127.0.0.1 (HOST), as every server of the benchmarks binds


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    """tests.helpers.wait_for, failing as a benchmark fails (BenchError) rather than as a test."""
    try:
        return helpers.wait_for(predicate, timeout, interval, what)
    except AssertionError as exc:
        raise BenchError(str(exc)) from None


class Process:
    """A server started in its own process group, stopped (group and all) by stop()."""

    def __init__(self, name: str, argv: list[str], *, env: dict[str, str] | None = None, cwd: Path = ROOT):
        self.name = name
        self.argv = argv
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        OUT.mkdir(parents=True, exist_ok=True)
        self.log_path = OUT / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, health_url: str, timeout: float = 60) -> Process:
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps it; closed below
        try:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        try:
            wait_for(lambda: self._healthy(health_url), timeout, f"{self.name} at {health_url}")
        except BaseException:
            self.stop()
            raise
        return self

    def _healthy(self, url: str) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            tail = self.log_path.read_text(errors="replace")[-3000:]
            raise BenchError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
        try:
            return requests.get(url, timeout=1).status_code < 500
        except requests.RequestException:
            return False

    def children(self) -> list[int]:
        """The pids of the direct children (gunicorn's workers)."""
        if self.proc is None:
            return []
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def pids(self) -> list[int]:
        """The process and all its descendants."""
        found, todo = [], [self.proc.pid] if self.proc else []
        while todo:
            pid = todo.pop()
            found.append(pid)
            for task in Path(f"/proc/{pid}/task").glob("*/children"):
                todo += [int(p) for p in task.read_text().split()]
        return found

    def cpu_by_pid(self) -> dict[int, float]:
        """CPU seconds used so far by the process and each of its descendants that is alive."""
        return cpu_by_pid(self.pids())

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def semula_server(
    name: str, db_url: str, *, auth: bool, workers: int = 2, src: Path | None = None, **env: str
) -> tuple[Process, str]:
    """`semula serve` on a free port, as users run it; returns the process and its base URL. `src`: the
    semula of another checkout (an older commit, to compare two in one run), run from its directory."""
    port = free_port()
    if src is not None:
        env = {**env, "PYTHONPATH": str(src)}
    process = Process(
        name,
        [sys.executable, "-m", "semula", "serve", "--bind", f"{HOST}:{port}"],
        cwd=src or ROOT,
        env={
            "SEMULA_DATABASE_URL": db_url,
            "SEMULA_AUTH": "on" if auth else "off",
            "SEMULA_WORKERS": str(workers),
            "SEMULA_LOG_LEVEL": "warning",
            # Keeps gunicorn's per-worker metric files out of /tmp, with the rest of the run.
            "PROMETHEUS_MULTIPROC_DIR": str(OUT / f"{name}-metrics"),
            **env,
        },
    )
    url = f"http://{HOST}:{port}"
    process.start(url + "/healthz")
    return process, url


def cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """User plus system CPU seconds of each process that is still alive."""
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        out[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return out


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchError(f"no VmRSS for pid {pid}")


class PostgresDatabase:
    """A database of its own on the bench's PostgreSQL server, dropped at exit."""

    def __init__(self, admin_url: str = PG_URL):
        self.admin_url = admin_url
        self.name = f"semula_bench_{uuid.uuid4().hex[:8]}"
        base, _, _ = admin_url.rpartition("/")
        self.url = f"{base}/{self.name}"

    def _admin(self):  # noqa: ANN202 - psycopg is imported lazily: only PostgreSQL rows need it
        import psycopg

        return psycopg.connect(self.admin_url, autocommit=True, connect_timeout=5)

    def create(self) -> PostgresDatabase:
        try:
            with self._admin() as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
        except Exception as exc:  # noqa: BLE001 - any failure means: no PostgreSQL rows
            raise BenchError(f"PostgreSQL at {self.admin_url} is not usable: {exc}") from exc
        return self

    def transactions(self) -> int:
        """Committed plus rolled-back transactions of this database, as PostgreSQL's statistics say."""
        with self._admin() as conn:
            row = conn.execute(
                "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (self.name,)
            ).fetchone()
        return int(row[0]) if row else 0

    def backend_pids(self) -> list[int]:
        """The PostgreSQL server processes serving this database now."""
        with self._admin() as conn:
            query = "SELECT pid FROM pg_stat_activity WHERE datname = %s"
            rows = conn.execute(query, (self.name,)).fetchall()
        return [row[0] for row in rows]

    def drop(self) -> None:
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')

    def prewarm(self) -> int | None:
        """Read this database's tables and indexes into the operating system's page cache
        (pg_prewarm's `read` mode, TOAST included), as read_through() does for a SQLite file: the
        blocks read, or None when pg_prewarm could not be used (not installed, no privilege, no
        connection)."""
        import psycopg

        try:
            with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_prewarm")
                row = conn.execute(
                    "SELECT coalesce(sum(pg_prewarm(c.oid, 'read')), 0) FROM pg_class c"
                    " WHERE c.relkind IN ('r', 'i', 't')"
                    " AND c.relnamespace IN ('public'::regnamespace, 'pg_toast'::regnamespace)"
                ).fetchone()
        except psycopg.Error:
            return None
        return int(row[0]) if row else 0


def read_through(*paths: Path) -> None:
    """Read files whole into the operating system's page cache (those that exist)."""
    for path in paths:
        try:
            with path.open("rb") as source:
                while source.read(1 << 20):
                    pass
        except FileNotFoundError:
            continue


def _cpu_ticks() -> tuple[int, int]:
    """Busy and total clock ticks of all cores since boot (the first line of /proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has been busy since boot, all cores added up."""
    return _cpu_ticks()[0] / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds() -> float:
    """CPU seconds of this process's finished (waited-for) children, e.g. the wrk runs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def cpu_busy(seconds: float = 0.5) -> float:
    """The share of all cores busy over the next few tenths of a second."""
    busy0, total0 = _cpu_ticks()
    time.sleep(seconds)
    busy1, total1 = _cpu_ticks()
    return (busy1 - busy0) / max(1, total1 - total0)


def wait_quiet(limit: float = 0.15, patience: float = 120) -> float:
    """Wait (boundedly) until other work leaves the cores mostly idle; returns the last busy share seen.

    The load generator shares the machine's cores with the servers, so a test suite running beside the
    benchmark would skew whichever rows it overlaps.
    """
    deadline = time.monotonic() + patience
    busy = cpu_busy()
    while busy > limit and time.monotonic() < deadline:
        busy = cpu_busy(1.0)
    return busy


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))
    return ordered[index]


def machine() -> str:
    cpu = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    python = sys.version.split()[0]
    return f"{os.cpu_count()} cores ({cpu}), {mem_kib / 1024 / 1024:.0f} GiB RAM, Python {python}"

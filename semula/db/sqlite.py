"""The SQLite driver: WAL, a short busy timeout, BEGIN IMMEDIATE for every write transaction.

SQLite's busy wait blocks every greenlet of a gevent worker, so transactions stay tiny.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from semula.db import QUERIES, Busy, DatabaseError, Row, UniqueViolation

BUSY_TIMEOUT_MS = 5000
WAL_ATTEMPTS = 100


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except sqlite3.IntegrityError as exc:
        if "UNIQUE" in str(exc) or "PRIMARY KEY" in str(exc):
            raise UniqueViolation(str(exc)) from exc
        raise DatabaseError(str(exc)) from exc
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise Busy(str(exc)) from exc
        raise DatabaseError(str(exc)) from exc


class _Conn:
    def __init__(self, raw: sqlite3.Connection):
        self.raw = raw

    def one(self, name: str, /, **params: Any) -> Row | None:
        with _translated():
            row = self.raw.execute(QUERIES[name], params).fetchone()
        return dict(row) if row is not None else None

    def all(self, name: str, /, **params: Any) -> list[Row]:
        with _translated():
            return [dict(r) for r in self.raw.execute(QUERIES[name], params).fetchall()]

    def run(self, name: str, /, **params: Any) -> int:
        with _translated():
            return self.raw.execute(QUERIES[name], params).rowcount

    def many(self, name: str, rows: list[Row], /) -> None:
        """One statement for many parameter sets (bulk writes inside a transaction)."""
        if rows:
            with _translated():
                self.raw.executemany(QUERIES[name], rows)

    def script(self, sql: str) -> None:
        # executescript() would COMMIT the open transaction, so run statements one by one.
        with _translated():
            for statement in split_statements(sql):
                self.raw.execute(statement)


def split_statements(sql: str) -> list[str]:
    """Split a migration on semicolons that end a line; migrations keep semicolons out of strings."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


class SQLiteStore:
    dialect = "sqlite"
    blocks_process = True  # gevent cannot switch inside sqlite3; a thread can run beside it

    def __init__(self, path: str, *, pool_size: int = 10):
        self.path = path
        self.pool_size = pool_size
        self._idle: list[_Conn] = []
        self._watch: _Conn | None = None
        self._watch_lock = threading.Lock()
        if path not in ("", ":memory:"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> _Conn:
        raw = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        raw.row_factory = sqlite3.Row
        db = sqlite_utils.Database(raw)
        with _translated():
            self._enable_wal(db)
            raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            raw.execute("PRAGMA synchronous = NORMAL")
            raw.execute("PRAGMA foreign_keys = ON")
        return _Conn(raw)

    @staticmethod
    def _enable_wal(db: sqlite_utils.Database) -> None:
        # Switching a new file to WAL needs a moment of exclusive access, and SQLite can answer
        # "locked" at once rather than wait when two processes open the file together.
        for attempt in range(WAL_ATTEMPTS):
            try:
                db.enable_wal()
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                    raise
                time.sleep(0.02)

    @contextmanager
    def _conn(self) -> Iterator[_Conn]:
        # pop() alone is atomic; "if self._idle" then pop() races between threads (the answerer).
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._open()
        try:
            yield conn
        finally:
            if conn.raw.in_transaction:
                conn.raw.rollback()
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
            else:
                conn.raw.close()

    def one(self, name: str, /, **params: Any) -> Row | None:
        with self._conn() as conn:
            return conn.one(name, **params)

    def all(self, name: str, /, **params: Any) -> list[Row]:
        with self._conn() as conn:
            return conn.all(name, **params)

    def run(self, name: str, /, **params: Any) -> int:
        with self._conn() as conn:
            return conn.run(name, **params)

    @contextmanager
    def transaction(self, workspace_id: str | None = None) -> Iterator[_Conn]:
        with self._conn() as conn:
            with _translated():
                conn.raw.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.raw.rollback()
                raise
            with _translated():
                conn.raw.execute("COMMIT")

    def scoped(self, workspace_id: str) -> SQLiteStore:
        """SQLite has no row-level security: the service layer's checks are the isolation."""
        return self

    # BEGIN IMMEDIATE already serialises writers, migrations included.
    migration_transaction = transaction

    def iterate(self, name: str, /, batch: int = 500, **params: Any) -> Iterator[Row]:
        with self._conn() as conn, _translated():
            cursor = conn.raw.execute(QUERIES[name], params)
            while rows := cursor.fetchmany(batch):
                yield from (dict(r) for r in rows)

    def version(self, project_id: str, fingerprint: str) -> object:
        """PRAGMA data_version of a connection that never writes: it moves with every commit of any
        other connection, in this process or another, so it covers every row at once."""
        if self.path in ("", ":memory:"):
            return object()  # every connection has a database of its own: nothing to compare
        with self._watch_lock:
            if self._watch is None:
                self._watch = self._open()
            with _translated():
                return self._watch.raw.execute("PRAGMA data_version").fetchone()[0]

    def close(self) -> None:
        with self._watch_lock:
            if self._watch is not None:
                self._watch.raw.close()
                self._watch = None
        while self._idle:
            self._idle.pop().raw.close()

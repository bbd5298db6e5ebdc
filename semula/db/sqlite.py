"""The SQLite driver: WAL, a short busy timeout, BEGIN IMMEDIATE for every write transaction.

SQLite's busy wait blocks every greenlet of a gevent worker, so transactions stay tiny.
"""

from __future__ import annotations

import contextlib
import functools
import mmap
import os
import re
import sqlite3
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import orjson

from semula.db import (
    QUERIES,
    Busy,
    DatabaseError,
    DiskFull,
    Row,
    SchemaMismatch,
    Unavailable,
    UniqueViolation,
    refuse_nul,
    takes_rows,
)

BUSY_TIMEOUT_MS = 5000
WAL_ATTEMPTS = 100
# The WAL-index header (https://www.sqlite.org/walformat.html): two 48-byte copies at the start of
# the -shm file, of which a writer updates the second, then the first, at every commit.
WAL_INDEX_HEADER = 48
WAL_INDEX_VERSION = 3007000
# The replay change counter (store.version()): its triggers are in the migration that made it.
COUNTER = "SELECT counter FROM replay_changes WHERE id = 1"


def _translation(exc: sqlite3.DatabaseError) -> DatabaseError:
    """The driver-neutral error for an error of sqlite3 (semula.db's classes)."""
    text = str(exc)
    if isinstance(exc, sqlite3.IntegrityError):
        return UniqueViolation(text) if "UNIQUE" in text or "PRIMARY KEY" in text else DatabaseError(text)
    if isinstance(exc, sqlite3.OperationalError):
        name = getattr(exc, "sqlite_errorname", "")
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
            return Busy(text)
        if name.startswith("SQLITE_FULL"):
            return DiskFull(text)
        if name.startswith("SQLITE_CANTOPEN"):
            return Unavailable(text)
        if text.startswith(("no such table", "no such column", "no such function")):
            return SchemaMismatch(text)
    return DatabaseError(text)  # disk I/O errors, a corrupt file, ...


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except sqlite3.DatabaseError as exc:
        raise _translation(exc) from exc


class _Conn:
    def __init__(self, raw: sqlite3.Connection):
        self.raw = raw

    def _execute(self, name: str, params: dict[str, Any]) -> sqlite3.Cursor:
        """Run a named query; one of several statements runs them in order and answers with the last."""
        refuse_nul(params)
        for sql in STEPS.get(name, ())[:-1]:
            self.raw.execute(sql, params)
        return self.raw.execute(STEPS[name][-1] if name in STEPS else QUERIES[name], params)

    def one(self, name: str, /, **params: Any) -> Row | None:
        with _translated():
            row = self._execute(name, params).fetchone()
        return dict(row) if row is not None else None

    def all(self, name: str, /, **params: Any) -> list[Row]:
        with _translated():
            return [dict(r) for r in self._execute(name, params).fetchall()]

    def run(self, name: str, /, **params: Any) -> int:
        with _translated():
            return self._execute(name, params).rowcount

    def many(self, name: str, rows: list[Row], /) -> None:
        """Many rows inside a transaction. A plain `INSERT … VALUES (:a, :b)` runs as multi-row
        inserts: a third of the time per row of executemany here, and a quarter of one statement over
        a JSON array (SQLite before 3.45 parses a JSON row again for every column it takes from it)."""
        if not rows:
            return
        for row in rows:
            refuse_nul(row)
        sql = QUERIES[name]
        with _translated():
            if takes_rows(sql):
                self.raw.execute(sql, {"rows": orjson.dumps(rows).decode()})
            elif (insert := _multi_row_insert(sql)) is None:
                self.raw.executemany(sql, rows)
            else:
                head, names = insert
                one, done = "(" + ", ".join("?" * len(names)) + ")", 0
                for size in _chunk_sizes(len(rows)):
                    chunk = rows[done : done + size]
                    done += size
                    self.raw.execute(head + ", ".join([one] * size), [row[n] for row in chunk for n in names])

    def script(self, sql: str) -> None:
        # executescript() would COMMIT the open transaction, so run statements one by one.
        with _translated():
            for statement in split_statements(sql):
                self.raw.execute(statement)


# `INSERT … VALUES (:a, :b, …)` and nothing after it: what Tx.many can write as multi-row inserts.
SINGLE_ROW_INSERT = re.compile(r"(INSERT\s.*?\sVALUES\s*)\(\s*(:\w+(?:\s*,\s*:\w+)*)\s*\)", re.S | re.I)
MAX_VARIABLES = 32766  # SQLite's default limit on a statement's parameters since 3.32
MULTI_ROW_MAX = 128  # rows per statement; sizes are powers of two, so few statements are ever prepared


@functools.cache
def _multi_row_insert(sql: str) -> tuple[str, list[str]] | None:
    """The statement up to VALUES and the parameter names of its one row, or None for anything else."""
    match = SINGLE_ROW_INSERT.fullmatch(sql.strip())
    names = [p.strip()[1:] for p in match[2].split(",")] if match else []
    if not names or len(names) * MULTI_ROW_MAX > MAX_VARIABLES:
        return None
    return match[1], names


def _chunk_sizes(count: int) -> Iterator[int]:
    """count as MULTI_ROW_MAX-row chunks and then powers of two: 300 is 128, 128, 32, 8, 4."""
    while count >= MULTI_ROW_MAX:
        yield MULTI_ROW_MAX
        count -= MULTI_ROW_MAX
    size = MULTI_ROW_MAX
    while count:
        size //= 2
        if count >= size:
            yield size
            count -= size


def split_statements(sql: str) -> list[str]:
    """Split SQL into its statements at the semicolons that end one (those inside a trigger's
    BEGIN … END do not, as sqlite3.complete_statement knows); migrations and queries keep semicolons
    out of strings and comments."""
    lines = [line for line in sql.splitlines() if not line.lstrip().startswith("--")]
    statements, current = [], ""
    for piece in "\n".join(lines).split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            statements.append(current.strip().rstrip(";").strip())
            current = ""
    statements.append(current.strip().rstrip(";").strip())
    return [s for s in statements if s]


# The rare query SQLite needs several statements for (the twin of one PostgreSQL statement with
# data-modifying CTEs): they run in order on one connection, in one transaction.
STEPS = {name: steps for name, sql in QUERIES.items() if len(steps := split_statements(sql)) > 1}


class WalIndex:
    """The WAL-index header of a database, read in place from its -shm file: no lock, no system call.

    Every commit, from any connection of any process, writes a new header (its change counter and
    last frame move; a WAL restart changes its salt), so an unchanged header means unchanged data.
    It is only read while a connection of this process keeps the database open: SQLite truncates
    the -shm file only when the first connection opens it.
    """

    def __init__(self, path: str):
        fd = os.open(path + "-shm", os.O_RDONLY)
        try:
            if os.fstat(fd).st_size < 2 * WAL_INDEX_HEADER:
                raise OSError("the WAL index is not initialised")
            self._map = mmap.mmap(fd, 2 * WAL_INDEX_HEADER, prot=mmap.PROT_READ)
        finally:
            os.close(fd)

    def header(self) -> bytes | None:
        """The current header, or None while a writer is between its two copies."""
        try:
            first, second = self._map[:WAL_INDEX_HEADER], self._map[WAL_INDEX_HEADER : 2 * WAL_INDEX_HEADER]
        except ValueError:  # closed by SQLiteStore.close() meanwhile
            return None
        if first != second or first[12] != 1:
            return None
        if struct.unpack_from("=I", first)[0] != WAL_INDEX_VERSION:
            return None
        return first

    def close(self) -> None:
        self._map.close()


class SQLiteStore:
    dialect = "sqlite"
    blocks_process = True  # gevent cannot switch inside sqlite3; a thread can run beside it
    batches_lookups = False  # a statement costs no round trip: each lookup reads alone
    workspace_id = None  # scoped() is the store itself

    def __init__(self, path: str, *, pool_size: int = 10):
        self.path = path
        self.pool_size = pool_size
        self._idle: list[_Conn] = []
        self._watch: _Conn | None = None
        self._wal_index: WalIndex | None = None
        self._seen: tuple[bytes, int] | None = None  # a WAL-index header and the counter read after it
        self._watch_lock = threading.Lock()
        if path not in ("", ":memory:"):
            Path(path).parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> _Conn:
        raw = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000
        )
        raw.row_factory = sqlite3.Row
        with _translated():
            self._enable_wal(raw)
            raw.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            raw.execute("PRAGMA synchronous = NORMAL")
            raw.execute("PRAGMA foreign_keys = ON")
        return _Conn(raw)

    @staticmethod
    def _enable_wal(raw: sqlite3.Connection) -> None:
        # Switching a new file to WAL needs a moment of exclusive access, and SQLite can answer
        # "locked" at once rather than wait when two processes open the file together. (What
        # sqlite-utils' enable_wal() does, without its import: a seventh of a process's start.)
        for attempt in range(WAL_ATTEMPTS):
            try:
                if raw.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                    raw.execute("PRAGMA journal_mode = wal")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == WAL_ATTEMPTS - 1:
                    raise
                time.sleep(0.02)

    def _take(self) -> _Conn:
        # pop() alone is atomic; "if self._idle" then pop() races between threads (the answerer).
        try:
            return self._idle.pop()
        except IndexError:
            return self._open()

    def _give_back(self, conn: _Conn) -> None:
        if conn.raw.in_transaction:
            conn.raw.rollback()
        if len(self._idle) < self.pool_size:
            self._idle.append(conn)
        else:
            conn.raw.close()

    @contextmanager
    def _conn(self) -> Iterator[_Conn]:
        conn = self._take()
        try:
            yield conn
        finally:
            self._give_back(conn)

    def _for(self, name: str) -> AbstractContextManager[_Conn]:
        # A query of several statements is atomic, as its PostgreSQL twin of one statement is.
        return self.transaction() if name in STEPS else self._conn()

    def one(self, name: str, /, **params: Any) -> Row | None:
        if name in STEPS:
            with self.transaction() as conn:
                return conn.one(name, **params)
        row = self._read(name, params, False)
        return dict(row) if row is not None else None

    def all(self, name: str, /, **params: Any) -> list[Row]:
        if name in STEPS:
            with self.transaction() as conn:
                return conn.all(name, **params)
        return [dict(row) for row in self._read(name, params, True)]

    def _read(self, name: str, params: dict[str, Any], every: bool) -> Any:
        """A named query's rows (all, or the first), written out with no generator context managers
        (_conn(), _translated()): every first sight of a replay reads its entry here, where decision 0045
        measured what they cost beside SQLite's own ~10 us."""
        refuse_nul(params)
        conn = self._take()
        try:
            cursor = conn.raw.execute(QUERIES[name], params)
            return cursor.fetchall() if every else cursor.fetchone()
        except sqlite3.DatabaseError as exc:
            raise _translation(exc) from exc
        finally:
            self._give_back(conn)

    def run(self, name: str, /, **params: Any) -> int:
        with self._for(name) as conn:
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

    def version(self, workspace_id: str) -> object:
        """The replay change counter (one for all workspaces): moved, by triggers, in the transaction
        of every change of a row a replay answer is made of (0017_replay_changes.sqlite.sql).

        Read only when the WAL-index header moved since it was last read: every commit of any
        connection, in this process or another, writes a new header, so an unchanged header means
        an unchanged counter, and a read costs no lock and no system call. A commit that changed
        nothing an answer depends on (the call log, a session's counter) moves the header but not
        the counter, and kept hits stay kept. Without a header to read, the counter is read each time.
        """
        if self.path in ("", ":memory:"):
            return object()  # every connection has a database of its own: nothing to compare
        index = self._wal_index
        header = index.header() if index is not None else None
        seen = self._seen
        if header is not None and seen is not None and seen[0] == header:
            return seen[1]
        with self._watch_lock:
            if self._watch is None:
                self._watch = self._open()
            # Read after the header: a commit between the two moves the header away from `header`
            # for good, so the pair is only ever used while the counter read is still current.
            with _translated():
                counter = self._watch.raw.execute(COUNTER).fetchone()[0]
            if header is not None:
                self._seen = (header, counter)
            if self._wal_index is None:
                # The watch connection has the -shm file open now, and keeps it until close().
                with contextlib.suppress(OSError, ValueError):  # none to read: the counter it is, each time
                    self._wal_index = WalIndex(self.path)
            return counter

    def on_notice(
        self, channel: str, callback: Callable[[str | None], None], lost: Callable[[], None] | None = None
    ) -> bool:
        """SQLite sends no notices: the caller polls."""
        return False

    def copy_to(self, path: str, rows_of: tuple[str, ...] | None = None) -> None:
        """Write a consistent copy of the database to `path` (a new file), as one read transaction sees
        it; with `rows_of`, every other table of the copy empty."""
        with self._conn() as conn, _translated():
            conn.raw.execute("VACUUM INTO ?", (path,))
        if rows_of is None:
            return
        copy = sqlite3.connect(path, isolation_level=None)
        try:
            with _translated():
                tables = copy.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite%'"
                ).fetchall()
                copy.execute("BEGIN")
                for (table,) in tables:
                    if table not in rows_of:
                        copy.execute(f'DELETE FROM "{table}"')  # noqa: S608 - the copy's own table names
                copy.execute("COMMIT")
        finally:
            copy.close()

    def close(self) -> None:
        with self._watch_lock:
            if self._wal_index is not None:
                self._wal_index.close()
                self._wal_index = None
            if self._watch is not None:
                self._watch.raw.close()
                self._watch = None
        while self._idle:
            self._idle.pop().raw.close()

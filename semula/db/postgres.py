"""The PostgreSQL driver: psycopg 3 with a connection pool (gevent-aware from psycopg 3.1.14)."""

from __future__ import annotations

import copy
import logging
import re
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import psycopg
import psycopg.errors
from psycopg import pq, waiting
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from semula.db import (
    POSTGRES_QUERIES,
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

# Any fixed 64-bit number: every semula process migrating one database takes the same lock.
MIGRATION_LOCK = 0x53454D554C41
# The channel every replay change is announced on (0020_replay_change_notices.postgresql.sql).
CHANGES_CHANNEL = "semula_replay_changes"
# Store.on_notice's channels (0022_upstream_flights_notices.postgresql.sql), by the name callers use.
NOTICE_CHANNELS = {"resolved": "semula_resolved", "flights": "semula_flights", "changes": CHANGES_CHANNEL}
# The listening connection each channel shares, and what is logged when it is lost: the wakeups
# together, started at their first subscriber; the replay changes (SEMULA_CHANGE_CHECK=notify) on their
# own, so a process that does not ask for them is sent none.
LISTENERS = {"resolved": "wakeups", "flights": "wakeups", "changes": "changes"}
LOST = {
    "wakeups": "release notices lost; held calls are released by polling until they are back",
    "changes": "replay change notices lost; kept hits read the counter until they are back",
}
RELISTEN_AFTER = 1.0  # s between a lost listening connection and the next attempt
RELISTEN_MAX = 30.0  # s between attempts at most, doubling from RELISTEN_AFTER while they fail
NOTICE_WAIT = 0.5  # s the listener waits for notices before it looks whether it is being stopped

logger = logging.getLogger("semula.db")


def to_psycopg(sql: str) -> str:
    """Rewrite `:name` parameters as `%(name)s` (and escape literal percent signs)."""
    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", sql.replace("%", "%%"))


PG_QUERIES = {name: to_psycopg(sql) for name, sql in POSTGRES_QUERIES.items()}

# entries_at_version's lookups (one, or several asked together: semula.service.versions), by how
# many: the statement with `= ANY` over an ARRAY of that many parameters, padded with the last
# fingerprint, for `= ANY(:fingerprints)`; all() picks it (_planned). psycopg prepares each after its
# fifth run, and PostgreSQL then plans each once: a generic plan for a known number of values costs
# what a plan for the values given does, whereas over an array of unknown length it looked dearer
# once a project had many entries, and every lookup was planned afresh, ~55 us of the server's CPU
# (decision 0045). Larger batches take entries_at_version itself.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _batch_name(size: int) -> str:
    return f"entries_at_version_{size}"


def _planned(params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """entries_at_version's statement for this many fingerprints (BATCH_SIZES), and its parameters."""
    fingerprints = params["fingerprints"]
    size = next((n for n in BATCH_SIZES if n >= len(fingerprints)), None)
    if size is None or not fingerprints:
        return "entries_at_version", params
    padded = fingerprints + fingerprints[-1:] * (size - len(fingerprints))
    others = {key: value for key, value in params.items() if key != "fingerprints"}
    return _batch_name(size), others | {f"f{index}": fingerprint for index, fingerprint in enumerate(padded)}


if "ANY(%(fingerprints)s)" not in PG_QUERIES["entries_at_version"]:
    raise RuntimeError("queries/proxy.sql: entries_at_version no longer reads = ANY(:fingerprints)")
for _size in BATCH_SIZES:
    _values = ", ".join(f"%(f{index})s" for index in range(_size))
    PG_QUERIES[_batch_name(_size)] = PG_QUERIES["entries_at_version"].replace(
        "ANY(%(fingerprints)s)", f"ANY(ARRAY[{_values}])"
    )


def _translation(exc: Exception, failures: list[str] | None = None) -> Exception | None:
    """The semula.db error a driver error stands for (None: not a driver error); `failures` holds why
    the pool last failed to connect, if it did."""
    if isinstance(exc, PoolTimeout):
        return Unavailable(failures[-1] if failures else _message(exc))
    if not isinstance(exc, psycopg.Error):
        return None
    if isinstance(exc, psycopg.errors.UniqueViolation):
        return UniqueViolation(exc.diag.message_primary or "unique violation")
    if isinstance(exc, psycopg.errors.DiskFull):
        return DiskFull(_message(exc))
    if isinstance(exc, (psycopg.errors.LockNotAvailable, psycopg.errors.QueryCanceled)):
        return Busy(_message(exc))
    if isinstance(exc, _SCHEMA):
        return SchemaMismatch(_message(exc))
    if isinstance(exc, psycopg.OperationalError):
        if getattr(exc, "sqlstate", None) in _CONNECTION_ENDED:
            return _Lost(_message(exc))
        return Unavailable(_message(exc))
    return DatabaseError(_message(exc))


@contextmanager
def _translated(failures: list[str] | None = None) -> Iterator[None]:
    """Driver errors as semula.db's (_translation)."""
    try:
        yield
    except (PoolTimeout, psycopg.Error) as exc:
        raise _translation(exc, failures) from exc


class _Lost(Unavailable):
    """The connection broke under a statement: the server ended it (it is closed now)."""


# A server that ended the connection (57P0x), or a connection found broken (08xxx, or no state at all).
_CONNECTION_ENDED = (None, "57P01", "57P02", "57P03", "08006", "08003", "08000")


def _read_only(sql: str) -> bool:
    text = re.sub(r"--[^\n]*", "", sql).strip().upper()
    return text.startswith("SELECT") and "FOR UPDATE" not in text and ";" not in text.rstrip(";")


# The statements that only read: safe to run again on another connection when one broke under them.
READS = frozenset(name for name, sql in PG_QUERIES.items() if _read_only(sql))

_SCHEMA = (
    psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn,
    psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedObject,
)


def _message(exc: Exception) -> str:
    diag = getattr(exc, "diag", None)
    return (diag.message_primary if diag is not None else None) or str(exc) or type(exc).__name__


def _recording(failures: list[str]) -> type[psycopg.Connection]:
    """A connection class that notes why connecting failed: the pool's own timeout does not say."""

    class Recording(psycopg.Connection):
        # The session's semula.workspace_id as this process last set it ("" for none); None while it is
        # not known (a new connection, or a set_config that did not return).
        semula_workspace: str | None = None
        # The cursor the replay path's reads run on (made at the first): a cursor made per statement
        # cost a kept hit's counter read about a third of its client CPU (Cursor() copies the
        # adapters map). A cursor holds its last result and parameters until its next statement, so
        # only reads whose result is small keep it (_fetch): one used for every read would keep,
        # say, 200 candidate rows of 88 KB requests alive on an idle pooled connection.
        semula_cursor: psycopg.Cursor[Row] | None = None

        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            try:
                conn = super().connect(*args, **kwargs)
            except psycopg.OperationalError as exc:
                failures[:] = [_message(exc)]
                raise
            failures.clear()
            return conn

        def close(self) -> None:
            """Close, and let go of the kept cursor: it refers back to this connection, so holding it
            would leave the two for the cycle collector to free, long after the pool discarded them.
            The pool closes what it discards, but for a connection it finds broken, which it only
            drops: a read that breaks lets go of the cursor itself (_fetch); one found broken idle
            (the pool's check) is freed at the next collection."""
            self.semula_cursor = None
            super().close()

        def wait(self, gen: Any, *args: Any, **kwargs: Any) -> Any:
            """Drive a statement's generator; in a gevent worker on gevent's own socket watchers.

            Where gevent patched `select`, psycopg waits through `select.poll()`, which gevent
            emulates in Python: 121,600 instructions a `SELECT 1` round trip against 73,000 waiting
            on the watchers (callgrind). A wait psycopg asks with any argument (an interval, or a
            timeout: its notifies) and every wait outside gevent stay psycopg's. Unlike psycopg's
            poll, which wakes every 0.1 s, a wait here does not notice a descriptor closed under it
            from another greenlet (libpq's close); nothing closes a connection checked out of the
            pool, where every wait here runs.
            """
            if args or kwargs or not _gevent_patched():
                return super().wait(gen, *args, **kwargs)
            try:
                return _wait_on_gevent(gen, self.pgconn.socket)
            except (KeyboardInterrupt, SystemExit):
                # psycopg would cancel the statement and wait for its end; a worker stopping drops
                # the connection instead, which the pool then replaces.
                if self.pgconn.transaction_status == pq.TransactionStatus.ACTIVE:
                    self.pgconn.finish()
                raise

    return Recording


def _gevent_patched() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and bool(monkey.is_module_patched("select"))


def _wait_on_gevent(gen: Any, fileno: int) -> Any:
    """Run a psycopg generator to its end, waiting on gevent's watchers for what it asks (read, write,
    or either: told both, psycopg's generators read only what has come and write what they can)."""
    from gevent.socket import wait_read, wait_readwrite, wait_write

    try:
        wanted = next(gen)
        while True:
            if wanted == waiting.WAIT_R:
                wait_read(fileno)
                ready = waiting.READY_R
            elif wanted == waiting.WAIT_W:
                wait_write(fileno)
                ready = waiting.READY_W
            else:
                wait_readwrite(fileno)
                ready = waiting.READY_RW
            wanted = gen.send(ready)
    except StopIteration as done:
        return done.value
    except OSError as exc:  # the descriptor went away under the wait (as psycopg's own waits say it)
        raise psycopg.OperationalError("connection socket closed") from exc


# The most bytes of entries a connection's kept cursor may go on holding after a first sight's read.
KEPT_RESULT = 64 * 1024
Keeps = Callable[[Any], bool]  # whether the kept cursor may go on holding a result, given its rows


def _always(rows: Any) -> bool:
    return True


def _small_entries(rows: list[Row]) -> bool:
    size = 0
    for row in rows:
        size += len(row["response"] or "") + len(row["chunks"] or "") + len(row["meta"] or "")
    return size <= KEPT_RESULT


# The reads that run on the connection's kept cursor (_cursor()): those of the replay path, whose
# results are small (the counter) or dropped when they are not.
KEEPS: dict[str, Keeps] = {"replay_counter": _always, "entries_at_version": _small_entries}
KEEPS |= {_batch_name(size): _small_entries for size in BATCH_SIZES}


def _cursor(raw: psycopg.Connection) -> psycopg.Cursor[Row]:
    """The connection's kept cursor (its result is read before the connection goes back)."""
    cursor = raw.semula_cursor
    if cursor is None:
        cursor = raw.semula_cursor = raw.cursor()
    return cursor


class _Conn:
    def __init__(self, raw: psycopg.Connection):
        self.raw = raw

    def _execute(self, name: str, params: dict[str, Any]) -> psycopg.Cursor:
        refuse_nul(params)
        return self.raw.execute(PG_QUERIES[name], params)

    def one(self, name: str, /, **params: Any) -> Row | None:
        with _translated():
            return self._execute(name, params).fetchone()

    def all(self, name: str, /, **params: Any) -> list[Row]:
        with _translated():
            return self._execute(name, params).fetchall()

    def run(self, name: str, /, **params: Any) -> int:
        with _translated():
            return self._execute(name, params).rowcount

    def many(self, name: str, rows: list[Row], /) -> None:
        """Many rows in one round trip: as one JSON array where the query takes `:rows` (a tenth of
        the client CPU of executemany for the call log), else pipelined by psycopg's executemany."""
        if rows:
            for row in rows:
                refuse_nul(row)
            with _translated():
                if takes_rows(PG_QUERIES[name]):
                    self.raw.execute(PG_QUERIES[name], {"rows": orjson.dumps(rows).decode()})
                else:
                    with self.raw.cursor() as cursor:
                        cursor.executemany(PG_QUERIES[name], rows)

    def script(self, sql: str) -> None:
        with _translated():
            self.raw.execute(sql)


class Listener:
    """One connection of its own that LISTENs on `channels`, in a thread (a greenlet in a gevent
    worker), and calls each subscriber of a channel with the payload of its notices (Store.on_notice).
    Started at the first subscriber. When the listening starts (after LISTEN: every commit from then on
    is announced) every subscriber is called with None, since notices may have been missed before; when
    it stops, each subscriber's `lost`. When it is lost (a database restart, `pg_terminate_backend`, an
    idle timeout) it listens again a second later, then at doubling intervals up to RELISTEN_MAX while
    the attempts fail, and logs the loss once, naming the error's type, never the connection string."""

    def __init__(self, conninfo: str, channels: tuple[str, ...], lost: str = "notices lost"):
        self._conninfo = conninfo  # holds the password: never logged, never in an error text
        self.channels = channels
        self.lost = lost  # the warning logged when the listening is lost
        self.backend: int | None = None  # the listening session's process id, for tests
        self._lock = threading.Lock()
        self._subscribers: dict[
            str, list[tuple[Callable[[str | None], None], Callable[[], None] | None]]
        ] = {}
        self._stopping = threading.Event()
        self._heard = False
        self._thread = threading.Thread(target=self._run, name="semula-listener", daemon=True)

    def subscribe(
        self, channel: str, callback: Callable[[str | None], None], lost: Callable[[], None] | None = None
    ) -> None:
        with self._lock:
            subscribers = self._subscribers.setdefault(channel, [])
            if (callback, lost) not in subscribers:  # each scoped view of a store subscribes the same one
                subscribers.append((callback, lost))
            if self._thread.ident is None:
                self._thread.start()

    def stop(self) -> None:
        """Stop listening (within NOTICE_WAIT)."""
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _call(self, channel: str | None, payload: str | None, *, lost: bool = False) -> None:
        """Call the subscribers of `channel` (None: of every channel)."""
        for name, subscribers in list(self._subscribers.items()):
            if channel is not None and name != channel:
                continue
            for callback, on_lost in list(subscribers):
                try:
                    if not lost:
                        callback(payload)
                    elif on_lost is not None:
                        on_lost()
                except Exception:  # a subscriber's bug must not stop the notices of the others
                    logger.exception("a notice's subscriber failed")

    def _run(self) -> None:
        pause, said = RELISTEN_AFTER, False  # said: the loss is logged, until the listening is back
        while not self._stopping.is_set():
            try:
                self._listen()
            except Exception as exc:  # lost (a restart, a terminated session): listen again soon
                if self._heard:
                    pause, said = RELISTEN_AFTER, False
                if not said:
                    logger.warning(self.lost, extra={"error": type(exc).__name__})
                    said = True
            finally:
                self._call(None, None, lost=True)
            self._stopping.wait(pause)
            pause = min(pause * 2, RELISTEN_MAX)  # a database that stays away is tried less often

    def _listen(self) -> None:
        self._heard = False  # whether this attempt got as far as listening
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            for channel in self.channels:
                conn.execute(f"LISTEN {channel}")
            self.backend = conn.info.backend_pid
            self._heard = True
            self._call(None, None)
            while not self._stopping.is_set():
                for notice in conn.notifies(timeout=NOTICE_WAIT):
                    self._call(notice.channel, notice.payload)


class PostgresStore:
    dialect = "postgresql"
    blocks_process = False  # psycopg waits through gevent's patched sockets
    batches_lookups = True  # each statement is a round trip to the server

    workspace_id: str | None = None

    def __init__(self, url: str, *, pool_size: int = 10, open_timeout: float = 10.0):
        self._failures: list[str] = []
        self._pool = ConnectionPool(
            url,
            min_size=1,
            max_size=pool_size,
            kwargs={"autocommit": True, "row_factory": dict_row},
            open=False,
            timeout=30,
            connection_class=_recording(self._failures),
        )
        try:
            with _translated(self._failures):
                self._pool.open(wait=True, timeout=open_timeout)
        except Unavailable:
            self._pool.close()  # or its workers go on trying to connect in the background
            raise
        # on_notice()'s listening connections (LISTENERS), made at their first subscriber; shared with
        # the scoped views, which copy this object.
        self.listeners: dict[str, Listener] = {}
        self._listeners_lock = threading.Lock()

    def on_notice(
        self, channel: str, callback: Callable[[str | None], None], lost: Callable[[], None] | None = None
    ) -> bool:
        """Call `callback(payload)` at each notice on `channel` ("resolved": a parked call's id;
        "flights": a record-through flight's "project fingerprint seq"; "changes": the workspace whose
        replay rows changed), committed by any process on the database; with None when the listening
        (re)starts, and `lost()` when it stops. One listening connection per process for the first
        two, one of its own for the changes (LISTENERS)."""
        group = LISTENERS[channel]
        with self._listeners_lock:
            listener = self.listeners.get(group)
            if listener is None:
                channels = tuple(NOTICE_CHANNELS[name] for name, of in LISTENERS.items() if of == group)
                listener = self.listeners[group] = Listener(self._pool.conninfo, channels, LOST[group])
        listener.subscribe(NOTICE_CHANNELS[channel], callback, lost)
        return True

    def scoped(self, workspace_id: str) -> PostgresStore:
        """A view of this store whose every statement runs as `workspace_id` under row-level security."""
        view = copy.copy(self)
        view.workspace_id = workspace_id
        return view

    def _take(self) -> psycopg.Connection:
        """A pooled connection whose session runs as this store's workspace (none when unscoped); the
        caller gives it back (self._pool.putconn).

        Every checkout sets the workspace its statements run as, unless the connection's session
        already has it: a connection another tenant used last is set again before any statement, so
        no setting is carried into the next checkout, and a tenant's reads on a connection it used
        last cost no set_config round trip (three round trips a hosted replay hit had, one now).
        """
        raw = self._pool.getconn()
        try:
            wanted = self.workspace_id or ""
            if raw.semula_workspace != wanted:
                raw.semula_workspace = None  # unknown until the statement returns
                raw.execute("SELECT set_config('semula.workspace_id', %s, false)", (wanted,))
                raw.semula_workspace = wanted
        except BaseException:
            self._pool.putconn(raw)
            raise
        return raw

    @contextmanager
    def _conn(self) -> Iterator[_Conn]:
        """A pooled connection as _take() gives it, back to the pool after the block (autocommit: no
        transaction to end unless the block began one, which its own context manager ends)."""
        with _translated(self._failures):
            raw = self._take()
            try:
                yield _Conn(raw)
            finally:
                self._pool.putconn(raw)

    def one(self, name: str, /, **params: Any) -> Row | None:
        return self._read(name, params, False)

    def all(self, name: str, /, **params: Any) -> list[Row]:
        if name == "entries_at_version":
            name, params = _planned(params)
        return self._read(name, params, True)

    def _read(self, name: str, params: dict[str, Any], every: bool) -> Any:
        """A statement's rows (all, or the first), written out rather than through _conn()'s context
        managers, which were a fifth of the client CPU of a replay hit's counter read.

        A read that met a connection the server had ended (a restart, pg_terminate_backend, an idle
        timeout) runs once more after the pool replaced its dead ones: checked on failure rather than
        at every checkout, which would cost every replay hit a round trip. A write is not run again:
        it may have been applied before the connection broke.

        The replay path's reads (KEEPS) run on the connection's kept cursor (`_cursor()`), which is
        dropped with its result when KEEPS says the result is too large to go on holding.
        """
        refuse_nul(params)
        sql = PG_QUERIES[name]
        reuse = KEEPS.get(name)
        try:
            return self._fetch(sql, params, every, reuse)
        except (PoolTimeout, psycopg.Error) as exc:
            error = _translation(exc, self._failures)
            if not isinstance(error, _Lost) or name not in READS:
                raise error from exc
        self._pool.check()
        try:
            return self._fetch(sql, params, every, reuse)
        except (PoolTimeout, psycopg.Error) as exc:
            raise _translation(exc, self._failures) from exc

    def _fetch(self, sql: str, params: dict[str, Any], every: bool, reuse: Keeps | None) -> Any:
        raw = self._take()
        try:
            cursor = (_cursor(raw) if reuse else raw.cursor()).execute(sql, params)
            rows = cursor.fetchall() if every else cursor.fetchone()
            if reuse and not reuse(rows):
                raw.semula_cursor = None
            return rows
        except BaseException:
            if raw.closed:  # broken: the pool drops it without close(), which lets go of the cursor
                raw.semula_cursor = None
            raise
        finally:
            self._pool.putconn(raw)

    def version(self, workspace_id: str) -> object:
        """The workspace's replay change counter: triggers move it in the transaction of every change
        of a row a replay answer is made of (migrations/0017_replay_changes.postgresql.sql). One row by
        primary key; concurrent reads are joined by the service layer (semula.service.versions)."""
        row = self._read("replay_counter", {"workspace_id": workspace_id}, False)
        return row["counter"] if row is not None else object()  # no such workspace: equal to nothing

    def run(self, name: str, /, **params: Any) -> int:
        with self._conn() as conn:
            return conn.run(name, **params)

    @contextmanager
    def transaction(self, workspace_id: str | None = None) -> Iterator[_Conn]:
        workspace_id = workspace_id or self.workspace_id
        with self._conn() as conn, _translated(), conn.raw.transaction():
            if workspace_id is not None:
                conn.raw.execute("SELECT set_config('semula.workspace_id', %s, true)", (workspace_id,))
            yield conn

    @contextmanager
    def migration_transaction(self) -> Iterator[_Conn]:
        with self.transaction() as conn:
            with _translated():
                conn.raw.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            yield conn

    def iterate(self, name: str, /, batch: int = 500, **params: Any) -> Iterator[Row]:
        with (
            self._conn() as conn,
            _translated(),
            conn.raw.transaction(),
            conn.raw.cursor(name="semula_iter") as cursor,
        ):
            cursor.itersize = batch
            cursor.execute(PG_QUERIES[name], params)
            yield from cursor

    def pool_in_use(self) -> int:
        """Connections checked out of this process's pool now."""
        stats = self._pool.get_stats()
        return stats.get("pool_size", 0) - stats.get("pool_available", 0)

    def close(self) -> None:
        for listener in list(self.listeners.values()):
            listener.stop()
        self._pool.close()

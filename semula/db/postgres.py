"""The PostgreSQL driver: psycopg 3 with a connection pool (gevent-aware from psycopg 3.1.14)."""

from __future__ import annotations

import copy
import logging
import re
import sys
import threading
from collections.abc import Callable, Hashable, Iterator
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
from semula.rounds import Round, Rounds

# Any fixed 64-bit number: every semula process migrating one database takes the same lock.
MIGRATION_LOCK = 0x53454D554C41
# The channel every replay change is announced on (0020_replay_change_notices.postgresql.sql).
CHANGES_CHANNEL = "semula_replay_changes"
# Store.on_notice's channels (0022_upstream_flights_notices.postgresql.sql), by the name callers use.
NOTICE_CHANNELS = {"resolved": "semula_resolved", "flights": "semula_flights"}
RELISTEN_AFTER = 1.0  # s between a lost listening connection and the next attempt
RELISTEN_MAX = 30.0  # s between attempts at most, doubling from RELISTEN_AFTER while they fail
NOTICE_WAIT = 0.5  # s the listener waits for notices before it looks whether it is being stopped

logger = logging.getLogger("semula.db")


def to_psycopg(sql: str) -> str:
    """Rewrite `:name` parameters as `%(name)s` (and escape literal percent signs)."""
    return re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", r"%(\1)s", sql.replace("%", "%%"))


PG_QUERIES = {name: to_psycopg(sql) for name, sql in POSTGRES_QUERIES.items()}

# Entry lookups (one, or several asked together: VersionReads), by how many: entries_at_version with
# `= ANY` over an ARRAY of that many parameters, padded with the last fingerprint, for
# `= ANY(:fingerprints)`. psycopg prepares each after its fifth run, and PostgreSQL then plans each
# once: a generic plan for a known number of values costs what a plan for the values given does,
# whereas over an array of unknown length it looked dearer once a project had many entries, and every
# lookup was planned afresh, ~55 us of the server's CPU (decision 0045). Larger batches take
# entries_at_version itself.
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def _batch_name(size: int) -> str:
    return f"entries_at_version_{size}"


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


Key = Hashable  # what a version is read for (a workspace's change counter)
Query = Callable[[list[Key]], dict[Key, object]]


class _Batch(Round):
    __slots__ = ("keys", "found")

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[Key] = set()
        self.found: dict[Key, object] = {}

    def answer(self, key: Key) -> object:
        return self.found.get(key, object())  # no such project: a value equal to nothing


class VersionReads:
    """Reads asked for concurrently, done in one query: the counter each kept hit on PostgreSQL
    needs, and the entries (with the counter) of a project's first sights.

    A caller gets its value from a query that began *after* it asked, as a query of its own would
    (so it sees every commit that completed before it asked): keys that arrive while a query is in
    flight wait for it to end and are then read together by one of them (semula.rounds). One query per
    group is in flight at a time (the store reads a workspace's counter in a group of its own, as its
    tenant).
    """

    def __init__(self) -> None:
        self._rounds: Rounds[_Batch] = Rounds(lambda: _Batch())  # the class as it is when a round is made

    def read(self, workspace: Hashable, key: Key, query: Query) -> object:
        def send(batch: _Batch) -> None:
            batch.found = query(sorted(batch.keys))

        batch, _ = self._rounds.join(workspace, lambda batch: batch.keys.add(key), send)
        return batch.answer(key)


class _Listener:
    """One connection of its own that LISTENs on `channels`, in a thread (a greenlet in a gevent
    worker). When it is lost (a database restart, `pg_terminate_backend`, an idle timeout) it listens
    again a second later, then at doubling intervals up to RELISTEN_MAX while the attempts fail, and
    logs the loss once, naming the error's type, never the connection string."""

    channels: tuple[str, ...] = ()
    lost = "notices lost"  # the warning logged when the listening is lost

    def __init__(self, conninfo: str):
        self._conninfo = conninfo  # holds the password: never logged, never in an error text
        self.backend: int | None = None  # the listening session's process id, for tests
        self._stopping = threading.Event()
        self._heard = False
        self._thread = threading.Thread(target=self._run, name=f"semula-{type(self).__name__}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Stop listening (within NOTICE_WAIT)."""
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=5)

    def _listening(self, listening: bool) -> None:
        """Called when the listening starts (after LISTEN: every commit from here on is announced) and
        when it stops."""

    def _notice(self, channel: str, payload: str) -> None:
        """Called with each notice."""

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
                self._listening(False)
            self._stopping.wait(pause)
            pause = min(pause * 2, RELISTEN_MAX)  # a database that stays away is tried less often

    def _listen(self) -> None:
        self._heard = False  # whether this attempt got as far as listening
        with psycopg.connect(self._conninfo, autocommit=True) as conn:
            for channel in self.channels:
                conn.execute(f"LISTEN {channel}")
            self.backend = conn.info.backend_pid
            self._heard = True
            self._listening(True)
            while not self._stopping.is_set():
                for notice in conn.notifies(timeout=NOTICE_WAIT):
                    self._notice(notice.channel, notice.payload)


class ChangeNotices(_Listener):
    """The replay change counters a process has read, each good until a notice of a change to its
    workspace comes (SEMULA_CHANGE_CHECK=notify; docs/decisions/0047-change-notices.md).

    A counter read is remembered only when no notice came, and the listening did not stop, between
    the moment before the read began and its end: a change it missed committed after the read's
    snapshot, so after LISTEN took effect, and its notice forgets the counter again. While the
    connection is lost, nothing is remembered and every check reads the counter, as without notices.
    """

    channels = (CHANGES_CHANNEL,)
    lost = "replay change notices lost; kept hits read the counter until they are back"

    def __init__(self, conninfo: str):
        super().__init__(conninfo)
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.known: dict[str, int] = {}
        self.epoch = 0  # moves with every notice, and when the listening starts or stops
        self.listening = False

    def version(self, workspace_id: str, read: Callable[[], object]) -> object:
        """The workspace's counter: remembered, or read (and remembered if no notice came meanwhile).

        Every kept hit comes here: the remembered value is looked up without the lock (a dict's get
        is atomic, and a notice that forgets it an instant later is one that came after this hit)."""
        epoch = self.epoch  # before the read begins: a notice from here on moves it
        listening = self.listening
        if listening:
            value = self.known.get(workspace_id)
            if value is not None:
                return value
        value = read()
        if listening and type(value) is int:
            with self._lock:
                if self.listening and self.epoch == epoch:
                    self.known[workspace_id] = value
        return value

    def wait_moved(self, epoch: int, timeout: float) -> bool:
        """Wait until the epoch is past `epoch` (a notice came, or the listening started or stopped)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.epoch > epoch, timeout)

    def _listening(self, listening: bool) -> None:
        self._moved(listening=listening)

    def _notice(self, channel: str, payload: str) -> None:
        self._moved(workspace_id=payload)

    def _moved(self, *, listening: bool | None = None, workspace_id: str | None = None) -> None:
        with self._changed:
            if listening is not None:
                self.listening = listening
                self.known.clear()
            if workspace_id is not None:
                self.known.pop(workspace_id, None)
            self.epoch += 1
            self._changed.notify_all()


class Wakeups(_Listener):
    """Notices that wake waiting calls when what they wait for is committed, by any process on the
    database (Store.on_notice; docs/decisions/0057-several-hosts.md): a parked call resolved, a
    record-through flight ended. Started at the first subscriber. Whoever waits also polls: a notice
    only makes the wait shorter, and when the listening (re)starts every subscriber is woken with None,
    since notices may have been missed meanwhile."""

    channels = tuple(NOTICE_CHANNELS.values())
    lost = "release notices lost; held calls are released by polling until they are back"

    def __init__(self, conninfo: str):
        super().__init__(conninfo)
        self._lock = threading.Lock()
        self._subscribers: dict[str, list[Callable[[str | None], None]]] = {}

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> None:
        with self._lock:
            subscribers = self._subscribers.setdefault(NOTICE_CHANNELS[channel], [])
            if callback not in subscribers:  # each scoped view of a store subscribes the same callback
                subscribers.append(callback)
            if self._thread.ident is None:
                self.start()

    def _call(self, channel: str, payload: str | None) -> None:
        for callback in list(self._subscribers.get(channel, ())):
            try:
                callback(payload)
            except Exception:  # a subscriber's bug must not stop the notices of the others
                logger.exception("a notice's subscriber failed")

    def _listening(self, listening: bool) -> None:
        if listening:
            for channel in list(self._subscribers):
                self._call(channel, None)

    def _notice(self, channel: str, payload: str) -> None:
        self._call(channel, payload)


class PostgresStore:
    dialect = "postgresql"
    blocks_process = False  # psycopg waits through gevent's patched sockets

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
        self._versions = VersionReads()  # shared with the scoped views, which copy this object
        self._notices: ChangeNotices | None = None  # listen_for_changes(); shared the same way
        self._wakeups = Wakeups(self._pool.conninfo)  # on_notice(): started at the first subscriber

    def listen_for_changes(self) -> None:
        """Check kept hits by notice (SEMULA_CHANGE_CHECK=notify): version() answers from the counters
        it read until a change's notice forgets them, rather than reading the counter each time. A
        change is then seen once its notice has come, within milliseconds, where a read sees it from
        the very next request. Before the scoped views are made: they share this object."""
        if self._notices is None:
            self._notices = ChangeNotices(self._pool.conninfo)
            self._notices.start()

    def on_notice(self, channel: str, callback: Callable[[str | None], None]) -> bool:
        """Call `callback(payload)` at each notice on `channel` ("resolved": a parked call's id;
        "flights": a record-through flight's "project fingerprint seq"), committed by any process on
        the database; with None when the listening (re)starts. One listening connection per process."""
        self._wakeups.subscribe(channel, callback)
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
        return self._read(name, params, True)

    def _read(self, name: str, params: dict[str, Any], every: bool, *, reuse: Keeps | None = None) -> Any:
        """A statement's rows (all, or the first), written out rather than through _conn()'s context
        managers, which were a fifth of the client CPU of a replay hit's counter read.

        A read that met a connection the server had ended (a restart, pg_terminate_backend, an idle
        timeout) runs once more after the pool replaced its dead ones: checked on failure rather than
        at every checkout, which would cost every replay hit a round trip. A write is not run again:
        it may have been applied before the connection broke.

        `reuse`: run on the connection's kept cursor (`_cursor()`), which is dropped with its result
        when `reuse(rows)` says the result is too large to go on holding.
        """
        refuse_nul(params)
        sql = PG_QUERIES[name]
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
        of a row a replay answer is made of (migrations/0017_replay_changes.postgresql.sql).

        Concurrent hits of a workspace read it together (VersionReads), each in a query that began
        after it asked: one row by primary key, whatever the number of hits waiting.
        """
        group = (self.workspace_id, workspace_id)  # under row-level security, a query reads as one tenant
        if self._notices is not None:
            return self._notices.version(
                workspace_id, lambda: self._versions.read(group, workspace_id, self._read_counter)
            )
        return self._versions.read(group, workspace_id, self._read_counter)

    def entry_at_version(
        self, workspace_id: str, project_id: str, fingerprint: str
    ) -> tuple[Row | None, object]:
        """Lookups of one project asked for together are read in one statement (VersionReads: each
        from a statement that began after it asked), with the counter from the same snapshot."""
        group = (self.workspace_id, "entries", workspace_id, project_id)
        found = self._versions.read(
            group, fingerprint, lambda keys: self._read_entries(workspace_id, project_id, keys)
        )
        assert isinstance(found, tuple)
        return found

    def _read_entries(self, workspace_id: str, project_id: str, fingerprints: list[Key]) -> dict[Key, object]:
        params: dict[str, Any] = {"workspace_id": workspace_id, "project_id": project_id}
        size = next((n for n in BATCH_SIZES if n >= len(fingerprints)), None)
        if size is not None:  # a statement PostgreSQL plans once (BATCH_SIZES)
            padded = fingerprints + fingerprints[-1:] * (size - len(fingerprints))
            params |= {f"f{index}": fingerprint for index, fingerprint in enumerate(padded)}
            name = _batch_name(size)
        else:
            params["fingerprints"] = fingerprints
            name = "entries_at_version"
        rows = self._read(name, params, True, reuse=_small_entries)
        version = rows[0]["version"]  # one row at least: the counter's
        found: dict[Key, object] = {fingerprint: (None, version) for fingerprint in fingerprints}
        for row in rows:
            fingerprint = row.pop("found_fingerprint")
            if fingerprint is not None:
                del row["version"]
                found[fingerprint] = (row, version)
        return found

    def _read_counter(self, keys: list[Key]) -> dict[Key, object]:
        [workspace_id] = keys  # one workspace per group
        row = self._read("replay_counter", {"workspace_id": workspace_id}, False, reuse=_always)
        return {workspace_id: row["counter"]} if row is not None else {}

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
        if self._notices is not None:
            self._notices.stop()
        self._wakeups.stop()
        self._pool.close()

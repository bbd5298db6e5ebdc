"""Storage: the only package that knows SQLite from PostgreSQL.

`connect(url)` returns a Store. Every statement is a named query from queries/*.sql,
shared by both dialects; parameters are written `:name`. Driver errors are
translated to the exceptions below, so callers never import sqlite3 or psycopg.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from importlib import resources
from typing import Any, Protocol

Row = dict[str, Any]


# Called with each translated error's kind (semula.metrics counts them), so no caller has to.
ERROR_LISTENERS: list[Callable[[str], None]] = []

# user:password@ in a URL the driver quotes back, e.g. in a connection error.
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)[^@\s]*@")


def clean(text: str) -> str:
    """A driver's message fit for a response and a log line: its first line, credentials redacted."""
    from semula.core.redact import redact_text

    lines = str(text).strip().splitlines()
    return redact_text(_URL_PASSWORD.sub(r"\1[REDACTED]@", lines[0][:300] if lines else ""))


class DatabaseError(Exception):
    """The database refused or failed a statement."""

    kind = "error"
    counted = True  # told to ERROR_LISTENERS (the metrics, whose alert pages someone)

    def __init__(self, detail: str = ""):
        self.detail = clean(detail)
        super().__init__(self.detail or (self.__doc__ or "").strip())
        if self.counted:
            for listener in ERROR_LISTENERS:
                listener(self.kind)

    def describe(self) -> str:
        """What happened, in a sentence: the class's summary and the driver's cleaned message."""
        summary = (self.__doc__ or "").strip().rstrip(".")
        return f"{summary}: {self.detail}" if self.detail else f"{summary}."


class UniqueViolation(DatabaseError):
    """A row with the same unique key exists already."""

    kind = "unique"


class Busy(DatabaseError):
    """The database stayed locked by another writer for longer than the busy timeout."""

    kind = "busy"


class Unavailable(DatabaseError):
    """The database cannot be reached."""

    kind = "unavailable"


class DiskFull(DatabaseError):
    """The database's disk is full."""

    kind = "disk_full"


class SchemaMismatch(DatabaseError):
    """The database schema is not the one this semula expects (run `semula migrate`)."""

    kind = "schema"


class InvalidText(DatabaseError):
    """A text value holds a NUL character (\u0000), which PostgreSQL cannot store in text."""

    kind = "invalid_text"
    counted = False  # a client's text, refused before it reached the database


def refuse_nul(params: dict[str, Any]) -> None:
    """Refuse a statement whose text parameters hold NUL, on both databases alike (SQLite would
    store it; PostgreSQL refuses it in the driver). JSON documents are stored with it escaped."""
    for value in params.values():
        if type(value) is str and "\x00" in value:
            raise InvalidText(
                "A text value holds a NUL character (\\u0000), which semula cannot store in a text field."
            )


def load_queries(text: str, dialect: str | None = None) -> dict[str, str]:
    """Split query text on `-- name: x` headers into {name: sql}.

    A header `-- name: x.postgresql` (or `.sqlite`) overrides x for that dialect only: the
    rare statement the two cannot share stays next to its twin, and visible.
    """
    queries: dict[str, str] = {}
    overrides: dict[str, str] = {}
    for match in re.finditer(r"^-- name: ([\w.]+)\n(.*?)(?=^-- name: |\Z)", text, re.S | re.M):
        body = "\n".join(line for line in match.group(2).splitlines() if not line.lstrip().startswith("--"))
        name, _, only = match.group(1).partition(".")
        target = queries if not only else overrides if only == dialect else {}
        if name in target:
            raise ValueError(f"query {match.group(1)} is defined twice")
        target[name] = body.strip().rstrip(";")
    return queries | overrides


# One file per area (core, proxy, pending, entries, ...); names are unique across all of them.
_TEXT = "\n".join(
    f.read_text()
    for f in sorted(resources.files(__package__).joinpath("queries").iterdir(), key=lambda f: f.name)
    if f.name.endswith(".sql")
)
QUERIES = load_queries(_TEXT, "sqlite")
POSTGRES_QUERIES = load_queries(_TEXT, "postgresql")


def takes_rows(sql: str) -> bool:
    """Whether a query reads its rows from one `:rows` JSON array parameter (see Tx.many); psycopg's
    spelling of it, `%(rows)s`, counts too."""
    return re.search(r"(?<![:\w]):rows\b|%\(rows\)s", sql) is not None


class Tx(Protocol):
    """One connection inside one transaction (or in autocommit, for the Store's own calls)."""

    def one(self, name: str, /, **params: Any) -> Row | None: ...
    def all(self, name: str, /, **params: Any) -> list[Row]: ...
    def run(self, name: str, /, **params: Any) -> int: ...
    def many(self, name: str, rows: list[dict[str, Any]], /) -> None:
        """Write many rows with one named query: once over all of them as the JSON array `:rows` when
        the dialect's query takes it (one statement), else row by row (which a driver may batch)."""
        ...

    def script(self, sql: str) -> None: ...


class Store(Protocol):
    """Named queries, run on one of the process's connections, and notices. What the service layer
    does with them (which reads go together, what is remembered) is not the store's business: it
    asks the store's capabilities below rather than its dialect."""

    dialect: str
    # True when a call holds the whole process until it returns (SQLite), even under gevent.
    blocks_process: bool
    # True when a statement costs a round trip to a server (PostgreSQL): reads asked for together are
    # worth one statement (semula.service.versions), and there entries_at_version reads a project's
    # entries for several fingerprints with the change counter in one.
    batches_lookups: bool
    # The workspace every statement runs as (scoped()), under row-level security; None unscoped.
    workspace_id: str | None

    def one(self, name: str, /, **params: Any) -> Row | None: ...
    def all(self, name: str, /, **params: Any) -> list[Row]: ...
    def run(self, name: str, /, **params: Any) -> int: ...
    def transaction(self, workspace_id: str | None = None) -> AbstractContextManager[Tx]: ...
    def scoped(self, workspace_id: str) -> Store: ...
    def migration_transaction(self) -> AbstractContextManager[Tx]: ...
    def iterate(self, name: str, /, batch: int = 500, **params: Any) -> Iterator[Row]: ...
    def version(self, workspace_id: str) -> object:
        """The replay change counter of this workspace, read now: a value that differs once a row a
        replay answer of this workspace is made of may have changed (its projects and their settings,
        entries and their answers, tokens, the workspace itself). It may change more often than those
        rows, never less. PostgreSQL: the `replay_counter` statement; SQLite: one counter for all,
        read only when its WAL-index header moved (a read of shared memory otherwise).

        Read before the rows it covers, it tells a later caller whether what it read then is still
        current (semula.service.hits, semula.service.versions).
        """
        ...

    def on_notice(
        self, channel: str, callback: Callable[[str | None], None], lost: Callable[[], None] | None = None
    ) -> bool:
        """Call `callback(payload)` at each notice on `channel`, committed by any process on the
        database: "resolved" (a parked call was answered or cancelled; its id), "flights" (a
        record-through flight ended; "project fingerprint seq") or "changes" (a row a replay answer is
        made of changed; the workspace's id). With None when the listening (re)starts: notices may have
        been missed; `lost()` when it stops. False where the database sends none (SQLite): there the
        caller polls only. A notice comes after the commit by an amount nobody can bound, so a caller
        polls as well."""
        ...

    def close(self) -> None: ...


def connect(url: str, *, pool_size: int = 10, open_timeout: float = 10.0) -> Store:
    """Open a Store for a sqlite:/// or postgresql:// URL (PostgreSQL: connected within open_timeout s)."""
    if url.startswith("sqlite:///"):
        from semula.db.sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///"), pool_size=pool_size)
    if url.startswith(("postgresql://", "postgres://")):
        from semula.db.postgres import PostgresStore

        return PostgresStore(url, pool_size=pool_size, open_timeout=open_timeout)
    raise ValueError("database URL must start with sqlite:/// or postgresql://")

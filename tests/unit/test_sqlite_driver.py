"""The SQLite driver's fast paths: the WAL-index header as a change signal, multi-row inserts."""

from __future__ import annotations

import sqlite3
import struct

import pytest

from semula.db import connect
from semula.db.sqlite import (
    MULTI_ROW_MAX,
    WAL_INDEX_HEADER,
    WAL_INDEX_VERSION,
    WalIndex,
    _chunk_sizes,
    _multi_row_insert,
    split_statements,
)


def header(change: int, *, init: int = 1, version: int = WAL_INDEX_VERSION) -> bytes:
    """A 48-byte header as https://www.sqlite.org/walformat.html lays it out (checksums left zero)."""
    head = struct.pack("=IIIBBHII", version, 0, change, init, 0, 4096, change * 3, 10)
    return head + bytes(WAL_INDEX_HEADER - len(head))


def shm(tmp_path, first: bytes, second: bytes):
    (tmp_path / "x.db-shm").write_bytes(first + second + bytes(32 * 1024))
    return WalIndex(str(tmp_path / "x.db"))


def test_two_equal_copies_are_the_header(tmp_path):
    assert shm(tmp_path, header(7), header(7)).header() == header(7)


@pytest.mark.parametrize(
    "first, second",
    [
        (header(7), header(8)),  # a writer between its two copies
        (header(7, init=0), header(7, init=0)),  # not initialised yet
        (header(7, version=1), header(7, version=1)),  # a format this code does not know
    ],
)
def test_anything_else_is_no_header(tmp_path, first, second):
    assert shm(tmp_path, first, second).header() is None


def test_a_closed_map_is_no_header(tmp_path):
    index = shm(tmp_path, header(7), header(7))
    index.close()
    assert index.header() is None


def test_a_short_file_is_refused_before_it_is_mapped(tmp_path):
    (tmp_path / "x.db-shm").write_bytes(bytes(10))
    with pytest.raises(OSError):
        WalIndex(str(tmp_path / "x.db"))


def test_the_store_sees_every_change_counted_and_only_those(tmp_path):
    path = tmp_path / "x.db"
    store = connect(f"sqlite:///{path}", pool_size=1)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA journal_mode=WAL")
    for statement in split_statements(
        """CREATE TABLE replay_changes (id INTEGER PRIMARY KEY, counter INTEGER NOT NULL);
        INSERT INTO replay_changes VALUES (1, 0);
        CREATE TABLE t (x); CREATE TABLE log (x);
        CREATE TRIGGER t_changes AFTER INSERT ON t
        BEGIN UPDATE replay_changes SET counter = counter + 1; END;"""
    ):
        other.execute(statement)
    store.version("wsp_default")  # the first read opens the watch connection and maps its -shm file
    index = store._wal_index
    assert index is not None and index.header() is not None  # the header is there to read
    before, header = store.version("wsp_default"), index.header()
    for value in range(3):
        other.execute("INSERT INTO log VALUES (?)", (value,))  # commits, but moves no counter
        assert index.header() != header and store.version("wsp_default") == before
        header = index.header()
        other.execute("INSERT INTO t VALUES (?)", (value,))
        after = store.version("wsp_default")
        assert after != before
        before = after
    other.execute("SELECT * FROM t").fetchall()  # a read commits nothing
    assert store.version("wsp_default") == before
    other.close()
    store.close()


def test_an_unchanged_header_costs_no_query(tmp_path, monkeypatch):
    store = connect(f"sqlite:///{tmp_path / 'x.db'}", pool_size=1)
    with store.transaction() as tx:
        tx.script(
            "CREATE TABLE replay_changes (id INTEGER PRIMARY KEY, counter INTEGER);"
            "INSERT INTO replay_changes VALUES (1, 5)"
        )
    assert store.version("wsp_default") == 5
    assert store.version("wsp_default") == 5
    store._watch = None  # a query now would open a connection: none is opened
    monkeypatch.setattr(store, "_open", lambda: pytest.fail("queried"))
    assert store.version("wsp_default") == 5
    store.close()


def test_a_trigger_body_is_one_statement():
    assert split_statements(
        "CREATE TABLE a (x);\n-- a; comment\nCREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE b SET y = 1; "
        "UPDATE c SET z = 2; END;\nSELECT 1"
    ) == [
        "CREATE TABLE a (x)",
        "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE b SET y = 1; UPDATE c SET z = 2; END",
        "SELECT 1",
    ]


@pytest.mark.parametrize("count", [0, 1, 7, 127, 128, 129, 300, 1000])
def test_multi_row_chunks_cover_every_row_once(count):
    sizes = list(_chunk_sizes(count))
    assert sum(sizes) == count and all(s <= MULTI_ROW_MAX for s in sizes)
    assert {s for s in sizes} <= {2**k for k in range(8)}  # few distinct statements are prepared


def test_only_a_plain_single_row_insert_is_written_as_multi_row():
    assert _multi_row_insert("INSERT INTO t (a, b) VALUES (:a, :b)") == (
        "INSERT INTO t (a, b) VALUES ",
        ["a", "b"],
    )
    assert _multi_row_insert("INSERT INTO t (a) VALUES (:a) ON CONFLICT DO NOTHING") is None
    assert _multi_row_insert("INSERT INTO t (a) VALUES (:a) RETURNING id") is None
    assert _multi_row_insert("INSERT INTO t (a) SELECT :a") is None
    assert _multi_row_insert("UPDATE t SET a = :a") is None

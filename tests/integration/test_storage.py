from __future__ import annotations

import gc
import logging
import multiprocessing
import weakref

import pytest

from semula import db
from semula.db import UniqueViolation, connect
from semula.migrate import migrate, migration_files
from tests.helpers import call_row


def test_migrate_twice_is_a_no_op(store):
    assert migrate(store) == []
    names = [r["name"] for r in store.all("list_migrations")]
    assert names == [p.name for p in migration_files(store.dialect)]


def _migrate_in_process(url: str, out) -> None:
    s = connect(url, pool_size=1)
    try:
        out.put(migrate(s))
    finally:
        s.close()


def test_concurrent_migrations_apply_each_file_once(tmp_path, db_url):
    # A fresh, empty database of the same dialect: two processes race to migrate it.
    if db_url.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        import psycopg

        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("DROP SCHEMA public CASCADE")
            conn.execute("CREATE SCHEMA public")
        url = db_url
    mp = multiprocessing.get_context("spawn")
    out = mp.Queue()
    procs = [mp.Process(target=_migrate_in_process, args=(url, out)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    results = [out.get(timeout=5) for _ in procs]
    applied = sorted(name for r in results for name in r)
    s = connect(url, pool_size=1)
    expected = [p.name for p in migration_files(s.dialect)]
    assert applied == expected
    assert [r["name"] for r in s.all("list_migrations")] == expected
    s.close()


def test_unique_violation_is_translated(store):
    with store.transaction() as tx:
        tx.run("record_migration", name="dup", now=1.0)
    with pytest.raises(UniqueViolation), store.transaction() as tx:
        tx.run("record_migration", name="dup", now=2.0)


def test_transaction_rolls_back_on_error(store):
    with pytest.raises(RuntimeError), store.transaction() as tx:
        tx.run("record_migration", name="rolled-back", now=1.0)
        raise RuntimeError("boom")
    assert store.one("migration_applied", name="rolled-back") is None


def test_named_queries_parse():
    assert db.QUERIES["ping"] == "SELECT 1 AS ok"
    from semula.db.postgres import to_psycopg

    assert to_psycopg("SELECT :a, :b_2 WHERE x LIKE '%'") == "SELECT %(a)s, %(b_2)s WHERE x LIKE '%%'"


CALL_COLUMNS = "id workspace_id project_id created_at fingerprint model stream outcome status duration_ms"
CALL_COLUMNS += " entry_id pending_id token_id api fault"


def _call_rows(count: int) -> list[dict]:
    return [call_row(id=f"call_{i:04d}", created_at=1000.0 + i) for i in range(count)]


@pytest.mark.parametrize("shape", ["per row", "json array"])
def test_many_writes_every_row_either_way(store, monkeypatch, shape):
    # insert_calls takes one row on SQLite and a `:rows` JSON array on PostgreSQL; each driver must
    # run the other shape too, since which one a query takes is its dialect's query file's choice.
    from semula.db import postgres, sqlite

    queries = sqlite.QUERIES if store.dialect == "sqlite" else postgres.PG_QUERIES
    if db.takes_rows(queries["insert_calls"]) != (shape == "json array"):
        if store.dialect == "postgresql":  # SQLite's per-row statement serves PostgreSQL as well
            sql = postgres.to_psycopg(db.QUERIES["insert_calls"])
        else:
            columns = CALL_COLUMNS.split()
            extracted = ", ".join(f"json_extract(value, '$.{c}')" for c in columns)
            sql = f"INSERT INTO call_log ({', '.join(columns)}) SELECT {extracted} FROM json_each(:rows)"
        monkeypatch.setitem(queries, "insert_calls", sql)
    assert db.takes_rows(queries["insert_calls"]) == (shape == "json array")
    rows = _call_rows(120)
    with store.transaction("wsp_default") as tx:
        tx.many("insert_calls", rows)
    written = store.all("calls_in_project", project_id="prj_x")
    assert [(r["id"], r["created_at"]) for r in written] == [(r["id"], r["created_at"]) for r in rows]


def test_takes_rows_reads_the_parameter_name_only():
    assert db.takes_rows("SELECT * FROM json_each(:rows)")
    assert not db.takes_rows("SELECT :rows_seen, '::rows'")


def test_connections_that_died_idle_in_the_pool_are_replaced(db_url, client, make_token, ctx, app):
    """After pg_terminate_backend of the app's pooled connections, the next requests all succeed."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite opens no connection that a server can end")
    import psycopg

    headers = make_token("admin")
    store = app.extensions["semula"]["store"]
    with store.transaction() as a, store.transaction() as b:  # two connections in the pool
        a.one("ping"), b.one("ping")
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    with psycopg.connect(db_url, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert len(ended) >= 2
    for _ in range(6):
        r = client.get("/api/v1/projects", headers=headers)
        assert r.status_code == 200, r.json


def test_an_idle_pooled_connection_holds_no_large_result(db_url):
    """A psycopg cursor keeps its last result and parameters until its next statement: only the change
    counter's read (an integer) runs on the cursor a connection keeps, so what other reads sent and
    got (a miss's candidates, a large entry) is not held by an idle pooled connection."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite keeps no result on its connections")
    from semula.db import connect

    store = connect(db_url, pool_size=1)
    try:
        store.version("wsp_default")
        conn = store._pool.getconn()
        kept = conn.semula_cursor
        store._pool.putconn(conn)
        assert kept is not None and kept.pgresult is not None and kept.pgresult.ntuples == 1
        assert store.all("calls_in_project", project_id="x" * 200_000) == []  # 200 KB sent, no rows
        conn = store._pool.getconn()
        store._pool.putconn(conn)
        assert conn.semula_cursor is kept and kept.pgresult.ntuples == 1  # not the read just made
    finally:
        store.close()


@pytest.fixture
def kept_connection(db_url):
    """A PostgreSQL store of one pooled connection whose kept cursor exists, with the cycle collector
    off: a weak reference to that connection, its server pid and the store. The connection is freed
    only if nothing, not a reference cycle either, holds it."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite keeps no cursor on its connections")
    from semula.db import connect

    store = connect(db_url, pool_size=1)
    collecting = gc.isenabled()
    gc.disable()
    try:
        store.version("wsp_default")
        conn = store._pool.getconn()
        assert conn.semula_cursor is not None
        freed, pid = weakref.ref(conn), conn.info.backend_pid
        store._pool.putconn(conn)
        del conn
        yield freed, pid, store
    finally:
        store.close()  # again, after a test that closed it: closing twice is harmless
        if collecting:
            gc.enable()


def test_a_closed_connection_is_freed_at_once(kept_connection):
    """The kept cursor refers to its connection: closing the connection (the pool discarding it, the
    store closing) lets go of the cursor, so the two are freed then, not at the next cycle collection."""
    freed, _, store = kept_connection
    store.close()
    assert freed() is None


def test_a_connection_a_read_found_broken_is_freed_at_once(kept_connection, db_url, caplog):
    """The pool drops a broken connection without closing it: a read on the kept cursor that found
    its connection ended (a server restart, here pg_terminate_backend) lets go of the cursor itself,
    so the dead connection is freed then, and the read runs again on a new one."""
    import psycopg

    # The pool's warning about the discarded connection names it: a captured record would hold it.
    caplog.set_level(logging.ERROR, logger="psycopg.pool")
    freed, pid, store = kept_connection
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert store.version("wsp_default") is not None  # read again on a new connection
    assert freed() is None


def test_a_first_sight_of_a_large_entry_leaves_no_cursor_holding_it(db_url, ctx):
    """A first sight's entry read runs on the kept cursor, which is dropped with its result when the
    entries it read are over KEPT_RESULT (a 2 MB embeddings answer must not stay on an idle connection)."""
    if not db_url.startswith("postgresql"):
        pytest.skip("SQLite keeps no result on its connections")
    from semula.db import connect
    from semula.db.postgres import KEPT_RESULT
    from semula.service import projects
    from semula.service.versions import Versions
    from tests.entry_helpers import save_entry

    projects.create(ctx, {"name": "shop", "mode": "replay"})
    small = save_entry(ctx, "shop", "small", {"content": "short"})
    large = save_entry(ctx, "shop", "large", {"content": "y" * (KEPT_RESULT + 1)})
    project_id = projects.get_row(ctx, "shop")["id"]
    store = connect(db_url, pool_size=1)
    try:

        def read(entry):
            row, _ = Versions().entry_at_version(
                store, ctx.principal.workspace_id, project_id, entry["fingerprint"]
            )
            assert row["id"] == entry["id"]
            conn = store._pool.getconn()
            store._pool.putconn(conn)
            return conn.semula_cursor

        kept = read(small)
        assert kept is not None and kept.pgresult.ntuples == 1
        assert read(large) is None  # dropped with the large result
        assert read(small) is not None
    finally:
        store.close()

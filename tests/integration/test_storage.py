from __future__ import annotations

import multiprocessing

import pytest

from semula import db
from semula.db import UniqueViolation, connect
from semula.migrate import migrate, migration_files


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

"""Database failures say what happened (disk full, missing relation, connection refused to host H),
in the error and in the log, with secrets redacted; only a real lock timeout says "busy"."""

from __future__ import annotations

import logging
import sqlite3

import psycopg
import pytest

from semula import db
from semula.db import postgres as pg_driver
from semula.db import sqlite as sqlite_driver
from semula.service import projects

URL = "/p/shop/v1/chat/completions"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "mode": "replay"})


def rename_entries(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            conn.execute("ALTER TABLE entries RENAME TO entries_gone")
    else:
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute("ALTER TABLE entries RENAME TO entries_gone")


def test_a_missing_relation_is_named_by_the_proxy_the_api_and_the_log(
    db_url, shop, client, make_token, caplog
):
    headers = make_token("admin")
    rename_entries(db_url)
    caplog.set_level(logging.WARNING)
    proxied = client.post(URL, json=BODY, headers=headers)
    listed = client.get("/api/v1/projects/shop/entries", headers=headers)
    for r in (proxied, listed):
        assert r.status_code == 500, r.json
        error = r.json["error"]
        assert error["code"] == "database_error" and "entries" in error["message"], error
        assert "busy" not in error["message"] and "migrate" in error["message"]
    details = [getattr(rec, "detail", "") for rec in caplog.records if rec.getMessage() == "database error"]
    assert details and all("entries" in d for d in details), details


def test_disk_full_is_reported_as_such_not_as_busy(shop, client, make_token, app, monkeypatch, caplog):
    headers = make_token("admin")
    store = app.extensions["semula"]["store"]

    def full(*args, **kwargs):
        raise db.DiskFull("database or disk is full")

    monkeypatch.setattr(store, "one", full)
    monkeypatch.setattr(store, "all", full)
    caplog.set_level(logging.WARNING)
    for r in (client.post(URL, json=BODY, headers=headers), client.get("/api/v1/projects", headers=headers)):
        assert r.status_code == 503
        assert r.json["error"]["code"] == "database_disk_full"
        assert "disk is full" in r.json["error"]["message"] and "busy" not in r.json["error"]["message"]
    assert any("disk is full" in getattr(rec, "detail", "") for rec in caplog.records)


def test_sqlite_disk_full_translates_to_disk_full(tmp_path):
    conn = sqlite3.connect(tmp_path / "small.db")
    conn.execute("CREATE TABLE t (x)")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(db.DiskFull) as full, sqlite_driver._translated():
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 100_000,))
    assert full.value.kind == "disk_full" and "full" in full.value.describe()
    with pytest.raises(db.SchemaMismatch, match="no such table: nope"), sqlite_driver._translated():
        conn.execute("SELECT * FROM nope")


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (psycopg.errors.DiskFull("could not extend file: No space left on device"), db.DiskFull),
        (psycopg.errors.UndefinedTable('relation "entries" does not exist'), db.SchemaMismatch),
        (psycopg.errors.LockNotAvailable("canceling statement due to lock timeout"), db.Busy),
        (psycopg.errors.AdminShutdown("terminating connection"), db.Unavailable),
    ],
)
def test_postgresql_errors_translate_by_what_happened(raised, expected):
    with pytest.raises(expected) as translated, pg_driver._translated():
        raise raised
    assert str(raised) in translated.value.describe()


def test_a_refused_connection_names_the_host_and_hides_the_password():
    with pytest.raises(db.Unavailable) as refused:
        db.connect("postgresql://bob:s3cret-pw@127.0.0.1:1/semula", pool_size=1)
    text = refused.value.describe()
    assert "127.0.0.1" in text and "refused" in text and "s3cret-pw" not in text


def test_clean_keeps_the_first_line_and_redacts_credentials():
    text = db.clean("could not use postgresql://bob:s3cret@db:5432/x password=hunter22\nDETAIL: secret row")
    assert text.startswith("could not use postgresql://bob:[REDACTED]@db:5432/x")
    assert "s3cret" not in text and "hunter22" not in text and "DETAIL" not in text


def test_sqlite_entry_lookup_translates_errors_and_keeps_its_connection(tmp_path):
    """The replay's entry lookup (a read of the store's, run outside its context managers): its errors
    are the driver-neutral ones all the same, and its connection goes back to the pool either way."""
    from semula.service.versions import Versions

    store = sqlite_driver.SQLiteStore(str(tmp_path / "lookup.db"), pool_size=2)
    lookup = Versions().entry_at_version
    try:
        with store.transaction() as tx:
            tx.raw.execute("CREATE TABLE replay_changes (id INTEGER PRIMARY KEY, counter INTEGER)")
            tx.raw.execute("INSERT INTO replay_changes VALUES (1, 7)")
            tx.raw.execute(
                "CREATE TABLE entries (id, response, chunks, review_status, model, meta, answers,"
                " project_id, fingerprint)"
            )
            tx.raw.execute(
                "INSERT INTO entries VALUES ('e1', '{}', NULL, 'unreviewed', 'm', NULL, 1, 'p', 'f')"
            )
        row, version = lookup(store, "w", "p", "f")
        assert version == 7
        assert row == {
            "id": "e1",
            "response": "{}",
            "chunks": None,
            "review_status": "unreviewed",
            "model": "m",
            "meta": None,
            "answers": 1,
        }
        assert lookup(store, "w", "p", "other")[0] is None
        idle = len(store._idle)
        with store.transaction() as tx:
            tx.raw.execute("DROP TABLE entries")
        with pytest.raises(db.SchemaMismatch, match="no such table: entries"):
            lookup(store, "w", "p", "f")
        assert len(store._idle) == idle
    finally:
        store.close()

"""Issue 16: migrate and serve refuse a database schema that this version of semula does not fit."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from semula.db import connect, postgres, sqlite
from semula.migrate import MIGRATIONS_DIR, SchemaMismatch, migrate, migration_files, schema
from semula.service.versions import Versions
from semula.surfaces.cli import EXIT_REFUSED, main
from tests.helpers import FUTURE_MIGRATION, forget_migration, free_port

CHECKOUT = Path(__file__).resolve().parents[2]


def _without_fault(sql: str) -> str:
    """insert_calls as it was before migration 0026 (no `fault` column)."""
    for column in (", fault TEXT)", ", %(fault)s)", ", :fault)", ", fault)"):
        sql = sql.replace(column, ")")
    return sql


def migrate_all_but(store, prefix: str | tuple[str, ...], tmp_path) -> None:
    """Migrate `store` with every migration of its dialect but the one whose name starts with `prefix`, as a
    database that an older semula migrated."""
    import shutil

    before = tmp_path / "before"
    before.mkdir()
    for path in migration_files(store.dialect):
        if not path.name.startswith(prefix):
            shutil.copy(str(path), before / path.name)
    migrate(store, before)


def test_a_checkout_reads_the_migrations_at_its_top_level():
    """The wheel ships them inside the package (test_wheel_install); a checkout keeps them beside it."""
    import semula

    top = os.path.join(os.path.dirname(os.path.dirname(semula.__file__)), "migrations")
    files = migration_files("sqlite")
    assert files and all(os.path.dirname(str(p)) == top for p in files)
    assert str(MIGRATIONS_DIR) == top


def test_a_fresh_database_is_missing_its_schema_until_migrated(empty_db_url):
    store = connect(empty_db_url, pool_size=1)
    try:
        assert schema(store).problem().reason == "schema_missing"
        assert migrate(store) == [p.name for p in migration_files(store.dialect)]
        assert schema(store).problem() is None
    finally:
        store.close()


def test_migrate_refuses_a_newer_schema_and_changes_nothing(store):
    store.run("record_migration", name=FUTURE_MIGRATION, now=1.0)
    forget_migration(store, "0006_pending_claim_indexes.sql")
    with pytest.raises(SchemaMismatch) as raised:
        migrate(store)
    assert raised.value.reason == "schema_newer" and FUTURE_MIGRATION in raised.value.message
    assert "Upgrade semula" in raised.value.message
    # Refused before applying anything: the missing migration is still missing.
    assert "0006_pending_claim_indexes.sql" not in [r["name"] for r in store.all("list_migrations")]


def test_migrate_refuses_an_installation_without_migrations(empty_db_url, tmp_path):
    store = connect(empty_db_url, pool_size=1)
    try:
        with pytest.raises(SchemaMismatch) as raised:
            migrate(store, tmp_path / "nothing-here")
    finally:
        store.close()
    assert raised.value.reason == "schema_missing" and "reinstall semula" in raised.value.message


def test_cli_migrate_refuses_a_newer_schema_with_what_to_do(store, db_url, monkeypatch):
    store.run("record_migration", name=FUTURE_MIGRATION, now=1.0)
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    result = CliRunner().invoke(main, ["migrate"])
    assert result.exit_code == 1
    assert "newer semula" in result.output and FUTURE_MIGRATION in result.output
    assert "applied" not in result.output


def test_serve_refuses_a_newer_schema_and_starts_no_server(store, db_url, tmp_path):
    store.run("record_migration", name=FUTURE_MIGRATION, now=1.0)
    env = {**os.environ, "SEMULA_DATABASE_URL": db_url, "SEMULA_WORKERS": "1"}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path / "metrics")
    args = [sys.executable, "-m", "semula", "serve", "--bind", f"127.0.0.1:{free_port()}"]
    out = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
    proc = subprocess.Popen(args, env=env, start_new_session=True, **out)
    try:
        output, _ = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("semula serve started on a database migrated by a newer semula")
    # The status deploy/semula.service does not restart on: starting again cannot fix it.
    assert proc.returncode == EXIT_REFUSED == 2
    assert f"RestartPreventExitStatus={EXIT_REFUSED}" in (CHECKOUT / "deploy" / "semula.service").read_text()
    assert b"newer semula" in output and b"Booting worker" not in output


def test_sqlite_moves_the_request_to_the_end_of_entry_rows_and_keeps_everything(tmp_path):
    """0019 (SQLite): an entry's request becomes its row's last column, so the replay's lookup of the
    response never walks the request's overflow pages; entries, their answers and revisions survive
    (a rebuilt table would have cascaded deletes to both), and the change counter moves once."""
    from semula.config import Settings
    from semula.service import CLI, Context, entries, projects
    from tests.entry_helpers import request_for, save_entry

    store = connect(f"sqlite:///{tmp_path}/old.db", pool_size=1)
    try:
        migrate_all_but(store, "0019_", tmp_path)
        ctx = Context(store, Settings(), CLI)
        project = projects.create(ctx, {"name": "shop", "mode": "replay"})
        long_text = "tool output " * 9000  # ~100 KB: the request spills onto overflow pages
        saved = [save_entry(ctx, "shop", text) for text in ("short", long_text)]
        entries.edit(ctx, saved[0]["id"], {"content": "edited"}, summary="by hand")
        entries.append(
            store,
            ctx,
            project_id=project["id"],
            fingerprint=saved[1]["fingerprint"],
            request=request_for(long_text),
            response=json.loads(
                store.one("get_entry", workspace_id="wsp_default", id=saved[1]["id"])["response"]
            ),
            chunks=None,
            actor="agent",
            summary="",
        )

        def rows(sql):
            with store.transaction() as tx:
                return [dict(row) for row in tx.raw.execute(sql)]

        def snapshot():  # by column name: the columns' order is what changes
            return (
                rows("SELECT * FROM entries ORDER BY id"),
                rows("SELECT * FROM entry_revisions ORDER BY id"),
                rows("SELECT * FROM entry_answers ORDER BY entry_id, seq"),
            )

        old = snapshot()
        counter = store.version("wsp_default")
        assert migrate(store) == ["0019_entry_request_last.sqlite.sql"]
        assert snapshot() == old
        assert [len(part) for part in old] == [2, 4, 1]  # revisions: 2 saves, 1 edit, 1 appended answer
        assert store.version("wsp_default") == counter + 1
        columns = [row["name"] for row in rows("PRAGMA table_info(entries)")]
        assert columns[-1] == "request" and columns.count("request") == 1
        row, _ = Versions().entry_at_version(store, "wsp_default", project["id"], saved[1]["fingerprint"])
        assert row["id"] == saved[1]["id"] and row["answers"] == 2
    finally:
        store.close()


def test_the_call_log_loses_its_workspace_key_and_keeps_every_row(empty_db_url, tmp_path, monkeypatch):
    """0021: the call log's rows no longer check their workspace by a foreign key (decision 0048).
    On SQLite the table is built again: its rows, every column of them, and its two indexes survive;
    on PostgreSQL the constraint is dropped. Rows written afterwards read back alike."""
    from semula.config import Settings
    from semula.service import CLI, Context, projects
    from semula.service.calllog import CallLog

    store = connect(empty_db_url, pool_size=1)
    try:
        # 0026 adds a column to the table 0021 builds anew: held back with it, and the rows written
        # as before it.
        migrate_all_but(store, ("0021_", "0026_"), tmp_path)
        monkeypatch.setitem(sqlite.QUERIES, "insert_calls", _without_fault(sqlite.QUERIES["insert_calls"]))
        monkeypatch.setitem(
            postgres.PG_QUERIES, "insert_calls", _without_fault(postgres.PG_QUERIES["insert_calls"])
        )
        ctx = Context(store, Settings(), CLI)
        projects.create(ctx, {"name": "shop", "mode": "replay"})
        project = projects.get_row(ctx, "shop")
        row = {
            "workspace_id": project["workspace_id"],
            "project_id": project["id"],
            "fingerprint": "f" * 64,
            "model": 'gpt "quoted" \\ tab\t ü 🦊',
            "stream": 1,
            "outcome": "hit",
            "status": 200,
            "entry_id": "ent_x",
            "pending_id": None,
            "token_id": "tok_x",
            "api": "openai.chat",
        }
        log = CallLog(store)  # unbatched: each row is written at once
        for i in range(3):
            log.record({**row, "created_at": 1000.0 + i, "duration_ms": 1.5 + i})

        def calls():
            return store.all("calls_in_project", project_id=row["project_id"])

        old = calls()
        assert len(old) == 3
        assert migrate(store) == [
            p.name for p in migration_files(store.dialect) if p.name.startswith(("0021_", "0026_"))
        ]
        monkeypatch.undo()
        assert calls() == [{**r, "fault": None} for r in old]
        log.record({**row, "created_at": 2000.0, "duration_ms": 9.0})
        new = calls()
        assert len(new) == 4 and {k: new[-1][k] for k in row} == row
        assert new[-1]["created_at"] == 2000.0 and new[-1]["duration_ms"] == 9.0
        listed = store.all("list_call_log", project_id=row["project_id"], outcome="hit", after=None, limit=10)
        assert [r["id"] for r in listed] == [r["id"] for r in reversed(new)]
        with store.transaction() as tx:
            if store.dialect == "sqlite":
                indexes = {r["name"] for r in tx.raw.execute("PRAGMA index_list(call_log)")}
                keys = list(tx.raw.execute("PRAGMA foreign_key_list(call_log)"))
            else:
                indexes = {
                    r["indexname"]
                    for r in tx.raw.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'call_log'")
                }
                keys = list(
                    tx.raw.execute(
                        "SELECT conname FROM pg_constraint"
                        " WHERE conrelid = 'call_log'::regclass AND contype = 'f'"
                    )
                )
        assert {"call_log_created_idx", "call_log_project_idx"} <= indexes and keys == []
    finally:
        store.close()


READS = [
    ("entries", "shop"),
    ("entry", "show", "ent_x"),
    ("entry", "answer", "show", "ent_x", "1"),
    ("project", "list"),
    ("project", "show", "shop"),
    ("workspace", "list"),
    ("token", "list"),
    ("token", "sessions", "tok_x"),
    ("audit",),
    ("export", "shop"),
]


@pytest.mark.parametrize("command", READS, ids=lambda c: " ".join(c[:3]))
def test_a_read_in_another_directory_creates_no_database_and_says_which_it_looked_for(
    command, tmp_path, monkeypatch
):
    # The default SQLite URL is relative: run elsewhere than the service, it names another file.
    monkeypatch.delenv("SEMULA_DATABASE_URL", raising=False)
    monkeypatch.delenv("SEMULA_OWNER_DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, list(command))
    assert result.exit_code == 1, result.output
    assert "There is no database to read." in result.output
    assert f"the SQLite database {tmp_path / 'semula.db'};" in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_read_migrates_nothing_and_says_what_to_do(empty_db_url, monkeypatch):
    # An existing database whose schema does not fit (none at all here, PostgreSQL or SQLite) is
    # reported, not migrated: migrating is `semula migrate`'s, or a command that writes.
    monkeypatch.setenv("SEMULA_DATABASE_URL", empty_db_url)
    if empty_db_url.startswith("sqlite:///"):
        import sqlite3

        sqlite3.connect(empty_db_url.removeprefix("sqlite:///")).close()  # a file with no tables
    result = CliRunner().invoke(main, ["project", "list"])
    assert result.exit_code == 1 and "no semula tables: run `semula migrate`" in result.output, result.output
    assert "(This command used the " in result.output
    store = connect(empty_db_url, pool_size=1)
    try:
        assert schema(store).applied == ()
    finally:
        store.close()
    # A command that writes still migrates first, as before.
    assert CliRunner().invoke(main, ["project", "create", "shop"]).exit_code == 0
    assert CliRunner().invoke(main, ["project", "list"]).output.startswith("shop\t")

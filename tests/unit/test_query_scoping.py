"""The query lint (tests/query_scoping.py) passes on semula's queries, and fails on a statement that
drops its scoping column."""

from __future__ import annotations

from tests.query_scoping import problems, tenant_tables, unscoped


def test_every_named_query_on_a_tenant_table_is_scoped():
    assert problems() == []


def test_the_tenant_tables_come_from_the_migrations():
    assert {"projects", "entries", "pending", "tokens", "ui_sessions", "entry_answers"} <= tenant_tables()
    assert not {"workspaces", "leases", "semula_migrations"} & tenant_tables()


def test_a_lookup_without_its_project_fails_the_lint():
    tables = tenant_tables()
    scoped = "SELECT id FROM entries WHERE project_id = :project_id AND fingerprint = :fingerprint"
    assert unscoped(scoped, tables) == []
    assert unscoped("SELECT id FROM entries WHERE fingerprint = :fingerprint", tables) != []
    # A nested statement is judged apart from the one around it.
    nested = (
        "UPDATE entries SET answers = 2 WHERE project_id = :project_id"
        " AND EXISTS (SELECT 1 FROM entry_revisions WHERE id = :r)"
    )
    assert unscoped(nested, tables) != []
    upsert = (
        "INSERT INTO entry_answers (entry_id, seq) VALUES (:e, :s)"
        " ON CONFLICT (entry_id, seq) DO UPDATE SET seq = 1"
    )
    assert unscoped(upsert, tables) != []
    assert unscoped(upsert + " WHERE entry_answers.workspace_id = excluded.workspace_id", tables) == []

"""PostgreSQL's plans for the statements of a first sight (semula/db/queries/proxy.sql).

psycopg prepares a statement on a connection once it has run it five times, and PostgreSQL then
chooses at each execution between its generic plan, planned once, and a plan made afresh for the
values given. A lone first sight must be a statement it plans once: with `= ANY` over an array of one
fingerprint, a project of many entries had every lookup planned afresh, ~60 us of the server's CPU
(bench/RESULTS.md, session 24).
"""

from __future__ import annotations

import pytest

from semula.db import connect
from semula.service import projects
from tests.entry_helpers import save_entry

MANY = 20_000  # entries enough for PostgreSQL to cost an index scan (a handful: a sequential scan)


def copies(store, entry_id: str, count: int) -> None:
    """`count` copies of an entry, each with an id and a fingerprint of its own, then fresh statistics."""
    with store.transaction() as conn:
        columns = [
            row["column_name"]
            for row in conn.raw.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'entries' "
                "ORDER BY ordinal_position"
            ).fetchall()
        ]
        made = {
            "id": "id || '_' || n",
            "fingerprint": "'v1:' || md5(n::text) || md5('x' || n::text)",
            "response_id": "NULL",
        }
        values = ", ".join(made.get(column, column) for column in columns)
        conn.raw.execute(
            f"INSERT INTO entries ({', '.join(columns)}) SELECT {values} "
            "FROM entries, generate_series(1, %s) AS n WHERE id = %s",
            (count, entry_id),
        )
    with store.transaction() as conn:
        conn.raw.execute("ANALYZE entries")


def test_a_lone_first_sight_is_a_statement_postgresql_plans_once(ctx, db_url):
    if ctx.store.dialect != "postgresql":
        pytest.skip("a PostgreSQL query plan: SQLite prepares no plan across executions")
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    entry = save_entry(ctx, "shop", "hello", {"content": "hi"})
    copies(ctx.store, entry["id"], MANY)
    project = projects.get_row(ctx, "shop")
    one = connect(db_url, pool_size=1)  # one connection: its prepared statements are the lookups'
    try:
        for _ in range(20):
            row, _ = one.entry_at_version(project["workspace_id"], project["id"], entry["fingerprint"])
            assert row is not None and row["id"] == entry["id"]
        raw = one._take()
        try:
            plans = raw.execute(
                "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                "WHERE statement LIKE '%found_fingerprint%'"
            ).fetchall()
        finally:
            one._pool.putconn(raw)
    finally:
        one.close()
    [counts] = plans
    generic, custom = counts["generic_plans"], counts["custom_plans"]
    # Prepared at the sixth run (psycopg's prepare_threshold, 5), planned afresh for its first five
    # executions (PostgreSQL's rule), then by its generic plan: 10 of the 20 runs at least.
    assert generic >= 10 and custom <= 5

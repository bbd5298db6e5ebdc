"""PostgreSQL's plans for the statements of a first sight (semula/db/queries/proxy.sql).

psycopg prepares a statement on a connection once it has run it five times, and PostgreSQL then
chooses at each execution between its generic plan, planned once, and a plan made afresh for the
values given. The entry lookups of first sights, alone or asked together, must be statements it
plans once: with `= ANY` over an array parameter, a project of many entries had every lookup planned
afresh, ~55 us of the server's CPU (bench/RESULTS.md, session 24).
"""

from __future__ import annotations

import pytest

from semula.db import connect
from semula.service import projects
from semula.service.versions import read_entries
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


def plans(store) -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each entry lookup prepared on the store's one connection."""
    raw = store._take()
    try:
        rows = raw.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE '%found_fingerprint%'"
        ).fetchall()
    finally:
        store._pool.putconn(raw)
    return [(row["generic_plans"], row["custom_plans"]) for row in rows]


@pytest.mark.parametrize("together", [1, 3])
def test_entry_lookups_are_statements_postgresql_plans_once(ctx, db_url, together):
    """A lone first sight, and three asked together (one statement, semula.service.versions)."""
    if ctx.store.dialect != "postgresql":
        pytest.skip("a PostgreSQL query plan: SQLite prepares no plan across executions")
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    saved = [save_entry(ctx, "shop", f"hello {n}", {"content": "hi"}) for n in range(together)]
    copies(ctx.store, saved[0]["id"], MANY)
    project = projects.get_row(ctx, "shop")
    wanted = [entry["fingerprint"] for entry in saved]
    one = connect(db_url, pool_size=1)  # one connection: its prepared statements are the lookups'
    try:
        for _ in range(20):
            found = read_entries(one, project["workspace_id"], project["id"], wanted)
            assert [row["id"] for row, _ in (found[f] for f in wanted)] == [e["id"] for e in saved]
        [(generic, custom)] = plans(one)
    finally:
        one.close()
    # Prepared at the sixth run (psycopg's prepare_threshold, 5), planned afresh for its first five
    # executions (PostgreSQL's rule), then by its generic plan: 10 of the 20 runs at least.
    assert generic >= 10 and custom <= 5

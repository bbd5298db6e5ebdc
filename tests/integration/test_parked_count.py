"""How many calls a project has parked, kept by migration 0028's triggers (issue 52,
docs/decisions/0080-held-calls-at-scale.md): max_misses reads it instead of counting the pending rows
at each park, so it must follow every way a call stops or starts being pending."""

from __future__ import annotations

from semula.config import Settings
from semula.db import connect, postgres, sqlite
from semula.migrate import migrate
from semula.service import CLI, Context, projects
from semula.service import pending as pending_service
from tests.agent_helpers import chat_request, park
from tests.integration.test_schema import migrate_all_but

COUNTED = "(SELECT COALESCE(SUM(parked), 0) FROM pending_parked WHERE project_id = :project_id)"
ROWS = "(SELECT COUNT(*) FROM pending WHERE project_id = :project_id AND status = 'pending')"


def parks(ctx: Context, project: str, text: str) -> bool:
    """Whether a miss of `text` parks (False: max_misses refused it)."""
    row = projects.get_row(ctx, project)
    return pending_service.park(ctx, row, f"v1:test:{project}:{text}", chat_request(text), False) is not None


def test_max_misses_counts_the_calls_parked_through_answers_and_cancels(ctx):
    projects.create(ctx, {"name": "capped", "max_misses": 3})
    projects.create(ctx, {"name": "other", "max_misses": 1})
    a, b, _ = (park(ctx, "capped", text) for text in "abc")
    assert not parks(ctx, "capped", "d")
    assert parks(ctx, "other", "x") and not parks(ctx, "other", "y")  # each project counts its own
    pending_service.answer(ctx, a, {"content": "answered"})
    assert parks(ctx, "capped", "d") and not parks(ctx, "capped", "e")
    pending_service.cancel(ctx, b)
    assert parks(ctx, "capped", "e") and not parks(ctx, "capped", "f")
    assert parks(ctx, "capped", "d")  # the same call again joins its row: no slot taken


def test_the_migration_counts_the_calls_parked_before_it(empty_db_url, tmp_path, monkeypatch):
    store = connect(empty_db_url, pool_size=1)
    try:
        migrate_all_but(store, "0028_pending_parked", tmp_path)
        # insert_pending as it was before 0028
        old = sqlite.QUERIES["insert_pending"].replace(COUNTED, ROWS)
        monkeypatch.setitem(sqlite.QUERIES, "insert_pending", old)
        pg = postgres.PG_QUERIES["insert_pending"].replace(
            postgres.to_psycopg(COUNTED), postgres.to_psycopg(ROWS)
        )
        monkeypatch.setitem(postgres.PG_QUERIES, "insert_pending", pg)
        ctx = Context(store, Settings(), CLI)
        projects.create(ctx, {"name": "capped", "max_misses": 3})
        first = park(ctx, "capped", "a")
        park(ctx, "capped", "b")
        pending_service.answer(ctx, first, {"content": "answered"})
        migrate(store)
        monkeypatch.undo()
        assert parks(ctx, "capped", "c") and parks(ctx, "capped", "d")
        assert not parks(ctx, "capped", "e")  # b, c and d: b counted by the migration
    finally:
        store.close()

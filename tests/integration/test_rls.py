"""Row-level security holds alone: raw SQL as the application role, bypassing the service layer."""

from __future__ import annotations

import psycopg
import pytest

from semula.core.fingerprint import fingerprint
from semula.service import Principal, pending, projects, record_through, sessions, tokens
from semula.service.calllog import CallLog
from tests.helpers import call_row
from tests.hosted_helpers import app_role_url, hosted, tenant  # noqa: F401 - fixture

REQUEST = {"model": "gpt-4o", "messages": [{"role": "user", "content": "B only"}]}


def tenant_tables(conn) -> list[str]:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.columns WHERE table_schema = 'public' "
        "AND column_name = 'workspace_id' ORDER BY table_name"
    ).fetchall()
    return [r[0] for r in rows]


@pytest.fixture
def filled(hosted, db_url):  # noqa: F811 - the fixture imported above
    if not db_url.startswith("postgresql"):
        pytest.skip("row-level security is PostgreSQL's; SQLite relies on the service layer (test_isolation)")
    operator, _, _ = hosted
    workspaces = {}
    for name in ("alpha", "bravo"):
        ctx = tenant(operator, name)
        projects.create(ctx, {"name": "p"})
        row = projects.get_row(ctx, "p")
        token = tokens.create(ctx, {"role": "admin"})
        sessions.start(
            ctx.as_(Principal(ctx.principal.workspace_id, "admin", "full", token["id"], token["id"]))
        )
        answered = pending.park(ctx, row, fingerprint(REQUEST), REQUEST, False)
        pending.answer(ctx, answered, {"content": "x"})
        second = pending.park(ctx, row, fingerprint(REQUEST), REQUEST, False, seq=2)
        pending.answer(ctx, second, {"content": "y"})  # answer 2 of the sequence: an entry_answers row
        ctx.store.one(
            "count_session_call",
            n=1,
            workspace_id=ctx.principal.workspace_id,
            project_id=row["id"],
            session="s",
            fingerprint="v1:x",
            now=0,
        )
        ctx.store.one(  # a fault rule's count (service.faults)
            "count_fault_call",
            workspace_id=ctx.principal.workspace_id,
            project_id=row["id"],
            session="s",
            rule="r",
            now=0,
        )
        pending.park(ctx, row, "v1:parked", REQUEST, False)
        ctx.store.run("ensure_upstream_usage", project_id=row["id"], workspace_id=ctx.principal.workspace_id)
        ctx.store.run(
            "record_dry_run",
            project_id=row["id"],
            fingerprint="v1:dry",
            workspace_id=ctx.principal.workspace_id,
            model="m",
            request="{}",
            now=0,
        )
        ctx.store.run(  # a record-through call in flight (service.flights)
            "claim_flight",
            project_id=row["id"],
            fingerprint="v1:flying",
            seq=1,
            workspace_id=ctx.principal.workspace_id,
            holder="h",
            until=10,
            now=0,
        )
        CallLog(ctx.store).record(call_row(workspace_id=ctx.principal.workspace_id, project_id=row["id"]))
        record_through.usage(ctx, "p")
        workspaces[name] = ctx.principal.workspace_id
    return workspaces, app_role_url(db_url)


def test_every_tenant_table_has_row_level_security(filled, db_url):
    with psycopg.connect(db_url) as conn:
        tables = tenant_tables(conn)
        flags = dict(
            conn.execute("SELECT relname, relrowsecurity FROM pg_class WHERE relkind = 'r'").fetchall()
        )
    assert {"projects", "entries", "entry_revisions", "pending", "call_log", "audit_log", "tokens"} <= set(
        tables
    )
    assert [t for t in tables if not flags[t]] == []
    assert flags["workspaces"]


def test_a_raw_query_under_one_workspace_sees_none_of_the_other(filled):
    workspaces, app_url = filled
    with psycopg.connect(app_url, autocommit=True) as conn:
        tables = tenant_tables(conn)
        for me, other in (("alpha", "bravo"), ("bravo", "alpha")):
            conn.execute("SELECT set_config('semula.workspace_id', %s, false)", (workspaces[me],))
            for table in tables:
                mine = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                theirs = conn.execute(
                    f"SELECT count(*) FROM {table} WHERE workspace_id = %s", (workspaces[other],)
                ).fetchone()[0]
                assert theirs == 0, f"{table}: {me} sees {theirs} rows of {other}"
                assert mine > 0, f"{table}: the test put no rows of {me} there"
            assert conn.execute("SELECT count(*) FROM workspaces").fetchone()[0] == 1
            # Writing into the other workspace is refused too.
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(
                    "INSERT INTO audit_log (id, workspace_id, created_at, actor, action) "
                    "VALUES ('aud_x', %s, 0, 'x', 'x')",
                    (workspaces[other],),
                )
        conn.execute("SELECT set_config('semula.workspace_id', '', false)")
        assert all(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] == 0 for t in tables)


def test_a_pooled_connection_forgets_its_workspace(filled):
    from semula.db import connect

    workspaces, app_url = filled
    store = connect(app_url, pool_size=1)  # one connection: every checkout reuses it
    try:
        mine = store.scoped(workspaces["alpha"]).all(
            "list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10
        )
        assert [p["name"] for p in mine] == ["p"]
        unscoped = store.all(
            "list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10
        )
        assert unscoped == []
        # Another tenant on the same connection sees its own rows only, in a transaction too.
        for name in ("alpha", "bravo", "bravo", "alpha"):
            scoped = store.scoped(workspaces[name])
            seen = scoped.all(
                "list_projects", workspace_id=workspaces[name], only_id=None, after=None, limit=10
            )
            other = "bravo" if name == "alpha" else "alpha"
            hidden = scoped.all(
                "list_projects", workspace_id=workspaces[other], only_id=None, after=None, limit=10
            )
            assert [p["name"] for p in seen] == ["p"] and hidden == []
            with scoped.transaction() as tx:
                assert (
                    tx.all(
                        "list_projects", workspace_id=workspaces[other], only_id=None, after=None, limit=10
                    )
                    == []
                )
        assert (
            store.all("list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10)
            == []
        )

        # An unscoped store's transaction as a tenant (authentication's pattern) sets it locally only.
        def bravo(reader):
            return reader.all(
                "list_projects", workspace_id=workspaces["bravo"], only_id=None, after=None, limit=10
            )

        with store.transaction(workspaces["bravo"]) as tx:
            assert [p["name"] for p in bravo(tx)] == ["p"]
        assert bravo(store) == []
    finally:
        store.close()


def test_a_tenant_reading_again_on_its_connection_sets_no_workspace_again(filled):
    """A scoped read costs one round trip once its connection runs as its workspace: no set_config
    before it and none after it (a hosted replay hit reads the change counter this way)."""
    from semula.db import connect

    workspaces, app_url = filled
    store = connect(app_url, pool_size=1)
    statements: list[str] = []
    try:
        scoped = store.scoped(workspaces["alpha"])
        scoped.all("list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10)
        import psycopg

        original = psycopg.Cursor.execute  # what a connection's execute() runs too

        def counting(self, query, *args, **kwargs):
            statements.append(str(query))
            return original(self, query, *args, **kwargs)

        psycopg.Cursor.execute = counting
        try:
            for _ in range(3):
                scoped.all(
                    "list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10
                )
            assert len(statements) == 3 and not [q for q in statements if "set_config" in q]
            store.all("list_projects", workspace_id=workspaces["alpha"], only_id=None, after=None, limit=10)
            assert [q for q in statements if "set_config" in q] != []  # unscoped: set again first
        finally:
            psycopg.Cursor.execute = original
    finally:
        store.close()


def test_a_set_config_that_fails_is_sent_again_before_the_next_statement(filled):
    """A checkout whose set_config failed (here a statement timeout; a broken connection is replaced)
    fails as a semula.db error, and the connection's session is not taken as set: the next checkout
    sets it before any statement, so no read runs as the tenant the connection had before."""
    from semula.db import Busy, connect

    workspaces, app_url = filled
    store = connect(app_url, pool_size=1)
    statements: list[str] = []
    original = psycopg.Cursor.execute

    def failing_once(self, query, *args, **kwargs):
        statements.append(str(query))
        if "set_config" in str(query) and len(statements) == 1:
            raise psycopg.errors.QueryCanceled("canceling statement due to statement timeout")
        return original(self, query, *args, **kwargs)

    args = dict(workspace_id=workspaces["bravo"], only_id=None, after=None, limit=10)
    try:
        assert store.scoped(workspaces["alpha"]).all("list_projects", **args) == []  # RLS: alpha's view
        psycopg.Cursor.execute = failing_once
        try:
            with pytest.raises(Busy, match="statement timeout"):
                store.scoped(workspaces["bravo"]).all("list_projects", **args)
            assert [
                row["name"] for row in store.scoped(workspaces["bravo"]).all("list_projects", **args)
            ] == ["p"]
        finally:
            psycopg.Cursor.execute = original
        assert ["set_config" in q for q in statements] == [True, True, False]
    finally:
        store.close()

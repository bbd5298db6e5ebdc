"""SEMULA_CHANGE_CHECK=notify through `semula serve` (gunicorn, gevent workers) and the openai SDK: each
worker listens for changes, and an entry edited by another process is replayed once its notice has
come, in hosted mode too (as the RLS-bound role, each tenant's own). On SQLite the setting is
refused at start, with the reason."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psycopg
import pytest

from semula.service import entries, projects, tokens
from tests.entry_helpers import save_entry
from tests.helpers import wait_for
from tests.hosted_helpers import hosted, tenant  # noqa: F401 - fixture

LISTENING = "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN semula_replay_changes'"


def content(client) -> str:
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hello"}])
    return reply.choices[0].message.content


def test_each_worker_listens_and_an_edit_elsewhere_is_replayed_once_noticed(
    start_server, ctx, shop, openai_client, db_url
):
    if not db_url.startswith("postgresql"):
        result = subprocess.run(
            [sys.executable, "-m", "semula", "serve", "--bind", "127.0.0.1:1"],
            env={**os.environ, "SEMULA_DATABASE_URL": db_url, "SEMULA_CHANGE_CHECK": "notify"},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0
        assert "SEMULA_CHANGE_CHECK=notify is for PostgreSQL" in result.stderr
        return
    entry = save_entry(ctx, "shop", "hello", {"content": "first"})
    server = start_server(workers=2, SEMULA_CHANGE_CHECK="notify")
    client = openai_client(server)
    assert [content(client) for _ in range(6)] == ["first"] * 6  # first sights, then kept hits
    with psycopg.connect(db_url, autocommit=True) as conn:  # one listening session per worker
        wait_for(lambda: conn.execute(LISTENING).fetchone()[0] == 2, timeout=30, what="2 listeners")
    entries.edit(ctx, entry["id"], {"content": "second"})
    seen, deadline = [], time.monotonic() + 10
    while time.monotonic() < deadline and seen[-10:] != ["second"] * 10:
        seen.append(content(client))  # each worker's kept hit goes once its notice has come
    assert seen[-10:] == ["second"] * 10, seen
    assert set(seen) == {"second"} or seen.index("second") < 10  # noticed within a few requests


def test_in_hosted_mode_each_tenant_replays_its_own_entry_and_sees_its_edit_once_noticed(
    db_url,
    hosted,  # noqa: F811 - the fixture imported above
    start_server,
    openai_client,
):
    if not db_url.startswith("postgresql"):
        pytest.skip("notices are PostgreSQL's (SQLite refuses the setting: the test above)")
    operator, _, app_settings = hosted
    tenants = {name: tenant(operator, name) for name in ("acme", "globex")}
    keys, saved = {}, {}
    for name, ctx in tenants.items():
        projects.create(ctx, {"name": "shop", "mode": "replay"})
        saved[name] = save_entry(ctx, "shop", "hello", {"content": f"{name} first"})
        keys[name] = tokens.create(ctx, {"role": "viewer", "scope": "replay"})["token"]
    server = start_server(
        workers=2,
        SEMULA_HOSTED="on",
        SEMULA_DATABASE_URL=app_settings.database_url,  # the RLS-bound role listens, as it reads
        SEMULA_OWNER_DATABASE_URL=db_url,
        SEMULA_CHANGE_CHECK="notify",
    )
    clients = {name: openai_client(server, "shop", api_key=keys[name]) for name in tenants}
    for _ in range(4):  # first sights, then kept hits, of the same request in two workspaces
        assert {name: content(c) for name, c in clients.items()} == {
            "acme": "acme first",
            "globex": "globex first",
        }
    with psycopg.connect(db_url, autocommit=True) as conn:
        listeners = f"{LISTENING} AND usename = 'semula_app'"
        wait_for(lambda: conn.execute(listeners).fetchone()[0] == 2, timeout=30, what="2 listeners")
    entries.edit(tenants["acme"], saved["acme"]["id"], {"content": "acme second"})
    seen, deadline = [], time.monotonic() + 10
    while time.monotonic() < deadline and seen[-10:] != [("acme second", "globex first")] * 10:
        seen.append((content(clients["acme"]), content(clients["globex"])))
    assert seen[-10:] == [("acme second", "globex first")] * 10, seen
    assert {g for _, g in seen} == {"globex first"}  # the other tenant's kept hit never moved
    assert "Traceback" not in server.log()

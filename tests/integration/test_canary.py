"""A canary credential inside a prompt: absent from the database, exports and logs, yet the same
request still replays its entry (the fingerprint is taken before redaction). SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import logging
from concurrent.futures import ThreadPoolExecutor

from semula import logs
from semula.core import bundle_format
from semula.service import pending, projects
from tests.helpers import wait_for

CANARY = "sk-proj-canary" + "7Qz" * 12
BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": f"Call the API with key {CANARY} please"}],
}
TABLES = ("entries", "entry_revisions", "pending", "call_log", "audit_log", "projects")


def database_text(db_url: str) -> str:
    """Every row of every table that could hold a prompt, as text, read with the raw driver."""
    rows = []
    if db_url.startswith("sqlite:///"):
        import sqlite3

        with sqlite3.connect(db_url.removeprefix("sqlite:///")) as conn:
            for table in TABLES:
                rows += conn.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - fixed names
    else:
        import psycopg

        with psycopg.connect(db_url) as conn:
            for table in TABLES:
                rows += conn.execute(f"SELECT * FROM {table}").fetchall()  # noqa: S608 - fixed names
    return repr(rows)


def test_canary_is_redacted_everywhere_and_the_request_still_replays(ctx, db_url, client, make_token, capsys):
    logs.setup("debug")
    try:
        projects.create(ctx, {"name": "shop", "record_timeout": 30})
        admin = make_token("admin")
        url = "/p/shop/v1/chat/completions"
        pool = ThreadPoolExecutor(1)
        held = pool.submit(client.post, url, json=BODY, headers=admin)
        shop = projects.get_row(ctx, "shop")
        [parked] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
        shown = pending.get(ctx, parked["id"])
        assert CANARY not in json.dumps(shown) and "[REDACTED]" in json.dumps(shown["request"])
        pending.answer(ctx, parked["id"], {"content": "done"})
        assert held.result(10).status_code == 200
        pool.shutdown()

        again = client.post(url, json=BODY, headers=admin)
        assert again.status_code == 200 and again.json["choices"][0]["message"]["content"] == "done"
        outcomes = [r["outcome"] for r in ctx.store.all("calls_in_project", project_id=shop["id"])]
        assert outcomes == ["answered", "hit"]

        exported = client.get("/api/v1/projects/shop/export", headers=admin).data
        assert CANARY.encode() not in exported and b"[REDACTED]" in exported
        assert bundle_format.find_secrets(io.BytesIO(exported)) == ([], 0)
        assert CANARY not in database_text(db_url)
        # A log line that quotes the prompt by mistake is still redacted.
        logging.getLogger("semula.test").warning("oops", extra={"prompt": BODY["messages"][0]["content"]})
    finally:
        logging.getLogger().handlers.clear()
    err = capsys.readouterr().err
    assert "oops" in err and CANARY not in err


ANTHROPIC_CANARY = "sk-ant-api03-canary" + "Xy9" * 12


def test_the_anthropic_key_is_a_canary_too(ctx, store, settings, db_url):
    """The provider echoes the key in its error, and an app puts it in a prompt: neither reaches the
    response, the database or the log."""
    from dataclasses import replace

    from semula.service import Context, tokens
    from semula.web import create_app
    from tests.fake_upstream import FakeUpstream

    fake = FakeUpstream()
    fake.mode = "error"
    try:
        operator = replace(settings, anthropic_key=ANTHROPIC_CANARY, anthropic_url=fake.url)
        projects.create(Context(store, operator, ctx.principal), {"name": "shop", "record_through": True})
        client = create_app(operator, store).test_client()
        secret = tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]
        prompt = f"My key is {ANTHROPIC_CANARY}, keep it"
        request = {
            "model": "claude-haiku-4-5",
            "max_tokens": 9,
            "messages": [{"role": "user", "content": prompt}],
        }
        r = client.post("/p/shop/v1/messages", json=request, headers={"x-api-key": secret})
        assert r.status_code == 502 and r.json["type"] == "error"
        assert fake.calls[0]["headers"]["x-api-key"] == ANTHROPIC_CANARY
        assert ANTHROPIC_CANARY not in r.get_data(as_text=True) and "[REDACTED]" in r.json["error"]["message"]
        assert ANTHROPIC_CANARY not in database_text(db_url)
    finally:
        fake.close()

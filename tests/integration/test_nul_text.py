"""NUL (\\u0000) in text that reaches a text column: PostgreSQL cannot store it, so both databases
refuse it alike, as a 400 in the API's shape, and the call log loses no other workspace's rows."""

from __future__ import annotations

import time

import pytest

from semula.service import projects
from semula.service.calllog import CallLog
from tests.entry_helpers import request_for, save_entry


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def test_a_nul_in_a_model_or_an_id_is_a_400_in_the_apis_shape(ctx, client, admin):
    projects.create(ctx, {"name": "shop", "mode": "record"})
    chat = {"model": "gpt-4o\u0000x", "messages": [{"role": "user", "content": "hi"}]}
    r = client.post("/p/shop/v1/chat/completions", json=chat, headers=admin)
    assert r.status_code == 400 and r.json["error"]["code"] == "invalid_text", r.json
    messages = {**chat, "max_tokens": 5}
    r = client.post("/p/shop/v1/messages", json=messages, headers=admin)
    assert r.status_code == 400 and r.json["type"] == "error", r.json
    for path in ("/api/v1/pending/%00", "/api/v1/entries/%00", "/api/v1/projects/shop/entries?model=%00"):
        r = client.get(path, headers=admin)
        assert r.status_code in (400, 404) and r.json["error"]["code"] != "database_error", (path, r.json)
    assert ctx.store.all("parked_in_project", project_id=projects.get_row(ctx, "shop")["id"]) == []


def test_a_call_log_row_with_nul_is_kept_and_a_failing_workspace_costs_no_other_its_rows(ctx, caplog):
    projects.create(ctx, {"name": "shop"})
    row = projects.get_row(ctx, "shop")
    save_entry(ctx, "shop", "hello")
    base = {
        "workspace_id": row["workspace_id"],
        "project_id": row["id"],
        "created_at": time.time(),
        "fingerprint": None,
        "model": "m",
        "stream": 0,
        "outcome": "hit",
        "status": 200,
        "duration_ms": 1.0,
        "entry_id": None,
        "pending_id": None,
        "token_id": None,
        "api": None,
    }
    log = CallLog(ctx.store, batched=True)
    # A row the database refuses (no status) fails its own workspace's transaction, and only that one.
    log.record({**base, "workspace_id": "wsp_ghost", "project_id": "prj_ghost", "status": None})
    log.record({**base, "model": "gpt\u0000x"})
    log.record({**base, "model": "fine"})
    with caplog.at_level("WARNING", logger="semula.calllog"):
        assert log.flush() == 3
    assert [r.msg for r in caplog.records] == ["call log write failed"]  # the ghost's, and only it
    models = sorted(r["model"] for r in ctx.store.all("calls_in_project", project_id=row["id"]))
    assert models == ["fine", "gpt\ufffdx"]


def test_the_request_text_itself_may_hold_nul(ctx, client, admin):
    """Prompts are stored inside JSON documents, where NUL is an escape: replay matches them."""
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    save_entry(ctx, "shop", "a\u0000b")
    r = client.post("/p/shop/v1/chat/completions", json=request_for("a\u0000b"), headers=admin)
    assert r.status_code == 200, r.json

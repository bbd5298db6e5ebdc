"""What makes two requests the same, changed after recording: entries are fingerprinted again, and agent
traffic (fresh ids on every run) replays with default settings. On SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest

from semula.core import fingerprint as fp
from semula.core.errors import Conflict
from semula.service import audit, entries, projects
from tests.entry_helpers import request_for, save_entry
from tests.helpers import answered_post

RESPONSES = "/p/shop/v1/responses"


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def codex_turn(run: str) -> dict:
    """A Responses request as Codex makes one: ids of its own making, fresh on every run."""
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "id": f"msg_{run}",
                "content": [{"type": "input_text", "text": "list the files"}],
            }
        ],
        "client_metadata": {"session_id": f"s-{run}", "root_turn_id": f"t-{run}"},
        "prompt_cache_key": f"s-{run}",
    }


def test_a_codex_run_with_fresh_ids_replays_with_default_settings(ctx, shop, client, admin):
    first = answered_post(
        ctx, shop, lambda: client.post(RESPONSES, json=codex_turn("run1"), headers=admin), "Two files."
    )
    assert first.status_code == 200, first.json
    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(RESPONSES, json=codex_turn("run2"), headers=admin)
    assert again.status_code == 200, again.json
    assert again.json["output"][0]["content"][0]["text"] == "Two files."


def test_changing_ignore_fields_fingerprints_the_entries_again(ctx, shop, client, admin):
    save_entry(ctx, "shop", "one", temperature=0.1)
    save_entry(ctx, "shop", "two", temperature=0.2)
    projects.update(ctx, "shop", {"mode": "replay"})
    sent = request_for("one", temperature=0.7)
    assert client.post("/p/shop/v1/chat/completions", json=sent, headers=admin).status_code == 424

    changed = projects.update(ctx, "shop", {"ignore_fields": ["/temperature"]})
    assert changed["refingerprinted"] == {
        "object": "refingerprint",
        "entries": 2,
        "changed": 2,
        "kept_redacted": 0,
    }
    hit = client.post("/p/shop/v1/chat/completions", json=sent, headers=admin)
    assert hit.status_code == 200 and hit.json["choices"][0]["message"]["content"] == "answer to one"
    rows = ctx.store.all("entry_fingerprints", project_id=shop["id"])
    assert {r["fingerprint"] for r in rows} == {
        fp.fingerprint(request_for(t), ["/temperature"]) for t in ("one", "two")
    }
    [event] = [e for e in audit.list_events(ctx, limit=100)["data"] if e["action"] == "project.refingerprint"]
    assert event["target"] == "shop"
    # And back: the settings say again what they said, and so do the fingerprints.
    projects.update(ctx, "shop", {"ignore_fields": []})
    assert client.post("/p/shop/v1/chat/completions", json=sent, headers=admin).status_code == 424


def test_a_change_that_would_merge_two_entries_is_refused_and_changes_nothing(ctx, shop):
    a = save_entry(ctx, "shop", "same", temperature=0.1)
    b = save_entry(ctx, "shop", "same", temperature=0.2)
    before = {r["id"]: r["fingerprint"] for r in ctx.store.all("entry_fingerprints", project_id=shop["id"])}
    with pytest.raises(Conflict) as refused:
        projects.update(ctx, "shop", {"ignore_fields": ["/temperature"], "mode": "replay"})
    assert refused.value.code == "fingerprint_collision"
    assert a["id"] in refused.value.message and b["id"] in refused.value.message
    assert projects.get(ctx, "shop")["ignore_fields"] == [] and projects.get(ctx, "shop")["mode"] == "record"
    after = ctx.store.all("entry_fingerprints", project_id=shop["id"])
    assert {r["id"]: r["fingerprint"] for r in after} == before


def test_an_entry_stored_redacted_keeps_its_fingerprint(ctx, shop, client, admin):
    secret = "sk-proj-" + "a1B2c3D4" * 6
    sent = request_for(f"my key is {secret}")
    chat = "/p/shop/v1/chat/completions"
    answered_post(ctx, shop, lambda: client.post(chat, json=sent, headers=admin), "Noted.")
    [row] = ctx.store.all("entry_fingerprints", project_id=shop["id"])
    assert secret not in row["request"]
    changed = projects.update(ctx, "shop", {"normalize": [{"pattern": "key", "replacement": "KEY"}]})
    assert changed["refingerprinted"]["kept_redacted"] == 1 and changed["refingerprinted"]["changed"] == 0
    assert ctx.store.all("entry_fingerprints", project_id=shop["id"])[0]["fingerprint"] == row["fingerprint"]


def test_entries_recorded_under_older_rules_are_named_and_fingerprinted_again(ctx, shop, client, admin):
    """An entry of an older semula that kept Codex's item ids in the fingerprint: the miss says what to
    do, and `refingerprint` (dry run first) does it."""
    answered_post(ctx, shop, lambda: client.post(RESPONSES, json=codex_turn("run1"), headers=admin), "Hi.")
    [row] = ctx.store.all("entry_fingerprints", project_id=shop["id"])
    old = fp.fingerprint(json.loads(row["request"]), api="openai.responses", transport=frozenset())
    with ctx.store.transaction(None) as tx:
        tx.run("set_entry_fingerprint", id=row["id"], project_id=shop["id"], fingerprint=old, now=0)
    projects.update(ctx, "shop", {"mode": "replay"})
    miss = client.post(RESPONSES, json=codex_turn("run2"), headers=admin)
    assert miss.status_code == 424
    assert "semula project refingerprint shop" in miss.json["error"]["message"]
    assert "redacted" not in miss.json["error"]["message"]

    dry = projects.refingerprint(ctx, "shop", dry_run=True)
    assert dry["changed"] == 1 and dry["dry_run"] is True
    assert client.post(RESPONSES, json=codex_turn("run2"), headers=admin).status_code == 424
    bad = client.post("/api/v1/projects/shop/refingerprint?dry_run=null", headers=admin)
    assert bad.status_code == 400 and bad.json["error"]["param"] == "dry_run"
    done = client.post("/api/v1/projects/shop/refingerprint", headers=admin)
    assert done.status_code == 200 and done.json["changed"] == 1
    assert client.post(RESPONSES, json=codex_turn("run3"), headers=admin).status_code == 200
    assert entries.get(ctx, row["id"])["fingerprint"] != old

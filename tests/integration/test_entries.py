"""The entry lifecycle through the service and REST, on SQLite and PostgreSQL.

The contract is docs/design/product.md §6 and §8.
"""

from __future__ import annotations

import pytest

from semula.core.errors import Conflict, InvalidAnswer, NotFound
from semula.service import audit, entries, projects
from tests.entry_helpers import request_for, save_entry

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


def actions(ctx, target=None):
    return [(e["action"], e["fields"]) for e in audit.list_events(ctx, target=target, limit=100)["data"]]


def test_list_filters_search_and_paging(ctx, shop):
    first = save_entry(ctx, "shop", "hello there")
    second = save_entry(ctx, "shop", 'quote "this" 100% please', model="gpt-4o-mini")
    third = save_entry(ctx, "shop", "weather in Paris?", {"content": "Sunny"})
    entries.review(ctx, third["id"], "approved")
    entries.set_pinned(ctx, first["id"], True)

    listed = entries.list_entries(ctx, "shop")
    assert [e["id"] for e in listed["data"]] == [third["id"], second["id"], first["id"]]  # newest first
    assert listed["object"] == "list" and listed["has_more"] is False
    assert listed["data"][0]["preview"] == {"prompt": "weather in Paris?", "answer": "Sunny"}
    assert "request" not in listed["data"][0]

    def ids(**filters):
        return [e["id"] for e in entries.list_entries(ctx, "shop", **filters)["data"]]

    assert ids(model="gpt-4o") == [third["id"], first["id"]]
    assert ids(review_status="approved") == [third["id"]]
    assert ids(pinned=True) == [first["id"]]
    assert ids(pinned=False) == [third["id"], second["id"]]
    assert ids(text="SUNNY") == [third["id"]]  # the response, case-insensitive
    assert ids(text='"this" 100%') == [second["id"]]  # quotes and LIKE wildcards are literal
    assert ids(text="100_") == []
    assert ids(text="nothing like it") == []

    page1 = entries.list_entries(ctx, "shop", limit=2)
    assert page1["has_more"] is True
    page2 = entries.list_entries(ctx, "shop", limit=2, after=page1["data"][-1]["id"])
    assert [e["id"] for e in page2["data"]] == [first["id"]] and page2["has_more"] is False


def test_edit_adds_a_human_revision_validated_against_the_request(ctx, shop):
    entry = save_entry(
        ctx,
        "shop",
        "weather?",
        {"tool_calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
        tools=TOOLS,
    )
    with pytest.raises(InvalidAnswer) as bad:
        entries.edit(ctx, entry["id"], {"tool_calls": [{"name": "weather", "arguments": {"town": "Rome"}}]})
    assert bad.value.param.startswith("tool_calls[0].arguments")
    with pytest.raises(InvalidAnswer):
        entries.edit(ctx, entry["id"], {"tool_calls": [{"name": "launch", "arguments": {}}]})

    entries.review(ctx, entry["id"], "approved")
    edited = entries.edit(
        ctx,
        entry["id"],
        {"tool_calls": [{"name": "weather", "arguments": {"city": "Rome"}}]},
        summary="Rome, not Oslo",
    )
    assert edited["revision"] == 2 and edited["review_status"] == "unreviewed"
    call = edited["response"]["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["arguments"] == '{"city":"Rome"}'
    first, second = edited["revisions"]
    assert (first["number"], first["actor"]) == (1, "agent")
    assert (second["number"], second["actor"], second["summary"]) == (2, "human", "Rome, not Oslo")
    assert actions(ctx, entry["id"])[0] == ("entry.edit", ["response"])


def test_revert_copies_an_old_revision_as_a_new_one(ctx, shop):
    entry = save_entry(ctx, "shop", "hi", {"content": "one"})
    entries.edit(ctx, entry["id"], {"content": "two"})
    reverted = entries.revert(ctx, entry["id"], 1)
    assert reverted["revision"] == 3
    assert reverted["response"]["choices"][0]["message"]["content"] == "one"
    assert reverted["revisions"][-1]["summary"] == "reverted to revision 1"
    assert actions(ctx, entry["id"])[0] == ("entry.revert", ["response"])
    with pytest.raises(NotFound) as missing:
        entries.revert(ctx, entry["id"], 9)
    assert missing.value.code == "revision_not_found"


def test_pin_locks_against_re_recording_and_is_audited_once(ctx, shop):
    entry = save_entry(ctx, "shop", "hi")
    assert entries.set_pinned(ctx, entry["id"], True)["pinned"] is True
    entries.set_pinned(ctx, entry["id"], True)  # no change, no audit event
    with pytest.raises(Conflict):
        save_entry(ctx, "shop", "hi", {"content": "re-recorded"})
    assert entries.get(ctx, entry["id"])["revision"] == 1
    # A person may still edit a pinned entry: the pin is against imports and re-recording.
    assert entries.edit(ctx, entry["id"], {"content": "fixed"})["revision"] == 2
    entries.set_pinned(ctx, entry["id"], False)
    assert [a for a, _ in actions(ctx, entry["id"])] == ["entry.unpin", "entry.edit", "entry.pin"]


def test_rejected_entries_do_not_replay_and_park_again(ctx, shop, client, make_token):
    entry = save_entry(ctx, "shop", "hello")
    admin = make_token("admin")
    body = request_for("hello")
    url = "/p/shop/v1/chat/completions"
    assert client.post(url, json=body, headers=admin).status_code == 200
    reviewed = client.post(
        f"/api/v1/entries/{entry['id']}/review", json={"status": "rejected"}, headers=admin
    )
    assert reviewed.status_code == 200 and reviewed.json["review_status"] == "rejected"
    assert actions(ctx, entry["id"])[0] == ("entry.review", ["review_status"])
    projects.update(ctx, "shop", {"mode": "replay"})
    missed = client.post(url, json=body, headers=admin)
    assert missed.status_code == 424
    projects.update(ctx, "shop", {"mode": "record", "record_timeout": 1})
    # In record mode the request parks again (and times out here, as nobody answers).
    assert client.post(url, json=body, headers=admin).status_code == 504
    assert ctx.store.all("parked_in_project", project_id=shop["id"])
    bad = client.post(f"/api/v1/entries/{entry['id']}/review", json={"status": "fine"}, headers=admin)
    assert bad.status_code == 400 and bad.json["error"]["param"] == "status"


def test_delete_removes_the_entry_and_its_revisions(ctx, shop, client, make_token):
    entry = save_entry(ctx, "shop", "bye")
    entries.edit(ctx, entry["id"], {"content": "later"})
    admin = make_token("admin")
    gone = client.delete(f"/api/v1/entries/{entry['id']}", headers=admin)
    assert gone.status_code == 200 and gone.json == {
        "object": "entry.deleted",
        "id": entry["id"],
        "deleted": True,
    }
    assert client.get(f"/api/v1/entries/{entry['id']}", headers=admin).status_code == 404
    assert (
        ctx.store.all("list_revisions", workspace_id=ctx.principal.workspace_id, entry_id=entry["id"]) == []
    )
    assert actions(ctx, entry["id"])[0] == ("entry.delete", [])
    projects.update(ctx, "shop", {"mode": "replay"})
    r = client.post("/p/shop/v1/chat/completions", json=request_for("bye"), headers=admin)
    assert r.status_code == 424


def test_rest_show_edit_revert_pin_and_list(ctx, shop, client, make_token):
    entry = save_entry(ctx, "shop", "hi", {"content": "one"})
    editor = make_token("editor")
    url = f"/api/v1/entries/{entry['id']}"
    shown = client.get(url, headers=editor).json
    assert shown["object"] == "entry" and shown["request"] == request_for("hi")
    assert [r["number"] for r in shown["revisions"]] == [1]

    edited = client.patch(url, json={"content": "two", "summary": "better"}, headers=editor)
    assert edited.status_code == 200 and edited.json["revisions"][-1]["summary"] == "better"
    whole = client.patch(url, json={"message": {"role": "assistant", "content": "three"}}, headers=editor)
    assert whole.json["response"]["choices"][0]["message"]["content"] == "three"
    bad = client.patch(url, json={"content": 5}, headers=editor)
    assert bad.status_code == 422 and bad.json["error"]["code"] == "invalid_answer"

    reverted = client.post(url + "/revert", json={"revision": 1}, headers=editor)
    assert reverted.status_code == 200 and reverted.json["revision"] == 4
    assert client.post(url + "/revert", json={"revision": "1"}, headers=editor).status_code == 400
    assert client.post(url + "/revert", json={"revision": 1, "x": 1}, headers=editor).status_code == 400

    assert client.post(url + "/pin", headers=editor).json["pinned"] is True
    listed = client.get("/api/v1/projects/shop/entries?pinned=true", headers=editor).json
    assert [e["id"] for e in listed["data"]] == [entry["id"]]
    assert client.post(url + "/unpin", headers=editor).json["pinned"] is False
    assert client.get("/api/v1/projects/shop/entries?pinned=maybe", headers=editor).status_code == 400
    assert client.get("/api/v1/projects/shop/entries?review_status=x", headers=editor).status_code == 400
    searched = client.get("/api/v1/projects/shop/entries?text=HI&limit=1", headers=editor).json
    assert len(searched["data"]) == 1


def test_roles_and_project_binding(ctx, shop, client, make_token):
    projects.create(ctx, {"name": "other"})
    entry = save_entry(ctx, "shop", "hi")
    url = f"/api/v1/entries/{entry['id']}"
    viewer = make_token("viewer")
    assert client.get(url, headers=viewer).status_code == 200
    assert client.get("/api/v1/projects/shop/entries", headers=viewer).status_code == 200
    for method, path, body in [
        ("patch", url, {"content": "x"}),
        ("post", url + "/pin", None),
        ("post", url + "/review", {"status": "approved"}),
        ("post", url + "/revert", {"revision": 1}),
        ("delete", url, None),
    ]:
        r = getattr(client, method)(path, json=body, headers=viewer)
        assert r.status_code == 403 and r.json["error"]["code"] == "insufficient_role", path
    replay = make_token("admin", scope="replay")
    assert client.get(url, headers=replay).status_code == 403

    bound = make_token("admin", project="other")
    for method, path in [("get", url), ("patch", url), ("post", url + "/pin"), ("delete", url)]:
        r = getattr(client, method)(path, json={"content": "x"} if method == "patch" else None, headers=bound)
        assert r.status_code == 404 and r.json["error"]["code"] == "entry_not_found", path
    assert client.get("/api/v1/projects/shop/entries", headers=bound).status_code == 404
    assert client.get("/api/v1/projects/shop/calls", headers=bound).status_code == 404
    assert client.get("/api/v1/entries/ent_nope", headers=viewer).status_code == 404
    assert entries.get(ctx, entry["id"])["revision"] == 1


def test_call_log_lists_newest_first_with_an_outcome_filter(ctx, shop, client, make_token):
    save_entry(ctx, "shop", "hello")
    admin = make_token("admin")
    url = "/p/shop/v1/chat/completions"
    client.post(url, json=request_for("hello"), headers=admin)
    projects.update(ctx, "shop", {"mode": "replay"})
    client.post(url, json=request_for("unknown"), headers=admin)
    viewer = make_token("viewer")
    calls = client.get("/api/v1/projects/shop/calls", headers=viewer).json
    assert [c["outcome"] for c in calls["data"]] == ["replay_miss", "hit"]
    assert calls["data"][0]["object"] == "call" and calls["data"][0]["status"] == 424
    hits = client.get("/api/v1/projects/shop/calls?outcome=hit", headers=viewer).json["data"]
    assert [c["outcome"] for c in hits] == ["hit"] and hits[0]["entry_id"]
    paged = client.get(f"/api/v1/projects/shop/calls?after={calls['data'][0]['id']}", headers=viewer).json
    assert [c["outcome"] for c in paged["data"]] == ["hit"]
    bad = client.get("/api/v1/projects/shop/calls?outcome=great", headers=viewer)
    assert bad.status_code == 400 and bad.json["error"]["param"] == "outcome"

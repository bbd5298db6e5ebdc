from __future__ import annotations

import pytest


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def test_create_list_get_update(client, admin):
    r = client.post("/api/v1/projects", json={"name": "shop", "record_timeout": 30}, headers=admin)
    assert r.status_code == 201, r.json
    body = r.json
    assert body["object"] == "project" and body["id"].startswith("prj_")
    assert body["record_timeout"] == 30 and body["mode"] == "record" and body["max_misses"] == 100

    listing = client.get("/api/v1/projects", headers=admin).json
    assert listing["object"] == "list" and listing["has_more"] is False
    assert [p["name"] for p in listing["data"]] == ["shop"]

    r = client.patch(
        "/api/v1/projects/shop", json={"mode": "replay", "ignore_fields": ["/temperature"]}, headers=admin
    )
    assert r.status_code == 200, r.json
    assert r.json["mode"] == "replay" and r.json["ignore_fields"] == ["/temperature"]
    assert client.get("/api/v1/projects/shop", headers=admin).json["mode"] == "replay"


def test_list_pages_with_cursor(client, admin):
    for name in ("a", "b", "c"):
        client.post("/api/v1/projects", json={"name": name}, headers=admin)
    first = client.get("/api/v1/projects?limit=2", headers=admin).json
    assert [p["name"] for p in first["data"]] == ["a", "b"] and first["has_more"] is True
    rest = client.get("/api/v1/projects?limit=2&after=b", headers=admin).json
    assert [p["name"] for p in rest["data"]] == ["c"] and rest["has_more"] is False


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"name": "ok", "mode": "sometimes"}, "mode"),
        ({"name": "ok", "record_timeout": 3601}, "record_timeout"),
        ({"name": "ok", "record_timeout": "30"}, "record_timeout"),
        ({"name": "ok", "colour": "blue"}, "colour"),
        ({"name": "ok", "ignore_fields": ["temperature"]}, "ignore_fields"),
    ],
)
def test_invalid_settings_name_the_field(client, admin, body, param):
    r = client.post("/api/v1/projects", json=body, headers=admin)
    assert r.status_code == 400
    assert r.json["error"]["param"].startswith(param)
    assert client.get("/api/v1/projects", headers=admin).json["data"] == []


def test_duplicate_name_is_409(client, admin):
    assert client.post("/api/v1/projects", json={"name": "x"}, headers=admin).status_code == 201
    r = client.post("/api/v1/projects", json={"name": "x"}, headers=admin)
    assert r.status_code == 409 and r.json["error"]["code"] == "project_exists"


def test_settings_changes_are_audited_by_field_name(client, admin):
    client.post("/api/v1/projects", json={"name": "p"}, headers=admin)
    client.patch("/api/v1/projects/p", json={"mode": "replay", "max_misses": 5}, headers=admin)
    events = client.get("/api/v1/audit", headers=admin).json["data"]
    assert events[0]["action"] == "project.settings"
    assert events[0]["fields"] == ["max_misses", "mode"]
    assert events[0]["actor"].startswith("tok_")
    # An unchanged value is no change and no audit line.
    client.patch("/api/v1/projects/p", json={"mode": "replay"}, headers=admin)
    assert len(client.get("/api/v1/audit", headers=admin).json["data"]) == len(events)


def test_record_through_needs_an_upstream_key(client, admin):
    client.post("/api/v1/projects", json={"name": "p"}, headers=admin)
    r = client.patch("/api/v1/projects/p", json={"record_through": True}, headers=admin)
    assert r.status_code == 422 and r.json["error"]["code"] == "upstream_not_configured"


def test_the_answerer_is_switched_on_without_a_command_on_the_server(client, admin, make_token):
    # The command is the daemon's, in its own environment file: the server's has none (decision 0052).
    client.post("/api/v1/projects", json={"name": "p"}, headers=admin)
    editor = client.patch("/api/v1/projects/p", json={"answerer": True}, headers=make_token("editor"))
    assert editor.status_code == 403
    r = client.patch("/api/v1/projects/p", json={"answerer": True}, headers=admin)
    assert r.status_code == 200 and r.json["answerer"] is True
    [event] = [
        e
        for e in client.get("/api/v1/audit", headers=admin).json["data"]
        if e["action"] == "project.answerer"
    ]
    assert event["target"] == "p"


def test_a_normalize_rule_re2_cannot_run_is_refused_when_saved(client, admin):
    assert client.post("/api/v1/projects", json={"name": "shop"}, headers=admin).status_code == 201
    rule = {"pattern": r"order-(?=\d)", "replacement": "order-"}
    r = client.patch("/api/v1/projects/shop", json={"normalize": [rule]}, headers=admin)
    assert r.status_code == 400, r.json
    assert r.json["error"]["param"] == "normalize[0].pattern"
    assert "order-(?=\\\\d)" in r.json["error"]["message"] and "RE2" in r.json["error"]["message"]
    assert client.get("/api/v1/projects/shop", headers=admin).json["normalize"] == []


def test_a_normalize_rule_without_a_replacement_is_stored_as_checked_and_the_project_keeps_serving(
    client, admin
):
    """A rule's replacement may be left out ("" then); it used to be stored as sent, and every proxy
    call of the project failed with a plain-text 500 (KeyError while fingerprinting)."""
    assert client.post("/api/v1/projects", json={"name": "shop", "mode": "replay"}, headers=admin).status_code
    rule = {"pattern": "order-[0-9]+"}
    r = client.patch("/api/v1/projects/shop", json={"normalize": [rule]}, headers=admin)
    assert r.status_code == 200, r.json
    assert r.json["normalize"] == [{"pattern": "order-[0-9]+", "replacement": ""}]

    def ask(number):
        body = {"model": "m", "messages": [{"role": "user", "content": f"where is order-{number}?"}]}
        return client.post("/p/shop/v1/chat/completions", json=body, headers=admin)

    first = ask(1)
    assert first.status_code == 424 and first.json["error"]["code"] == "semula_replay_miss"
    # The miss names the closest entry the normalised request could match: none yet.
    assert "no entries" in first.json["error"]["message"]

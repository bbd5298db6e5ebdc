"""Fault rules through the proxy (Flask's test client) on SQLite and PostgreSQL: which calls a rule
applies to, what it counts, how it is set, and how a bad rule is refused (issue #50, decision 0061)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from semula.core.errors import BadRequest
from semula.service import CLI, Context, audit, calllog, faults, projects, sequences
from semula.web import create_app
from tests.entry_helpers import save_entry
from tests.fake_upstream import FakeUpstream
from tests.helpers import wait_for

URL = "/p/shop/v1/chat/completions"


def body(text: str = "hello", model: str = "gpt-4o") -> dict:
    return {"model": model, "messages": [{"role": "user", "content": text}]}


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 1})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def statuses(client, headers, count: int, url: str = URL, **kwargs) -> list[int]:
    return [client.post(url, json=body(**kwargs), headers=headers).status_code for _ in range(count)]


def test_a_bad_rule_is_a_400_naming_the_kinds_or_keys(ctx, shop, client, admin):
    refused = client.post("/api/v1/projects/shop/faults", json={"kind": "flood"}, headers=admin)
    assert refused.status_code == 400
    error = refused.json["error"]
    assert error["code"] == "invalid_fault" and error["param"] == "fault.kind"
    assert (
        "the kinds are: rate_limit, server_error, bad_gateway, unavailable, overloaded, timeout"
        in error["message"]
    )
    bad_key = client.patch(
        "/api/v1/projects/shop", json={"faults": [{"kind": "timeout", "tims": 2}]}, headers=admin
    )
    assert bad_key.status_code == 400
    assert (
        "timeout rules take no key 'tims'; their keys: kind, after, times, probability, seed, match"
        in (bad_key.json["error"]["message"])
    )
    for rule, param in [
        ({"kind": "rate_limit", "times": 0}, "fault.times"),
        ({"kind": "rate_limit", "probability": 1.5}, "fault.probability"),
        ({"kind": "rate_limit", "retry_after": "soon"}, "fault.retry_after"),
        ({"kind": "rate_limit", "match": {"prompt": "x"}}, "fault.match"),
        ({"kind": "rate_limit", "match": {"api": "google.gemini"}}, "fault.match.api"),
        ({"kind": "rate_limit", "session": "a/b"}, "fault.session"),
    ]:
        with pytest.raises(BadRequest) as exc:
            faults.add(ctx, "shop", rule)
        assert exc.value.param == param, rule
    assert faults.list_rules(ctx, "shop")["data"] == []


def test_a_rule_matches_by_api_model_text_session_and_entry(ctx, shop, client, admin):
    entry = save_entry(ctx, "shop", "hello", {"content": "Hi."})
    save_entry(ctx, "shop", "bye", {"content": "Bye."})
    faults.add(ctx, "shop", {"kind": "server_error", "match": {"contains": "bye", "api": "openai.chat"}})
    assert statuses(client, admin, 2) == [200, 200]
    assert statuses(client, admin, 2, text="bye") == [500, 500]
    faults.clear(ctx, "shop")
    faults.add(ctx, "shop", {"kind": "bad_gateway", "entry": entry["id"]})
    assert statuses(client, admin, 1) == [502] and statuses(client, admin, 1, text="bye") == [200]
    faults.clear(ctx, "shop", entry=entry["id"])
    faults.add(ctx, "shop", {"kind": "unavailable", "session": "s1", "times": 1})
    assert statuses(client, admin, 1) == [200]
    session_url = "/p/shop/s/s1/v1/chat/completions"
    assert statuses(client, admin, 2, url=session_url) == [503, 200]
    sequences.reset(ctx, "shop", "s1")  # the session starts over: its rules count from one
    assert statuses(client, admin, 2, url=session_url) == [503, 200]
    cleared = client.delete("/api/v1/projects/shop/faults?session=s1", headers=admin)
    assert cleared.status_code == 200 and cleared.json["data"] == []
    actions = [e["action"] for e in audit.list_events(ctx)["data"]]
    assert actions.count("fault.add") == 3 and actions.count("fault.clear") == 3


def test_a_parked_call_is_never_faulted_nor_counted(ctx, shop, client, admin):
    faults.add(ctx, "shop", {"kind": "rate_limit", "times": 5})
    missed = client.post(URL, json=body("unrecorded"), headers=admin)
    assert missed.status_code == 504  # parked, nobody answered within record_timeout
    projects.update(ctx, "shop", {"mode": "replay"})
    assert client.post(URL, json=body("unrecorded"), headers=admin).status_code == 424
    [rule] = faults.list_rules(ctx, "shop")["data"]
    assert rule["counts"] == []


def test_a_rule_keeps_no_hit_and_a_project_without_rules_keeps_them_again(ctx, shop, app, admin):
    save_entry(ctx, "shop", "hello", {"content": "Hi."})
    client = app.test_client()
    proxy = app.wsgi_app  # the ProxyApp in front of Flask
    faults.add(ctx, "shop", {"kind": "rate_limit", "times": 3})
    assert statuses(client, admin, 5) == [429, 429, 429, 200, 200]
    assert list(proxy.hits.held()) == []
    faults.clear(ctx, "shop")
    assert statuses(client, admin, 3) == [200, 200, 200]
    assert len(list(proxy.hits.held())) == 1


@pytest.fixture
def forwarding(store, settings, make_token):
    """A record-through project `shop` (a fake provider that counts its calls), its server's test
    client and an admin's headers."""
    fake = FakeUpstream()
    try:
        upstream = replace(
            settings, upstream_key="sk-upstream-test-0123456789abcdefghijkl", upstream_url=fake.url
        )
        uctx = Context(store, upstream, CLI)
        projects.create(uctx, {"name": "shop", "record_through": True})
        yield uctx, fake, create_app(upstream, store).test_client(), make_token("admin")
    finally:
        fake.close()


def test_record_through_is_faulted_without_calling_the_provider(forwarding):
    uctx, fake, client, headers = forwarding
    faults.add(uctx, "shop", {"kind": "overloaded", "times": 1})
    assert client.post(URL, json=body("fresh"), headers=headers).status_code == 503
    assert fake.calls == []
    assert client.post(URL, json=body("fresh"), headers=headers).status_code == 200
    assert len(fake.calls) == 1


def test_a_disconnect_on_a_record_through_miss_calls_no_provider_and_its_retry_is_recorded(forwarding):
    uctx, fake, client, headers = forwarding
    faults.add(uctx, "shop", {"kind": "disconnect", "times": 1})
    # The rule's use: the head and nothing (the cut), the provider not called.
    cut = client.post(URL, json=body("fresh"), headers=headers)
    assert cut.status_code == 200 and cut.data == b"" and fake.calls == []
    # The retry, the rule used up, is forwarded once and recorded; the next call replays it.
    forwarded = client.post(URL, json=body("fresh"), headers=headers)
    assert forwarded.json["choices"][0]["message"]["content"] == "upstream says: fresh"
    replayed = client.post(URL, json=body("fresh"), headers=headers)
    assert replayed.json["choices"][0]["message"]["content"] == "upstream says: fresh"
    assert len(fake.calls) == 1
    rows = list(reversed(calllog.list_calls(uctx, "shop")["data"]))
    assert [row["outcome"] for row in rows] == ["fault", "forwarded", "hit"]
    assert rows[0]["fault"] == {"kind": "disconnect", "after_events": 0, "at": "body", "times": 1}
    [rule] = faults.list_rules(uctx, "shop")["data"]
    assert rule["counts"] == [{"session": None, "calls": 3, "faults": 1}]


def test_the_headers_disconnect_on_a_record_through_miss_calls_no_provider(forwarding):
    uctx, fake, client, headers = forwarding
    cutting = {**headers, "X-Semula-Fault": "disconnect; after_events=1"}
    stream = {**body("fresh"), "stream": True}
    # A stream: its head and no event (what a cut before the first event gives), no provider call.
    cut = client.post(URL, json=stream, headers=cutting)
    assert cut.status_code == 200 and cut.mimetype == "text/event-stream" and cut.data == b""
    assert fake.calls == []
    # Without the header it is forwarded (and recorded); with it again, the recording is cut.
    forwarded = client.post(URL, json=stream, headers=headers).data
    assert b"upstream" in forwarded and forwarded.endswith(b"data: [DONE]\n\n")
    assert len(fake.calls) == 1
    again = client.post(URL, json=stream, headers=cutting)
    assert again.data.count(b"data: ") == 1 and len(fake.calls) == 1
    rows = list(reversed(calllog.list_calls(uctx, "shop")["data"]))
    assert [row["outcome"] for row in rows] == ["fault", "forwarded", "hit"]
    assert rows[0]["fault"]["via"] == "header" and rows[2]["fault"]["kind"] == "disconnect"


def test_a_slow_record_through_miss_calls_the_provider_and_records_its_reply(forwarding):
    uctx, fake, client, headers = forwarding
    slowed = client.post(URL, json=body("fresh"), headers={**headers, "X-Semula-Fault": "slow; ttfb=0"})
    assert slowed.json["choices"][0]["message"]["content"] == "upstream says: fresh"
    assert client.post(URL, json=body("fresh"), headers=headers).status_code == 200
    assert len(fake.calls) == 1


def test_the_project_setting_sets_rules_and_a_removed_rule_counts_anew(ctx, shop, client, admin):
    save_entry(ctx, "shop", "hello", {"content": "Hi."})
    rules = [{"kind": "rate_limit", "times": 1}]
    changed = client.patch("/api/v1/projects/shop", json={"faults": rules}, headers=admin)
    assert changed.status_code == 200
    assert changed.json["faults"] == [{"kind": "rate_limit", "retry_after": 1.0, "times": 1}]
    assert statuses(client, admin, 2) == [429, 200]
    calls = wait_for(
        lambda: calllog.list_calls(ctx, "shop", outcome="fault")["data"], what="the fault logged"
    )
    assert calls[0]["fault"] == {"kind": "rate_limit", "retry_after": 1.0, "times": 1}
    projects.update(ctx, "shop", {"faults": []})
    projects.update(ctx, "shop", {"faults": rules})
    assert statuses(client, admin, 2) == [429, 200]
    assert projects.get(ctx, "shop")["faults"] == json.loads(json.dumps(changed.json["faults"]))


def test_a_reply_the_headers_fault_shaped_names_it_in_the_call_log(ctx, shop, client, admin):
    save_entry(ctx, "shop", "hello", {"content": "Hi."})
    slow = {**admin, "X-Semula-Fault": "slow; ttfb=0"}
    # The first call is looked up and replayed; the second is a kept hit (no rule is set).
    for _ in range(2):
        answered = client.post(URL, json=body(), headers=slow)
        assert answered.status_code == 200 and answered.json["choices"][0]["message"]["content"] == "Hi."
    calls = wait_for(
        lambda: len(rows := calllog.list_calls(ctx, "shop")["data"]) == 2 and rows,
        what="both calls logged",
    )
    assert [call["fault"] for call in calls] == [
        {"kind": "slow", "ttfb": 0.0, "pace": 0.0, "via": "header"}
    ] * 2


def test_the_cli_adds_lists_and_clears_rules(ctx, shop, db_url, monkeypatch):
    from click.testing import CliRunner

    from semula.surfaces.cli import main

    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)

    def run(*args: str):
        result = CliRunner().invoke(main, list(args))
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    added = run("fault", "add", "shop", "rate_limit", "times=2", "session=ci-1", "match.model=gpt-4o")
    assert added["data"][0] | {"counts": []} == {
        "object": "fault_rule",
        "index": 0,
        "kind": "rate_limit",
        "retry_after": 1.0,
        "times": 2,
        "session": "ci-1",
        "match": {"model": "gpt-4o"},
        "counts": [],
    }
    run("project", "set", "shop", 'faults=[{"kind": "slow", "ttfb": 0.1}, {"kind": "overloaded"}]')
    assert [r["kind"] for r in run("fault", "list", "shop")["data"]] == ["slow", "overloaded"]
    assert [r["kind"] for r in run("fault", "clear", "shop", "--index", "0")["data"]] == ["overloaded"]
    refused = CliRunner().invoke(main, ["fault", "add", "shop", "flood"])
    assert refused.exit_code != 0 and "the kinds are: rate_limit" in refused.output
    assert run("fault", "clear", "shop")["data"] == []


def test_the_mcp_tools_add_list_and_clear_rules(ctx, shop, app, make_token):
    import anyio
    from mcp import Client

    from semula.surfaces.mcp_server import build
    from tests.agent_helpers import in_process_client

    server = build(in_process_client(app, make_token("editor", scope="full")))

    async def session():
        async with Client(server) as client:
            calls = [
                ("add_fault", {"project": "shop", "rule": {"kind": "server_error", "times": 1}}),
                ("list_faults", {"project": "shop"}),
                ("clear_faults", {"project": "shop"}),
            ]
            return [await client.call_tool(name, args) for name, args in calls]

    added, listed, cleared = anyio.run(session)
    assert [r["kind"] for r in added.structured_content["data"]] == ["server_error"]
    assert listed.structured_content["data"][0]["times"] == 1
    assert cleared.structured_content["data"] == []
    assert [e["action"] for e in audit.list_events(ctx)["data"]][:2] == ["fault.clear", "fault.add"]


def test_the_dashboard_lists_adds_and_clears_rules(ctx, shop, app, make_token):
    from tests.integration.test_auth import signed_in

    browser, csrf = signed_in(app, make_token("editor"))
    faults.add(ctx, "shop", {"kind": "rate_limit", "times": 2, "session": "ci-1"})
    page = browser.get("/ui/p/shop/settings").get_data(as_text=True)
    assert "Fault rules" in page and "kind=rate_limit" in page and "session=ci-1" in page
    added = browser.post(
        "/ui/p/shop/faults", data={"csrf": csrf, "action": "add", "rule": '{"kind": "overloaded"}'}
    )
    assert added.status_code == 302
    assert [r["kind"] for r in faults.list_rules(ctx, "shop")["data"]] == ["rate_limit", "overloaded"]
    refused = browser.post("/ui/p/shop/faults", data={"csrf": csrf, "action": "add", "rule": '{"kind": "x"}'})
    assert refused.status_code == 400 and "the kinds are: rate_limit" in refused.get_data(as_text=True)
    assert browser.post("/ui/p/shop/faults", data={"csrf": csrf, "index": "0"}).status_code == 302
    assert [r["kind"] for r in faults.list_rules(ctx, "shop")["data"]] == ["overloaded"]
    assert browser.post("/ui/p/shop/faults", data={"csrf": csrf}).status_code == 302
    assert faults.list_rules(ctx, "shop")["data"] == []
    assert "No fault rules." in browser.get("/ui/p/shop/settings").get_data(as_text=True)

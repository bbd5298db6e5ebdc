"""Record-through against a fake provider on 127.0.0.1, on SQLite and PostgreSQL.

The design is docs/design/record-through.md.
"""

from __future__ import annotations

import io
import json
import logging
import re
import ssl
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from semula import logs
from semula.core.fingerprint import fingerprint
from semula.service import CLI, Context, bundles, entries, projects, provider, record_through
from semula.web import create_app
from tests.entry_helpers import save_entry
from tests.fake_upstream import FakeUpstream
from tests.helpers import free_port

CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"
URL = "/p/shop/v1/chat/completions"


def body(text: str = "hello", **extra) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def fake():
    server = FakeUpstream()
    yield server
    server.close()


@pytest.fixture
def upstream_settings(settings, fake):
    return replace(settings, upstream_key=CANARY, upstream_url=fake.url)


@pytest.fixture
def uctx(store, upstream_settings):
    return Context(store, upstream_settings, CLI)


@pytest.fixture
def client(store, upstream_settings):
    return create_app(upstream_settings, store).test_client()


@pytest.fixture
def shop(uctx):
    return projects.create(uctx, {"name": "shop", "record_through": True, "upstream_max_calls": 5})


@pytest.fixture
def headers(make_token):
    return make_token("admin")


def usage(client, headers):
    return client.get("/api/v1/projects/shop/upstream", headers=headers).json


def calls(store, shop):
    return [r["outcome"] for r in store.all("calls_in_project", project_id=shop["id"])]


def test_forward_records_an_entry_and_then_replays_it(client, shop, headers, fake, store):
    r = client.post(URL, json=body(), headers={**headers, "X-App-Secret": "app-only"})
    assert r.status_code == 200, r.json
    assert r.json["choices"][0]["message"]["content"] == "upstream says: hello"
    # The call that forwarded it gets the provider's id and created; a replay gets fresh ones.
    assert r.json["model"] == "gpt-4o" and (r.json["id"], r.json["created"]) == ("chatcmpl-upstream", 1)
    again = client.post(URL, json=body(), headers=headers)
    assert again.json["choices"][0]["message"]["content"] == "upstream says: hello"
    assert again.json["id"] != "chatcmpl-upstream" and again.json["created"] > 1
    assert len(fake.calls) == 1
    sent = fake.calls[0]
    assert sent["headers"]["Authorization"] == f"Bearer {CANARY}"
    assert "X-App-Secret" not in sent["headers"] and sent["body"] == body()
    assert calls(store, shop) == ["forwarded", "hit"]
    assert usage(client, headers)["calls"] == 1 and usage(client, headers)["prompt_tokens"] == 20


def test_the_entry_its_revision_and_the_tokens_are_written_together(client, uctx, shop, headers, fake):
    assert client.post(URL, json=body(), headers=headers).status_code == 200
    entry_id = entries.list_entries(uctx, "shop")["data"][0]["id"]
    full = entries.get(uctx, entry_id)
    assert [(r["number"], r["actor"], r["summary"]) for r in full["revisions"]] == [
        (1, "agent", "recorded from upstream")
    ]
    # Rejected, it no longer replays and is recorded again as revision 2; pinned, it refuses that.
    entries.review(uctx, entry_id, "rejected")
    assert client.post(URL, json=body(), headers=headers).status_code == 200
    assert [r["number"] for r in entries.get(uctx, entry_id)["revisions"]] == [1, 2]
    entries.review(uctx, entry_id, "rejected")
    entries.set_pinned(uctx, entry_id, True)
    r = client.post(URL, json=body(), headers=headers)
    assert r.status_code == 409 and r.json["error"]["code"] == "entry_pinned"
    assert [r["number"] for r in entries.get(uctx, entry_id)["revisions"]] == [1, 2]
    spent = usage(client, headers)
    # The third call reached the provider (the pin refused only its saving): spent, without tokens.
    assert (spent["calls"], spent["prompt_tokens"], spent["completion_tokens"]) == (3, 40, 20)


def test_upstream_model_replaces_the_model_sent(client, uctx, shop, headers, fake):
    projects.update(uctx, "shop", {"upstream_model": "gpt-4o-mini"})
    r = client.post(URL, json=body(), headers=headers)
    # The app gets the model the provider answered with, as it would calling the provider directly.
    assert fake.calls[0]["body"]["model"] == "gpt-4o-mini" and r.json["model"] == "gpt-4o-mini"


def test_budget_cap_then_429_and_replay_still_works(client, uctx, shop, headers, fake, store):
    projects.update(uctx, "shop", {"upstream_max_calls": 2})
    assert client.post(URL, json=body("a"), headers=headers).status_code == 200
    assert client.post(URL, json=body("b"), headers=headers).status_code == 200
    r = client.post(URL, json=body("c"), headers=headers)
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_upstream_budget"
    message = r.json["error"]["message"]
    assert "upstream_max_calls 2, upstream_max_tokens no cap" in message
    assert "semula project upstream shop --reset" in message and "None" not in message
    assert client.post(URL, json=body("a"), headers=headers).status_code == 200
    assert len(fake.calls) == 2 and calls(store, shop)[-2:] == ["budget", "hit"]


def test_token_cap_is_checked_before_a_call(client, uctx, shop, headers):
    projects.update(uctx, "shop", {"upstream_max_tokens": 10})
    assert client.post(URL, json=body("a"), headers=headers).status_code == 200  # spends 30: overshoots once
    assert client.post(URL, json=body("b"), headers=headers).json["error"]["code"] == "semula_upstream_budget"


def test_prompt_tokens_count_toward_the_token_cap(client, uctx, shop, headers):
    projects.update(uctx, "shop", {"upstream_max_tokens": 25})
    assert client.post(URL, json=body("a"), headers=headers).status_code == 200  # 20 prompt + 10 completion
    spent = usage(client, headers)
    assert (spent["prompt_tokens"], spent["completion_tokens"]) == (20, 10)
    # The 10 completion tokens alone are under the cap of 25; with the 20 prompt tokens they pass it.
    r = client.post(URL, json=body("b"), headers=headers)
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_upstream_budget"


def test_an_entry_recorded_meanwhile_is_returned_without_paying(uctx, shop, fake, store):
    """Another server recorded the prompt after this one looked: the forward pays nothing for it."""
    recorded = save_entry(uctx, "shop", "hello", {"content": "recorded by the other server"})
    project = projects.get_row(uctx, "shop")
    entry = record_through.forward(uctx, project, recorded["fingerprint"], body())
    assert entry["id"] == recorded["id"]
    assert fake.calls == []
    assert store.one("get_upstream_usage", project_id=shop["id"])["calls"] == 0


def test_a_call_that_reached_the_provider_is_spent_and_error_text_is_redacted(
    client, uctx, shop, headers, fake, store, capfd
):
    logs.setup("info", (CANARY,))
    fake.mode = "error"
    r = client.post(URL, json=body(), headers=headers)
    assert r.status_code == 502 and r.json["error"]["code"] == "semula_upstream_error"
    message = r.json["error"]["message"]
    assert "401" in message and "[REDACTED]" in message and CANARY not in message
    assert usage(client, headers)["calls"] == 1  # the provider saw it: it may have billed it
    # An answer semula cannot store still reaches the app, with a warning, and is not recorded.
    fake.mode = "invalid"
    r = client.post(URL, json=body(), headers=headers)
    assert r.status_code == 200 and r.json["choices"][0]["message"]["tool_calls"][0]["function"]["name"]
    assert r.headers["X-Semula-Warning"].startswith("not recorded: ")
    assert "choices[0].message.tool_calls" in r.headers["X-Semula-Warning"]
    assert usage(client, headers)["calls"] == 2 and entries.list_entries(uctx, "shop")["data"] == []
    assert calls(store, shop) == ["error", "forwarded"]
    logging.getLogger("semula.test").info("done")
    assert CANARY not in "".join(capfd.readouterr())


def test_unreachable_upstream_is_named_by_exception_type_only(store, settings, headers):
    url = f"http://127.0.0.1:{free_port()}/v1"
    s = replace(settings, upstream_key=CANARY, upstream_url=url)
    projects.create(Context(store, s, CLI), {"name": "shop", "record_through": True})
    r = create_app(s, store).test_client().post(URL, json=body(), headers=headers)
    assert r.status_code == 502 and r.json["error"]["code"] == "semula_upstream_unreachable"
    message = r.json["error"]["message"]
    assert re.search(r"\(Connection\w*Error\)", message) and "127.0.0.1" not in message
    # It never left: the call is given back.
    spent = store.one("get_upstream_usage", project_id=projects.get(Context(store, s, CLI), "shop")["id"])
    assert spent["calls"] == 0


def test_redirects_are_not_followed_and_nothing_is_retried(client, shop, headers, fake):
    fake.mode = "redirect"
    r = client.post(URL, json=body(), headers=headers)
    assert r.status_code == 502 and "answered 307" in r.json["error"]["message"]
    assert len(fake.calls) == 1 and usage(client, headers)["calls"] == 1


def test_a_too_large_answer_is_refused_and_the_next_call_works(client, shop, headers, fake, monkeypatch):
    monkeypatch.setattr(provider, "MAX_RESPONSE_BYTES", 100)
    r = client.post(URL, json=body("big"), headers=headers)
    assert r.status_code == 502 and "too large" in r.json["error"]["message"]
    monkeypatch.undo()
    r = client.post(URL, json=body("next"), headers=headers)
    assert r.status_code == 200 and r.json["choices"][0]["message"]["content"] == "upstream says: next"


def test_connections_are_kept_alive_and_one_the_provider_closed_is_not_reused(client, shop, headers, fake):
    for text in ("one", "two", "three"):
        assert client.post(URL, json=body(text), headers=headers).status_code == 200
    assert len({c["peer"] for c in fake.calls}) == 1  # one connection for all three
    fake.mode = "hang up"
    assert client.post(URL, json=body("four"), headers=headers).status_code == 200
    fake.mode = "ok"
    r = client.post(URL, json=body("five"), headers=headers)  # not sent on the closed connection
    assert r.status_code == 200 and r.json["choices"][0]["message"]["content"] == "upstream says: five"
    assert len(fake.calls) == 5 and fake.calls[4]["peer"] != fake.calls[3]["peer"]


@pytest.fixture
def tls_provider(tmp_path):
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    server = FakeUpstream(tls=context)
    yield server, str(tmp_path / "ca.pem")
    server.close()


@pytest.mark.parametrize("trusted", [True, False])
def test_an_https_provider_is_called_with_its_certificate_checked(
    store, settings, headers, tls_provider, monkeypatch, trusted
):
    server, ca_file = tls_provider
    if trusted:
        monkeypatch.setattr(provider, "_ca_bundle", lambda: ca_file)
    provider._provider.cache_clear()
    s = replace(settings, upstream_key=CANARY, upstream_url=server.url)
    projects.create(Context(store, s, CLI), {"name": "shop", "record_through": True})
    try:
        app = create_app(s, store).test_client()
        responses = [app.post(URL, json=body(text), headers=headers) for text in ("a", "b")]
    finally:
        provider._provider.cache_clear()
    if trusted:
        assert [r.json["choices"][0]["message"]["content"] for r in responses] == [
            "upstream says: a",
            "upstream says: b",
        ]
        assert len({c["peer"] for c in server.calls}) == 1
    else:  # a certificate no CA of the bundle signed: refused before anything is sent
        assert all(r.json["error"]["code"] == "semula_upstream_unreachable" for r in responses)
        assert "SSLCertVerificationError" in responses[0].json["error"]["message"] and not server.calls


def test_the_environment_proxy_is_used(store, settings, headers, fake, monkeypatch):
    # The fake provider stands in for the proxy: it is asked for the provider's absolute URL.
    monkeypatch.setenv("HTTP_PROXY", fake.url.removesuffix("/v1").replace("//", "//proxy%20user:s3cret@"))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    provider._provider.cache_clear()
    s = replace(settings, upstream_key=CANARY, upstream_url="http://provider.invalid/v1")
    projects.create(Context(store, s, CLI), {"name": "shop", "record_through": True})
    try:
        r = create_app(s, store).test_client().post(URL, json=body(), headers=headers)
    finally:
        provider._provider.cache_clear()
    assert r.status_code == 200
    assert [c["path"] for c in fake.calls] == ["http://provider.invalid/v1/chat/completions"]
    sent = {name.lower(): value for name, value in fake.calls[0]["headers"].items()}
    assert sent["proxy-authorization"] == "Basic cHJveHkgdXNlcjpzM2NyZXQ="  # "proxy user:s3cret"


def test_dry_run_lists_prompts_and_never_calls(client, uctx, shop, headers, fake, store):
    projects.update(uctx, "shop", {"upstream_dry_run": True})
    for _ in range(2):
        r = client.post(URL, json=body("dry"), headers=headers)
        assert r.status_code == 424 and r.json["error"]["code"] == "semula_upstream_dry_run"
    client.post(URL, json=body("other"), headers=headers)
    listed = usage(client, headers)["dry_run_prompts"]
    assert sorted((p["count"], p["request"]["messages"][0]["content"]) for p in listed) == [
        (1, "other"),
        (2, "dry"),
    ]
    assert fake.calls == [] and calls(store, shop) == ["dry_run"] * 3


def test_replay_mode_and_replay_scope_never_forward(client, uctx, shop, make_token, headers, fake):
    r = client.post(URL, json=body(), headers=make_token("viewer", scope="replay"))
    assert r.status_code == 424 and r.json["error"]["code"] == "semula_replay_miss"
    projects.update(uctx, "shop", {"mode": "replay"})
    assert client.post(URL, json=body(), headers=headers).status_code == 424
    assert fake.calls == []


def test_stream_is_forwarded_with_usage_and_saved_with_chunks(client, shop, headers, fake, store):
    r = client.post(URL, json=body(stream=True), headers=headers)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    assert fake.calls[0]["body"]["stream_options"] == {"include_usage": True}
    events = [json.loads(x[6:]) for x in r.get_data(as_text=True).split("\n\n") if x and x != "data: [DONE]"]
    assert "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"]) == (
        "upstream says: hello"
    )
    assert all("usage" not in e or e["usage"] is None for e in events)  # the app did not ask for usage
    entry = store.one("entry_by_fingerprint", project_id=shop["id"], fingerprint=fingerprint(body()))
    saved = json.loads(entry["chunks"])
    assert len(saved) == 5 and saved[-1]["usage"]["total_tokens"] == 30  # kept with the usage chunk
    plain = client.post(URL, json=body(), headers=headers).json
    assert plain["choices"][0]["message"]["content"] == "upstream says: hello" and len(fake.calls) == 1


def test_fifty_identical_concurrent_misses_make_one_upstream_call(client, shop, headers, fake):
    fake.delay = 0.3
    with ThreadPoolExecutor(50) as pool:
        results = list(pool.map(lambda _: client.post(URL, json=body("same"), headers=headers), range(50)))
    assert {r.status_code for r in results} == {200}
    assert len(fake.calls) == 1 and usage(client, headers)["calls"] == 1


def test_identical_concurrent_misses_all_get_the_providers_error(client, shop, headers, fake):
    """The callers that wait for the leader's forward share its failure, not only its success."""
    fake.mode, fake.delay = "error", 0.5
    with ThreadPoolExecutor(10) as pool:
        results = list(pool.map(lambda _: client.post(URL, json=body("same"), headers=headers), range(10)))
    assert len(fake.calls) == 1  # one flight: the other nine waited for it
    refusals = [(r.status_code, r.json["error"]["code"]) for r in results]
    assert refusals == [(502, "semula_upstream_error")] * 10
    assert usage(client, headers)["calls"] == 1


def test_reset_is_admin_only_and_audited(client, shop, headers, make_token):
    client.post(URL, json=body(), headers=headers)
    editor = make_token("editor")
    assert client.post("/api/v1/projects/shop/upstream/reset", headers=editor).status_code == 403
    r = client.post("/api/v1/projects/shop/upstream/reset", headers=headers)
    assert r.status_code == 200 and r.json["calls"] == 0
    events = client.get("/api/v1/audit?action=project.upstream_reset", headers=headers).json["data"]
    assert len(events) == 1 and CANARY not in json.dumps(events)


def test_switching_on_is_admin_only_audited_and_needs_a_key(client, settings, store, headers, make_token):
    projects.create(Context(store, settings, CLI), {"name": "p"})
    r = client.patch("/api/v1/projects/p", json={"record_through": True}, headers=make_token("editor"))
    assert r.status_code == 403
    assert (
        client.patch("/api/v1/projects/p", json={"record_through": True}, headers=headers).status_code == 200
    )
    events = client.get("/api/v1/audit?action=project.settings", headers=headers).json["data"]
    assert events[0]["fields"] == ["record_through"]


def test_hosted_tenants_need_the_operator_switch(store, settings):
    hosted = replace(settings, hosted=True, upstream_key=CANARY)
    ctx = Context(store, hosted, CLI)
    from semula.core.errors import Forbidden

    with pytest.raises(Forbidden):
        projects.create(ctx, {"name": "p", "record_through": True})
    allowed = Context(store, replace(hosted, upstream_tenants=True), CLI)
    assert projects.create(allowed, {"name": "p", "record_through": True})["record_through"] is True


def test_key_never_reaches_the_database(client, shop, headers, fake, store):
    client.post(URL, json=body(f"my own key {CANARY}"), headers=headers)
    fake.mode = "error"
    client.post(URL, json=body("x"), headers=headers)
    for query, params in [
        ("calls_in_project", {"project_id": shop["id"]}),
        (
            "list_audit",
            {"workspace_id": "wsp_default", "action": None, "target": None, "before": None, "limit": 100},
        ),
    ]:
        assert CANARY not in json.dumps(store.all(query, **params))
    assert CANARY not in json.dumps(usage(client, headers))


def test_cli_shows_and_resets_usage(db_url, uctx, shop, monkeypatch):
    from click.testing import CliRunner

    from semula.surfaces.cli import main

    uctx.store.run("ensure_upstream_usage", project_id=shop["id"], workspace_id="wsp_default")
    uctx.store.run(
        "take_upstream_call",
        project_id=shop["id"],
        fingerprint="v1:none",
        seq=1,
        max_calls=5,
        max_tokens=None,
    )
    monkeypatch.setenv("SEMULA_DATABASE_URL", db_url)
    shown = CliRunner().invoke(main, ["project", "upstream", "shop"])
    assert shown.exit_code == 0 and json.loads(shown.output)["calls"] == 1
    reset = CliRunner().invoke(main, ["project", "upstream", "shop", "--reset"])
    assert json.loads(reset.output)["calls"] == 0


def session_url(session: str) -> str:
    return f"/p/shop/s/{session}/v1/chat/completions"


def said(response) -> str:
    assert response.status_code == 200, response.json
    return response.json["choices"][0]["message"]["content"]


@pytest.fixture
def recording_sequences(uctx, shop, fake):
    """shop records sequences through the provider, whose answers are numbered by call."""
    projects.update(uctx, "shop", {"sequences": "record"})
    fake.numbered = True


def test_sequences_record_forwards_the_kth_call_for_answer_k(
    client, uctx, shop, headers, fake, store, recording_sequences
):
    got = [said(client.post(session_url("a"), json=body(), headers=headers)) for _ in range(3)]
    assert got == ["upstream says: hello #1", "upstream says: hello #2", "upstream says: hello #3"]
    # Another session replays the sequence, and its fourth call records answer 4.
    got = [said(client.post(session_url("b"), json=body(), headers=headers)) for _ in range(4)]
    assert got[:3] == ["upstream says: hello #1", "upstream says: hello #2", "upstream says: hello #3"]
    assert got[3] == "upstream says: hello #4"
    # Without a session: answer 1, nothing forwarded.
    assert said(client.post(URL, json=body(), headers=headers)) == "upstream says: hello #1"
    assert len(fake.calls) == 4 and usage(client, headers)["calls"] == 4
    assert usage(client, headers)["prompt_tokens"] == 80  # every answer's tokens are counted
    entry_id = entries.list_entries(uctx, "shop")["data"][0]["id"]
    full = entries.get(uctx, entry_id)
    assert full["answers"] == 4
    assert [(r["seq"], r["number"], r["actor"]) for r in full["revisions"]] == [
        (seq, 1, "agent") for seq in (1, 2, 3, 4)
    ]
    assert calls(store, shop) == ["forwarded"] * 3 + ["hit"] * 3 + ["forwarded", "hit"]


def test_each_recorded_answer_replays_its_own_provider_headers_and_keeps_them_when_reordered(
    client, uctx, shop, headers, fake, recording_sequences
):
    """Answers 2..n keep what the provider sent with them (entry_answers.meta), as answer 1 does."""

    def replayed(session, project="shop"):
        url = session_url(session).replace("/p/shop/", f"/p/{project}/")
        r = client.post(url, json=body(), headers=headers)
        return said(r), r.headers.get("openai-processing-ms")

    for number in (1, 2, 3):
        fake.headers = {"openai-processing-ms": str(100 * number)}
        assert replayed("a") == (f"upstream says: hello #{number}", str(100 * number))
    fake.headers = {}
    assert [replayed("b") for _ in range(3)] == [
        (f"upstream says: hello #{n}", str(100 * n)) for n in (1, 2, 3)
    ]
    # A bundle carries each answer's own, and an import replays them.
    bundle = json.loads(b"".join(bundles.export_bundle(uctx, "shop")))
    [item] = bundle["entries"]
    assert item["meta"]["headers"] == {"openai-processing-ms": "100"}
    assert [a["meta"]["headers"] for a in item["later_answers"]] == [
        {"openai-processing-ms": "200"},
        {"openai-processing-ms": "300"},
    ]
    projects.create(uctx, {"name": "copy", "mode": "replay"})
    bundles.import_bundle(uctx, "copy", io.BytesIO(json.dumps(bundle).encode()))
    assert [replayed("z", "copy")[1] for _ in range(3)] == ["100", "200", "300"]
    entry_id = entries.list_entries(uctx, "shop")["data"][0]["id"]
    entries.reorder_answers(uctx, entry_id, [3, 1, 2])
    assert [replayed("c") for _ in range(3)] == [
        (f"upstream says: hello #{n}", str(100 * n)) for n in (3, 1, 2)
    ]
    entries.delete_answer(uctx, entry_id, 1)  # answer #3 goes; #1 is answer 1 again
    assert [replayed("d") for _ in range(2)] == [(f"upstream says: hello #{n}", str(100 * n)) for n in (1, 2)]
    assert len(fake.calls) == 3


def test_a_streamed_call_records_its_answer_of_the_sequence(
    client, uctx, shop, headers, fake, recording_sequences
):
    assert said(client.post(session_url("a"), json=body(), headers=headers)) == "upstream says: hello #1"
    r = client.post(session_url("a"), json=body(stream=True), headers=headers)
    events = [json.loads(x[6:]) for x in r.get_data(as_text=True).split("\n\n") if x and x != "data: [DONE]"]
    text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events if e["choices"])
    assert text == "upstream says: hello #2"
    # The stream was answer 2 of the plain request's sequence too (stream is not fingerprinted).
    client.post("/api/v1/projects/shop/sessions/a/reset", headers=headers)
    got = [said(client.post(session_url("a"), json=body(), headers=headers)) for _ in range(2)]
    assert got == ["upstream says: hello #1", "upstream says: hello #2"] and len(fake.calls) == 2


def test_concurrent_calls_at_two_positions_are_two_flights_one_position_is_one(
    client, shop, headers, fake, recording_sequences
):
    fake.delay = 0.3
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(lambda _: client.post(session_url("a"), json=body(), headers=headers), range(2))
        )
    assert sorted(said(r) for r in results) == ["upstream says: hello #1", "upstream says: hello #2"]
    assert len(fake.calls) == 2 and usage(client, headers)["calls"] == 2
    # The third call of three sessions at once: one position, one provider call, shared.
    for session in ("x", "y", "z"):
        for _ in range(2):
            said(client.post(session_url(session), json=body(), headers=headers))
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda s: client.post(session_url(s), json=body(), headers=headers), "xyz"))
    assert [said(r) for r in results] == ["upstream says: hello #3"] * 3
    assert len(fake.calls) == 3 and usage(client, headers)["calls"] == 3


def test_a_failed_call_leaves_no_gap_in_the_sequence(client, uctx, shop, headers, fake, recording_sequences):
    """Call 1 of the session failed at the provider: call 2 records answer 1, and pays once."""
    fake.mode = "error"
    assert client.post(session_url("a"), json=body(), headers=headers).status_code == 502
    fake.mode = "ok"
    assert said(client.post(session_url("a"), json=body(), headers=headers)) == "upstream says: hello #2"
    assert len(fake.calls) == 2 and usage(client, headers)["calls"] == 2  # the failed call was spent too
    got = [said(client.post(session_url("b"), json=body(), headers=headers)) for _ in range(2)]
    assert got == ["upstream says: hello #2", "upstream says: hello #3"]


def test_concurrent_appends_get_distinct_answers_and_lose_none(uctx, shop):
    """Record-through of one request by many calls at once, in any process: answers 1..n, once each."""
    request = body("same")
    uctx.store.run("ensure_upstream_usage", project_id=shop["id"], workspace_id="wsp_default")
    with ThreadPoolExecutor(8) as pool:
        saved = list(
            pool.map(
                lambda n: entries.append(
                    uctx.store,
                    uctx,
                    project_id=shop["id"],
                    fingerprint=fingerprint(request),
                    request=request,
                    response={"choices": [{"message": {"role": "assistant", "content": f"answer {n}"}}]},
                    chunks=None,
                    actor="agent",
                    summary="test",
                    tokens=(1, 1),
                ),
                range(12),
            )
        )
    assert sorted(s["seq"] for s in saved) == list(range(1, 13))
    entry = entries.get(uctx, saved[0]["id"])
    assert entry["answers"] == 12
    assert sorted(a["response"]["choices"][0]["message"]["content"] for a in entry["sequence"]) == sorted(
        f"answer {n}" for n in range(12)
    )
    assert [(r["seq"], r["number"]) for r in entry["revisions"]] == [(n, 1) for n in range(1, 13)]
    spent = uctx.store.one("get_upstream_usage", project_id=shop["id"])
    assert (spent["prompt_tokens"], spent["completion_tokens"]) == (12, 12)


def test_the_warning_header_is_one_printable_line_whatever_the_answer_quoted():
    """X-Semula-Warning may quote a provider's answer (a tool name, a value): never a header split."""
    from semula.web.fastpath import _warned

    [(name, value)] = _warned("not recorded: unknown tool 'a\r\nSet-Cookie: x=1\x00\x7f' — é")
    assert name == "X-Semula-Warning"
    assert value == "not recorded: unknown tool 'a  Set-Cookie: x=1  ' ? ?"
    assert _warned(None) == [] and _warned("") == []


def test_paced_replays_are_bounded_whatever_the_recording_and_the_factor():
    """A client that left is noticed only at the next write: no pause may hold a connection long."""
    from types import SimpleNamespace

    from semula.service import replay

    entry = {"meta": json.dumps({"gaps": [1.0, 600, 600, 600, 0.1]})}
    call = SimpleNamespace(project={"stream_pacing": "100"})
    gaps = replay.pacing(call, entry)
    assert gaps[0] == replay.MAX_PACED_GAP  # 1 s x 100
    assert max(gaps) <= replay.MAX_PACED_GAP and sum(gaps) <= replay.MAX_PACED_TOTAL
    assert replay.pacing(
        SimpleNamespace(project={"stream_pacing": "recorded"}), {"meta": '{"gaps": [0.25]}'}
    ) == [0.25]


def test_a_live_stream_relays_the_providers_events_with_the_key_redacted(client, shop, headers, fake):
    """A provider that echoes the key back: the app gets each event redacted, as a stored answer is."""
    r = client.post(URL, json=body(f"my key is {CANARY}", stream=True), headers=headers)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    text = r.get_data(as_text=True)
    assert CANARY not in text and "[REDACTED]" in text


def test_record_through_series_carry_no_tenants_project_name_in_hosted_mode():
    from types import SimpleNamespace

    from semula import metrics
    from semula.service import record_through

    def value(project):
        return metrics.RECORD_THROUGH.labels(project, "budget")._value.get()

    before = value(""), value("tenant-shop")
    hosted = SimpleNamespace(settings=SimpleNamespace(hosted=True))
    record_through._count(hosted, {"name": "tenant-shop"}, "budget")
    assert (value(""), value("tenant-shop")) == (before[0] + 1, before[1])
    record_through._count(
        SimpleNamespace(settings=SimpleNamespace(hosted=False)), {"name": "tenant-shop"}, "budget"
    )
    assert value("tenant-shop") == before[1] + 1

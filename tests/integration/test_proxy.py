"""The proxy through Flask's test client, on SQLite and PostgreSQL (held calls wait in threads)."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from semula import dialects
from semula.core import fingerprint as fp
from semula.core.errors import InvalidAnswer, PendingResolved
from semula.service import bundles, entries, pending, projects
from tests.entry_helpers import save_entry
from tests.helpers import wait_for

URL = "/p/shop/v1/chat/completions"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30, "max_misses": 3})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def parked(ctx, shop, count=1):
    return wait_for(
        lambda: (
            (rows := ctx.store.all("parked_in_project", project_id=shop["id"]))
            and len(rows) >= count
            and rows
        ),
        what=f"{count} parked",
    )


def call_async(client, headers, body=BODY, url=URL):
    pool = ThreadPoolExecutor(1)
    future = pool.submit(client.post, url, json=body, headers=headers)
    pool.shutdown(wait=False)
    return future


def record(ctx, shop, client, headers, payload, body=BODY):
    future = call_async(client, headers, body)
    [row] = parked(ctx, shop)
    pending.answer(ctx, row["id"], payload)
    return future.result(10)


def outcomes(ctx, shop):
    return [(r["outcome"], r["status"]) for r in ctx.store.all("calls_in_project", project_id=shop["id"])]


def test_record_then_hit_with_fresh_id_and_templates(ctx, shop, client, admin):
    first = record(ctx, shop, client, admin, {"content": "Model {{request.model}} at {{now}} id {{uuid}}"})
    assert first.status_code == 200
    body = first.json
    assert body["object"] == "chat.completion" and body["model"] == "gpt-4o"
    text = body["choices"][0]["message"]["content"]
    assert text.startswith("Model gpt-4o at 20") and "{{" not in text
    again = client.post(URL, json=BODY, headers=admin).json
    assert again["id"] != body["id"]
    assert again["choices"][0]["message"]["content"] != text  # a fresh uuid each time
    assert outcomes(ctx, shop) == [("answered", 200), ("hit", 200)]


def test_other_templates_stay_literal(ctx, shop, client, admin):
    r = record(ctx, shop, client, admin, {"content": "{{env.HOME}} {{ now }} {{7*7}}"})
    assert r.json["choices"][0]["message"]["content"] == "{{env.HOME}} {{ now }} {{7*7}}"


def test_replay_mode_miss_is_424_naming_the_closest_entry(ctx, shop, client, admin):
    record(ctx, shop, client, admin, {"content": "hi"})
    projects.update(ctx, "shop", {"mode": "replay"})
    r = client.post(URL, json={**BODY, "messages": [{"role": "user", "content": "hellO"}]}, headers=admin)
    assert r.status_code == 424 and r.json["error"]["code"] == "semula_replay_miss"
    assert "messages[0].content" in r.json["error"]["message"]
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []
    assert outcomes(ctx, shop)[-1] == ("replay_miss", 424)


def test_replay_miss_names_the_closest_entry_not_the_newest(ctx, shop, client, admin):
    close = {**BODY, "messages": [{"role": "user", "content": "hello there"}]}
    far = {**BODY, "messages": [{"role": "user", "content": "Write a sonnet about the sea at dusk."}]}
    record(ctx, shop, client, admin, {"content": "hi"}, body=close)
    record(ctx, shop, client, admin, {"content": "a sonnet"}, body=far)
    [newer, older] = ctx.store.all(
        "entry_candidates", project_id=shop["id"], api="openai.chat", model="gpt-4o", limit=10
    )
    assert json.loads(older["request"])["messages"] == close["messages"]
    projects.update(ctx, "shop", {"mode": "replay"})
    asked = {**BODY, "messages": [{"role": "user", "content": "hello therE"}]}
    r = client.post(URL, json=asked, headers=admin)
    assert r.status_code == 424
    message = r.json["error"]["message"]
    fingerprint = entries.get_row(ctx, older["id"])["fingerprint"]
    assert f"Closest entry: {older['id']} (fingerprint {fingerprint[:19]}…);" in message
    assert 'first difference at messages[0].content: recorded "hello there", sent "hello therE".' in message


def test_a_miss_between_two_long_texts_alike_at_their_start_shows_where_they_part(ctx, shop, client, admin):
    prompt = "You are an agent. " * 20 + "Today is Monday. Be brief."
    record(
        ctx,
        shop,
        client,
        admin,
        {"content": "hi"},
        body={**BODY, "messages": [{"role": "user", "content": prompt}]},
    )
    projects.update(ctx, "shop", {"mode": "replay"})
    sent = prompt.replace("Monday", "Sunday")
    r = client.post(URL, json={**BODY, "messages": [{"role": "user", "content": sent}]}, headers=admin)
    assert r.status_code == 424
    message = r.json["error"]["message"]
    alike = prompt.index("Monday")
    assert (
        'first difference at messages[0].content: recorded "… an agent. Today is Monday. Be brief.", '
        f'sent "… an agent. Today is Sunday. Be brief." (alike for their first {alike} characters).'
    ) in message


def test_a_miss_names_an_entry_from_a_bundle_by_its_fingerprint(ctx, shop, client, admin):
    long_text = "a long prompt " * 20
    record(
        ctx,
        shop,
        client,
        admin,
        {"content": "hi"},
        body={**BODY, "messages": [{"role": "user", "content": long_text}]},
    )
    bundle = b"".join(bundles.export_bundle(ctx, "shop"))
    projects.create(ctx, {"name": "copy"})
    bundles.import_bundle(ctx, "copy", io.BytesIO(bundle))
    projects.update(ctx, "copy", {"mode": "replay"})
    [entry] = json.loads(bundle)["entries"]
    r = client.post("/p/copy/v1/chat/completions", json=BODY, headers=admin)
    message = r.json["error"]["message"]
    assert f"Closest entry: the bundle's entry with fingerprint {entry['fingerprint'][:19]}…;" in message
    assert "ent_" not in message
    recorded = json.dumps(long_text)[:79] + "…"
    assert f'first difference at messages[0].content: recorded {recorded}, sent "hello".' in message


def test_replay_miss_in_an_empty_project_says_so(ctx, client, admin, monkeypatch):
    projects.create(ctx, {"name": "empty", "mode": "replay"})
    copied = []  # the request's canonical copy is made only to compare it with an entry (issue #49)
    canonical = dialects.Dialect.canonical
    monkeypatch.setattr(dialects.Dialect, "canonical", lambda *a: copied.append(1) or canonical(*a))
    r = client.post("/p/empty/v1/chat/completions", json=BODY, headers=admin)
    assert r.status_code == 424 and "no entries" in r.json["error"]["message"]
    assert "scope" not in r.json["error"]["message"]  # a replay-mode project: the scope is not the cause
    assert not copied


def test_a_miss_in_a_project_with_entries_of_other_apis_only_names_them(ctx, client, admin):
    projects.create(ctx, {"name": "moved", "mode": "replay"})
    for text in ("one", "two"):
        save_entry(ctx, "moved", text)
    anthropic = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "one"}],
    }
    r = client.post("/p/moved/v1/messages", json=anthropic, headers=admin)
    assert r.status_code == 424
    assert (
        "project 'moved' has no entries of the Anthropic Messages API (it has 2 of Chat Completions; an "
        "entry answers only the API it was recorded through) to replay." in r.json["error"]["message"]
    ), r.json
    r = client.post("/p/moved/v1/responses", json={"model": "gpt-4o", "input": "one"}, headers=admin)
    assert "no entries of the Responses API (it has 2 of Chat Completions" in r.json["error"]["message"]


def test_replay_scope_token_never_parks(ctx, shop, client, make_token):
    r = client.post(URL, json=BODY, headers=make_token("viewer", scope="replay"))
    assert r.status_code == 424
    message = r.json["error"]["message"]
    assert "has no entries to replay" in message
    assert "this token's scope is replay, which never parks" in message and "scope record" in message
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []


def test_ignore_fields_and_normalize_shape_the_fingerprint(ctx, shop, client, admin):
    projects.update(
        ctx,
        "shop",
        {
            "ignore_fields": ["/temperature"],
            "normalize": [{"pattern": r"\d{4}-\d\d-\d\d", "replacement": "DATE"}],
        },
    )
    dated = {**BODY, "messages": [{"role": "user", "content": "today is 2026-11-29"}], "temperature": 0.2}
    record(ctx, shop, client, admin, {"content": "noted"}, body=dated)
    projects.update(ctx, "shop", {"mode": "replay"})
    other_day = {**dated, "messages": [{"role": "user", "content": "today is 2027-01-01"}], "temperature": 1}
    assert client.post(URL, json=other_day, headers=admin).json["choices"][0]["message"]["content"] == "noted"


def test_project_from_path_binding_or_header(ctx, shop, client, admin, make_token):
    record(ctx, shop, client, admin, {"content": "hi"})
    bound = make_token("viewer", scope="replay", project="shop")
    assert client.post("/v1/chat/completions", json=BODY, headers=bound).status_code == 200
    assert (
        client.post(
            "/v1/chat/completions", json=BODY, headers={**admin, "X-Semula-Project": "shop"}
        ).status_code
        == 200
    )
    r = client.post("/v1/chat/completions", json=BODY, headers=admin)
    assert r.status_code == 400 and r.json["error"]["code"] == "project_required"
    projects.create(ctx, {"name": "other"})
    assert client.post("/p/other/v1/chat/completions", json=BODY, headers=bound).status_code == 404
    models = client.get("/p/shop/v1/models", headers=admin).json
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["gpt-4o"]


def test_proxy_needs_a_token(shop, client):
    r = client.post(URL, json=BODY)
    assert r.status_code == 401 and r.json["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ("{not json", 400, None),
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        ({"model": "gpt-4o", "messages": []}, 400, "messages"),
        ([1, 2], 400, None),
    ],
)
def test_bad_requests_are_openai_errors(shop, client, admin, body, status, param):
    kwargs = {"data": body, "content_type": "application/json"} if isinstance(body, str) else {"json": body}
    r = client.post(URL, headers=admin, **kwargs)
    assert r.status_code == status and r.json["error"]["param"] == param


def test_wrong_method_and_huge_body(shop, client, admin, app):
    assert client.get(URL, headers=admin).status_code == 405
    big = {
        **BODY,
        "messages": [
            {"role": "user", "content": "x" * (app.extensions["semula"]["settings"].max_body_bytes)}
        ],
    }
    r = client.post(URL, json=big, headers=admin)
    assert r.status_code == 413 and r.json["error"]["code"] == "payload_too_large"


def test_max_misses_caps_parked_rows(ctx, shop, client, admin, app):
    futures = [
        call_async(client, admin, {**BODY, "messages": [{"role": "user", "content": f"q{i}"}]})
        for i in range(3)
    ]
    parked(ctx, shop, 3)
    r = client.post(
        URL, json={**BODY, "messages": [{"role": "user", "content": "one too many"}]}, headers=admin
    )
    assert r.status_code == 429 and r.json["error"]["code"] == "semula_max_misses"
    # An identical miss still joins its parked row rather than being refused.
    joiner = call_async(client, admin, {**BODY, "messages": [{"role": "user", "content": "q0"}]})
    parking = app.extensions["semula"]["parking"]
    wait_for(lambda: parking.held == 4, what="the joiner held beside the three")
    for row in ctx.store.all("parked_in_project", project_id=shop["id"]):
        pending.answer(ctx, row["id"], {"content": "ok"})
    assert all(f.result(10).status_code == 200 for f in [*futures, joiner])
    assert ("max_misses", 429) in outcomes(ctx, shop)


def test_cancel_fails_the_held_call_and_saves_nothing(ctx, shop, client, admin):
    future = call_async(client, admin)
    [row] = parked(ctx, shop)
    pending.cancel(ctx, row["id"])
    r = future.result(10)
    assert r.status_code == 409 and r.json["error"]["code"] == "semula_pending_cancelled"
    with pytest.raises(PendingResolved):
        pending.answer(ctx, row["id"], {"content": "too late"})


def test_answer_twice_is_409(ctx, shop, client, admin):
    future = call_async(client, admin)
    [row] = parked(ctx, shop)
    pending.answer(ctx, row["id"], {"content": "one"})
    with pytest.raises(PendingResolved):
        pending.answer(ctx, row["id"], {"content": "two"})
    assert future.result(10).json["choices"][0]["message"]["content"] == "one"


def test_response_format_json_schema_is_enforced(ctx, shop, client, admin):
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    body = {
        **BODY,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    }
    future = call_async(client, admin, body)
    [row] = parked(ctx, shop)
    with pytest.raises(InvalidAnswer) as info:
        pending.answer(ctx, row["id"], {"content": '{"n": "three"}'})
    assert info.value.param == "content.n"
    with pytest.raises(InvalidAnswer) as info:
        pending.answer(ctx, row["id"], {"content": "not json"})
    # The parser's message ends in a parenthesis; the sentence still ends before the form.
    assert "line 1 column 1 (char 0). Answer this call in this form: " in info.value.message
    pending.answer(ctx, row["id"], {"content": '{"n": 3}'})
    assert json.loads(future.result(10).json["choices"][0]["message"]["content"]) == {"n": 3}


def test_rejected_entry_does_not_replay_and_parks_again(ctx, shop, client, admin, store):
    record(ctx, shop, client, admin, {"content": "first"})
    entry = store.one("entry_by_fingerprint", project_id=shop["id"], fingerprint=fp.fingerprint(BODY))
    store.run(
        "set_review_status", id=entry["id"], workspace_id="wsp_default", review_status="rejected", now=0
    )
    second = record(ctx, shop, client, admin, {"content": "second"})
    assert second.json["choices"][0]["message"]["content"] == "second"
    row = store.one("get_entry", workspace_id="wsp_default", id=entry["id"])
    assert row["revision"] == 2 and row["review_status"] == "unreviewed"


def test_canary_secret_in_a_prompt_is_redacted_in_storage_but_still_matches(ctx, shop, client, admin, store):
    canary = "sk-proj-CANARY0123456789abcdefghijklmnopqrstuv"
    body = {**BODY, "messages": [{"role": "user", "content": f"my key is {canary}"}]}
    future = call_async(client, admin, body)
    [row] = parked(ctx, shop)
    full = pending.get(ctx, row["id"])
    assert canary not in json.dumps(full) and "[REDACTED]" in json.dumps(full)
    pending.answer(ctx, row["id"], {"content": "thanks"})
    assert future.result(10).status_code == 200
    entry = store.one("entry_by_fingerprint", project_id=shop["id"], fingerprint=fp.fingerprint(body))
    assert canary not in json.dumps(store.one("get_entry", workspace_id="wsp_default", id=entry["id"]))
    assert client.post(URL, json=body, headers=admin).json["choices"][0]["message"]["content"] == "thanks"


def test_stream_request_can_park_and_gets_sse(ctx, shop, client, admin):
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    future = call_async(client, admin, body)
    [row] = parked(ctx, shop)
    pending.answer(ctx, row["id"], {"content": "streamed"})
    r = future.result(10)
    assert r.headers["Content-Type"].startswith("text/event-stream")
    lines = [line for line in r.get_data(as_text=True).split("\n\n") if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert (
        "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "streamed"
    )
    assert chunks[-1]["usage"]["total_tokens"] > 0
    # The stream flag is transport-only: the same request without it is a hit.
    assert client.post(URL, json=BODY, headers=admin).json["choices"][0]["message"]["content"] == "streamed"


def test_metrics_count_outcomes(ctx, shop, client, admin):
    before = client.get("/metrics").get_data(as_text=True)
    record(ctx, shop, client, admin, {"content": "x"})
    client.post(URL, json=BODY, headers=admin)
    after = client.get("/metrics").get_data(as_text=True)

    def value(text, name):
        return sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith(name + " ") or line.startswith(name + "{")
        )

    assert (
        value(after, 'semula_proxy_calls_total{outcome="hit"}')
        - value(before, 'semula_proxy_calls_total{outcome="hit"}')
        == 1
    )
    assert value(after, "semula_misses_total") - value(before, "semula_misses_total") == 1


def test_answered_calls_free_their_max_misses_slots(ctx, shop, client, admin):
    """Only calls still parked count toward max_misses: once they are answered, a new miss parks."""
    futures = [
        call_async(client, admin, {**BODY, "messages": [{"role": "user", "content": f"q{i}"}]})
        for i in range(3)
    ]
    for row in parked(ctx, shop, 3):
        pending.answer(ctx, row["id"], {"content": "ok"})
    assert all(f.result(10).status_code == 200 for f in futures)
    late = call_async(client, admin, {**BODY, "messages": [{"role": "user", "content": "a fourth"}]})
    rows = wait_for(
        lambda: late.done() or ctx.store.all("parked_in_project", project_id=shop["id"]),
        what="the fourth miss parked (or answered at once)",
    )
    assert not late.done(), late.result().json  # a 429 comes back at once
    [row] = rows
    pending.answer(ctx, row["id"], {"content": "parked after all"})
    r = late.result(10)
    assert r.status_code == 200, r.json
    assert r.json["choices"][0]["message"]["content"] == "parked after all"


def test_an_answer_over_this_apps_rest_releases_its_held_call_without_a_poll(
    ctx, shop, store, settings, make_token, monkeypatch
):
    """The app hands its own Parking to the contexts it makes: an answer given through it wakes the
    held call at once, even when the poll that would otherwise find it is a minute away (and without
    the notice PostgreSQL sends, which would make the poll come at once: test_flights)."""
    from dataclasses import replace

    from semula.web import create_app

    monkeypatch.setattr(store, "on_notice", lambda channel, callback: False)
    admin = make_token("admin")
    app = create_app(replace(settings, poll_interval=60.0), store)
    client = app.test_client()
    future = call_async(client, admin)
    [row] = parked(ctx, shop)
    answered = client.post(f"/api/v1/pending/{row['id']}/answer", json={"content": "at once"}, headers=admin)
    assert answered.status_code == 200, answered.get_json()
    held = future.result(10)
    assert held.status_code == 200
    assert held.get_json()["choices"][0]["message"]["content"] == "at once"
    assert app.extensions["semula"]["parking"].polls == 0


def test_a_miss_compares_the_newest_entries_of_its_model_first_then_the_others(ctx, monkeypatch):
    from semula.service import replay

    projects.create(ctx, {"name": "many", "mode": "replay"})
    for text, model in [("a1", "gpt-4o"), ("b1", "o3"), ("a2", "gpt-4o"), ("b2", "o3"), ("b3", "o3")]:
        save_entry(ctx, "many", text, model=model)
    monkeypatch.setattr(replay, "CANDIDATES", 3)
    project = projects.get_row(ctx, "many")
    call = replay.start(ctx, project, {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    texts = [json.loads(r["request"])["messages"][0]["content"] for r in replay._candidates(ctx, call)]
    assert texts == ["a2", "a1", "b3"]


def test_the_miss_candidates_are_read_in_index_order_not_sorted(tmp_path):
    import sqlite3

    from semula.db import QUERIES, connect
    from semula.migrate import migrate

    store = connect(f"sqlite:///{tmp_path / 'x.db'}", pool_size=1)
    migrate(store)
    store.close()
    with sqlite3.connect(tmp_path / "x.db") as raw:
        for name in ("entry_candidates", "entry_candidates_other_models"):
            params = {"project_id": "p", "api": "openai.chat", "model": "m", "limit": 200}
            plan = " ".join(r[-1] for r in raw.execute("EXPLAIN QUERY PLAN " + QUERIES[name], params))
            assert "USING INDEX entries_" in plan and "TEMP B-TREE" not in plan, plan


def test_an_answer_to_a_logprobs_request_replays_with_logprobs(ctx, shop, client, admin):
    """A text answer has no logprobs of its own: a request that asks for them gets each word as a token,
    sure of itself, so code reading choices[0].logprobs.content works on replay too."""
    asked = {**BODY, "logprobs": True, "top_logprobs": 2}
    first = record(ctx, shop, client, admin, "Hello there", body=asked).json
    logprobs = first["choices"][0]["logprobs"]
    assert [t["token"] for t in logprobs["content"]] == ["Hello ", "there"]
    assert logprobs["content"][0] == {
        "token": "Hello ",
        "logprob": 0.0,
        "bytes": list(b"Hello "),
        "top_logprobs": [{"token": "Hello ", "logprob": 0.0, "bytes": list(b"Hello ")}],
    }
    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(URL, json=asked, headers=admin).json
    assert again["choices"][0]["logprobs"] == logprobs
    streamed = client.post(URL, json={**asked, "stream": True}, headers=admin).get_data(as_text=True)
    chunks = [json.loads(line[6:]) for line in streamed.splitlines() if line.startswith("data: {")]
    carried = [c["choices"][0]["logprobs"] for c in chunks if c["choices"][0]["delta"].get("content")]
    assert [lp["content"][0]["token"] for lp in carried] == ["Hello ", "there"]


def test_a_large_body_is_read_checked_and_compared_by_the_offload_small_ones_here(ctx, app, client, admin):
    """Decision 0074: the server runs a large request's pure work (parse, check, fingerprint, a miss's
    comparison with entries) through ProxyApp.offload, a native thread in a worker; a small request's
    stays on the event loop. The answers are the same either way."""
    import threading

    from semula.web import fastpath

    ran = []  # (what ran, in which thread)

    def offload(function):
        result = []

        def captured():
            try:
                result.append((True, function()))
            except Exception as exc:
                result.append((False, exc))

        worker = threading.Thread(target=captured)
        worker.start()
        worker.join()
        ran.append((getattr(function, "__name__", None) or function.func.__name__, worker.ident))
        [(done, value)] = result
        if not done:
            raise value
        return value

    projects.create(ctx, {"name": "big", "mode": "replay"})
    save_entry(ctx, "big", "hello")
    proxy = app.extensions["semula"]["proxy"]
    proxy.offload = offload
    filler = "x" * 1000
    messages = [{"role": "user", "content": f"{i} {filler}"} for i in range(300)]
    large = {"model": "gpt-4o", "messages": messages}
    assert len(json.dumps(large)) > fastpath.HEAVY_BODY
    r = client.post("/p/big/v1/chat/completions", json=large, headers=admin)
    assert r.status_code == 424, r.json
    message = r.json["error"]["message"]
    assert "first difference at messages[0].content" in message
    assert [name for name, _ in ran] == ["read", "checked", "_closest"]
    assert all(ident != threading.get_ident() for _, ident in ran)
    proxy.offload = None  # the same request without: the same answer
    assert (
        client.post("/p/big/v1/chat/completions", json=large, headers=admin).json["error"]["message"]
        == message
    )
    ran.clear()
    proxy.offload = offload
    r = client.post("/p/big/v1/chat/completions", json={**large, "messages": messages[:2]}, headers=admin)
    assert r.status_code == 424 and not ran
    wrong = [*messages, {"role": "wizard", "content": "x"}]
    bad = client.post("/p/big/v1/chat/completions", json={**large, "messages": wrong}, headers=admin)
    assert bad.status_code == 400 and [name for name, _ in ran] == ["read", "checked"]


def test_a_large_body_is_checked_fingerprinted_and_compared_by_the_helper_process(
    ctx, app, client, admin, monkeypatch
):
    """Decision 0074: with a helper (semula.heavy, another process), a large request's check,
    fingerprint and a replay miss's comparison run there, and the worker never parses the body for a
    hit or a replay miss; the answers are those without it. What the check refuses is refused the same;
    a helper gone is started again, and meanwhile the worker does the work itself."""
    import os
    import signal

    from semula import heavy
    from semula.web import fastpath, policy

    parsed_here = []
    real_read = policy.read_json
    monkeypatch.setattr(policy, "read_json", lambda raw: parsed_here.append(len(raw)) or real_read(raw))
    projects.create(ctx, {"name": "big", "mode": "replay"})
    filler = "x" * 1000
    messages = [{"role": "user", "content": f"{i} {filler}"} for i in range(300)]
    large = {"model": "gpt-4o", "messages": messages}
    assert len(json.dumps(large)) > fastpath.HEAVY_BODY
    save_entry(ctx, "big", "kept", messages=messages[:-1] + [{"role": "user", "content": "other"}])
    save_entry(ctx, "big", "hit", {"content": "the large answer"}, messages=messages[1:])
    url = "/p/big/v1/chat/completions"
    proxy = app.extensions["semula"]["proxy"]
    without = [
        client.post(url, json=body, headers=admin) for body in (large, {**large, "messages": messages[1:]})
    ]
    wrong = {**large, "messages": [*messages, {"role": "wizard", "content": "x"}]}
    refused = client.post(url, json=wrong, headers=admin)
    assert [r.status_code for r in (*without, refused)] == [424, 200, 400]
    proxy.offload, proxy.helper = (lambda function: function()), heavy.Helper()
    try:
        parsed_here.clear()
        miss = client.post(url, json=large, headers=admin)
        assert miss.status_code == 424 and miss.json == without[0].json
        assert "first difference at messages[299].content" in miss.json["error"]["message"]
        hit = client.post(url, json={**large, "messages": messages[1:]}, headers=admin)
        assert hit.status_code == 200 and hit.json["choices"] == without[1].json["choices"]
        assert client.post(url, json=wrong, headers=admin).json == refused.json
        assert parsed_here == []  # the helper parsed them all
        os.kill(proxy.helper._pid, signal.SIGKILL)
        os.waitpid(proxy.helper._pid, 0)
        assert client.post(url, json=large, headers=admin).json == without[0].json  # done here
        assert len(parsed_here) == 1
        assert client.post(url, json=large, headers=admin).json == without[0].json  # a new helper
        assert len(parsed_here) == 1
    finally:
        proxy.helper.close()
        proxy.offload = proxy.helper = None

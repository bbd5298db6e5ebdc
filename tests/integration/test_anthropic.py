"""The Anthropic Messages dialect through Flask's test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from semula.core.errors import InvalidAnswer
from semula.service import Context, bundles, entries, pending, projects, record_through, tokens
from semula.web import create_app
from tests.fake_upstream import FakeUpstream
from tests.helpers import (
    WEATHER_FUNCTION,
    answered_post,
    dashboard_text_answer,
    parked,
    typed_events,
    wait_for,
)

URL = "/p/shop/v1/messages"
MODEL = "claude-sonnet-4-6"
WEATHER = {
    "name": "get_weather",
    "description": WEATHER_FUNCTION["description"],
    "input_schema": WEATHER_FUNCTION["parameters"],
}
CANARY = "sk-ant-CANARY-integration-0123456789abcdef"


def body(text: str = "Say hi", **extra) -> dict:
    return {"model": MODEL, "max_tokens": 256, "messages": [{"role": "user", "content": text}], **extra}


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def key(make_token):
    """The token as the Anthropic SDK sends it: x-api-key."""
    return {"x-api-key": make_token("admin")["Authorization"].split()[1], "anthropic-version": "2023-06-01"}


def record(ctx, shop, client, headers, request, payload):
    """Post `request`, answer the call it parks with `payload` through the service, return the response."""
    return answered_post(ctx, shop, lambda: client.post(URL, json=request, headers=headers), payload)


def test_plain_text_recorded_then_replayed(ctx, shop, client, key):
    hinted = [{"type": "text", "text": "Be terse.", "cache_control": {"type": "ephemeral"}}]
    first = record(ctx, shop, client, key, body(system=hinted), "Hi!")
    assert first.status_code == 200, first.json
    message = first.json
    assert message["type"] == "message" and message["role"] == "assistant" and message["model"] == MODEL
    assert message["id"].startswith("msg_") and message["content"] == [{"type": "text", "text": "Hi!"}]
    assert message["stop_reason"] == "end_turn" and message["stop_sequence"] is None
    assert {"input_tokens", "output_tokens", "cache_read_input_tokens"} <= set(message["usage"])

    projects.update(ctx, "shop", {"mode": "replay"})
    # cache_control is a billing hint, not part of what is asked; the id is fresh, as the API's are.
    plain = [{"type": "text", "text": "Be terse."}]
    replied = client.post(URL, json=body(system=plain), headers=key)
    # The request's id as Anthropic's SDKs read it (message._request_id), the one semula logs.
    assert replied.headers["request-id"] == replied.headers["x-request-id"]
    again = replied.json
    assert again["content"] == message["content"] and again["id"] != message["id"]
    # The system prompt as a string is another request.
    assert client.post(URL, json=body(system="Be terse."), headers=key).status_code == 424
    # x-api-key is a token on the Anthropic routes only.
    assert client.post("/p/shop/v1/chat/completions", json=body(), headers=key).status_code == 401


def test_errors_are_in_anthropics_envelope_with_semulas_code(ctx, shop, client, key):
    record(ctx, shop, client, key, body("How are you?"), "Fine.")
    projects.update(ctx, "shop", {"mode": "replay"})
    miss = client.post(URL, json=body("How are you!"), headers=key)
    assert miss.status_code == 424
    assert miss.json["type"] == "error" and miss.json["error"]["type"] == "invalid_request_error"
    assert miss.json["error"]["message"].startswith("semula_replay_miss: No recorded entry")
    assert "messages[0].content" in miss.json["error"]["message"]

    anonymous = client.post(URL, json=body())
    assert anonymous.status_code == 401
    assert anonymous.json == {
        "type": "error",
        "error": {"type": "authentication_error", "message": anonymous.json["error"]["message"]},
    }
    wrong = client.post(URL, json=body(), headers={"x-api-key": "smt_nope"})
    assert wrong.status_code == 401 and "invalid_api_key:" in wrong.json["error"]["message"]
    bearer = {"Authorization": f"Bearer {key['x-api-key']}"}
    assert client.post(URL, json=body("How are you?"), headers=bearer).status_code == 200
    unknown = client.post("/p/nope/v1/messages", json=body(), headers=key)
    assert unknown.status_code == 404 and unknown.json["error"]["type"] == "not_found_error"


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        ({"model": MODEL, "messages": [{"role": "user", "content": "x"}]}, "max_tokens: Field required"),
        ({"max_tokens": 5, "messages": []}, "model: Field required"),
        (
            body(messages=[{"role": "user", "content": "a"}, {"role": "developer", "content": "b"}]),
            "messages.1.role: Input should be 'user', 'assistant' or 'system'",
        ),
        (
            body(messages=[{"role": "user", "content": "a"}, {"role": "system", "content": 5}]),
            "messages.1.content: Input should be a valid string or a list of content blocks",
        ),
        (body(max_tokens=-1), "max_tokens: Input should be greater than or equal to 0"),
        (
            body(
                messages=[
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "toolu_x", "content": "1"}],
                    },
                ]
            ),
            "messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_x",
        ),
        (body(tools=[{"name": "a b", "input_schema": {}}]), "tools.0.name"),
        (body(tool_choice={"type": "required"}), "tool_choice: Input tag"),
        (body(temperature=1.5), "temperature: Input should be between 0 and 1"),
        ({**body(), "anthropic-beta": ["x"]}, "anthropic-beta: Extra inputs are not permitted"),
    ],
)
def test_requests_the_api_refuses_are_400_in_its_words(ctx, shop, client, key, request_body, message):
    r = client.post(URL, json=request_body, headers=key)
    assert r.status_code == 400 and r.json["type"] == "error"
    assert r.json["error"]["type"] == "invalid_request_error" and message in r.json["error"]["message"]
    assert not ctx.store.all("parked_in_project", project_id=shop["id"])


def test_tool_use_then_tool_result_follow_up(ctx, shop, client, key):
    asked = body("Weather in Paris?", tools=[WEATHER], tool_choice={"type": "any"})
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=asked, headers=key)
        [row] = parked(ctx, shop)
        call = pending.get(ctx, row["id"])
        assert call["api"] == "anthropic.messages"
        view = call["conversation"]
        assert view["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
        assert view["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]
        assert view["tool_choice"] == "required"
        assert call["shape"]["skeleton"] == {
            "tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]
        }
        with pytest.raises(InvalidAnswer, match="requires a tool call"):
            pending.answer(ctx, row["id"], "sunny")
        with pytest.raises(InvalidAnswer) as info:
            pending.answer(
                ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {"town": 1}}]}
            )
        assert info.value.param.startswith("tool_calls[0].arguments")
        pending.answer(
            ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
        )
        message = future.result(10).json
    [use] = message["content"]
    assert use["type"] == "tool_use" and use["id"].startswith("toolu_") and use["input"] == {"city": "Paris"}
    assert message["stop_reason"] == "tool_use"

    follow = body(
        tools=[WEATHER],
        messages=[
            asked["messages"][0],
            {"role": "assistant", "content": message["content"]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": use["id"], "content": '{"temp_c": 21}'}],
            },
        ],
    )
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=follow, headers=key)
        [row] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="follow-up")
        view = pending.get(ctx, row["id"])["conversation"]
        assert [m["role"] for m in view["messages"]] == ["user", "assistant", "tool"]
        assert view["messages"][1]["tool_calls"][0]["id"] == use["id"]
        assert view["messages"][2] == {"role": "tool", "tool_call_id": use["id"], "content": '{"temp_c": 21}'}
        pending.answer(ctx, row["id"], "21 °C in Paris.")
        assert future.result(10).json["content"][0]["text"] == "21 °C in Paris."

    # Replayed: the tool call keeps its id, so the follow-up matches its recording.
    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(URL, json=asked, headers=key).json
    assert again["content"] == message["content"]
    assert client.post(URL, json=follow, headers=key).json["content"][0]["text"] == "21 °C in Paris."


def test_stream_replays_anthropic_events(ctx, shop, client, key):
    text = "Once upon a time there was a server that remembered everything it was told."
    record(ctx, shop, client, key, body("Tell me a story"), text)
    r = client.post(URL, json=body("Tell me a story", stream=True), headers=key)
    assert r.status_code == 200 and r.mimetype == "text/event-stream"
    events = typed_events(r.get_data(as_text=True))
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta") == text
    assert events[-2]["delta"]["stop_reason"] == "end_turn"


def test_betas_are_part_of_the_request_and_count_tokens_estimates(ctx, shop, client, key):
    beta = {**key, "anthropic-beta": "interleaved-thinking-2025-05-14, context-1m-2025-08-07"}
    record(ctx, shop, client, beta, body(), "with betas")
    projects.update(ctx, "shop", {"mode": "replay"})
    reordered = {**key, "anthropic-beta": "context-1m-2025-08-07,interleaved-thinking-2025-05-14"}
    assert client.post(URL, json=body(), headers=reordered).json["content"][0]["text"] == "with betas"
    plain = client.post(URL, json=body(), headers=key)
    assert plain.status_code == 424 and "anthropic-beta" in plain.json["error"]["message"]
    [entry] = entries.list_entries(ctx, "shop")["data"]
    stored = entries.get(ctx, entry["id"])["request"]
    assert stored["anthropic-beta"] == ["context-1m-2025-08-07", "interleaved-thinking-2025-05-14"]

    counted = client.post(
        "/p/shop/v1/messages/count_tokens", json={"model": MODEL, "messages": body()["messages"]}, headers=key
    )
    assert counted.status_code == 200 and counted.json["input_tokens"] > 0
    refused = client.post("/p/shop/v1/messages/count_tokens", json={"model": MODEL}, headers=key)
    assert refused.status_code == 400 and refused.json["error"]["message"] == "messages: Field required"


def test_a_pasted_message_with_thinking_and_a_bundle_round_trip(ctx, shop, client, key):
    pasted = {
        "type": "message",
        "content": [
            {"type": "thinking", "thinking": "The user greets me.", "signature": "sig-abc"},
            {"type": "text", "text": "Hello there."},
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }
    asked = body("Hello", thinking={"type": "enabled", "budget_tokens": 1024})
    message = record(ctx, shop, client, key, asked, pasted).json
    assert message["content"] == pasted["content"] and message["usage"]["output_tokens"] == 5

    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    [item] = json.loads(exported)["entries"]
    assert item["api"] == "anthropic.messages"
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 1
    streamed = client.post("/p/copy/v1/messages", json={**asked, "stream": True}, headers=key)
    events = typed_events(streamed.get_data(as_text=True))
    kinds = [e["delta"]["type"] for e in events if e["type"] == "content_block_delta"]
    assert kinds[0] == "thinking_delta" and "signature_delta" in kinds and kinds[-1] == "text_delta"
    listed = entries.list_entries(ctx, "copy")["data"]
    assert listed[0]["api"] == "anthropic.messages" and listed[0]["preview"]["answer"] == "Hello there."


def test_record_through_posts_to_anthropic_with_its_key_only(ctx, store, settings):
    fake = FakeUpstream()
    try:
        operator = replace(settings, anthropic_key=CANARY, anthropic_url=fake.url)
        octx = Context(store, operator, ctx.principal)
        projects.create(octx, {"name": "shop", "record_through": True})
        client = create_app(operator, store).test_client()
        secret = tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]
        headers = {"x-api-key": secret, "anthropic-version": "2023-06-01", "anthropic-beta": "b1"}
        first = client.post(URL, json=body("Hello"), headers=headers)
        assert first.status_code == 200, first.json
        assert first.json["content"][0]["text"] == "upstream says: Hello"
        assert first.json["model"] == MODEL + "-20250929"
        streamed = client.post(URL, json=body("Stream", stream=True), headers=headers)
        assert "event: message_stop" in streamed.get_data(as_text=True)
        [call, _] = fake.calls
        assert call["path"] == "/v1/messages" and call["headers"]["x-api-key"] == CANARY
        assert (
            call["headers"]["anthropic-version"] == "2023-06-01" and call["headers"]["anthropic-beta"] == "b1"
        )
        assert "Authorization" not in call["headers"] and secret not in json.dumps(call)
        assert "anthropic-beta" not in call["body"] and "anthropic-version" not in call["body"]
        usage = record_through.usage(octx, "shop")
        assert usage["calls"] == 2 and usage["prompt_tokens"] == 28 and usage["completion_tokens"] == 14

        projects.update(ctx, "shop", {"mode": "replay"})
        again = client.post(URL, json=body("Hello"), headers=headers).json
        assert again["content"] == first.json["content"] and again["provider_extra"] == {"kept": True}
        # The provider's stream replays as it sent it, its ping included.
        replayed = client.post(URL, json=body("Stream", stream=True), headers=headers).get_data(as_text=True)
        assert [e["type"] for e in typed_events(replayed)] == [
            e["type"] for e in typed_events(streamed.get_data(as_text=True))
        ]
        assert "event: ping" in replayed
        assert len(fake.calls) == 2
    finally:
        fake.close()


@pytest.fixture
def forwarding(ctx, store, settings):
    """A project recording through to a fake Anthropic: (its client, the fake, the token's headers)."""
    fake = FakeUpstream()
    operator = replace(settings, anthropic_key=CANARY, anthropic_url=fake.url)
    projects.create(Context(store, operator, ctx.principal), {"name": "shop", "record_through": True})
    secret = tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]
    headers = {"x-api-key": secret, "anthropic-version": "2023-06-01"}
    try:
        yield create_app(operator, store).test_client(), fake, headers
    finally:
        fake.close()


def test_a_forwarded_stream_that_ends_in_an_error_event_is_relayed_and_not_saved(ctx, forwarding):
    client, fake, headers = forwarding
    fake.mode = "stream error"
    streamed = client.post(URL, json=body("Hello", stream=True), headers=headers)
    events = typed_events(streamed.get_data(as_text=True))
    # The provider's error event, then semula's saying nothing was recorded: the API's own event, which
    # the SDK raises (it passes over an event with no name).
    assert [e["type"] for e in events][-2:] == ["error", "error"]
    assert events[-2]["error"] == {"type": "overloaded_error", "message": "Overloaded"}
    assert events[-1]["error"]["type"] == "api_error"
    assert events[-1]["error"]["message"].startswith("semula_upstream_error: ")
    assert entries.list_entries(ctx, "shop")["data"] == []
    fake.mode = "ok"  # the call is forwarded again, and this time saved
    again = client.post(URL, json=body("Hello", stream=True), headers=headers)
    assert "event: message_stop" in again.get_data(as_text=True) and len(fake.calls) == 2
    assert fake.calls[1]["peer"] == fake.calls[0]["peer"]  # on the connection the stream was read whole on
    [entry] = entries.list_entries(ctx, "shop")["data"]
    assert entry["preview"]["answer"] == "upstream says: Hello"


def test_a_forwarded_stream_the_app_left_is_not_saved(ctx, forwarding):
    client, fake, headers = forwarding
    streamed = client.post(URL, json=body("Hello", stream=True), headers=headers, buffered=False)
    first = next(iter(streamed.response))
    assert first.startswith(b"event: message_start")
    streamed.close()  # the app went away after the first event
    assert entries.list_entries(ctx, "shop")["data"] == []
    again = client.post(URL, json=body("Hello", stream=True), headers=headers)
    assert "event: message_stop" in again.get_data(as_text=True) and len(fake.calls) == 2
    assert len(entries.list_entries(ctx, "shop")["data"]) == 1


def test_the_dashboard_answers_an_anthropic_call_as_text(ctx, shop, client, key):
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=body("Greet me", system="Be kind."), headers=key)
        [row] = parked(ctx, shop)
        shown = dashboard_text_answer(client, key["x-api-key"], row["id"], "Hello, you.")
        assert "Greet me" in shown and "Be kind." in shown
        message = future.result(10).json
    assert message["content"] == [{"type": "text", "text": "Hello, you."}]
    [entry] = entries.list_entries(ctx, "shop")["data"]
    page = client.get(f"/ui/entries/{entry['id']}")
    assert page.status_code == 200 and "Hello, you." in page.get_data(as_text=True)


def claude_code_21_request() -> dict:
    """A request shaped as current Claude Code (2.1) sends one: a `system` message mid-conversation,
    two user messages in a row, adaptive thinking, context_management and output_config."""
    reminder = "<system-reminder>The date is 2026-12-06.</system-reminder>"
    return {
        "model": MODEL,
        "max_tokens": 32000,
        "system": [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "list the files here"}]},
            {"role": "system", "content": [{"type": "text", "text": "Prefer the Bash tool."}]},
            {"role": "user", "content": reminder},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "", "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}},
                ],
            },
            {"role": "system", "content": "Tool results follow."},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "9C"}],
            },
            {"role": "user", "content": [{"type": "text", "text": "and now?"}]},
        ],
        "tools": [WEATHER],
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"},
        "metadata": {"user_id": "user_abc_account__session_1"},
        "stream": False,
    }


def test_a_claude_code_21_request_records_and_replays(ctx, shop, client, key):
    headers = {**key, "anthropic-beta": "mid-conversation-system-2026-04-07,context-management-2025-06-27"}
    url = URL + "?beta=true"
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, url, json=claude_code_21_request(), headers=headers)
        [row] = parked(ctx, shop)
        view = pending.get(ctx, row["id"])["conversation"]
        # Every system message is shown to the answerer where the conversation has it.
        roles = [(m["role"], m.get("content")) for m in view["messages"]]
        assert roles[0] == ("system", "You are Claude Code.")
        assert roles[2] == ("system", [{"type": "text", "text": "Prefer the Bash tool."}])
        order = ["system", "user", "system", "user", "assistant", "system", "tool", "user"]
        assert [r for r, _ in roles] == order
        pending.answer(ctx, row["id"], "Two files.")
        first = future.result(10)
    assert first.status_code == 200, first.json
    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(url, json=claude_code_21_request(), headers=headers)
    assert again.status_code == 200 and again.json["content"] == [{"type": "text", "text": "Two files."}]
    # The mid-conversation system message is part of what is asked.
    changed = claude_code_21_request()
    changed["messages"][1]["content"][0]["text"] = "Prefer the Read tool."
    assert client.post(url, json=changed, headers=headers).status_code == 424


@pytest.mark.parametrize(
    "thinking",
    [{"type": "enabled", "budget_tokens": 1024}, {"type": "adaptive"}, {"type": "disabled"}, {"type": "new"}],
)
def test_every_thinking_type_and_a_zero_max_tokens_are_accepted(ctx, shop, client, key, thinking):
    projects.update(ctx, "shop", {"mode": "replay"})
    r = client.post(URL, json=body(thinking=thinking, max_tokens=0), headers=key)
    assert r.status_code == 424, r.json  # checked and looked up: a miss, not a 400

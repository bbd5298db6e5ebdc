"""Anthropic Messages calls answered by every surface: the CLI, MCP, the answerer daemon and
record-through to a fake Anthropic provider; each answer reaches the official anthropic SDK."""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace

import anthropic
import pytest

from semula.service import Context, projects, tokens
from semula.surfaces.client import Client
from tests.acceptance.test_anthropic_api import MODEL, WEATHER
from tests.agent_helpers import cli_claim_and_answer, mcp_claim_and_answer
from tests.answerer_helpers import answered_by_daemon
from tests.fake_upstream import FakeUpstream
from tests.helpers import finished, held_call, wait_for

pytestmark = pytest.mark.acceptance
CANARY = "sk-ant-upstream-CANARY-0123456789abcdef"


def held(client: anthropic.Anthropic, **request) -> tuple[threading.Thread, dict]:
    """A messages.create call in a thread: it parks and waits (finished() gives its message)."""
    return held_call(
        lambda: client.messages.create(model=MODEL, max_tokens=256, **request), anthropic.AnthropicError
    )


def test_cli_and_mcp_answer_anthropic_calls(ctx, start_server, tmp_path):
    projects.create(ctx, {"name": "shop"})
    server = start_server()
    app_token = tokens.create(ctx, {"role": "viewer", "scope": "record", "name": "app"})["token"]
    agent_token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "agent"})["token"]
    client = anthropic.Anthropic(
        base_url=server.url + "/p/shop", api_key=app_token, timeout=60, max_retries=0
    )
    env = {**os.environ, "SEMULA_URL": server.url, "SEMULA_TOKEN": agent_token}
    rest = Client(server.url, agent_token)

    # The CLI: claim shows the conversation view; the answer is the skeleton, filled in.
    thread, out = held(client, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER])
    wait_for(lambda: rest.list_pending()["data"], what="the call to park")
    shown = cli_claim_and_answer(
        env, {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    )
    assert "api anthropic.messages" in shown and "[user] Weather in Paris?" in shown
    assert "get_weather" in shown
    [use] = finished(thread, out).content
    assert use.type == "tool_use" and use.input == {"city": "Paris"}

    # MCP: claim_next returns the view; a text answer releases the held call.
    thread, out = held(client, system="Be brief.", messages=[{"role": "user", "content": "Say hi"}])
    wait_for(lambda: rest.list_pending()["data"], what="the second call to park")
    claimed, answered = mcp_claim_and_answer(env, str(tmp_path), "Hi!")
    assert claimed["api"] == "anthropic.messages"
    assert claimed["conversation"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi"},
    ]
    assert answered.is_error is False
    assert finished(thread, out).content[0].text == "Hi!"
    client.close()


def test_the_answerer_daemon_answers_an_anthropic_call(start_server, start_answerer, ctx, token, tmp_path):
    server, out = answered_by_daemon(start_server, start_answerer, ctx, tmp_path)
    client = anthropic.Anthropic(base_url=server.url + "/p/shop", api_key=token, timeout=60, max_retries=0)
    with client.messages.stream(
        model=MODEL,
        max_tokens=256,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER],
    ) as stream:
        message = stream.get_final_message()
    [use] = message.content
    assert use.type == "tool_use" and use.input == {"city": "Paris"} and message.stop_reason == "tool_use"
    [doc_path] = [p for p in out.iterdir() if p.name.startswith("stdin-")]
    doc = json.loads(doc_path.read_text())
    assert doc["api"] == "anthropic.messages"
    assert doc["request"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert doc["request"]["tools"][0]["function"]["name"] == "get_weather"
    client.close()


def test_record_through_anthropic_keeps_what_the_provider_sent(start_server, ctx, token):
    fake = FakeUpstream()
    try:
        server = start_server(SEMULA_ANTHROPIC_KEY=CANARY, SEMULA_ANTHROPIC_URL=fake.url)
        operator = Context(ctx.store, replace(ctx.settings, anthropic_key=CANARY), ctx.principal)
        projects.create(operator, {"name": "shop", "record_through": True})
        client = anthropic.Anthropic(
            base_url=server.url + "/p/shop", api_key=token, timeout=60, max_retries=0
        )

        first = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
        )
        assert first.content[0].text == "upstream says: Hello" and first.model == MODEL + "-20250929"
        with client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Stream"}]
        ) as stream:
            deltas = list(stream.text_stream)
            final = stream.get_final_message()
        assert deltas == ["upstream", " says: Stream"] and final.content[0].text == "upstream says: Stream"
        assert [c["path"] for c in fake.calls] == ["/v1/messages", "/v1/messages"]
        sent = fake.calls[0]["headers"]
        # The server's key, and the version the app's SDK sent; nothing else of the app's.
        assert sent["x-api-key"] == CANARY
        assert sent["anthropic-version"] == client.default_headers["anthropic-version"]
        assert "Authorization" not in sent and token not in json.dumps(fake.calls)
        usage = Client(server.url, token).request("GET", "/api/v1/projects/shop/upstream")
        assert usage["calls"] == 2 and usage["prompt_tokens"] == 28 and usage["completion_tokens"] == 14

        # Replay: no provider call, the provider's own message (its unknown fields too) back.
        projects.update(ctx, "shop", {"mode": "replay"})
        again = client.messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Hello"}]
        )
        assert again.content[0].text == first.content[0].text and again.model_extra["provider_extra"] == {
            "kept": True
        }
        with client.messages.stream(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "Stream"}]
        ) as stream:
            assert list(stream.text_stream) == deltas
        assert len(fake.calls) == 2
        server.stop()
        assert CANARY not in server.log()
    finally:
        fake.close()

"""Responses API calls answered by every surface: the CLI, MCP, the answerer daemon and record-through.

Each surface sees the same conversation view as for Chat Completions (docs/decisions/0030-dialects.md),
and each answer reaches the official openai SDK as a Responses `response`, then replays.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import replace

import openai
import pytest

from semula.service import Context, projects, tokens
from semula.surfaces.client import Client
from tests.agent_helpers import cli_claim_and_answer, mcp_claim_and_answer
from tests.answerer_helpers import answered_by_daemon
from tests.fake_upstream import FakeUpstream
from tests.helpers import RESPONSES_WEATHER_TOOL, finished, held_call, wait_for

pytestmark = pytest.mark.acceptance
CANARY = "sk-upstream-CANARY-responses-0123456789abcdef"


def held(client: openai.OpenAI, **request) -> tuple[threading.Thread, dict]:
    """A responses.create call in a thread: it parks and waits (finished() gives its response)."""
    return held_call(lambda: client.responses.create(**request), openai.OpenAIError)


@pytest.fixture
def agents(ctx, start_server):
    projects.create(ctx, {"name": "shop"})
    server = start_server()
    app_token = tokens.create(ctx, {"role": "viewer", "scope": "record", "name": "app"})["token"]
    agent_token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "agent"})["token"]
    client = openai.OpenAI(base_url=server.url + "/p/shop/v1", api_key=app_token, timeout=60, max_retries=0)
    env = {**os.environ, "SEMULA_URL": server.url, "SEMULA_TOKEN": agent_token}
    yield {"server": server, "client": client, "env": env, "rest": Client(server.url, agent_token)}
    client.close()


def test_cli_and_mcp_answer_responses_calls(agents, ctx, tmp_path):
    client, env = agents["client"], agents["env"]

    # The CLI: claim shows the conversation view; the answer is the skeleton, filled in.
    thread, out = held(client, model="gpt-4.1", input="Weather in Paris?", tools=[RESPONSES_WEATHER_TOOL])
    wait_for(lambda: agents["rest"].list_pending()["data"], what="the call to park")
    shown = cli_claim_and_answer(
        env, {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
    )
    assert "api openai.responses" in shown and "[user] Weather in Paris?" in shown
    assert "get_weather" in shown
    [item] = finished(thread, out).output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "Paris"}

    # MCP: claim_next returns the view; a text answer releases the held call.
    thread, out = held(client, model="gpt-4.1-mini", instructions="Be brief.", input="Say hi")
    wait_for(lambda: agents["rest"].list_pending()["data"], what="the second call to park")
    claimed, answered = mcp_claim_and_answer(env, str(tmp_path), "Hi!")
    assert claimed["api"] == "openai.responses"
    assert claimed["conversation"]["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say hi"},
    ]
    assert answered.is_error is False
    assert finished(thread, out).output_text == "Hi!"


def test_the_answerer_daemon_answers_a_responses_call(start_server, start_answerer, ctx, token, tmp_path):
    server, out = answered_by_daemon(start_server, start_answerer, ctx, tmp_path)
    client = openai.OpenAI(base_url=server.url + "/p/shop/v1", api_key=token, timeout=60, max_retries=0)
    response = client.responses.create(
        model="gpt-4.1", input="Weather in Paris?", tools=[RESPONSES_WEATHER_TOOL]
    )
    [item] = response.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"city": "Paris"}
    [doc_path] = [p for p in out.iterdir() if p.name.startswith("stdin-")]
    doc = json.loads(doc_path.read_text())
    assert doc["api"] == "openai.responses"
    assert doc["request"]["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
    assert doc["request"]["tools"][0]["function"]["name"] == "get_weather"


def test_record_through_responses_keeps_what_the_provider_sent(start_server, ctx, token):
    fake = FakeUpstream()
    try:
        server = start_server(SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
        operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
        projects.create(operator, {"name": "shop", "record_through": True})
        client = openai.OpenAI(base_url=server.url + "/p/shop/v1", api_key=token, timeout=60, max_retries=0)

        first = client.responses.create(model="gpt-4.1", input="Hello")
        assert first.output_text == "upstream says: Hello" and first.id == "resp_upstream1"
        assert first.model == "gpt-4.1-2025-04-14"
        with client.responses.stream(
            model="gpt-4.1", input=[{"role": "user", "content": "Stream"}]
        ) as stream:
            deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
            final = stream.get_final_response()
        assert deltas == ["upstream", " says: Stream"] and final.output_text == "upstream says: Stream"
        assert [c["path"] for c in fake.calls] == ["/v1/responses", "/v1/responses"]
        assert fake.calls[0]["headers"]["Authorization"] == f"Bearer {CANARY}"
        usage = Client(server.url, token).request("GET", "/api/v1/projects/shop/upstream")
        assert usage["calls"] == 2 and usage["prompt_tokens"] == 24 and usage["completion_tokens"] == 12

        # Replay: no provider call, the provider's own response (its id and unknown fields) back.
        projects.update(ctx, "shop", {"mode": "replay"})
        again = client.responses.create(model="gpt-4.1", input="Hello")
        assert again.id == first.id and again.output_text == first.output_text
        assert again.model_extra.get("provider_extra") == {"kept": True}
        with client.responses.stream(
            model="gpt-4.1", input=[{"role": "user", "content": "Stream"}]
        ) as stream:
            replayed = [e.delta for e in stream if e.type == "response.output_text.delta"]
        assert replayed == deltas and len(fake.calls) == 2
        server.stop()
        assert CANARY not in server.log()
    finally:
        fake.close()

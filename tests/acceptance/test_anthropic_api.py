"""The Anthropic Messages API against real gunicorn + gevent, driven by the official anthropic SDK."""

from __future__ import annotations

import io
import json

import anthropic
import pytest

from semula.service import bundles, entries, projects
from tests.acceptance import shared
from tests.acceptance.test_responses_api import recorded
from tests.helpers import WEATHER_FUNCTION

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

MODEL = "claude-sonnet-4-6"
WEATHER = {
    "name": "get_weather",
    "description": WEATHER_FUNCTION["description"],
    "input_schema": WEATHER_FUNCTION["parameters"],
}
PARIS = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}


def test_messages_record_then_replay_with_the_sdk(server, ctx, shop, anthropic_client):
    client = anthropic_client(server)
    seen: set[str] = set()

    def plain():
        return client.messages.create(
            model=MODEL,
            max_tokens=256,
            system="Be terse.",
            messages=[{"role": "user", "content": "Say hello"}],
        )

    asked = [{"role": "user", "content": "What is the weather in Paris?"}]

    def tool_call():
        return client.messages.create(model=MODEL, max_tokens=256, messages=asked, tools=[WEATHER])

    def forced():
        return client.messages.create(
            model=MODEL,
            max_tokens=256,
            messages=[{"role": "user", "content": "Paris weather, use the tool"}],
            tools=[WEATHER],
            tool_choice={"type": "any"},
        )

    def streamed():
        with client.messages.stream(
            model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Count to five"}]
        ) as stream:
            return "".join(stream.text_stream), stream.get_final_message()

    first = recorded(ctx, shop, "Hello!", seen, plain)
    assert (
        first.content[0].text == "Hello!" and first.id.startswith("msg_") and first.stop_reason == "end_turn"
    )

    call = recorded(ctx, shop, PARIS, seen, tool_call)
    [use] = call.content
    assert use.type == "tool_use" and use.id.startswith("toolu_") and use.input == {"city": "Paris"}
    assert call.stop_reason == "tool_use"

    follow_messages = [
        *asked,
        {"role": "assistant", "content": [block.to_dict() for block in call.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": use.id, "content": '{"temp_c": 21}'}],
        },
    ]

    def follow_up():
        return client.messages.create(model=MODEL, max_tokens=256, messages=follow_messages, tools=[WEATHER])

    answer = recorded(ctx, shop, "It is 21 °C in Paris.", seen, follow_up)
    assert answer.content[0].text == "It is 21 °C in Paris."

    any_call = recorded(ctx, shop, PARIS, seen, forced)
    assert any_call.content[0].name == "get_weather"

    text, final = recorded(ctx, shop, "one two three four five", seen, streamed)
    assert text == "one two three four five" and final.content[0].text == text
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0

    counted = client.messages.count_tokens(model=MODEL, messages=follow_messages, tools=[WEATHER])
    assert counted.input_tokens > 0

    # Replay: the same calls, answered from the recordings; the tool call keeps its id.
    projects.update(ctx, "shop", {"mode": "replay"})
    assert plain().content[0].text == "Hello!"
    assert tool_call().content[0].id == use.id
    assert follow_up().content[0].text == "It is 21 °C in Paris."
    assert forced().content[0].input == {"city": "Paris"}
    text, final = streamed()
    assert text == "one two three four five" and final.id.startswith("msg_")

    # Exported, imported into a fresh project, replayed there.
    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 5
    copy = anthropic_client(server, "copy")
    assert (
        copy.messages.create(model=MODEL, max_tokens=256, messages=follow_messages, tools=[WEATHER])
        .content[0]
        .text
        == "It is 21 °C in Paris."
    )
    with copy.messages.stream(
        model=MODEL, max_tokens=256, messages=[{"role": "user", "content": "Count to five"}]
    ) as stream:
        assert stream.get_final_message().content[0].text == "one two three four five"


def test_a_miss_is_the_sdks_error_with_semulas_explanation(server, ctx, shop, anthropic_client):
    client = anthropic_client(server)
    recorded(
        ctx,
        shop,
        "Fine.",
        set(),
        lambda: client.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": [{"type": "text", "text": "How are you?"}]}],
        ),
    )
    projects.update(ctx, "shop", {"mode": "replay"})
    with pytest.raises(anthropic.APIStatusError) as info:
        client.messages.create(
            model=MODEL,
            max_tokens=64,
            messages=[{"role": "user", "content": [{"type": "text", "text": "How are you!"}]}],
        )
    assert info.value.status_code == 424
    assert info.value.body["error"]["message"].startswith("semula_replay_miss: ")
    assert "messages[0].content[0].text" in info.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as bad:
        client.messages.create(model=MODEL, max_tokens=-1, messages=[{"role": "user", "content": "x"}])
    assert "max_tokens: Input should be greater than or equal to 0" in bad.value.message
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_client(server, api_key="smt_wrong").messages.create(
            model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "x"}]
        )


def claude_code_turns() -> tuple[list, list, list]:
    """A Claude Code-like conversation: a long system prompt as blocks with cache_control, 24 tools,
    and tool_use / tool_result turns."""
    system = [
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {
            "type": "text",
            "text": "You are an interactive CLI tool that helps users with software engineering tasks. " * 60,
            "cache_control": {"type": "ephemeral"},
        },
    ]
    tools = [
        {
            "name": f"Tool{n}",
            "description": f"Tool number {n}. " * 10,
            "input_schema": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
                "additionalProperties": False,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        }
        for n in range(22)
    ]
    tools += [
        {
            "name": "Read",
            "description": "Reads a file from the local filesystem.",
            "input_schema": {
                "type": "object",
                "properties": {"file_path": {"type": "string"}},
                "required": ["file_path"],
                "additionalProperties": False,
            },
        },
        {
            "name": "Bash",
            "description": "Executes a bash command.",
            "input_schema": {
                "type": "object",
                "properties": {"command": {"type": "string"}, "timeout": {"type": "number"}},
                "required": ["command"],
                "additionalProperties": False,
            },
            "cache_control": {"type": "ephemeral"},
        },
    ]
    first = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>Context.</system-reminder>"},
                {"type": "text", "text": "What does setup.cfg say?", "cache_control": {"type": "ephemeral"}},
            ],
        }
    ]
    return system, tools, first


def test_a_claude_code_conversation_records_and_replays(server, ctx, shop, anthropic_client):
    client = anthropic_client(server)
    system, tools, messages = claude_code_turns()
    betas = ["claude-code-20250219", "interleaved-thinking-2025-05-14"]
    seen: set[str] = set()

    def turn(history):
        return client.messages.create(
            model=MODEL,
            max_tokens=32000,
            system=system,
            messages=history,
            tools=tools,
            metadata={"user_id": "user_abc_session_1"},
            extra_headers={"anthropic-beta": ",".join(betas)},
        )

    script = [
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": "/repo/setup.cfg"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "grep -c = setup.cfg"}}]},
        "setup.cfg names the package semula and lists its dependencies.",
    ]
    results = ["[metadata]\nname = semula", "12"]
    history = list(messages)
    replies = []
    for number, payload in enumerate(script):
        reply = recorded(ctx, shop, payload, seen, lambda history=list(history): turn(history))
        replies.append(reply)
        history.append({"role": "assistant", "content": [block.to_dict() for block in reply.content]})
        if number < len(results):
            use = reply.content[-1]
            history.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": use.id, "content": results[number]},
                        {"type": "text", "text": "<system-reminder>ok</system-reminder>"},
                    ],
                }
            )
    assert replies[-1].content[0].text.startswith("setup.cfg names")
    assert len(entries.list_entries(ctx, "shop")["data"]) == 3

    # Replayed turn by turn: every tool_result quotes the recorded id and matches; cache_control
    # placement is not part of what is asked.
    projects.update(ctx, "shop", {"mode": "replay"})
    history = list(messages)
    for number, recorded_reply in enumerate(replies):
        again = turn(list(history))
        assert [b.to_dict() for b in again.content] == [b.to_dict() for b in recorded_reply.content]
        history.append({"role": "assistant", "content": [block.to_dict() for block in again.content]})
        if number < len(results):
            history.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": again.content[-1].id,
                            "content": results[number],
                        },
                        {"type": "text", "text": "<system-reminder>ok</system-reminder>"},
                    ],
                }
            )
    moved = json.loads(json.dumps(history))
    moved[0]["content"][1].pop("cache_control")
    moved[0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert turn(moved[:1]).content[0].name == "Read"

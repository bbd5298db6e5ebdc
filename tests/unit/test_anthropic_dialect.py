"""The Anthropic Messages dialect's pure parts: ids, errors, streams, the view (no database)."""

from __future__ import annotations

import pytest

from semula import dialects
from semula.core import errors
from semula.dialects.anthropic_messages import assemble, tool_use_id

ANTHROPIC = dialects.get(dialects.ANTHROPIC)
REQUEST = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def test_tool_use_ids_are_deterministic_and_keep_anthropics_own():
    assert tool_use_id("call_abc") == tool_use_id("call_abc") != tool_use_id("call_abd")
    assert tool_use_id("call_abc").startswith("toolu_01")
    assert tool_use_id("toolu_01XYZ") == "toolu_01XYZ"


@pytest.mark.parametrize(
    ("exc", "kind", "message"),
    [
        (
            errors.ReplayMiss("No recorded entry."),
            "invalid_request_error",
            "semula_replay_miss: No recorded entry.",
        ),
        (errors.RecordTimeout("late"), "timeout_error", "semula_record_timeout: late"),
        (errors.UpstreamBudget("spent"), "rate_limit_error", "semula_upstream_budget: spent"),
        (errors.Unauthorized(), "authentication_error", None),
        (errors.PayloadTooLarge(), "request_too_large", None),
        (errors.ServiceUnavailable("busy"), "overloaded_error", "service_unavailable: busy"),
        (errors.BadRequest("x: y", code="invalid_request_error"), "invalid_request_error", "x: y"),
    ],
)
def test_errors_are_anthropics_envelope_with_semulas_code(exc, kind, message):
    body = ANTHROPIC.error_body(exc)
    assert set(body) == {"type", "error"} and body["type"] == "error"
    assert set(body["error"]) == {"type", "message"} and body["error"]["type"] == kind
    assert body["error"]["message"] == (message or f"{exc.code}: {exc.message}")


def test_a_hand_written_stream_assembles_as_the_sdk_does():
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "role": "assistant",
                "model": "claude-x",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 9, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": "", "signature": ""},
        },
        {"type": "ping"},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s1"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"a"'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ": 1}"},
        },
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use", "stop_sequence": None},
            "usage": {"output_tokens": 12},
        },
        {"type": "message_stop"},
    ]
    message = assemble(events)
    assert message["content"] == [
        {"type": "thinking", "thinking": "Hmm", "signature": "s1"},
        {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"a": 1}},
    ]
    assert message["stop_reason"] == "tool_use" and message["usage"] == {
        "input_tokens": 9,
        "output_tokens": 12,
    }
    # And back: the events made from the message add up to it again.
    req = ANTHROPIC.check({**REQUEST, "stream": True})
    _, again = ANTHROPIC.render(req, message, None, False, 0.0)
    assert assemble(again)["content"] == message["content"]


def test_the_view_of_images_tool_results_and_thinking():
    request = {
        **REQUEST,
        "system": [{"type": "text", "text": "You see.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
                    },
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    {"type": "text", "text": "What is it?"},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "...", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_9", "name": "look", "input": {"x": 1}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_9",
                        "is_error": True,
                        "content": [{"type": "text", "text": "no"}],
                    },
                ],
            },
        ],
        "tools": [
            {"name": "look", "input_schema": {"type": "object"}},
            {"type": "web_search_20250305", "name": "web_search"},
        ],
        "tool_choice": {"type": "tool", "name": "look", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 2048},
    }
    ANTHROPIC.check(request)
    view = ANTHROPIC.conversation(request)
    assert view["messages"] == [
        {"role": "system", "content": "You see."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "[image image/png, 3 bytes]"},
                {"type": "text", "text": "[image https://example.com/a.png]"},
                {"type": "text", "text": "What is it?"},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "toolu_9", "type": "function", "function": {"name": "look", "arguments": '{"x":1}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_9", "content": "[error] no"},
    ]
    assert [t["function"]["name"] for t in view["tools"]] == ["look"]
    assert view["tool_choice"] == {"type": "function", "function": {"name": "look"}}
    assert view["parallel_tool_calls"] is False
    assert "web_search_20250305" in view["notes"][0] and "thinking" in view["notes"][1]


@pytest.mark.parametrize(
    ("field", "lowest"),
    [("max_tokens", 0), ("top_k", 0)],  # max_tokens 0 warms the prompt cache (decision 0059)
)
def test_integer_fields_are_refused_below_their_lowest_value_and_taken_at_it(field, lowest):
    ANTHROPIC.check({**REQUEST, field: lowest})
    with pytest.raises(errors.BadRequest) as refused:
        ANTHROPIC.check({**REQUEST, field: lowest - 1})
    assert refused.value.message == f"{field}: Input should be greater than or equal to {lowest}"
    assert refused.value.param == field


def test_a_stream_that_carries_an_error_event_is_not_an_answer():
    """The provider's `error` event mid-stream (overloaded, say): what came before it adds up to a
    message, but it is not one to save."""
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "content": [], "usage": {}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hal"}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    assert assemble(events)["content"] == [{"type": "text", "text": "Hal"}]
    with pytest.raises(ValueError, match="error event"):
        ANTHROPIC.from_stream(events)
    with pytest.raises(ValueError, match="message_stop"):  # nor is the same stream cut short there
        ANTHROPIC.from_stream(events[:3])
    ended = [*events[:3], {"type": "content_block_stop", "index": 0}, {"type": "message_stop"}]
    message, saved = ANTHROPIC.from_stream(ended)  # the same stream ended as the API ends one is one
    assert message["content"] == [{"type": "text", "text": "Hal"}] and len(saved) == 5


def test_the_sdk_raises_the_error_event_semula_ends_a_broken_stream_with():
    """The Anthropic SDK passes over an event with no name: semula's must be the API's `event: error`."""
    import anthropic

    try:
        import httpx2 as httpx  # the HTTP client of the SDK installed here
    except ImportError:  # an SDK that still uses httpx
        import httpx

    broken = errors.UpstreamError("The upstream provider's stream broke (ValueError); nothing was recorded.")
    req = ANTHROPIC.check({**REQUEST, "stream": True})
    _, started = ANTHROPIC.render(req, {"content": [{"type": "text", "text": "Hal"}]}, None, False, 0.0)
    sent = b"".join(ANTHROPIC.sse(started[:3])) + ANTHROPIC.stream_error(broken, req)

    def semula(request: httpx.Request) -> httpx.Response:  # a stream that broke after its first events
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=sent)

    client = anthropic.Anthropic(
        api_key="x",
        base_url="http://semula.test",
        http_client=httpx.Client(transport=httpx.MockTransport(semula)),
    )
    with pytest.raises(anthropic.APIStatusError, match="semula_upstream_error"):
        for _ in client.messages.create(**REQUEST, stream=True):
            pass


def test_more_messages_than_the_api_takes_are_refused_before_they_are_checked(monkeypatch):
    from semula.dialects import anthropic_checks

    monkeypatch.setattr(anthropic_checks, "MAX_MESSAGES", 3)  # the API's 100,000, made small
    turns = [{"role": role, "content": "hi"} for role in ("user", "assistant", "user", "assistant")]
    ANTHROPIC.check({"model": "m", "max_tokens": 5, "messages": turns[:3]})
    monkeypatch.setattr(anthropic_checks, "_check_message", lambda *a: pytest.fail("a message checked"))
    with pytest.raises(errors.BadRequest) as info:
        ANTHROPIC.check({"model": "m", "max_tokens": 5, "messages": turns})
    assert info.value.param == "messages" and "at most 3" in info.value.message

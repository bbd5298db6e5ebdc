"""A kept hit's answer is held as the bytes it was sent as, and each reply replaces only the members its
dialect stamps afresh (Dialect.kept_json / restamp_json): the same JSON restamp() would give."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from semula import dialects
from semula.dialects import ANTHROPIC, CHAT, EMBEDDINGS, RESPONSES

REQUESTS = {
    CHAT: {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    RESPONSES: {"model": "gpt-4o", "input": "hi"},
    ANTHROPIC: {
        "model": "claude-sonnet-4-5",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    },
    EMBEDDINGS: {"model": "text-embedding-3-small", "input": "hi"},
}
# A recorded answer per API, with a nested `"id"` and `"created"` a replacement must leave alone.
RESPONSES_RECORDED = {
    CHAT: {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": 'the "id":"x", and "created":1,',
                    "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    },
    RESPONSES: {
        "id": "resp_1",
        "object": "response",
        "created_at": 1_700_000_000,
        "status": "completed",
        "model": "gpt-4o",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "hi", "annotations": []}],
            }
        ],
    },
    ANTHROPIC: {
        "id": "msg_01",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {"id": "msg_01x"}}],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
    EMBEDDINGS: {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": [0.5, -0.25]}],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 1, "total_tokens": 1},
    },
}


def rendered(api: str) -> tuple[dialects.Dialect, dialects.Request, dict]:
    dialect = dialects.get(api)
    req = dialect.check(REQUESTS[api])
    body, events = dialect.render(req, RESPONSES_RECORDED[api], None, False, 1_800_000_000.0)
    assert events is None and body is not None
    return dialect, req, body


@pytest.mark.parametrize("api", [CHAT, RESPONSES, ANTHROPIC, EMBEDDINGS])
def test_a_kept_body_replies_as_restamp_would_changing_only_the_stamped_members(api: str) -> None:
    dialect, req, body = rendered(api)
    made = dialect.kept_json(body)
    assert made is not None
    data, stamps = made
    assert json.loads(data) == body and set(stamps) == set(dialect.stamped) & set(body)
    replies = [json.loads(dialect.restamp_json(data, stamps, req, 1_900_000_000.0 + n)) for n in range(3)]
    expected = dialect.restamp(body, req, 1_900_000_000.0)
    for reply in replies:
        assert {k: v for k, v in reply.items() if k not in dialect.stamped} == {
            k: v for k, v in expected.items() if k not in dialect.stamped
        }
        assert set(reply) == set(expected) and list(reply) == list(body)  # no member added, none moved
    for name in dialect.stamped:
        values = [reply[name] for reply in replies]
        if name in ("created", "created_at"):
            assert values == [1_900_000_000 + n for n in range(3)]
        else:
            assert len(set(values)) == 3 and body[name] not in values  # a fresh id for every reply
    if api == CHAT:  # the nested id and the look-alikes inside a string are the recorded ones
        message = replies[0]["choices"][0]["message"]
        assert message["content"] == 'the "id":"x", and "created":1,'
        assert message["tool_calls"][0]["id"] == "call_1"


def test_with_restamp_recorded_a_kept_body_replies_with_its_recorded_stamps() -> None:
    dialect, req, body = rendered(CHAT)
    req = replace(req, fresh=False)
    data, stamps = dialect.kept_json(body) or (b"", {})
    assert dialect.restamp_json(data, stamps, req, 1_900_000_000.0) == data


def test_a_body_whose_stamp_appears_twice_is_not_kept_as_bytes() -> None:
    dialect, _req, body = rendered(ANTHROPIC)
    body["content"][0]["input"] = {"id": body["id"]}  # the same member nested: a replacement could hit it
    assert dialect.kept_json(body) is None


@pytest.mark.parametrize("api", [CHAT, RESPONSES, ANTHROPIC, EMBEDDINGS])
@pytest.mark.parametrize("own_stamps", [False, True])
def test_with_restamp_recorded_a_body_is_kept_only_where_its_replies_stamp_as_renders_do(
    api: str, own_stamps: bool
) -> None:
    """A kept body's replies repeat the stamps restamp() keeps; where a render gives fresh ones each
    time (with restamp `recorded`, an answer recorded without stamps of its own), it is not kept."""
    dialect = dialects.get(api)
    req = replace(dialect.check(REQUESTS[api]), fresh=False)
    recorded = {k: v for k, v in RESPONSES_RECORDED[api].items() if own_stamps or k not in dialect.stamped}
    if api == CHAT and own_stamps:
        recorded.update(id="chatcmpl-recorded", created=1_700_000_000)
    renders = [dialect.render(req, recorded, None, False, 1_800_000_000.0 + n)[0] for n in range(2)]
    data, stamps = dialect.kept_json(renders[0]) or (b"", {})
    replies = [json.loads(dialect.restamp_json(data, stamps, req, 1_800_000_000.0 + n)) for n in range(2)]
    as_renders = all(
        (renders[0].get(name) == renders[1].get(name)) == (replies[0].get(name) == replies[1].get(name))
        for name in dialect.stamped
    )
    assert dialect.keeps_json(req, recorded) == as_renders
    assert as_renders == (own_stamps or not dialect.stamped)
    if own_stamps:  # every reply is the recorded one, stamps and all
        assert renders[0] == renders[1] == replies[0] == replies[1]

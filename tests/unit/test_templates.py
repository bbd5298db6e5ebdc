from __future__ import annotations

import copy
import json
import re
import uuid

import pytest

from semula.core.templates import expand, expand_chunks, expand_completion

NOW = 1704164645.9  # 2024-01-02T03:04:05.9Z


def completion(content, arguments=None):
    message = {"role": "assistant", "content": content}
    if arguments is not None:
        message["tool_calls"] = [
            {
                "id": "call_{{uuid}}",
                "type": "function",
                "function": {"name": "f_{{now}}", "arguments": arguments},
            }
        ]
    return {
        "object": "chat.completion",
        "model": "{{request.model}}",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def test_now_is_an_iso_utc_timestamp_shared_by_the_whole_value():
    assert expand(["at {{now}}", {"k": "{{now}}!"}], "m", now=NOW) == [
        "at 2024-01-02T03:04:05Z",
        {"k": "2024-01-02T03:04:05Z!"},
    ]


def test_now_defaults_to_the_current_time():
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", expand("{{now}}", "m"))


def test_each_uuid_is_fresh():
    first, second = expand("{{uuid}} {{uuid}}", "m").split()
    assert uuid.UUID(first).version == 4
    assert first != second


def test_request_model():
    assert expand("I am {{request.model}}.", "gpt-4o-mini") == "I am gpt-4o-mini."


@pytest.mark.parametrize(
    "text",
    [
        "{{ now }}",
        "{{env.HOME}}",
        "{{7*7}}",
        "{{request.messages}}",
        "{{config.SECRET_KEY}}",
        "{now}",
        "{{NOW}}",
        "{{uuid()}}",
    ],
)
def test_nothing_else_expands(text):
    assert expand(text, "m", now=NOW) == text


def test_text_without_templates_is_returned_as_is():
    text = "plain text " * 100
    assert expand(text, "m") is text
    assert expand({"n": 1, "b": None}, "m") == {"n": 1, "b": None}


def test_expand_completion_expands_content_and_arguments_only():
    stored = completion("model {{request.model}} at {{now}}", '{"when": "{{now}}", "id": "{{uuid}}"}')
    before = copy.deepcopy(stored)
    expanded = expand_completion(stored, "gpt-4o", now=NOW)
    assert stored == before
    message = expanded["choices"][0]["message"]
    assert message["content"] == "model gpt-4o at 2024-01-02T03:04:05Z"
    arguments = json.loads(message["tool_calls"][0]["function"]["arguments"])
    assert arguments["when"] == "2024-01-02T03:04:05Z"
    assert uuid.UUID(arguments["id"])
    # Ids, names and other fields are not content: they stay as stored.
    assert message["tool_calls"][0]["id"] == "call_{{uuid}}"
    assert message["tool_calls"][0]["function"]["name"] == "f_{{now}}"
    assert expanded["model"] == "{{request.model}}"


def test_a_model_name_in_arguments_keeps_them_valid_json():
    expanded = expand_completion(completion(None, '{"m": "{{request.model}}"}'), 'odd"model\\x', now=NOW)
    arguments = expanded["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"m": 'odd"model\\x'}


def test_a_completion_without_templates_is_unchanged():
    stored = completion("hello", '{"a": 1}')
    assert expand_completion(stored, "m") == stored


def test_expand_chunks_expands_deltas_without_touching_the_stored_chunks():
    chunks = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "at {{now}}"}}]},
        {
            "object": "chat.completion.chunk",
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{{uuid}}"}}]}}
            ],
        },
        {"object": "chat.completion.chunk", "choices": [], "usage": {"total_tokens": 1}},
    ]
    before = copy.deepcopy(chunks)
    expanded = expand_chunks(chunks, "m", now=NOW)
    assert chunks == before
    assert expanded[0]["choices"][0]["delta"]["content"] == "at 2024-01-02T03:04:05Z"
    assert uuid.UUID(expanded[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"])
    assert expanded[2] == chunks[2]

"""What semula makes from an answer passes OpenAI's own OpenAPI description of the response.

The schemas are copied unchanged from the openai/openai-openapi repository (tests/data, MIT licence).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from semula import dialects
from semula.core import stream


def _nullable(node):
    """The description marks optional nulls OpenAPI 3.0's way (`nullable: true`); JSON Schema spells it
    as a null alternative."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _nullable(value) for key, value in node.items()}
    if node.pop("nullable", False) is True:
        return {"anyOf": [node, {"type": "null"}]}
    return node


DOCUMENT = _nullable(
    json.loads((Path(__file__).resolve().parents[1] / "data" / "openai-openapi-subset.json").read_text())
)
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "tools": [TOOL]}
ANSWERS = [
    "Hello!",
    {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
    {"content": "Checking.", "tool_calls": [{"name": "get_weather", "arguments": '{"city": "Oslo"}'}]},
    {"refusal": "I cannot help with that."},
    {"content": "cut", "finish_reason": "length", "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
]


def errors(instance, schema_name: str) -> list[str]:
    validator = Draft202012Validator({**DOCUMENT, "$ref": f"#/components/schemas/{schema_name}"})
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(instance)]


def rendered(dialect_name: str, request: dict, answer, *, stream_on: bool = False):
    dialect = dialects.get(dialect_name)
    response, chunks = dialect.accept(answer, request, dialect.conversation(request))
    req = dialect.check({**request, "stream": stream_on})
    return dialect.render(req, response, chunks, False, 1764440000.0)


@pytest.mark.parametrize("answer", ANSWERS)
def test_a_completion_made_from_an_answer_is_an_official_chat_completion(answer):
    body, _ = rendered("openai.chat", CHAT, answer)
    assert errors(body, "CreateChatCompletionResponse") == []
    assert body["choices"][0]["message"]["refusal"] == (
        answer.get("refusal") if isinstance(answer, dict) else None
    )


@pytest.mark.parametrize("answer", ANSWERS)
def test_stream_chunks_made_from_an_answer_are_official_chunks(answer):
    _, chunks = rendered("openai.chat", CHAT, answer, stream_on=True)
    assert chunks and all(errors(chunk, "CreateChatCompletionStreamResponse") == [] for chunk in chunks)


def test_n_choices_answered_one_by_one_are_an_official_chat_completion():
    request = {**CHAT, "n": 2}
    answer = {"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}]}
    body, _ = rendered("openai.chat", request, answer)
    assert errors(body, "CreateChatCompletionResponse") == [] and len(body["choices"]) == 2


RESPONSES = {
    "model": "gpt-4.1",
    "input": "hi",
    "tools": [{"type": "function", "name": "get_weather", "parameters": TOOL["function"]["parameters"]}],
}


@pytest.mark.parametrize("answer", ANSWERS[:4])
def test_a_response_made_from_an_answer_is_an_official_response(answer):
    body, _ = rendered("openai.responses", RESPONSES, answer)
    assert errors(body, "Response") == []


@pytest.mark.parametrize("answer", ANSWERS[:4])
def test_response_events_made_from_an_answer_are_official_events(answer):
    _, events = rendered("openai.responses", RESPONSES, answer, stream_on=True)
    assert events and [e for e in events if errors(e, "ResponseStreamEvent")] == []


def test_the_schemas_can_fail():
    assert errors({"object": "chat.completion"}, "CreateChatCompletionResponse")
    assert errors({"object": "response", "output": "text"}, "Response")
    assert errors(
        {**stream.synthesize_chunks({"choices": []}, True)[0], "choices": [{}]},
        "CreateChatCompletionStreamResponse",
    )

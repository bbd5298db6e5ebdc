from __future__ import annotations

import copy
import json

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from semula.core.answers import parse_answer
from semula.core.stream import assemble_chunks, replay_chunks, sse_lines, stamp_chunks, synthesize_chunks

REQUEST = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Weather in Paris and Rome?"}]}
LONG_TEXT = "The weather in Paris is mild today, with light rain expected later in the evening. " * 4
TEXT = parse_answer(LONG_TEXT, REQUEST)
TOOLS = parse_answer(
    {
        "tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris", "note": "x" * 60}},
            {"name": "get_weather", "arguments": {"city": "Rome"}},
        ]
    },
    REQUEST,
)
MIXED = parse_answer(
    {"content": "Let me check. ünïcödé ✓", "tool_calls": [{"name": "lookup", "arguments": '{"q": "é"}'}]},
    REQUEST,
)
COMPLETIONS = [TEXT, TOOLS, MIXED]


def deltas(chunks):
    return [chunk["choices"][0]["delta"] for chunk in chunks if chunk["choices"]]


def test_text_chunks_open_with_the_role_and_close_with_the_finish_reason():
    chunks = synthesize_chunks(TEXT, include_usage=False)
    assert deltas(chunks)[0] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}]
    pieces = [d["content"] for d in deltas(chunks)[1:-1]]
    assert len(pieces) > 3
    assert "".join(pieces) == LONG_TEXT
    assert all(
        chunk["object"] == "chat.completion.chunk" and chunk["model"] == "gpt-4o-mini" for chunk in chunks
    )
    assert all("usage" not in chunk for chunk in chunks)
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_tool_call_chunks_open_each_call_then_stream_its_arguments():
    chunks = synthesize_chunks(TOOLS, include_usage=False)
    assert deltas(chunks)[0] == {"role": "assistant", "content": None}
    calls = [d["tool_calls"][0] for d in deltas(chunks) if "tool_calls" in d]
    first = TOOLS["choices"][0]["message"]["tool_calls"][0]
    assert calls[0] == {
        "index": 0,
        "id": first["id"],
        "type": "function",
        "function": {"name": "get_weather", "arguments": ""},
    }
    pieces = [c["function"]["arguments"] for c in calls if c["index"] == 0]
    assert len(pieces) > 2
    assert "".join(pieces) == first["function"]["arguments"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_include_usage_adds_a_final_usage_chunk():
    chunks = synthesize_chunks(TEXT, include_usage=True)
    assert chunks[-1] == {
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": TEXT["usage"],
    }
    assert all(chunk["usage"] is None for chunk in chunks[:-1])


@pytest.mark.parametrize("completion", COMPLETIONS)
def test_synthesize_then_assemble_round_trips(completion):
    assembled = assemble_chunks(synthesize_chunks(completion, include_usage=True))
    assert assembled == completion


def test_assemble_without_a_usage_chunk_has_no_usage():
    assembled = assemble_chunks(synthesize_chunks(TEXT, include_usage=False))
    assert "usage" not in assembled
    assert assembled["choices"] == TEXT["choices"]


def test_assemble_merges_interleaved_tool_call_deltas_by_index():
    def chunk(delta, finish_reason=None):
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}], "model": "m"}

    chunks = [
        chunk({"role": "assistant", "content": None}),
        chunk(
            {
                "tool_calls": [
                    {"index": 1, "id": "b", "type": "function", "function": {"name": "g", "arguments": ""}}
                ]
            }
        ),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "a",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x"'},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}),
        chunk({}, "tool_calls"),
        {
            "choices": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            "model": "m",
        },
    ]
    assembled = assemble_chunks(chunks)
    message = assembled["choices"][0]["message"]
    assert message["content"] is None
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("a", "f", '{"x": 1}'),
        ("b", "g", "{}"),
    ]
    assert assembled["choices"][0]["finish_reason"] == "tool_calls"
    assert assembled["usage"]["total_tokens"] == 3


@pytest.mark.parametrize("completion", COMPLETIONS)
@pytest.mark.parametrize("include_usage", [False, True])
def test_the_openai_sdk_accepts_every_chunk_and_rebuilds_the_completion(completion, include_usage):
    chunks = stamp_chunks(
        synthesize_chunks(completion, include_usage), "chatcmpl-1", 1700000000, "gpt-4o-mini"
    )
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    final = state.get_final_completion().choices[0]
    expected = completion["choices"][0]
    assert final.message.content == expected["message"]["content"]
    assert final.finish_reason == expected["finish_reason"]
    calls = [(c.id, c.function.name, c.function.arguments) for c in final.message.tool_calls or []]
    assert calls == [
        (c["id"], c["function"]["name"], c["function"]["arguments"])
        for c in expected["message"].get("tool_calls", [])
    ]
    assembled = {**assemble_chunks(chunks), "id": "chatcmpl-1", "created": 1700000000}
    assert (
        ChatCompletion.model_validate(assembled).choices[0].message.content == expected["message"]["content"]
    )


def test_stamp_chunks_sets_id_and_created_on_copies_and_keeps_the_recorded_model():
    stored = [
        {"id": "chatcmpl-old", "object": "chat.completion.chunk", "model": "gpt-4o-2024", "choices": []},
        {"object": "chat.completion.chunk", "choices": []},
    ]
    before = copy.deepcopy(stored)
    recorded, bare = stamp_chunks(stored, "chatcmpl-new", 1234, "gpt-4o")
    assert stored == before
    assert list(recorded)[:4] == ["id", "object", "created", "model"]
    assert (recorded["id"], recorded["created"], recorded["model"]) == ("chatcmpl-new", 1234, "gpt-4o-2024")
    assert (bare["id"], bare["model"]) == ("chatcmpl-new", "gpt-4o")


def test_sse_lines_frame_each_chunk_and_end_with_done():
    chunks = stamp_chunks(synthesize_chunks(MIXED, include_usage=False), "chatcmpl-1", 1, "m")
    lines = list(sse_lines(chunks))
    assert lines[-1] == b"data: [DONE]\n\n"
    assert len(lines) == len(chunks) + 1
    for line, chunk in zip(lines, chunks, strict=False):
        assert line.startswith(b"data: ") and line.endswith(b"\n\n")
        assert b"\n" not in line[:-2]
        assert json.loads(line[len(b"data: ") :]) == chunk


def test_sse_lines_survive_a_lone_surrogate():
    (line, done) = sse_lines([{"choices": [{"delta": {"content": "\ud800"}}]}])
    assert json.loads(line[6:])["choices"][0]["delta"]["content"] == "\ud800"
    assert done == b"data: [DONE]\n\n"


def test_replay_drops_the_usage_chunk_unless_asked():
    stored = synthesize_chunks(TEXT, include_usage=True)
    replayed = replay_chunks(stored, include_usage=False)
    assert len(replayed) == len(stored) - 1
    assert all(chunk["choices"] and "usage" not in chunk for chunk in replayed)
    assert replay_chunks(stored, include_usage=True) == stored


def test_replay_adds_a_usage_chunk_a_stream_was_recorded_without():
    stored = synthesize_chunks(TEXT, include_usage=False)
    replayed = replay_chunks(stored, include_usage=True, usage=TEXT["usage"])
    assert replayed[-1] == {
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini",
        "choices": [],
        "usage": TEXT["usage"],
    }
    assert all(chunk["usage"] is None for chunk in replayed[:-1])
    estimated = replay_chunks(stored, include_usage=True)[-1]["usage"]
    assert estimated["completion_tokens"] == len(LONG_TEXT) // 4
    assert estimated["total_tokens"] == estimated["prompt_tokens"] + estimated["completion_tokens"]


def test_a_provider_stream_with_its_usage_chunk_replays_as_recorded():
    """OpenAI's stream today: no "usage" key on the content chunks, and a final chunk carrying
    service_tier and system_fingerprint beside the usage. Replay adds nothing and drops nothing."""
    body = [
        {
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {"content": "Hi"}}],
        },
        {
            "object": "chat.completion.chunk",
            "model": "gpt-4o",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        },
    ]
    final = {
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "service_tier": "default",
        "system_fingerprint": "fp_1",
        "choices": [],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    assert replay_chunks([*body, final], include_usage=True) == [*body, final]
    assert replay_chunks([*body, final], include_usage=False) == body

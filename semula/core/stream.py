"""Streaming: synthesise `chat.completion.chunk`s from a completion, assemble them back, write SSE (pure)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from semula.core import jsonio
from semula.core.answers import WORDS, estimate_tokens

DONE = b"data: [DONE]\n\n"
# Pieces of at least this many characters; longer texts get longer pieces so a chunk count stays modest.
_PIECE = 20
_MAX_PIECES = 50
_STAMPED = frozenset({"id", "object", "created", "model"})


def synthesize_chunks(completion: dict[str, Any], include_usage: bool) -> list[dict[str, Any]]:
    """The chunks a provider would have streamed for this completion, without `id` and `created`."""
    model = completion.get("model")
    chunks: list[dict[str, Any]] = []

    def emit(
        index: int, delta: dict[str, Any], finish_reason: str | None = None, logprobs: Any = None
    ) -> None:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        chunks.append(_chunk(model, [choice], include_usage))

    for position, choice in enumerate(completion.get("choices") or []):
        index = choice.get("index", position)
        message = choice.get("message") or {}
        content = message.get("content")
        # Like OpenAI: a text answer opens with content "", a tool-call-only answer with content null.
        emit(index, {"role": "assistant", "content": "" if content is not None else None})
        tokens = (
            (choice.get("logprobs") or {}).get("content")
            if isinstance(choice.get("logprobs"), dict)
            else None
        )
        if tokens and "".join(str(token.get("token", "")) for token in tokens) == content:
            # With logprobs, a chunk a token, as the API streams them, each carrying its own.
            for token in tokens:
                emit(index, {"content": token["token"]}, logprobs={"content": [token], "refusal": None})
        else:
            for piece in pieces(content or "", words=True):
                emit(index, {"content": piece})
        if message.get("refusal"):
            emit(index, {"refusal": message["refusal"]})
        for number, call in enumerate(message.get("tool_calls") or []):
            function = call.get("function") or {}
            opening = {
                "index": number,
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function.get("name"), "arguments": ""},
            }
            emit(index, {"tool_calls": [opening]})
            for piece in pieces(function.get("arguments") or "", words=False):
                emit(index, {"tool_calls": [{"index": number, "function": {"arguments": piece}}]})
        emit(index, {}, choice.get("finish_reason") or "stop")

    if include_usage:
        chunks.append(_usage_chunk(model, completion.get("usage") or _estimated_usage(completion)))
    return chunks


def replay_chunks(
    chunks: list[dict[str, Any]], include_usage: bool, usage: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Stored chunks as this request wants them: with a final usage chunk only when it asked for one.

    A stream recorded with its usage chunk replays as recorded (the provider's own `usage` keys on the
    other chunks, or none, and its final chunk whole: `service_tier`, `system_fingerprint`). One
    recorded without gets a final chunk from `usage`, else an estimate from its content, and "usage":
    null on the others, as OpenAI documents include_usage.
    """
    body = [chunk for chunk in chunks if not _is_usage_chunk(chunk)]
    recorded_final = next((chunk for chunk in reversed(chunks) if _is_usage_chunk(chunk)), None)
    if not include_usage:
        return [{key: value for key, value in chunk.items() if key != "usage"} for chunk in body]
    if recorded_final is not None:
        return [*body, recorded_final]
    stored_usage = next((c["usage"] for c in reversed(chunks) if c.get("usage")), None)
    result = [
        {**{key: value for key, value in chunk.items() if key != "usage"}, "usage": None} for chunk in body
    ]
    model = next((c.get("model") for c in chunks if c.get("model")), None)
    final = stored_usage or usage or _estimated_usage(assemble_chunks(body))
    result.append(_usage_chunk(model, final))
    return result


def stamp_chunks(chunks: Iterable[dict[str, Any]], id: str, created: int, model: str) -> list[dict[str, Any]]:
    """Copies of the chunks carrying this response's `id` and `created`, and the model they were recorded
    with (else `model`), in OpenAI's key order."""
    stamped = []
    for chunk in chunks:
        rest = {key: value for key, value in chunk.items() if key not in _STAMPED}
        stamped.append(
            {
                "id": id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": chunk.get("model") or model,
                **rest,
            }
        )
    return stamped


def assemble_chunks(chunks: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The `chat.completion` a stream adds up to: content joined, tool call deltas merged by index."""
    model = None
    usage = None
    choices: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        model = model or chunk.get("model")
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            state = choices.setdefault(
                choice.get("index", 0),
                {"content": None, "refusal": None, "calls": {}, "finish_reason": None},
            )
            delta = choice.get("delta") or {}
            for key in ("content", "refusal"):
                if isinstance(delta.get(key), str):
                    state[key] = (state[key] or "") + delta[key]
            for call_delta in delta.get("tool_calls") or []:
                call = state["calls"].setdefault(
                    call_delta.get("index", 0), {"id": None, "type": "function", "name": "", "arguments": ""}
                )
                call["id"] = call_delta.get("id") or call["id"]
                function = call_delta.get("function") or {}
                # Concatenated like the OpenAI SDK does: some providers stream names in pieces too.
                call["name"] += function.get("name") or ""
                call["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                state["finish_reason"] = choice["finish_reason"]

    assembled = []
    for index in sorted(choices):
        state = choices[index]
        message: dict[str, Any] = {"role": "assistant", "content": state["content"]}
        if state["refusal"] is not None:
            message["refusal"] = state["refusal"]
        if state["calls"]:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"]},
                }
                for _, call in sorted(state["calls"].items())
            ]
        finish_reason = state["finish_reason"] or ("tool_calls" if state["calls"] else "stop")
        assembled.append(
            {"index": index, "message": message, "finish_reason": finish_reason, "logprobs": None}
        )
    completion: dict[str, Any] = {"object": "chat.completion", "model": model, "choices": assembled}
    if usage is not None:
        completion["usage"] = usage
    return completion


def sse_lines(chunks: Iterable[dict[str, Any]]) -> Iterator[bytes]:
    """`data: {chunk}` server-sent events, then `data: [DONE]`."""
    for chunk in chunks:
        yield b"data: " + jsonio.compact(chunk) + b"\n\n"
    yield DONE


def _chunk(model: Any, choices: list[dict[str, Any]], include_usage: bool) -> dict[str, Any]:
    chunk = {"object": "chat.completion.chunk", "model": model, "choices": choices}
    if include_usage:
        chunk["usage"] = None
    return chunk


def _usage_chunk(model: Any, usage: dict[str, Any]) -> dict[str, Any]:
    return {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}


def _is_usage_chunk(chunk: dict[str, Any]) -> bool:
    return not chunk.get("choices") and bool(chunk.get("usage"))


def _estimated_usage(completion: dict[str, Any]) -> dict[str, int]:
    # The prompt is not known here; only the completion side can be estimated.
    text = ""
    for choice in completion.get("choices") or []:
        message = choice.get("message") or {}
        text += (message.get("content") or "") + (message.get("refusal") or "")
        for call in message.get("tool_calls") or []:
            text += (call.get("function") or {}).get("arguments") or ""
    tokens = estimate_tokens(text)
    return {"prompt_tokens": 0, "completion_tokens": tokens, "total_tokens": tokens}


def pieces(text: str, words: bool) -> list[str]:
    if not text:
        return []
    size = max(_PIECE, -(-len(text) // _MAX_PIECES))
    if not words:
        return [text[start : start + size] for start in range(0, len(text), size)]
    # Break after whitespace so pieces look like a model's output; a long word still breaks at `size`.
    pieces, current = [], ""
    for word in WORDS.findall(text):
        current += word
        while len(current) >= 2 * size:
            pieces.append(current[:size])
            current = current[size:]
        if len(current) >= size:
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    return pieces

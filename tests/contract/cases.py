"""What the dialect contract suite needs to know of each API: one Case per dialect in the registry.

A dialect semula speaks without a Case here fails the suite (test_every_dialect_has_a_case), and the
parametrized tests are made from semula.dialects.names(), so a new API is held to every contract at
once. A Case says what only the API knows: its paths, its SDK's credentials, a minimal request, its
error envelope, its stream's end and usage, its documented limits and its request shapes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from semula import dialects

PROJECT = "/p/shop"
CHAT_MODEL, RESPONSES_MODEL, EMBED_MODEL = "gpt-4o", "gpt-4.1", "text-embedding-3-small"
CLAUDE, GEMINI_MODEL, GEMINI_EMBED = "claude-sonnet-4-5", "gemini-2.5-flash", "gemini-embedding-001"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


@dataclass(frozen=True)
class Shape:
    """A request shape: the path it is posted to (under the project), its body, and a text of it that
    the conversation view must show."""

    path: str
    body: dict[str, Any]
    said: str


@dataclass(frozen=True)
class Boundary:
    """A documented limit: a request at it (accepted) and one just past it (refused with a 400 that
    names `param`)."""

    name: str
    path: str
    at: dict[str, Any]
    past: dict[str, Any]
    param: str


@dataclass(frozen=True)
class Stream:
    """How the API streams: the path and body of a streamed request saying `text`, and what the app
    reads on the wire (the raw text of the response)."""

    path: str
    body: Callable[[str], dict[str, Any]]
    ended: Callable[[str], bool]  # the API's end event is there
    usage: Callable[[str], int]  # the total tokens the stream reports
    failed: Callable[[str], bool]  # it carries the API's error event


@dataclass(frozen=True)
class Case:
    path: str
    credentials: Callable[[str], dict[str, str]]  # the token as the API's SDK sends it
    body: Callable[[str], dict[str, Any]]  # a minimal request saying `text`
    answer: dict[str, Any]  # an answer the body's conversation view accepts
    error: Callable[[Any, int], None]  # asserts the API's error envelope and type for a status
    stream: Stream | None  # None: the API has no streams (said here, never skipped)
    boundaries: list[Boundary]
    transport: dict[str, Any]  # a value for each of the dialect's transport fields
    shapes: list[Shape]
    headers: dict[str, str] = field(default_factory=dict)  # transport fields sent as headers


# The error envelopes, as each API documents them.


def openai_error(body: Any, status: int) -> None:
    """{"error": {"message", "type", "param", "code"}}; the type by status, as OpenAI's."""
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    expected = {429: {"rate_limit_error", "requests", "tokens"}}.get(
        status, {"server_error"} if status >= 500 else {"invalid_request_error"}
    )
    assert error["type"] in expected, (status, error)


# docs.claude.com/en/api/errors: other 4xx are invalid_request_error, other 5xx api_error.
ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",  # not in the docs; the SDKs retry it as they retry a 529
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error(body: Any, status: int) -> None:
    """{"type": "error", "error": {"type", "message"}}."""
    assert set(body) == {"type", "error"} and body["type"] == "error", body
    error = body["error"]
    assert set(error) == {"type", "message"}, error
    assert isinstance(error["message"], str) and error["message"], error
    default = "api_error" if status >= 500 else "invalid_request_error"
    assert error["type"] == ANTHROPIC_TYPES.get(status, default), (status, error)


# ai.google.dev/gemini-api/docs/troubleshooting and google.rpc.Code's HTTP mapping.
GOOGLE_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",  # Google refuses a payload past its limit as an invalid argument
    424: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def google_error(body: Any, status: int) -> None:
    """{"error": {"code", "message", "status"}} (and details, which Google adds)."""
    assert set(body) == {"error"}, body
    error = body["error"]
    assert {"code", "message", "status"} <= set(error) <= {"code", "message", "status", "details"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["code"] == status and error["status"] == GOOGLE_STATUSES[status], (status, error)


# Streams on the wire.


def data_lines(text: str) -> list[Any]:
    """The JSON of each `data:` line of a stream, `[DONE]` as the string."""
    out = []
    for line in text.replace("\r\n", "\n").split("\n"):
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def typed(text: str) -> list[dict[str, Any]]:
    return [event for event in data_lines(text) if isinstance(event, dict)]


def chat_usage(text: str) -> int:
    [usage] = [chunk["usage"] for chunk in typed(text) if chunk.get("usage")]
    return usage["total_tokens"]


def responses_usage(text: str) -> int:
    [done] = [event for event in typed(text) if event.get("type") == "response.completed"]
    return done["response"]["usage"]["total_tokens"]


def anthropic_usage(text: str) -> int:
    events = typed(text)
    [start] = [event for event in events if event.get("type") == "message_start"]
    [delta] = [event for event in events if event.get("type") == "message_delta"]
    return start["message"]["usage"]["input_tokens"] + delta["usage"]["output_tokens"]


def gemini_usage(text: str) -> int:
    return typed(text)[-1]["usageMetadata"]["totalTokenCount"]


def _last_type(text: str) -> str | None:
    events = typed(text)
    return events[-1].get("type") if events else None


def generation_limit(name: str, at: float, past: float) -> Boundary:
    """A limit of the Gemini API's generationConfig."""
    return Boundary(
        f"{name} {at}",
        GEMINI_PATH,
        gemini("hi", generationConfig={name: at}),
        gemini("hi", generationConfig={name: past}),
        f"generationConfig.{name}",
    )


def typed_stream(
    path: str, body: Callable[..., dict[str, Any]], end: str, usage: Callable[[str], int]
) -> Stream:
    """An API whose stream is typed events (`event: TYPE`), `end` the last, `error` the error event."""
    return Stream(
        path=path,
        body=lambda text: body(text, stream=True),
        ended=lambda text: _last_type(text) == end,
        usage=usage,
        failed=lambda text: any(event.get("type") == "error" for event in typed(text)),
    )


# The requests.


def chat(words: str, **extra: Any) -> dict[str, Any]:
    return {"model": CHAT_MODEL, "messages": [{"role": "user", "content": words}], **extra}


def chat_tools(count: int) -> list[dict[str, Any]]:
    return [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": SCHEMA}} for i in range(count)
    ]


def responses(words: str, **extra: Any) -> dict[str, Any]:
    return {"model": RESPONSES_MODEL, "input": words, **extra}


def embeddings(words: Any, **extra: Any) -> dict[str, Any]:
    return {"model": EMBED_MODEL, "input": words, "dimensions": 3, **extra}


def claude(words: str, **extra: Any) -> dict[str, Any]:
    return {"model": CLAUDE, "max_tokens": 64, "messages": [{"role": "user", "content": words}], **extra}


def gemini(words: str, **extra: Any) -> dict[str, Any]:
    return {"contents": [{"role": "user", "parts": [{"text": words}]}], **extra}


def gemini_embed(words: str, **extra: Any) -> dict[str, Any]:
    return {"content": {"parts": [{"text": words}]}, "outputDimensionality": 3, **extra}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


GEMINI_PATH = f"/v1beta/models/{GEMINI_MODEL}:generateContent"
GEMINI_STREAM = f"/v1beta/models/{GEMINI_MODEL}:streamGenerateContent?alt=sse"
EMBED_PATH = f"/v1beta/models/{GEMINI_EMBED}:embedContent"
BATCH_PATH = f"/v1beta/models/{GEMINI_EMBED}:batchEmbedContents"
# Text that answers any of the shapes below, those asking for JSON of SCHEMA too.
ANSWER = {"content": '{"city": "Oslo"}'}
WEATHER_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
}

CASES: dict[str, Case] = {
    dialects.CHAT: Case(
        path="/v1/chat/completions",
        credentials=bearer,
        body=chat,
        answer=ANSWER,
        error=openai_error,
        stream=Stream(
            path="/v1/chat/completions",
            body=lambda text: chat(text, stream=True, stream_options={"include_usage": True}),
            ended=lambda text: data_lines(text)[-1:] == ["[DONE]"],
            usage=chat_usage,
            failed=lambda text: any("error" in chunk for chunk in typed(text)),
        ),
        boundaries=[
            Boundary(
                "128 tools",
                "/v1/chat/completions",
                chat("hi", tools=chat_tools(128)),
                chat("hi", tools=chat_tools(129)),
                "tools",
            ),
        ],
        transport={
            "metadata": {"run": "7"},
            "prompt_cache_key": "k1",
            "safety_identifier": "user-1",
            "service_tier": "auto",
            "store": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "someone",
        },
        shapes=[
            Shape("/v1/chat/completions", chat("plain words"), "plain words"),
            Shape(
                "/v1/chat/completions",
                {
                    "model": CHAT_MODEL,
                    "messages": [
                        {"role": "system", "content": "be a pirate"},
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": "what is in the picture"},
                                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PIXEL}"}},
                            ],
                        },
                    ],
                },
                "what is in the picture",
            ),
            Shape(
                "/v1/chat/completions",
                chat(
                    "weather in Oslo?",
                    tools=[{"type": "function", "function": {"name": "weather", "parameters": SCHEMA}}],
                    messages=[
                        {"role": "user", "content": "weather in Oslo?"},
                        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
                        {"role": "tool", "tool_call_id": "call_1", "content": "rain all week"},
                    ],
                ),
                "rain all week",
            ),
            Shape(
                "/v1/chat/completions",
                chat(
                    "a city as JSON",
                    response_format={"type": "json_schema", "json_schema": {"name": "c", "schema": SCHEMA}},
                ),
                "a city as JSON",
            ),
            Shape("/v1/chat/completions", chat("streamed words", stream=True), "streamed words"),
        ],
    ),
    dialects.RESPONSES: Case(
        path="/v1/responses",
        credentials=bearer,
        body=responses,
        answer=ANSWER,
        error=openai_error,
        stream=typed_stream("/v1/responses", responses, "response.completed", responses_usage),
        boundaries=[
            Boundary(
                "a 64-character tool name",
                "/v1/responses",
                responses("hi", tools=[{"type": "function", "name": "t" * 64, "parameters": SCHEMA}]),
                responses("hi", tools=[{"type": "function", "name": "t" * 65, "parameters": SCHEMA}]),
                "tools[0].name",
            ),
            Boundary(
                "128 tools",
                "/v1/responses",
                responses("hi", tools=[{"type": "function", "name": f"t{i}"} for i in range(128)]),
                responses("hi", tools=[{"type": "function", "name": f"t{i}"} for i in range(129)]),
                "tools",
            ),
        ],
        transport={
            "background": False,
            "client_metadata": {"run": "7"},
            "metadata": {"run": "7"},
            "prompt_cache_key": "k1",
            "safety_identifier": "user-1",
            "service_tier": "auto",
            "store": False,
            "stream": True,
            "stream_options": {"include_obfuscation": False},
            "user": "someone",
        },
        shapes=[
            Shape("/v1/responses", responses("plain words"), "plain words"),
            Shape(
                "/v1/responses",
                responses(
                    [
                        {
                            "role": "user",
                            "content": [
                                {"type": "input_text", "text": "what is in the picture"},
                                {"type": "input_image", "image_url": f"data:image/png;base64,{PIXEL}"},
                            ],
                        }
                    ],
                    instructions="be a pirate",
                ),
                "what is in the picture",
            ),
            Shape(
                "/v1/responses",
                responses(
                    [
                        {"role": "user", "content": "weather in Oslo?"},
                        {
                            "type": "function_call",
                            "call_id": "call_1",
                            "name": "weather",
                            "arguments": '{"city":"Oslo"}',
                        },
                        {"type": "function_call_output", "call_id": "call_1", "output": "rain all week"},
                    ],
                    tools=[{"type": "function", "name": "weather", "parameters": SCHEMA}],
                ),
                "rain all week",
            ),
            Shape(
                "/v1/responses",
                responses(
                    "a city as JSON",
                    text={"format": {"type": "json_schema", "name": "c", "schema": SCHEMA}},
                ),
                "a city as JSON",
            ),
            Shape("/v1/responses", responses("streamed words", stream=True), "streamed words"),
        ],
    ),
    dialects.EMBEDDINGS: Case(
        path="/v1/embeddings",
        credentials=bearer,
        body=embeddings,
        answer={"embeddings": [[0.5, 0.25, 0.125]]},
        error=openai_error,
        stream=None,
        boundaries=[
            Boundary(
                "2048 inputs",
                "/v1/embeddings",
                embeddings(["a"] * 2048),
                embeddings(["a"] * 2049),
                "input",
            ),
            Boundary(
                "1 dimension",
                "/v1/embeddings",
                embeddings("a", dimensions=1),
                embeddings("a", dimensions=0),
                "dimensions",
            ),
        ],
        transport={"encoding_format": "base64", "user": "someone"},
        shapes=[
            Shape("/v1/embeddings", embeddings("plain words"), "plain words"),
            Shape("/v1/embeddings", embeddings(["first text", "second text"]), "second text"),
            Shape("/v1/embeddings", embeddings([[101, 202, 303]]), "303"),
        ],
    ),
    dialects.ANTHROPIC: Case(
        path="/v1/messages",
        credentials=lambda secret: {"x-api-key": secret, "anthropic-version": "2023-06-01"},
        body=claude,
        answer=ANSWER,
        error=anthropic_error,
        stream=typed_stream("/v1/messages", claude, "message_stop", anthropic_usage),
        boundaries=[
            Boundary(
                "max_tokens 0",
                "/v1/messages",
                claude("hi", max_tokens=0),
                claude("hi", max_tokens=-1),
                "max_tokens",
            ),
            Boundary(
                "temperature 1",
                "/v1/messages",
                claude("hi", temperature=1),
                claude("hi", temperature=1.01),
                "temperature",
            ),
            Boundary("top_k 0", "/v1/messages", claude("hi", top_k=0), claude("hi", top_k=-1), "top_k"),
            Boundary(
                "a 128-character tool name",
                "/v1/messages",
                claude("hi", tools=[{"name": "t" * 128, "input_schema": SCHEMA}]),
                claude("hi", tools=[{"name": "t" * 129, "input_schema": SCHEMA}]),
                "tools.0.name",
            ),
        ],
        transport={
            "anthropic-version": "2023-01-01",
            "metadata": {"user_id": "someone"},
            "service_tier": "auto",
            "stream": True,
        },
        headers={"anthropic-version": "anthropic-version"},
        shapes=[
            Shape("/v1/messages", claude("plain words"), "plain words"),
            Shape(
                "/v1/messages",
                claude(
                    "",
                    system=[{"type": "text", "text": "be a pirate"}],
                    messages=[
                        {
                            "role": "user",
                            "content": [
                                {"type": "text", "text": "what is in the picture"},
                                {
                                    "type": "image",
                                    "source": {"type": "base64", "media_type": "image/png", "data": PIXEL},
                                },
                            ],
                        }
                    ],
                ),
                "what is in the picture",
            ),
            Shape(
                "/v1/messages",
                claude(
                    "",
                    tools=[{"name": "weather", "input_schema": SCHEMA}],
                    messages=[
                        {"role": "user", "content": "weather in Oslo?"},
                        {
                            "role": "assistant",
                            "content": [
                                {
                                    "type": "tool_use",
                                    "id": "toolu_1",
                                    "name": "weather",
                                    "input": {"city": "Oslo"},
                                }
                            ],
                        },
                        {
                            "role": "user",
                            "content": [
                                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rain all week"}
                            ],
                        },
                    ],
                ),
                "rain all week",
            ),
            Shape("/v1/messages", claude("plain words", system="a system text"), "a system text"),
            Shape("/v1/messages", claude("streamed words", stream=True), "streamed words"),
        ],
    ),
    dialects.GEMINI: Case(
        path=GEMINI_PATH,
        credentials=lambda secret: {"x-goog-api-key": secret},
        body=gemini,
        answer=ANSWER,
        error=google_error,
        stream=Stream(
            path=GEMINI_STREAM,
            body=gemini,
            # No end event: the last chunk says why the candidate finished.
            ended=lambda text: "finishReason" in ((typed(text) or [{}])[-1].get("candidates") or [{}])[0],
            usage=gemini_usage,
            failed=lambda text: any("error" in chunk for chunk in typed(text)),
        ),
        boundaries=[
            generation_limit("temperature", 2, 2.01),
            generation_limit("topK", 1, 0),
            generation_limit("maxOutputTokens", 1, 0),
        ],
        transport={"stream": True},  # a route of its own: streamGenerateContent
        shapes=[
            Shape(GEMINI_PATH, gemini("plain words"), "plain words"),
            Shape(
                GEMINI_PATH,
                gemini(
                    "",
                    systemInstruction={"parts": [{"text": "be a pirate"}]},
                    contents=[
                        {
                            "role": "user",
                            "parts": [
                                {"text": "what is in the picture"},
                                {"inlineData": {"mimeType": "image/png", "data": PIXEL}},
                            ],
                        }
                    ],
                ),
                "what is in the picture",
            ),
            Shape(
                GEMINI_PATH,
                gemini(
                    "",
                    tools=[{"functionDeclarations": [{"name": "weather", "parameters": SCHEMA}]}],
                    contents=[
                        {"role": "user", "parts": [{"text": "weather in Oslo?"}]},
                        {
                            "role": "model",
                            "parts": [{"functionCall": {"name": "weather", "args": {"city": "Oslo"}}}],
                        },
                        {
                            "role": "user",
                            "parts": [
                                {
                                    "functionResponse": {
                                        "name": "weather",
                                        "response": {"says": "rain all week"},
                                    }
                                }
                            ],
                        },
                    ],
                ),
                "rain all week",
            ),
            Shape(GEMINI_STREAM, gemini("streamed words"), "streamed words"),
        ],
    ),
    dialects.GEMINI_EMBEDDINGS: Case(
        path=EMBED_PATH,
        credentials=lambda secret: {"x-goog-api-key": secret},
        body=gemini_embed,
        answer={"embeddings": [[0.5, 0.25, 0.125]]},
        error=google_error,
        stream=None,
        boundaries=[
            Boundary(
                "250 requests in a batch",
                BATCH_PATH,
                {"requests": [{"model": f"models/{GEMINI_EMBED}", **gemini_embed("a")}] * 250},
                {"requests": [{"model": f"models/{GEMINI_EMBED}", **gemini_embed("a")}] * 251},
                "requests",
            ),
        ],
        transport={},
        shapes=[
            Shape(EMBED_PATH, gemini_embed("plain words"), "plain words"),
            Shape(
                BATCH_PATH,
                {
                    "requests": [
                        {"model": f"models/{GEMINI_EMBED}", **gemini_embed(t)}
                        for t in ("first text", "second text")
                    ]
                },
                "second text",
            ),
        ],
    ),
}


def case(name: str) -> Case:
    """The Case of a dialect, failing loudly (not skipping) when it has none."""
    if name not in CASES:
        raise AssertionError(
            f"dialect {name!r} has no Case in tests/contract/cases.py: every API semula speaks is held to "
            "the dialect contract (error envelopes, streams, request checks, fingerprints, views)."
        )
    return CASES[name]

"""The Gemini API dialect: its checks, the conversation view, answers, streams and error envelope (pure)."""

from __future__ import annotations

import json

import pytest

from semula import dialects
from semula.core import errors
from semula.core.errors import BadRequest, InvalidAnswer
from semula.dialects import gemini

G = dialects.get(dialects.GEMINI)
MODEL = "gemini-2.5-flash"


def request(*contents, **extra):
    turns = list(contents) or [{"role": "user", "parts": [{"text": "Hi"}]}]
    return G.with_route({"contents": turns, **extra}, f"models/{MODEL}", "generateContent")


def user(text):
    return {"role": "user", "parts": [{"text": text}]}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "The body must be a JSON object"),
        ({"model": MODEL}, "* GenerateContentRequest.contents: contents is not specified"),
        ({"model": MODEL, "contents": []}, "contents is not specified"),
        (
            {"model": MODEL, "contents": [{"role": "user", "parts": []}]},
            "contents[0].parts: contents.parts must not",
        ),
        ({"model": MODEL, "contents": [{"role": "user"}]}, "contents.parts must not be empty"),
        (
            {"model": MODEL, "contents": [{"role": "system", "parts": [{"text": "x"}]}]},
            "valid role: user, model",
        ),
        (
            {"model": MODEL, "contents": [{"parts": [{}]}]},
            "contents[0].parts[0].data: required oneof field 'data'",
        ),
        (
            {"model": MODEL, "contents": [{"parts": [{"text": "a", "inlineData": {}}]}]},
            "Cannot set 'inlineData'",
        ),
        (
            {"model": MODEL, "contents": [{"parts": [{"text": 5}]}]},
            "Invalid value at 'contents[0].parts[0].text'",
        ),
        ({"model": MODEL, "contents": [{"parts": [{"functionCall": {"args": {}}}]}]}, "Name cannot be empty"),
        (
            {"model": MODEL, "contents": [{"parts": [{"inlineData": {"mimeType": "image/png"}}]}]},
            "inline_data.data",
        ),
    ],
)
def test_refused_contents(body, message):
    with pytest.raises(BadRequest, match=None) as refused:
        G.check(body)
    assert message in refused.value.message


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"tools": [{"functionDeclarations": [{"description": "x"}]}]},
            "function_declarations[0].name: Name cannot",
        ),
        ({"tools": [{"functionDeclarations": [{"name": "9lives"}]}]}, "Invalid function name"),
        ({"tools": [{"functionDeclarations": [{"name": "f" * 129}]}]}, "Invalid function name"),
        (
            {
                "tools": [
                    {"functionDeclarations": [{"name": "f", "parameters": {}, "parametersJsonSchema": {}}]}
                ]
            },
            "mutually exclusive",
        ),
        ({"toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}}, "(TYPE_ENUM)"),
        (
            {"toolConfig": {"functionCallingConfig": {"mode": "AUTO", "allowedFunctionNames": ["f"]}}},
            "only be set when the mode is ANY",
        ),
        ({"generationConfig": {"temperature": 2.5}}, "temperature must be in the range [0, 2]"),
        ({"generationConfig": {"temperature": "hot"}}, "(TYPE_FLOAT)"),
        ({"generationConfig": {"maxOutputTokens": 0}}, "maxOutputTokens must be at least 1"),
        ({"generationConfig": {"candidateCount": True}}, "(TYPE_INT32)"),
        ({"generationConfig": {"responseMimeType": "text/html"}}, "allowed mimetypes"),
        ({"generationConfig": {"responseSchema": {"type": "OBJECT"}}}, "when response_schema is set"),
        (
            {
                "generationConfig": {
                    "responseMimeType": "application/json",
                    "responseSchema": {"type": "OBJECT"},
                    "responseJsonSchema": {"type": "object"},
                }
            },
            "mutually exclusive",
        ),
        ({"generationConfig": {"thinkingConfig": {"thinkingBudget": "lots"}}}, "thinking_budget"),
    ],
)
def test_refused_settings(extra, message):
    with pytest.raises(BadRequest) as refused:
        G.check(request(**extra))
    assert message in refused.value.message
    assert refused.value.code == "invalid_argument"


def test_what_google_accepts_is_accepted():
    accepted = request(
        {"parts": [{"text": "no role is a user turn"}]},
        {"role": "model", "parts": [{"text": "ok", "thoughtSignature": "c2ln"}]},
        {
            "role": "user",
            "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}}, {"text": "and?"}],
        },
        systemInstruction={"parts": [{"text": "Be brief."}]},
        tools=[{"functionDeclarations": [{"name": "a.b:c-d_e"}]}, {"googleSearch": {}}],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["a.b:c-d_e"]}},
        generationConfig={
            "temperature": 2,
            "topP": 1,
            "maxOutputTokens": 1,
            "thinkingConfig": {"thinkingBudget": -1, "includeThoughts": True, "thinkingLevel": "low"},
            "responseMimeType": "text/x.enum",
            "responseSchema": {"type": "STRING", "enum": ["a", "b"]},
            "someNewSetting": 1,
        },
        cachedContent="cachedContents/abc",
        anUnknownField=[1],
    )
    req = G.check(accepted)
    assert req.model == MODEL and req.stream is False


def test_the_route_puts_model_and_stream_in_the_stored_request():
    stored = G.with_route(
        {"contents": [user("x")], "stream": "client's"}, "models/m-1", "streamGenerateContent"
    )
    assert stored["model"] == "m-1" and stored["stream"] is True
    assert "stream" not in G.with_route({"contents": [], "stream": True}, "m-1", "generateContent")
    # stream is transport: the streamed and the plain call are one recording.
    plain = G.with_route({"contents": [user("x")]}, "m-1", "generateContent")
    assert G.fingerprint(stored, [], []) == G.fingerprint(plain, [], [])
    assert G.fingerprint(plain, [], []) != G.fingerprint({**plain, "model": "m-2"}, [], [])
    assert G.upstream_target(stored) == "/models/m-1:streamGenerateContent?alt=sse"
    assert G.upstream_target(plain) == "/models/m-1:generateContent"
    assert G.upstream_body(stored) == {"contents": [user("x")]}


def test_the_conversation_view():
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}
    call_with_id = {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}, "id": "fc-2"}}
    body = request(
        user("Weather in Paris and Rome?"),
        {"role": "model", "parts": [{"text": "thinking", "thought": True}, call, call_with_id]},
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "id": "fc-2", "response": {"temp": 25}}},
                {"functionResponse": {"name": "get_weather", "response": {"temp": 21}}},
            ],
        },
        systemInstruction={"parts": [{"text": "Be brief."}, {"text": "Use tools."}]},
        tools=[
            {
                "functionDeclarations": [
                    {"name": "get_weather", "parameters": {"type": "OBJECT", "nullable": True}}
                ]
            },
            {"codeExecution": {}},
        ],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
        generationConfig={"responseMimeType": "application/json", "responseSchema": {"type": "ARRAY"}},
    )
    view = G.conversation(body)
    messages = view["messages"]
    assert messages[0] == {"role": "system", "content": "Be brief.\n\nUse tools."}
    assert messages[1] == {"role": "user", "content": "Weather in Paris and Rome?"}
    calls = messages[2]["tool_calls"]
    assert messages[2]["content"] is None and [c["function"]["name"] for c in calls] == ["get_weather"] * 2
    assert calls[1]["id"] == "fc-2" and calls[0]["function"]["arguments"] == '{"city":"Paris"}'
    # Matched by id first, then by name: the response without an id answers the Paris call.
    assert messages[3] == {"role": "tool", "tool_call_id": "fc-2", "content": '{"temp": 25}'}
    assert messages[4] == {"role": "tool", "tool_call_id": calls[0]["id"], "content": '{"temp": 21}'}
    assert view["tools"][0]["function"]["parameters"] == {"type": ["object", "null"]}
    assert view["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert view["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": {"type": "array"}},
    }
    assert "codeExecution" in view["notes"][0]


def test_fields_in_snake_case_are_read_as_google_reads_them():
    """Google's curl examples write `system_instruction`, `inline_data`, `generation_config`: its parser
    takes a field by either name, so semula stores, checks and views them by their JSON names."""
    image = {"inline_data": {"mime_type": "image/png", "data": "aGk="}}
    snake = request(
        {"role": "user", "parts": [{"text": "What is this?"}, image]},
        system_instruction={"parts": [{"text": "Be brief."}]},
        tools=[
            {
                "function_declarations": [
                    {
                        "name": "lookup",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"max_items": {"type": "INTEGER"}},
                            "any_of": [{"type": "OBJECT"}],
                        },
                    }
                ]
            }
        ],
        tool_config={"function_calling_config": {"mode": "ANY", "allowed_function_names": ["lookup"]}},
        generation_config={"max_output_tokens": 5, "response_mime_type": "text/plain"},
    )
    camel = request(
        {
            "role": "user",
            "parts": [{"text": "What is this?"}, {"inlineData": {"mimeType": "image/png", "data": "aGk="}}],
        },
        systemInstruction={"parts": [{"text": "Be brief."}]},
        tools=[
            {
                "functionDeclarations": [
                    {
                        "name": "lookup",
                        "parameters": {
                            "type": "OBJECT",
                            # A property's name is the client's own: kept as written.
                            "properties": {"max_items": {"type": "INTEGER"}},
                            "anyOf": [{"type": "OBJECT"}],
                        },
                    }
                ]
            }
        ],
        toolConfig={"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["lookup"]}},
        generationConfig={"maxOutputTokens": 5, "responseMimeType": "text/plain"},
    )
    assert snake == camel
    G.check(snake)  # a part holding inline_data holds data (it was refused as holding none)
    view = G.conversation(snake)
    assert view["messages"][0] == {"role": "system", "content": "Be brief."}
    assert view["tools"][0]["function"]["name"] == "lookup"
    # Free JSON (a call's args, a response, a JSON schema) is the client's: never renamed.
    call = {"function_call": {"name": "lookup", "args": {"max_items": 3}}}
    stored = request(user("x"), {"role": "model", "parts": [call]})
    assert stored["contents"][1]["parts"][0] == {"functionCall": {"name": "lookup", "args": {"max_items": 3}}}
    with pytest.raises(BadRequest, match="Duplicate field") as refused:
        request(user("x"), system_instruction={"parts": [{"text": "a"}]}, systemInstruction={"parts": []})
    assert refused.value.status == 400
    assert G.count_tokens({"contents": [{"parts": [image]}]})["totalTokens"] >= 1
    batch = E.with_route(
        {
            "requests": [
                {"content": {"parts": [{"text": "a"}]}, "output_dimensionality": 8, "task_type": "CLUSTERING"}
            ]
        },
        "models/gemini-embedding-001",
        "batchEmbedContents",
    )
    assert (
        batch["requests"][0]["outputDimensionality"] == 8 and batch["requests"][0]["taskType"] == "CLUSTERING"
    )


def test_a_stream_asked_for_without_alt_sse_is_one_json_array_sent_as_it_comes():
    events = [{"candidates": [{"content": {"parts": [{"text": w}]}}]} for w in ("Hel", "lo")]
    data = b"".join(G.sse(events))
    # Split anywhere, even inside an event or its CRLF framing: the same array, element by element.
    for cut in (1, len(data) // 3, len(data) - 2):
        pieces = list(gemini.json_array([data[:cut], data[cut:]]))
        assert json.loads(b"".join(pieces)) == events
    assert list(gemini.json_array([b'data: {"a":1}\r\n\r\n'])) == [b'[{"a":1}', b"]"]
    assert json.loads(b"".join(gemini.json_array([]))) == []
    assert json.loads(b"".join(gemini.json_array([b'data: {"a":1}']))) == [{"a": 1}]  # no end framing


def test_images_are_placeholders_and_json_schema_passes_through():
    body = request(
        {"role": "user", "parts": [{"inlineData": {"mimeType": "image/png", "data": "AAAA"}}]},
        tools=[{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}],
        generationConfig={"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}},
    )
    view = G.conversation(body)
    assert view["messages"] == [{"role": "user", "content": "[inlineData image/png, 3 bytes]"}]
    assert view["tools"][0]["function"]["parameters"] == {"type": "object"}
    assert view["response_format"]["json_schema"]["schema"] == {"type": "object"}
    mode_json = G.conversation(request(generationConfig={"responseMimeType": "application/json"}))
    assert mode_json["response_format"] == {"type": "json_object"}


def test_answers_render_as_a_generate_content_response_and_back():
    body = request(
        tools=[{"functionDeclarations": [{"name": "f", "parametersJsonSchema": {"type": "object"}}]}]
    )
    view = G.conversation(body)
    response, chunks = G.accept(
        {"content": "Let me look.", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]}, body, view
    )
    assert chunks is None
    candidate = response["candidates"][0]
    [text, called] = candidate["content"]["parts"]
    assert candidate["content"]["role"] == "model" and text == {"text": "Let me look."}
    # The call carries its id, made from what it calls: the same answer gives the same id.
    assert called["functionCall"] == {"id": called["functionCall"]["id"], "name": "f", "args": {"a": 1}}
    assert called["functionCall"]["id"].startswith("call_")
    again = G.accept({"tool_calls": [{"name": "f", "arguments": {"a": 1}}]}, body, view)[0]
    assert again["candidates"][0]["content"]["parts"][0]["functionCall"]["id"] == called["functionCall"]["id"]
    assert candidate["finishReason"] == "STOP" and response["modelVersion"] == MODEL
    common = G.common(response, None)
    assert common["choices"][0]["finish_reason"] == "tool_calls"
    assert common["choices"][0]["message"]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": '{"a":1}',
    }
    with pytest.raises(InvalidAnswer):
        G.accept({"tool_calls": [{"name": "g", "arguments": {}}]}, body, view)


def test_a_pasted_response_is_kept_and_filled():
    body = request()
    view = G.conversation(body)
    pasted = {"candidates": [{"content": {"parts": [{"text": "Hi"}], "role": "model"}}], "extra": 1}
    response, _ = G.accept(pasted, body, view)
    assert (
        response["extra"] == 1
        and response["responseId"]
        and response["usageMetadata"]["candidatesTokenCount"] >= 1
    )
    with pytest.raises(InvalidAnswer):
        G.accept({"candidates": [{"content": {"parts": "Hi"}}]}, body, view)
    with pytest.raises(InvalidAnswer):
        G.accept({"candidates": []}, body, view)


def test_usage_counts_tool_prompts_and_thoughts():
    usage = {
        "promptTokenCount": 10,
        "toolUsePromptTokenCount": 2,
        "candidatesTokenCount": 5,
        "thoughtsTokenCount": 7,
    }
    assert G.usage({"usageMetadata": usage}) == (12, 12)
    assert G.usage({}) == (0, 0)


def test_stream_chunks_add_up_to_the_response():
    response = gemini.envelope(
        {"model": MODEL},
        [{"text": "one two three " * 20}, {"functionCall": {"name": "f", "args": {}}}],
        "STOP",
        3,
        9,
        "rid",
    )
    chunks = gemini.synthesize_chunks(response)
    assert (
        len(chunks) > 2
        and "usageMetadata" not in chunks[0]
        and chunks[-1]["usageMetadata"]["totalTokenCount"] == 12
    )
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    assert gemini.assemble(chunks) == response
    req = G.check({**request(), "stream": True})
    _, events = G.render(req, response, None, False, 0.0)
    assert len({e["responseId"] for e in events}) == 1 and events[0]["responseId"] != "rid"
    wire = b"".join(G.sse(events))
    assert wire.startswith(b"data: {") and wire.count(b"\r\n\r\n") == len(events)
    recorded, kept = G.from_stream(chunks)
    assert recorded == response and kept == chunks
    with pytest.raises(ValueError):
        G.from_stream([*chunks, {"error": {"code": 500}}])
    thinking = [
        {"text": "weighing it up " * 12, "thought": True},
        {"text": "The answer is " * 12, "thoughtSignature": "c2ln"},
        {"text": "and more."},
    ]
    pasted = gemini.envelope({"model": MODEL}, thinking, "STOP", 1, 2, "rid")
    streamed = gemini.synthesize_chunks(pasted)
    assert sum("thoughtSignature" in c["candidates"][0]["content"]["parts"][0] for c in streamed) == 1
    # The signature starts a part; text after it joins that part, as the SDK joins a stream's text.
    assert gemini.assemble(streamed)["candidates"][0]["content"]["parts"] == [
        thinking[0],
        {"text": thinking[1]["text"] + "and more.", "thoughtSignature": "c2ln"},
    ]


@pytest.mark.parametrize(
    ("exc", "status"),
    [
        (errors.Unauthorized(), "UNAUTHENTICATED"),
        (errors.Forbidden(), "PERMISSION_DENIED"),
        (errors.NotFound(), "NOT_FOUND"),
        (errors.Conflict(), "ABORTED"),
        (errors.PayloadTooLarge(), "INVALID_ARGUMENT"),
        (errors.ReplayMiss("no"), "FAILED_PRECONDITION"),
        (errors.TooManyMisses(), "RESOURCE_EXHAUSTED"),
        (errors.SemulaError(), "INTERNAL"),
        (errors.UpstreamError(), "UNAVAILABLE"),
        (errors.ServiceUnavailable(), "UNAVAILABLE"),
        (errors.RecordTimeout(), "DEADLINE_EXCEEDED"),
    ],
)
def test_error_envelope_for_each_status(exc, status):
    error = G.error_body(exc)["error"]
    assert error["code"] == exc.status and error["status"] == status
    assert error["message"].startswith(f"{exc.code}: ")
    assert error["details"] == [
        {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": exc.code, "domain": "semula"}
    ]


def test_count_tokens_is_an_estimate():
    assert G.count_tokens({"contents": [user("x" * 400)]})["totalTokens"] >= 100
    assert G.count_tokens({"generateContentRequest": {"contents": [user("hello")]}})["totalTokens"] >= 1
    assert G.count_tokens({})["totalTokens"] == 0
    with pytest.raises(BadRequest):
        G.count_tokens({"contents": [{"parts": []}]})


E = dialects.get(dialects.GEMINI_EMBEDDINGS)


def embed(*texts, **extra):
    if len(texts) == 1:
        body = {"content": {"parts": [{"text": texts[0]}]}, **extra}
    else:
        body = {"requests": [{"content": {"parts": [{"text": t}]}, **extra} for t in texts]}
    return E.with_route(body, "models/gemini-embedding-001", "embedContent")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"model": "m"}, "content is not specified"),
        ({"model": "m", "content": {"parts": []}}, "content.parts must not be empty"),
        ({"model": "m", "requests": []}, "requests must not be empty"),
        (
            {"model": "m", "requests": [{"content": {"parts": [{"text": 1}]}}]},
            "requests[0].content.parts[0].text",
        ),
        ({"model": "m", "content": {"parts": [{"text": "x"}]}, "taskType": "GUESS"}, "(TYPE_ENUM)"),
        (
            {"model": "m", "content": {"parts": [{"text": "x"}]}, "outputDimensionality": 0},
            "must be positive",
        ),
    ],
)
def test_refused_embeddings(body, message):
    with pytest.raises(BadRequest) as refused:
        E.check(body)
    assert message in refused.value.message


def test_embeddings_answers_pasted_responses_and_synthetic_vectors():
    one = embed("hello", outputDimensionality=2, taskType="RETRIEVAL_QUERY")
    assert E.check(one).model == "gemini-embedding-001"
    view = E.conversation(one)
    assert (
        view["messages"] == [{"role": "user", "content": "hello"}] and view["embeddings"]["dimensions"] == 2
    )
    assert E.accept({"embeddings": [[1, 0.5]]}, one, view)[0] == {"embedding": {"values": [1, 0.5]}}
    pasted = {"embedding": {"values": [0.0, 1.0]}, "metadata": {"x": 1}}
    assert E.accept(pasted, one, view)[0] == pasted
    for wrong in (
        {"embeddings": [[1.0]]},
        {"embeddings": [[1, 2], [3, 4]]},
        {"embeddings": ["AACAPw=="]},
        {"v": 1},
    ):
        with pytest.raises(InvalidAnswer):
            E.accept(wrong, one, view)

    two = embed("a", "b")
    made = E.synthetic_response(two)
    assert [len(item["values"]) for item in made["embeddings"]] == [3072, 3072]
    assert made == E.synthetic_response(two) and made["embeddings"][0] != made["embeddings"][1]
    assert E.common(made, None)["choices"][0]["message"]["content"] == "2 embeddings of 3072 numbers"
    assert E.upstream_target(two) == "/models/gemini-embedding-001:batchEmbedContents"
    assert E.upstream_target(one) == "/models/gemini-embedding-001:embedContent"
    assert E.error_body(BadRequest("x"))["error"]["status"] == "INVALID_ARGUMENT"


def test_a_function_call_id_a_client_made_is_out_of_the_fingerprint():
    """Gemini CLI names a call that came without an id `<tool>_<epoch ms>_<n>`, new on every run; an id
    semula or a provider gave stays part of the request."""

    def follow_up(call_id: str) -> dict:
        return {
            "model": MODEL,
            "contents": [
                {"role": "user", "parts": [{"text": "list the files"}]},
                {"role": "model", "parts": [{"functionCall": {"id": call_id, "name": "ls", "args": {}}}]},
                {
                    "role": "user",
                    "parts": [
                        {"functionResponse": {"id": call_id, "name": "ls", "response": {"output": "a"}}}
                    ],
                },
            ],
        }

    first, second = follow_up("ls_1796515697474_0"), follow_up("ls_1796515699999_0")
    assert G.fingerprint(first, [], []) == G.fingerprint(second, [], [])
    assert first["contents"][1]["parts"][0]["functionCall"]["id"] == "ls_1796515697474_0"  # not changed
    assert G.fingerprint(follow_up("call_1"), [], []) != G.fingerprint(follow_up("call_2"), [], [])
    # The shape with another tool's name is not the CLI's: kept.
    assert G.fingerprint(follow_up("cat_1796515697474_0"), [], []) != G.fingerprint(
        follow_up("cat_1796515697475_0"), [], []
    )


def test_a_request_at_the_caps_is_not_walked_for_snake_case_or_made_ids(monkeypatch):
    """Issue #49: a request of 100,000 text turns took ~1 s of CPU, a third of it renaming snake_case
    fields it did not have. A request with no key holding `_` is not walked for them, nor are text
    parts looked at for a client's call ids; one snake_case key anywhere is still renamed."""
    from semula.dialects import gemini_checks

    walked, looked = [], []
    walk, look = gemini_checks._json_names, gemini._made_id
    monkeypatch.setattr(gemini_checks, "_json_names", lambda *a: walked.append(1) or walk(*a))
    monkeypatch.setattr(gemini, "_made_id", lambda part: looked.append(part) or look(part))
    # A text holding what a snake_case key looks like is a string, not a key.
    turns = [user(f"turn {i}") for i in range(1000)] + [user('say "max_output_tokens": 5')]
    body = request(*turns, generationConfig={"maxOutputTokens": 5})
    assert body["contents"] == turns and not walked
    G.fingerprint(body, [], [])
    assert not looked
    deep = {
        "role": "model",
        "parts": [{"function_response": {"name": "f", "response": {}, "will_continue": True}}],
    }
    stored = request(*turns, deep)
    assert stored["contents"][-1] == {
        "role": "model",
        "parts": [{"functionResponse": {"name": "f", "response": {}, "willContinue": True}}],
    }
    assert walked
    G.fingerprint(stored, [], [])
    assert len(looked) == 1  # only the part holding a function response


@pytest.mark.parametrize(
    "turn",
    [
        user("x"),
        {"parts": [{"text": "a"}, {"text": "b", "thought": True}]},
        {"role": "", "parts": [{"text": "a", "inlineData": None}]},
        {"role": "system", "parts": [{"text": "a"}]},
        {"role": "user", "parts": []},
        {"role": "user", "parts": [{"text": 5}]},
        {"role": "user", "parts": [{"text": "a", "inlineData": {}}]},
        {"role": "user", "parts": [{"text": "a"}, {"functionCall": {"name": "f"}}]},
        {"role": "user", "parts": "a"},
        [],
    ],
)
def test_a_text_turn_passed_at_once_is_one_the_whole_check_passes(turn):
    from semula.dialects import gemini_checks

    try:
        gemini_checks._check_content(turn, "contents[0]")
        passes = True
    except BadRequest:
        passes = False
    if gemini_checks._text_turn(turn):
        assert passes
    if passes and all(isinstance(p, dict) and set(p) <= {"text", "thought"} for p in turn["parts"]):
        assert gemini_checks._text_turn(turn)


def _skills_prompt(*names: str, after: str = "") -> dict:
    """A request whose system instruction lists agent skills as Gemini CLI 0.61 does."""
    skills = "\n".join(
        f"  <skill>\n    <name>{n}</name>\n    <description>{n} help</description>\n"
        f"    <location>/opt/cli/builtin/{n}</location>\n  </skill>"
        for n in names
    )
    text = f"You are Gemini CLI.\n\n<available_skills>\n{skills}\n</available_skills>\n\n# Hooks{after}"
    return {
        "model": MODEL,
        "systemInstruction": {"role": "user", "parts": [{"text": text}]},
        "contents": [{"role": "user", "parts": [{"text": "list the files"}]}],
    }


def test_the_order_of_gemini_clis_skills_is_out_of_the_fingerprint():
    """Gemini CLI lists its skills in the order two file searches finished in, which a loaded machine
    changes between runs (the real CLI's replay missed at systemInstruction.parts[0].text: recorded
    skill-creator first, sent antigravity-support first). Which skills it lists still counts."""
    recorded = _skills_prompt("skill-creator", "antigravity-support")
    replayed = _skills_prompt("antigravity-support", "skill-creator")
    assert G.fingerprint(recorded, [], []) == G.fingerprint(replayed, [], [])
    text = recorded["systemInstruction"]["parts"][0]["text"]
    assert text.index("skill-creator") < text.index("antigravity-support")  # the request is as sent
    assert G.fingerprint(recorded, [], []) != G.fingerprint(_skills_prompt("skill-creator", "other"), [], [])
    assert G.fingerprint(recorded, [], []) != G.fingerprint(
        _skills_prompt("skill-creator", "antigravity-support", after=" more"), [], []
    )
    # A list that is not one of <skill> elements only is left as sent.
    odd = _skills_prompt("b", "a")
    odd["systemInstruction"]["parts"][0]["text"] = odd["systemInstruction"]["parts"][0]["text"].replace(
        "</available_skills>", "note\n</available_skills>"
    )
    assert G.steady(odd) is odd
    assert G.steady(_skills_prompt("a", "b")) == _skills_prompt("a", "b")

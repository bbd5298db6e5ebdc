"""The Gemini API dialect through Flask's test client, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from semula.service import Context, bundles, entries, pending, projects, record_through, tokens
from semula.web import create_app
from tests.fake_upstream import FakeUpstream
from tests.helpers import WEATHER_FUNCTION, answered_post, dashboard_text_answer, parked

MODEL = "gemini-2.5-flash"
URL = f"/p/shop/v1beta/models/{MODEL}:generateContent"
STREAM_URL = f"/p/shop/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
WEATHER = {
    "name": "get_weather",
    "description": WEATHER_FUNCTION["description"],
    "parameters": {
        "type": "OBJECT",
        "properties": {"city": {"type": "STRING"}},
        "required": ["city"],
    },
}


def body(text: str = "Say hi", **extra) -> dict:
    return {"contents": [{"role": "user", "parts": [{"text": text}]}], **extra}


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def key(make_token):
    """The token as google-genai sends it: x-goog-api-key."""
    return {"x-goog-api-key": make_token("admin")["Authorization"].split()[1]}


def record(ctx, shop, client, headers, request, payload, url=URL):
    return answered_post(ctx, shop, lambda: client.post(url, json=request, headers=headers), payload)


def sse_chunks(text: str) -> list[dict]:
    blocks = [block for block in text.split("\r\n\r\n") if block.strip()]
    assert all(block.startswith("data: ") for block in blocks), text
    return [json.loads(block[len("data: ") :]) for block in blocks]


def test_text_recorded_then_replayed_with_the_model_from_the_path(ctx, shop, client, key):
    request = body(systemInstruction={"parts": [{"text": "Be terse."}]}, generationConfig={"temperature": 0})
    first = record(ctx, shop, client, key, request, "Hi!")
    assert first.status_code == 200, first.json
    response = first.json
    candidate = response["candidates"][0]
    assert candidate["content"] == {"parts": [{"text": "Hi!"}], "role": "model"}
    assert candidate["finishReason"] == "STOP" and response["modelVersion"] == MODEL
    assert response["usageMetadata"]["totalTokenCount"] >= 1 and response["responseId"]
    [entry] = entries.list_entries(ctx, "shop")["data"]
    assert entry["api"] == "gemini.generate_content" and entry["model"] == MODEL

    projects.update(ctx, "shop", {"mode": "replay"})
    again = client.post(URL, json=request, headers=key)
    assert again.status_code == 200
    assert again.json["candidates"] == response["candidates"]
    assert again.json["responseId"] != response["responseId"]
    # The same body to another model is another request; so is it under /v1 (where google-genai calls).
    other = client.post(URL.replace(MODEL, "gemini-2.5-pro"), json=request, headers=key)
    assert other.status_code == 424
    v1 = client.post(URL.replace("/v1beta/", "/v1/"), json=request, headers=key)
    assert v1.status_code == 200 and v1.json["candidates"] == response["candidates"]
    # ?key= carries the token too; x-goog-api-key is a token on the Gemini routes only.
    token = key["x-goog-api-key"]
    assert client.post(f"{URL}?key={token}", json=request).status_code == 200
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "Say hi"}]}
    assert client.post("/p/shop/v1/chat/completions", json=chat, headers=key).status_code == 401


def test_the_view_and_a_function_call_follow_up(ctx, shop, client, key):
    tools = [{"functionDeclarations": [WEATHER]}]
    config = {"functionCallingConfig": {"mode": "ANY"}}
    ask = body("Weather in Paris?", tools=tools, toolConfig=config)

    def answer_with_call():
        [row] = parked(ctx, shop)
        view = pending.get(ctx, row["id"])["conversation"]
        assert view["messages"] == [{"role": "user", "content": "Weather in Paris?"}]
        assert view["tools"][0]["function"]["parameters"]["properties"]["city"] == {"type": "string"}
        assert view["tool_choice"] == "required"
        return row

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(lambda: client.post(URL, json=ask, headers=key))
        row = answer_with_call()
        # The function's schema is checked: a call without the required city is refused.
        with pytest.raises(Exception, match="city"):
            pending.answer(ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {}}]})
        pending.answer(
            ctx, row["id"], {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}
        )
        called = future.result(10)
    assert called.status_code == 200, called.json
    parts = called.json["candidates"][0]["content"]["parts"]
    call_id = parts[0]["functionCall"]["id"]
    assert parts == [{"functionCall": {"id": call_id, "name": "get_weather", "args": {"city": "Paris"}}}]

    follow = body("Weather in Paris?", tools=tools)
    follow["contents"] += [
        {"role": "model", "parts": parts},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 21}}}]},
    ]
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(lambda: client.post(URL, json=follow, headers=key))
        [row] = [r for r in parked(ctx, shop)]
        view = pending.get(ctx, row["id"])["conversation"]
        call = view["messages"][1]["tool_calls"][0]
        assert view["messages"][2] == {"role": "tool", "tool_call_id": call["id"], "content": '{"temp": 21}'}
        # Answered over REST, as an agent or the answerer daemon does.
        rest = {"Authorization": f"Bearer {key['x-goog-api-key']}"}
        shown = client.get(f"/api/v1/pending/{row['id']}", headers=rest).json
        assert shown["api"] == "gemini.generate_content" and shown["conversation"] == view
        answered = client.post(
            f"/api/v1/pending/{row['id']}/answer", json={"content": "21 degrees."}, headers=rest
        )
        assert answered.status_code == 200, answered.json
        final = future.result(10)
    assert final.json["candidates"][0]["content"]["parts"] == [{"text": "21 degrees."}]

    projects.update(ctx, "shop", {"mode": "replay"})
    assert client.post(URL, json=ask, headers=key).json["candidates"][0]["content"]["parts"] == parts
    assert client.post(URL, json=follow, headers=key).status_code == 200


def test_a_stream_replays_as_sse_chunks_of_one_recording(ctx, shop, client, key):
    request = body("Tell a story")
    words = "Once upon a time there was a small server that answered every call."
    first = record(ctx, shop, client, key, request, words, url=STREAM_URL)
    assert first.status_code == 200 and first.headers["Content-Type"].startswith("text/event-stream")
    chunks = sse_chunks(first.get_data(as_text=True))
    assert len(chunks) > 1
    text = "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
    assert text == words
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in chunks[-1]
    assert len({c["responseId"] for c in chunks}) == 1

    projects.update(ctx, "shop", {"mode": "replay"})
    # One recording answers the stream and the plain call (stream is transport).
    plain = client.post(URL, json=request, headers=key)
    assert plain.json["candidates"][0]["content"]["parts"] == [{"text": words}]
    again = sse_chunks(client.post(STREAM_URL, json=request, headers=key).get_data(as_text=True))
    assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in again) == words
    # Without alt=sse Google streams one JSON array of the same chunks (first, second and kept sights).
    for _ in range(3):
        array = client.post(STREAM_URL.removesuffix("?alt=sse"), json=request, headers=key)
        assert array.status_code == 200 and array.headers["Content-Type"].startswith("application/json")
        assert [c["candidates"] for c in array.json] == [c["candidates"] for c in again]
    # A header fault that shapes the reply keeps it an array: slow delays it, disconnect cuts it.
    arrayed_url = STREAM_URL.removesuffix("?alt=sse")
    slow = client.post(arrayed_url, json=request, headers={**key, "X-Semula-Fault": "slow; ttfb=0.01"})
    assert slow.headers["Content-Type"].startswith("application/json")
    assert [c["candidates"] for c in slow.json] == [c["candidates"] for c in again]
    cut_one = {**key, "X-Semula-Fault": "disconnect; after_events=1"}
    cut = client.post(arrayed_url, json=request, headers=cut_one)
    assert cut.headers["Content-Type"].startswith("application/json")
    sse = client.post(STREAM_URL, json=request, headers=cut_one)
    assert [c["candidates"] for c in sse_chunks(sse.get_data(as_text=True))] == [again[0]["candidates"]]
    # One element, then the cut (which only a real socket shows: here the array ends after it).
    assert [c["candidates"] for c in cut.json] == [again[0]["candidates"]]
    # An error is Google's error object, not an array.
    missed = client.post(STREAM_URL.removesuffix("?alt=sse"), json=body("never recorded"), headers=key)
    assert missed.status_code == 424 and missed.json["error"]["status"] == "FAILED_PRECONDITION"


def test_errors_are_in_googles_envelope_with_semulas_code(ctx, shop, client, key):
    record(ctx, shop, client, key, body("How are you?"), "Fine.")
    projects.update(ctx, "shop", {"mode": "replay"})
    miss = client.post(URL, json=body("How are you!"), headers=key)
    assert miss.status_code == 424
    error = miss.json["error"]
    assert error["code"] == 424 and error["status"] == "FAILED_PRECONDITION"
    assert (
        error["message"].startswith("semula_replay_miss: ")
        and "contents[0].parts[0].text" in error["message"]
    )
    assert error["details"][0]["reason"] == "semula_replay_miss"

    unauthenticated = client.post(URL, json=body(), headers={"x-goog-api-key": "smt_wrong"})
    assert unauthenticated.status_code == 401
    assert unauthenticated.json["error"]["status"] == "UNAUTHENTICATED"

    refused = client.post(URL, json={"contents": [{"role": "user", "parts": []}]}, headers=key)
    assert refused.status_code == 400
    assert refused.json["error"] == {
        "code": 400,
        "status": "INVALID_ARGUMENT",
        "message": "* GenerateContentRequest.contents[0].parts: contents.parts must not be empty.",
        "details": [
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [
                    {
                        "field": "contents[0].parts",
                        "description": "* GenerateContentRequest.contents[0].parts: contents.parts must not "
                        "be empty.",
                    }
                ],
            }
        ],
    }
    got = client.get(URL, headers=key)
    assert got.status_code == 405 and got.json["error"]["code"] == 405
    unknown = client.post("/p/shop/v1beta/models/x:predict", json={}, headers=key)
    assert unknown.status_code == 404 and unknown.json["error"]["status"] == "NOT_FOUND"
    missing = client.post("/p/nosuch/v1beta/models/x:generateContent", json=body(), headers=key)
    assert missing.status_code == 404 and missing.json["error"]["status"] == "NOT_FOUND"


def test_unknown_fields_are_kept_and_fingerprinted(ctx, shop, client, key):
    request = body(someFutureField={"on": True}, generationConfig={"newKnob": 3})
    assert record(ctx, shop, client, key, request, "ok").status_code == 200
    [entry] = entries.list_entries(ctx, "shop")["data"]
    stored = entries.get(ctx, entry["id"])["request"]
    assert stored["someFutureField"] == {"on": True} and stored["generationConfig"] == {"newKnob": 3}
    projects.update(ctx, "shop", {"mode": "replay"})
    assert client.post(URL, json=request, headers=key).status_code == 200
    assert client.post(URL, json=body(someFutureField={"on": False}), headers=key).status_code == 424


def test_count_tokens_and_models(ctx: Context, shop, client, key):
    counted = client.post(f"/p/shop/v1beta/models/{MODEL}:countTokens", json=body("Hello there"), headers=key)
    assert counted.status_code == 200 and counted.json["totalTokens"] >= 1
    assert client.get("/p/shop/v1beta/models", headers=key).json == {"models": []}
    record(ctx, shop, client, key, body(), "Hi")
    listed = client.get("/p/shop/v1beta/models", headers=key).json["models"]
    assert [m["name"] for m in listed] == [f"models/{MODEL}"]
    # google-genai asks under /v1: a Google client's key makes it the Gemini API's list.
    assert client.get("/p/shop/v1/models", headers=key).json["models"] == listed
    one = client.get(f"/p/shop/v1beta/models/{MODEL}", headers=key)
    assert one.status_code == 200 and one.json["baseModelId"] == MODEL
    absent = client.get("/p/shop/v1beta/models/gemini-0", headers=key)
    assert absent.status_code == 404 and absent.json["error"]["status"] == "NOT_FOUND"


EMBED_MODEL = "gemini-embedding-001"
EMBED = f"/p/shop/v1beta/models/{EMBED_MODEL}:embedContent"
BATCH = f"/p/shop/v1beta/models/{EMBED_MODEL}:batchEmbedContents"


def embed_one(text: str, **extra) -> dict:
    return {"content": {"parts": [{"text": text}]}, **extra}


def batch(*texts: str) -> dict:
    return {"requests": [{"model": f"models/{EMBED_MODEL}", **embed_one(t)} for t in texts]}


def test_embeddings_answered_then_replayed(ctx, shop, client, key):
    one = embed_one("hello", outputDimensionality=3)
    first = record(ctx, shop, client, key, one, {"embeddings": [[0.5, 0.25, 0.125]]}, url=EMBED)
    assert first.status_code == 200, first.json
    assert first.json == {"embedding": {"values": [0.5, 0.25, 0.125]}}

    def answer_batch():
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(lambda: client.post(BATCH, json=batch("a", "b"), headers=key))
            [row] = parked(ctx, shop)
            view = pending.get(ctx, row["id"])["conversation"]
            assert [m["content"] for m in view["messages"]] == ["a", "b"]
            assert view["embeddings"] == {"inputs": 2, "dimensions": 3072}
            with pytest.raises(Exception, match="2 inputs"):
                pending.answer(ctx, row["id"], {"embeddings": [[0.1] * 3072]})
            pending.answer(ctx, row["id"], {"embeddings": [[0.1] * 3072, [0.2] * 3072]})
            return future.result(10)

    answered = answer_batch()
    assert [len(e["values"]) for e in answered.json["embeddings"]] == [3072, 3072]

    projects.update(ctx, "shop", {"mode": "replay"})
    assert client.post(EMBED, json=one, headers=key).json == first.json
    assert client.post(BATCH, json=batch("a", "b"), headers=key).json == answered.json
    miss = client.post(BATCH, json=batch("a", "c"), headers=key)
    assert miss.status_code == 424 and miss.json["error"]["status"] == "FAILED_PRECONDITION"
    refused = client.post(EMBED, json={"content": {"parts": []}}, headers=key)
    assert refused.status_code == 400 and refused.json["error"]["status"] == "INVALID_ARGUMENT"


def test_synthetic_embeddings_are_made_at_once(ctx, shop, client, key):
    projects.update(ctx, "shop", {"embeddings": "synthetic"})
    made = client.post(BATCH, json=batch("a", "b"), headers=key)
    assert made.status_code == 200, made.json
    first, second = (e["values"] for e in made.json["embeddings"])
    assert len(first) == len(second) == 3072 and first != second
    single = client.post(EMBED, json=embed_one("a", outputDimensionality=8), headers=key)
    assert len(single.json["embedding"]["values"]) == 8
    # Saved as entries at once, nothing parked.
    assert len(entries.list_entries(ctx, "shop")["data"]) == 2
    projects.update(ctx, "shop", {"mode": "replay"})
    assert client.post(BATCH, json=batch("a", "b"), headers=key).json == made.json


CANARY = "AIzaSyCANARY-integration-0123456789abcde"


def test_record_through_posts_to_google_with_its_key_only(ctx, store, settings):
    fake = FakeUpstream()
    try:
        operator = replace(settings, gemini_key=CANARY, gemini_url=fake.url.removesuffix("/v1") + "/v1beta")
        octx = Context(store, operator, ctx.principal)
        projects.create(octx, {"name": "shop", "record_through": True})
        client = create_app(operator, store).test_client()
        secret = tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]
        headers = {"x-goog-api-key": secret}
        first = client.post(URL, json=body("Hello"), headers=headers)
        assert first.status_code == 200, first.json
        assert first.json["candidates"][0]["content"]["parts"] == [{"text": "upstream says: Hello"}]
        assert first.json["modelVersion"] == "gemini-2.5-flash-001" and first.json["providerExtra"] == 1
        streamed = client.post(STREAM_URL, json=body("Stream"), headers=headers)
        chunks = sse_chunks(streamed.get_data(as_text=True))
        assert (
            "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in chunks)
            == "upstream says: Stream"
        )
        # Relayed as it comes and recorded whole when asked for as a JSON array: the provider is
        # still asked for server-sent events.
        arrayed = client.post(STREAM_URL.removesuffix("?alt=sse"), json=body("Array"), headers=headers)
        assert arrayed.headers["Content-Type"].startswith("application/json")
        assert "".join(c["candidates"][0]["content"]["parts"][0]["text"] for c in arrayed.json) == (
            "upstream says: Array"
        )
        vectors = client.post(BATCH, json=batch("a", "b"), headers=headers)
        assert vectors.json == {"embeddings": [{"values": [0.25, -0.5, 0.0]}, {"values": [0.25, -0.5, 1.0]}]}
        call, stream_call, array_call, embed_call = fake.calls
        assert call["path"] == f"/v1beta/models/{MODEL}:generateContent"
        assert (
            stream_call["path"]
            == array_call["path"]
            == f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
        )
        assert embed_call["path"] == f"/v1beta/models/{EMBED_MODEL}:batchEmbedContents"
        assert call["headers"]["x-goog-api-key"] == CANARY and "Authorization" not in call["headers"]
        assert secret not in json.dumps(fake.calls)
        # The provider gets the app's own body: no model or stream semula keeps in the stored request.
        assert call["body"] == body("Hello") and stream_call["body"] == body("Stream")
        usage = record_through.usage(octx, "shop")
        assert usage["calls"] == 4 and usage["prompt_tokens"] == 36 and usage["completion_tokens"] == 18

        projects.update(ctx, "shop", {"mode": "replay"})
        again = client.post(URL, json=body("Hello"), headers=headers).json
        assert again["candidates"] == first.json["candidates"] and again["responseId"] != "upstream-id"
        replayed = sse_chunks(
            client.post(STREAM_URL, json=body("Stream"), headers=headers).get_data(as_text=True)
        )
        assert [c["candidates"] for c in replayed] == [c["candidates"] for c in chunks]
        replayed_array = client.post(STREAM_URL.removesuffix("?alt=sse"), json=body("Array"), headers=headers)
        assert [c["candidates"] for c in replayed_array.json] == [c["candidates"] for c in arrayed.json]
        assert len(fake.calls) == 4

        projects.update(ctx, "shop", {"mode": "record"})
        fake.mode = "error"
        failed = client.post(URL, json=body("Bad key"), headers=headers)
        assert failed.status_code == 502 and failed.json["error"]["status"] == "UNAVAILABLE"
        assert CANARY not in failed.get_data(as_text=True)
    finally:
        fake.close()


def test_a_session_records_and_replays_a_sequence(ctx, shop, client, key):
    projects.update(ctx, "shop", {"sequences": "record"})

    def text(response):
        assert response.status_code == 200, response.json
        return response.json["candidates"][0]["content"]["parts"][0]["text"]

    def url(session):
        return f"/p/shop/s/{session}/v1beta/models/{MODEL}:generateContent"

    recorded = [
        text(record(ctx, shop, client, key, body("Next?"), answer, url=url("run-1"))) for answer in "AB"
    ]
    assert recorded == ["A", "B"]
    projects.update(ctx, "shop", {"mode": "replay"})
    replayed = [text(client.post(url("run-2"), json=body("Next?"), headers=key)) for _ in range(2)]
    assert replayed == ["A", "B"]


def test_the_dashboard_answers_a_gemini_call_as_text(ctx, shop, client, key):
    request = body("Greet me", systemInstruction={"parts": [{"text": "Be kind."}]})
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, URL, json=request, headers=key)
        [row] = parked(ctx, shop)
        shown = dashboard_text_answer(client, key["x-goog-api-key"], row["id"], "Hello, you.")
        assert "Greet me" in shown and "Be kind." in shown
        response = future.result(10).json
    assert response["candidates"][0]["content"]["parts"] == [{"text": "Hello, you."}]
    [entry] = entries.list_entries(ctx, "shop")["data"]
    page = client.get(f"/ui/entries/{entry['id']}")
    assert page.status_code == 200 and "Hello, you." in page.get_data(as_text=True)
    assert entry["preview"]["answer"] == "Hello, you."


def test_a_pasted_response_with_thoughts_exports_imports_and_replays(ctx, shop, client, key):
    request = body("Think, then greet", generationConfig={"thinkingConfig": {"includeThoughts": True}})
    pasted = {
        "candidates": [
            {
                "content": {
                    "parts": [
                        {"text": "The user wants a greeting.", "thought": True},
                        {"text": "Hello there.", "thoughtSignature": "c2lnbmF0dXJl"},
                    ],
                    "role": "model",
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 4, "candidatesTokenCount": 3, "thoughtsTokenCount": 6},
    }
    answered = record(ctx, shop, client, key, request, pasted).json
    assert answered["candidates"][0]["content"] == pasted["candidates"][0]["content"]
    assert answered["usageMetadata"] == pasted["usageMetadata"] and answered["modelVersion"] == MODEL

    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    [item] = json.loads(exported)["entries"]
    assert item["api"] == "gemini.generate_content" and item["request"]["model"] == MODEL
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    assert bundles.import_bundle(ctx, "copy", io.BytesIO(exported))["created"] == 1
    url = f"/p/copy/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
    chunks = sse_chunks(client.post(url, json=request, headers=key).get_data(as_text=True))
    parts = [part for chunk in chunks for part in chunk["candidates"][0]["content"]["parts"]]
    assert (
        parts[0]["thought"] is True
        and "".join(p["text"] for p in parts if not p.get("thought")) == "Hello there."
    )
    [listed] = entries.list_entries(ctx, "copy")["data"]
    assert listed["api"] == "gemini.generate_content" and listed["preview"]["answer"] == "Hello there."

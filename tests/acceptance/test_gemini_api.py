"""The Gemini API against real gunicorn + gevent, driven by the official google-genai SDK."""

from __future__ import annotations

import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from semula.service import entries, projects
from tests.acceptance.test_responses_api import recorded
from tests.helpers import WEATHER_FUNCTION

pytestmark = pytest.mark.acceptance

MODEL = "gemini-2.5-flash"
EMBED_MODEL = "gemini-embedding-001"
WEATHER = types.Tool(
    function_declarations=[
        types.FunctionDeclaration(
            name="get_weather",
            description=WEATHER_FUNCTION["description"],
            parameters_json_schema=WEATHER_FUNCTION["parameters"],
        )
    ]
)
COUNTED = " ".join(["one, two, three, four and five."] * 8)
PARIS = {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}


@pytest.fixture
def gemini_client(token):
    """A google-genai client for a server and project (the SDK retries nothing unless told to)."""
    made = []

    def make(server, version: str | None = "v1beta"):
        options = types.HttpOptions(base_url=f"{server.url}/p/shop", api_version=version, timeout=120_000)
        client = genai.Client(api_key=token, http_options=options)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def test_gemini_record_then_replay_with_the_sdk(start_server, ctx, shop, gemini_client):
    server = start_server()
    client = gemini_client(server)
    seen: set[str] = set()
    asked = "What is the weather in Paris?"
    tools = types.GenerateContentConfig(tools=[WEATHER])

    def plain():
        config = types.GenerateContentConfig(system_instruction="Be terse.", temperature=0)
        return client.models.generate_content(model=MODEL, contents="Say hello", config=config)

    def tool_call():
        return client.models.generate_content(model=MODEL, contents=asked, config=tools)

    def streamed():
        chunks = client.models.generate_content_stream(model=MODEL, contents="Count to five")
        return [chunk.text for chunk in chunks]

    def embedded():
        config = types.EmbedContentConfig(output_dimensionality=4)
        return client.models.embed_content(model=EMBED_MODEL, contents=["red", "blue"], config=config)

    first = recorded(ctx, shop, "Hello!", seen, plain)
    assert first.text == "Hello!" and first.candidates[0].finish_reason == types.FinishReason.STOP
    assert first.model_version == MODEL and first.usage_metadata.total_token_count > 0

    call = recorded(ctx, shop, PARIS, seen, tool_call)
    [function_call] = call.function_calls
    assert function_call.name == "get_weather" and function_call.args == {"city": "Paris"}

    history = [
        types.Content(role="user", parts=[types.Part.from_text(text=asked)]),
        call.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name="get_weather", response={"temp_c": 21})],
        ),
    ]

    def follow_up():
        return client.models.generate_content(model=MODEL, contents=history, config=tools)

    answer = recorded(ctx, shop, "It is 21 °C in Paris.", seen, follow_up)
    assert answer.text == "It is 21 °C in Paris."

    pieces = recorded(ctx, shop, COUNTED, seen, streamed)
    assert len(pieces) > 1 and "".join(pieces) == COUNTED

    vectors = [[0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]]
    made = recorded(ctx, shop, {"embeddings": vectors}, seen, embedded)
    assert [e.values for e in made.embeddings] == vectors

    assert client.models.count_tokens(model=MODEL, contents="Say hello").total_tokens >= 1
    apis = {e["api"] for e in entries.list_entries(ctx, "shop")["data"]}
    assert apis == {"gemini.generate_content", "gemini.embed_content"}

    projects.update(ctx, "shop", {"mode": "replay"})
    assert plain().text == "Hello!"
    assert tool_call().function_calls[0].args == {"city": "Paris"}
    assert follow_up().text == "It is 21 °C in Paris."
    assert "".join(streamed()) == COUNTED
    assert [e.values for e in embedded().embeddings] == vectors
    # The SDK's default API version (v1) is served as well.
    v1 = gemini_client(server, None)
    config = types.GenerateContentConfig(system_instruction="Be terse.", temperature=0)
    assert v1.models.generate_content(model=MODEL, contents="Say hello", config=config).text == "Hello!"
    assert sorted(m.name for m in v1.models.list()) == [f"models/{MODEL}", f"models/{EMBED_MODEL}"]

    # A miss is Google's error envelope: the SDK raises its ClientError with semula's status and code.
    with pytest.raises(genai_errors.ClientError) as missed:
        client.models.generate_content(model=MODEL, contents="Never recorded")
    assert missed.value.code == 424 and missed.value.status == "FAILED_PRECONDITION"
    assert missed.value.message.startswith("semula_replay_miss: ")
    stranger = genai.Client(
        api_key="smt_not_a_token", http_options=types.HttpOptions(base_url=f"{server.url}/p/shop")
    )
    with pytest.raises(genai_errors.ClientError) as unauthenticated, stranger:
        stranger.models.generate_content(model=MODEL, contents="Say hello")
    assert unauthenticated.value.code == 401 and unauthenticated.value.status == "UNAUTHENTICATED"

"""The proxy's routes as clients see them, pinned: for each path and method the status, the error
envelope, the route template the access log and the metrics name it by, and the request-id headers.
The routes come from the dialect registry (semula/dialects/routes.py); this table is what they
amounted to before they did, so a change in how they are declared changes nothing here."""

from __future__ import annotations

import pytest

from semula.service import projects
from tests.helpers import json_log_lines

OPENAI, ANTHROPIC, GOOGLE = "openai", "anthropic", "google"
GOOG = {"x-goog-api-key": "unused"}
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
CONTENTS = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

# (method, path, body, extra headers) -> (status, envelope or None, route template, request-id header)
ROUTES = [
    (
        ("POST", "/p/shop/v1/chat/completions", CHAT, {}),
        (424, OPENAI, "/p/{project}/v1/chat/completions", False),
    ),
    (
        ("GET", "/p/shop/v1/chat/completions", None, {}),
        (405, OPENAI, "/p/{project}/v1/chat/completions", False),
    ),
    (
        ("POST", "/p/shop/s/run1/v1/chat/completions", CHAT, {}),
        (424, OPENAI, "/p/{project}/v1/chat/completions", False),
    ),
    (("POST", "/v1/chat/completions", CHAT, {}), (400, OPENAI, "/v1/chat/completions", False)),
    (
        ("POST", "/p/shop/v1/responses", {"model": "m", "input": "hi"}, {}),
        (424, OPENAI, "/p/{project}/v1/responses", False),
    ),
    (("GET", "/p/shop/v1/responses", None, {}), (405, OPENAI, "/p/{project}/v1/responses", False)),
    (
        ("GET", "/p/shop/v1/responses/resp_1", None, {}),
        (404, OPENAI, "/p/{project}/v1/responses/{id}", False),
    ),
    (
        ("DELETE", "/p/shop/v1/responses/resp_1", None, {}),
        (404, OPENAI, "/p/{project}/v1/responses/{id}", False),
    ),
    (
        ("POST", "/p/shop/v1/responses/resp_1", None, {}),
        (405, OPENAI, "/p/{project}/v1/responses/{id}", False),
    ),
    (
        ("GET", "/p/shop/v1/responses/resp_1/input_items", None, {}),
        (404, OPENAI, "/p/{project}/v1/responses/{id}/input_items", False),
    ),
    (
        ("POST", "/p/shop/v1/responses/resp_1/input_items", None, {}),
        (405, OPENAI, "/p/{project}/v1/responses/{id}/input_items", False),
    ),
    (
        ("POST", "/p/shop/v1/embeddings", {"model": "m", "input": "hi"}, {}),
        (424, OPENAI, "/p/{project}/v1/embeddings", False),
    ),
    (("POST", "/p/shop/v1/messages", MESSAGES, {}), (424, ANTHROPIC, "/p/{project}/v1/messages", True)),
    (("GET", "/p/shop/v1/messages", None, {}), (405, ANTHROPIC, "/p/{project}/v1/messages", True)),
    (
        ("POST", "/p/shop/v1/messages/count_tokens", MESSAGES, {}),
        (200, None, "/p/{project}/v1/messages/count_tokens", True),
    ),
    (
        ("GET", "/p/shop/v1/messages/count_tokens", None, {}),
        (405, ANTHROPIC, "/p/{project}/v1/messages/count_tokens", True),
    ),
    (("GET", "/p/shop/v1/models", None, {}), (200, None, "/p/{project}/v1/models", False)),
    (("GET", "/p/shop/v1/models/gpt-4", None, {}), (404, OPENAI, "/p/{project}/v1/models/{model}", False)),
    (("POST", "/p/shop/v1/models", None, {}), (405, OPENAI, "/p/{project}/v1/models", False)),
    (("GET", "/p/shop/v1/models", None, GOOG), (200, None, "/p/{project}/v1/models", False)),
    (("GET", "/p/shop/v1/models/gem", None, GOOG), (404, GOOGLE, "/p/{project}/v1/models/{model}", False)),
    (("GET", "/v1beta/models", None, {"x-semula-project": "shop"}), (200, None, "/v1beta/models", False)),
    (
        ("GET", "/p/shop/v1beta/models/gem", None, {}),
        (404, GOOGLE, "/p/{project}/v1beta/models/{model}", False),
    ),
    (("POST", "/p/shop/v1beta/models", None, {}), (405, GOOGLE, "/p/{project}/v1beta/models", False)),
    (
        ("POST", "/p/shop/v1beta/models/gem:generateContent", CONTENTS, {}),
        (424, GOOGLE, "/p/{project}/v1beta/models/{model}:generateContent", False),
    ),
    (
        ("POST", "/p/shop/v1/models/gem:generateContent", CONTENTS, {}),
        (424, GOOGLE, "/p/{project}/v1/models/{model}:generateContent", False),
    ),
    (
        ("GET", "/p/shop/v1beta/models/gem:generateContent", None, {}),
        (405, GOOGLE, "/p/{project}/v1beta/models/{model}:generateContent", False),
    ),
    (
        ("POST", "/p/shop/v1beta/models/gem:streamGenerateContent", CONTENTS, {}),
        (424, GOOGLE, "/p/{project}/v1beta/models/{model}:streamGenerateContent", False),
    ),
    (
        ("POST", "/p/shop/v1beta/models/gem:countTokens", CONTENTS, {}),
        (200, None, "/p/{project}/v1beta/models/{model}:countTokens", False),
    ),
    (
        ("GET", "/p/shop/v1beta/models/gem:countTokens", None, {}),
        (405, GOOGLE, "/p/{project}/v1beta/models/{model}:countTokens", False),
    ),
    (
        ("POST", "/p/shop/v1beta/models/gem:embedContent", {"content": {"parts": [{"text": "hi"}]}}, {}),
        (424, GOOGLE, "/p/{project}/v1beta/models/{model}:embedContent", False),
    ),
    (
        (
            "POST",
            "/p/shop/v1/models/gem:batchEmbedContents",
            {"requests": [{"content": {"parts": [{"text": "hi"}]}}]},
            {},
        ),
        (424, GOOGLE, "/p/{project}/v1/models/{model}:batchEmbedContents", False),
    ),
    (("GET", "/v1/audio/speech", None, {}), (404, OPENAI, "unmatched", False)),
    (("GET", "/p/shop/v1/audio/speech", None, {}), (404, OPENAI, "unmatched", False)),
    (("POST", "/v1beta/models/gem:predict", None, {}), (404, GOOGLE, "unmatched", False)),
    (("POST", "/p/Shop/v1/chat/completions", CHAT, {}), (404, OPENAI, "unmatched", False)),
    (
        ("POST", "/p/nope/v1/chat/completions", CHAT, {}),
        (404, OPENAI, "/p/{project}/v1/chat/completions", False),
    ),
    (
        ("GET", "/p/nope/v1/messages/count_tokens", None, {}),
        (404, ANTHROPIC, "/p/{project}/v1/messages/count_tokens", True),
    ),
]


def envelope(body: dict) -> str:
    """Which API's error object a body is: OpenAI's, Anthropic's or Google's."""
    if body.get("type") == "error":
        return ANTHROPIC
    return GOOGLE if isinstance(body["error"].get("code"), int) else OPENAI


@pytest.fixture
def access_lines():
    with json_log_lines("semula.access") as lines:
        yield lines


def test_every_route_answers_as_before(ctx, client, make_token, access_lines):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    admin = make_token("admin")
    seen = []
    for (method, path, body, headers), _ in ROUTES:
        response = client.open(path, method=method, json=body, headers={**admin, **headers})
        kind = envelope(response.json) if response.status_code >= 400 else None
        seen.append((response.status_code, kind, "request-id" in response.headers))
    lines = access_lines()
    assert len(lines) == len(ROUTES)
    got = [(status, kind, line["route"], rid) for (status, kind, rid), line in zip(seen, lines, strict=True)]
    assert got == [expected for _, expected in ROUTES]


def test_each_api_takes_the_token_where_its_clients_send_it(ctx, client, make_token):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    token = make_token("admin")["Authorization"].split()[1]
    anthropic, google = {"x-api-key": token}, {"x-goog-api-key": token}
    assert client.post("/p/shop/v1/messages", json=MESSAGES, headers=anthropic).status_code == 424
    assert (
        client.post("/p/shop/v1/messages/count_tokens", json=MESSAGES, headers=anthropic).status_code == 200
    )
    gemini = "/p/shop/v1beta/models/gem:generateContent"
    assert client.post(gemini, json=CONTENTS, headers=google).status_code == 424
    assert client.post(f"{gemini}?key={token}", json=CONTENTS).status_code == 424
    assert client.get("/p/shop/v1/models", headers=google).json == {"models": []}
    # Elsewhere those headers are not a token.
    assert client.post("/p/shop/v1/chat/completions", json=CHAT, headers=anthropic).status_code == 401
    assert client.post("/p/shop/v1/messages", json=MESSAGES, headers=google).status_code == 401
    assert client.get("/p/shop/v1/models", headers=anthropic).status_code == 401

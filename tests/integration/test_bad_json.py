"""Bad JSON at every entrance (proxy, REST, bundle import) is a 400 in OpenAI's shape, never a 500,
and nothing of it is stored: non-standard numbers, lone surrogates, nesting past jsonio.MAX_DEPTH."""

from __future__ import annotations

import json

import pytest

from semula.core import jsonio
from semula.service import pending, projects
from tests.entry_helpers import request_for, snapshot
from tests.integration.test_proxy import call_async, parked

URL = "/p/shop/v1/chat/completions"
BODY = json.dumps(request_for("hello"))
DEEP = "[" * 5000 + "]" * 5000  # past Python's recursion limit, where json.loads itself gives up
JUST_TOO_DEEP = "[" * jsonio.MAX_DEPTH + "]" * jsonio.MAX_DEPTH  # inside a body object: one level too many
BAD = {
    "lone surrogate": (BODY.replace("hello", "\\ud800"), "lone UTF-16 surrogate"),
    "reversed pair": (BODY.replace("hello", "\\udc00\\ud800"), "lone UTF-16 surrogate"),
    "NaN": (BODY.replace("}", ', "temperature": NaN}', 1), "NaN"),
    "Infinity": (BODY.replace("}", ', "temperature": Infinity}', 1), "Infinity"),
    "overflowing number": (BODY.replace("}", ', "temperature": 1e400}', 1), "too large"),
    "integer past 64 bits": (BODY.replace("}", ', "seed": 99999999999999999999}', 1), "fit in 64 bits"),
    "deep": (BODY.replace('"hello"', DEEP), "nests deeper than"),
    "just too deep": (BODY.replace('"hello"', JUST_TOO_DEEP), "nests deeper than"),
}


def schema(levels: int) -> dict:
    """A valid tool parameter schema whose JSON nests exactly `levels` deep."""
    if levels == 1:
        return {"type": "string"}
    if levels == 2:
        return {"type": "string", "enum": ["x"]}
    return {"type": "object", "properties": {"a": schema(levels - 2)}}


def at_the_limit() -> dict:
    """A real chat request whose JSON nests exactly MAX_DEPTH deep (the tool schema starts at 5)."""
    tool = {"type": "function", "function": {"name": "f", "parameters": schema(jsonio.MAX_DEPTH - 4)}}
    return request_for("deep tools", tools=[tool])


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    return 0


@pytest.fixture
def shop(ctx):
    return projects.create(ctx, {"name": "shop", "record_timeout": 30})


@pytest.fixture
def admin(make_token):
    return make_token("admin")


def assert_400(response, message):
    assert response.status_code == 400, response.data[:300]
    error = response.json["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and message in error["message"], error


@pytest.mark.parametrize("case", sorted(BAD))
def test_the_proxy_refuses_bad_json_and_parks_nothing(ctx, shop, client, admin, case):
    raw, message = BAD[case]
    r = client.post(URL, data=raw.encode(), headers={**admin, "Content-Type": "application/json"})
    assert_400(r, message)
    assert ctx.store.all("parked_in_project", project_id=shop["id"]) == []


@pytest.mark.parametrize("case", sorted(BAD))
def test_rest_bodies_refuse_bad_json(ctx, shop, client, admin, case):
    raw, message = BAD[case]
    future = call_async(client, admin)
    [row] = parked(ctx, shop)
    answer = '{"content": "fine", "usage": ' + raw + "}"
    r = client.post(f"/api/v1/pending/{row['id']}/answer", data=answer, headers=admin)
    assert_400(r, message)
    created = client.post("/api/v1/projects", data='{"name": "other", "x": ' + raw + "}", headers=admin)
    assert_400(created, message)
    pending.cancel(ctx, row["id"])
    assert future.result(10).status_code == 409


def bundle_with(request_json: str) -> bytes:
    header = '{"bundle": {"format": "semula-bundle", "version": 1}, "entries": ['
    return (header + '{"request": ' + request_json + ', "response": {"content": "1"}}]}').encode()


@pytest.mark.parametrize("case", ["deep", "just too deep"])
def test_bundle_imports_refuse_nesting_past_the_limit(ctx, shop, client, admin, case):
    before = snapshot(ctx, "shop")
    r = client.post("/api/v1/projects/shop/import", data=bundle_with(BAD[case][0]), headers=admin)
    assert_400(r, "nests deeper than")
    assert r.json["error"]["code"] == "invalid_bundle"
    assert snapshot(ctx, "shop") == before


def test_a_request_at_the_limit_parks_answers_replays_and_round_trips(ctx, shop, client, admin):
    body = at_the_limit()
    assert depth(body) == jsonio.MAX_DEPTH
    future = call_async(client, admin, body)
    [row] = parked(ctx, shop)
    pending.answer(ctx, row["id"], {"tool_calls": [{"name": "f", "arguments": {"a": {"a": {}}}}]})
    assert future.result(10).status_code == 200
    assert client.post(URL, json=body, headers=admin).status_code == 200
    exported = client.get("/api/v1/projects/shop/export", headers=admin).data
    projects.create(ctx, {"name": "copy"})
    r = client.post("/api/v1/projects/copy/import", data=exported, headers=admin)
    assert r.status_code == 200 and r.json["created"] == 1, r.json

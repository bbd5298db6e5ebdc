"""Adding an API is one registration (issue #51 item 4): a toy dialect, declared here and registered
with one call, is served on its route, answers errors in its own envelope, is counted and logged under
its route template, and is in the OpenAPI document's `api` values; unregistered, it is all gone."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from semula import dialects
from semula.core.errors import BadRequest, SemulaError
from semula.dialects import Dialect, Request, common_answer
from semula.dialects.routes import Route
from semula.service import projects
from tests.helpers import answered_post


class Echo(Dialect):
    """An API that takes `{"say": text}` and answers `{"echoed": text}`; its errors are `{"oops": …}`."""

    name = "toy.echo"
    title = "Toy echo"
    upstream_path = "/echo"
    transport_fields = frozenset()
    routes = (Route("/v1/toy/echo", "/v1/toy/echo"),)

    def error_body(self, exc: SemulaError) -> dict[str, Any]:
        return {"oops": {"status": exc.status, "why": exc.code}}

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict) or not isinstance(body.get("say"), str):
            raise BadRequest("say must be a string.", code="toy_say")
        return Request(model="echo-1", stream=False)

    def texts(self, request: dict[str, Any]):
        yield request, "say"

    def conversation(self, request: dict[str, Any], history=()) -> dict[str, Any]:
        return {"model": "echo-1", "messages": [{"role": "user", "content": request["say"]}]}

    def respond(self, completion: dict[str, Any], request: dict[str, Any], *, response_id=None) -> dict:
        return {"echoed": completion["choices"][0]["message"]["content"]}

    def common(self, response: dict[str, Any], chunks) -> dict[str, Any]:
        return common_answer("echo-1", [response["echoed"]], [], "stop", 0, 0)

    def render(self, req, response, chunks, expand, now):
        return response, None

    def restamp(self, body, req, now):
        return body


def requests_counted(route: str, status: str, outcome: str) -> float:
    labels = {"route": route, "status": status, "outcome": outcome}
    return REGISTRY.get_sample_value("semula_requests_total", labels) or 0.0


def api_values(client) -> list[str]:
    document = client.get("/api/v1/openapi.json").json
    return document["components"]["schemas"]["Entry"]["properties"]["api"]["enum"]


@pytest.fixture
def echo():
    dialects.register(Echo())  # the one call
    try:
        yield
    finally:
        if Echo.name in dialects.names():
            dialects.unregister(Echo.name)


def test_a_toy_api_is_one_registration(ctx, client, make_token, echo):
    shop = projects.create(ctx, {"name": "shop", "record_timeout": 30})
    admin = make_token("admin")
    url = "/p/shop/v1/toy/echo"
    before = requests_counted("/p/{project}/v1/toy/echo", "200", "hit")

    # Served on its route: recorded (parked and answered), then replayed.
    post = lambda: client.post(url, json={"say": "hello"}, headers=admin)  # noqa: E731
    recorded = answered_post(ctx, shop, post, "hello back")
    assert recorded.status_code == 200 and recorded.json == {"echoed": "hello back"}
    replayed = post()
    assert replayed.status_code == 200 and replayed.json == {"echoed": "hello back"}

    # Its errors are in its envelope, from the first (a 401) on.
    refused = client.post(url, json={"say": 1}, headers=admin)
    assert refused.status_code == 400 and refused.json == {"oops": {"status": 400, "why": "toy_say"}}
    anonymous = client.post(url, json={"say": "hello"})
    assert anonymous.status_code == 401 and anonymous.json["oops"]["status"] == 401
    assert client.get(url, headers=admin).json == {"oops": {"status": 405, "why": "method_not_allowed"}}

    # Counted under its route template; named in the OpenAPI document and the unknown-path error.
    assert requests_counted("/p/{project}/v1/toy/echo", "200", "hit") == before + 1
    assert Echo.name in api_values(client)
    unknown = client.get("/v1/toy/other", headers=admin)
    assert unknown.status_code == 404 and "POST /v1/toy/echo (Toy echo)" in unknown.json["error"]["message"]

    # Unregistered, the route is an unknown path again and the document no longer names it.
    dialects.unregister(Echo.name)
    gone = client.post(url, json={"say": "hello"}, headers=admin)
    assert gone.status_code == 404 and gone.json["error"]["code"] == "unknown_path"
    assert "(Toy echo)" not in gone.json["error"]["message"]
    assert Echo.name not in api_values(client)


def test_a_name_is_registered_once(echo):
    with pytest.raises(ValueError, match="toy.echo"):
        dialects.register(Echo())

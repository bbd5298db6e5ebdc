"""Adding an API is one registration (issue #51 item 4): a toy dialect, declared here and registered
with one call, is served on its route, answers errors in its own envelope, is counted and logged under
its route template, speaks its own protocol over its WebSocket, is in the OpenAPI document's `api`
values and `semula --help`, and reaches the answerer daemon's command by its name; unregistered, it is
all gone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from prometheus_client import REGISTRY
from werkzeug.test import EnvironBuilder

from answerer.daemon import document
from answerer.server import ServiceServer
from semula import dialects
from semula.core.errors import BadRequest, SemulaError
from semula.dialects import Dialect, Request, common_answer, typed_sse
from semula.dialects.routes import Handler, Route, Socket
from semula.service import pending, projects
from semula.surfaces.cli import main
from semula.web import socket_mode
from tests.helpers import answered_post

SOCKET = Socket("echo.say", lane="tag", quiet=("echo.thanks",))


class Echo(Dialect):
    """An API that takes `{"say": text}` and answers `{"echoed": text}`; its errors are `{"oops": …}`."""

    name = "toy.echo"
    title = "Toy echo"
    upstream_path = "/echo"
    transport_fields = frozenset({"stream"})
    sdk_env = (("ECHO_BASE_URL", "{root}/v1/toy"),)  # where its SDK is pointed (the pytest plugin)
    routes = (
        # Its calls, over HTTP and over a WebSocket (a GET upgraded) that speaks its own protocol: an
        # `echo.say` message is a turn, its `tag` a lane echoed on the reply, `echo.thanks` unanswered.
        Route("/v1/toy/echo", "/v1/toy/echo", websocket=SOCKET),
        # A handler of its own: the models its project's recordings use, as this API lists them.
        Route("/v1/toy/models", "/v1/toy/models", Handler(("GET",), lambda s: {"toys": s.models()})),
    )

    def error_body(self, exc: SemulaError) -> dict[str, Any]:
        return {"oops": {"status": exc.status, "why": exc.code}}

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict) or not isinstance(body.get("say"), str):
            raise BadRequest("say must be a string.", code="toy_say")
        return Request(model="echo-1", stream=body.get("stream") is True)

    def texts(self, request: dict[str, Any]):
        yield request, "say"

    def conversation(self, request: dict[str, Any], history=()) -> dict[str, Any]:
        return {"model": "echo-1", "messages": [{"role": "user", "content": request["say"]}]}

    def respond(self, completion: dict[str, Any], request: dict[str, Any], *, response_id=None) -> dict:
        return {"echoed": completion["choices"][0]["message"]["content"]}

    def common(self, response: dict[str, Any], chunks) -> dict[str, Any]:
        return common_answer("echo-1", [response["echoed"]], [], "stop", 0, 0)

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict) or not isinstance(response.get("echoed"), str):
            raise BadRequest("echoed must be a string.", param="echoed")
        return response, None

    def render(self, req, response, chunks, expand, now):
        return (None, [response]) if req.stream else (response, None)

    def sse(self, events):
        return typed_sse(events)

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
    post = lambda: client.post(url, json={"model": "echo-1", "say": "hello"}, headers=admin)  # noqa: E731
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

    # Its own handler answers its own route (and only the methods it declares).
    assert client.get("/p/shop/v1/toy/models", headers=admin).json == {"toys": ["echo-1"]}
    refused = client.post("/p/shop/v1/toy/models", headers=admin)
    assert refused.status_code == 405 and refused.json["oops"]["why"] == "method_not_allowed"

    # Counted under its route template; named in the OpenAPI document and the unknown-path error.
    assert requests_counted("/p/{project}/v1/toy/echo", "200", "hit") == before + 1
    assert Echo.name in api_values(client)
    assert dialects.sdk_env("http://semula/p/shop")["ECHO_BASE_URL"] == "http://semula/p/shop/v1/toy"
    unknown = client.get("/v1/toy/other", headers=admin)
    assert unknown.status_code == 404 and "POST /v1/toy/echo (Toy echo)" in unknown.json["error"]["message"]

    # Unregistered, the route is an unknown path again and the document no longer names it.
    dialects.unregister(Echo.name)
    gone = client.post(url, json={"say": "hello"}, headers=admin)
    assert gone.status_code == 404 and gone.json["error"]["code"] == "unknown_path"
    assert "(Toy echo)" not in gone.json["error"]["message"]
    assert Echo.name not in api_values(client)


def test_its_entries_travel_in_bundles_and_its_calls_take_fault_rules(ctx, client, make_token, echo):
    shop = projects.create(ctx, {"name": "shop", "record_timeout": 30})
    projects.create(ctx, {"name": "copy", "record_timeout": 30})
    admin = make_token("admin")
    post = lambda project: client.post(f"/p/{project}/v1/toy/echo", json={"say": "hi"}, headers=admin)  # noqa: E731
    answered_post(ctx, shop, lambda: post("shop"), "hi back")

    # Exported with its api, imported into another project (the api checked against the registry
    # when the bundle is read), and replayed there.
    bundle = client.get("/api/v1/projects/shop/export", headers=admin)
    assert [entry["api"] for entry in json.loads(bundle.data)["entries"]] == [Echo.name]
    imported = client.post("/api/v1/projects/copy/import", data=bundle.data, headers=admin)
    assert imported.status_code == 200, imported.json
    assert post("copy").json == {"echoed": "hi back"}

    # A fault rule may match its calls by api (REST), and the rule answers in its envelope.
    added = client.post(
        "/api/v1/projects/copy/faults",
        json={"kind": "server_error", "match": {"api": Echo.name}},
        headers=admin,
    )
    assert added.status_code == 201, added.json
    assert post("copy").json == {"oops": {"status": 500, "why": "server_error"}}

    # Unregistered, a bundle of its entries is refused: the api is no registered one.
    dialects.unregister(Echo.name)
    refused = client.post("/api/v1/projects/copy/import", data=bundle.data, headers=admin)
    assert refused.status_code == 400 and "api: Must be one of" in refused.json["error"]["message"]


class Socket:
    """A WebSocket as socket_mode uses one: the client's messages, then the client gone."""

    def __init__(self, *messages: bytes):
        self.messages, self.sent = list(messages), b""

    def receive(self) -> bytes | None:
        return self.messages.pop(0) if self.messages else None

    def send(self, *payloads: bytes) -> None:
        self.sent += b"".join(payloads)

    def send_frames(self, data: bytes) -> None:
        self.sent += data

    def close(self) -> None:
        pass


def test_its_route_takes_a_websocket_as_it_declares(ctx, app, client, make_token, echo, monkeypatch):
    shop = projects.create(ctx, {"name": "shop", "record_timeout": 30})
    admin = make_token("admin")
    post = lambda: client.post("/p/shop/v1/toy/echo", json={"model": "echo-1", "say": "hi"}, headers=admin)  # noqa: E731
    answered_post(ctx, shop, post, "hi back")

    # The upgrade is taken on the route that declares it, and its turns are calls of its API in the
    # protocol it declares: the answer recorded over HTTP is its reply (its `stream` is transport), as
    # its events frame it, with the turn's lane; its acknowledgement is answered with nothing; a
    # message of another protocol (the Responses API's) is refused in its envelope, naming its own.
    socket = Socket(
        b'{"type": "echo.say", "model": "echo-1", "say": "hi", "tag": "t1"}',
        b'{"type": "echo.thanks"}',
        b'{"type": "response.create", "model": "echo-1", "say": "hi"}',
    )
    monkeypatch.setattr(socket_mode.WebSocket, "accept", lambda *args, **kwargs: socket)
    headers = {**admin, "Upgrade": "websocket", "Connection": "Upgrade"}
    environ = EnvironBuilder(path="/p/shop/v1/toy/echo", headers=headers).get_environ()
    assert app.wsgi_app(environ, lambda status, headers: None) == []
    replied, refused = socket.sent.split(b'{"echoed":"hi back","tag":"t1"}')
    error = json.loads(refused)
    assert error == {"type": "error", "status": 400, "oops": {"status": 400, "why": "invalid_event"}}

    # A route that does not declare it is no socket: a GET there is its handler's.
    environ = EnvironBuilder(path="/p/shop/v1/toy/models", headers=headers).get_environ()
    assert json.loads(b"".join(app.wsgi_app(environ, lambda status, headers: None))) == {"toys": ["echo-1"]}


def test_its_parked_call_reaches_the_answerers_command_by_its_name(ctx, echo):
    shop = projects.create(ctx, {"name": "shop", "record_timeout": 30})
    toy, request = dialects.get(Echo.name), {"say": "hi"}
    pending_id = pending.park(ctx, shop, toy.fingerprint(request, [], []), request, False, api=toy.name)
    claimed = ServiceServer(ctx).claim(pending_id, "w1", 30)
    assert json.loads(document(claimed, 1, None, None))["api"] == Echo.name
    # A claim without an api (a server from before the other APIs) is the default API's.
    claimed.pop("api")
    assert json.loads(document(claimed, 1, None, None))["api"] == dialects.CHAT


def test_semula_help_names_it_and_other_commands_load_no_dialect(echo):
    shown = CliRunner().invoke(main, ["--help"])
    assert shown.exit_code == 0 and "Anthropic Messages" in shown.stdout and "Toy echo" in shown.stdout
    dialects.unregister(Echo.name)
    assert "Toy echo" not in CliRunner().invoke(main, ["--help"]).stdout
    # Only the help reads the registry: another command's (here its help) loads no dialect's module.
    script = (
        "import sys\n"
        "from semula.surfaces.cli import main\n"
        "try:\n    main(['project', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('semula.dialects.')))"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout.splitlines()[-1] == "['semula.dialects.routes']"


def test_a_name_is_registered_once(echo):
    with pytest.raises(ValueError, match="toy.echo"):
        dialects.register(Echo())


def test_no_module_outside_the_dialects_names_an_api():
    """Every API but the default one is known through the registry only: no module outside
    semula/dialects/ (nor the answerer daemon) names one (a literal or a constant of
    semula.dialects). The default, Chat Completions, is what rows, bundles and fingerprints from
    before the other APIs are; the fingerprint (pure logic, which the dialects use) has its own name
    for it."""
    names = {dialect.name for dialect in dialects._builtin()}
    constants = {
        name
        for name, value in vars(dialects).items()
        if isinstance(value, str) and value in names and name != "CHAT"
    }
    package = Path(dialects.__file__).parents[1]
    named = []
    # The package and the answerer daemon (a program of its own, which names no API either).
    for path in sorted([*package.rglob("*.py"), *(package.parent / "answerer").rglob("*.py")]):
        where = path.relative_to(package.parent).as_posix()
        if where.startswith("semula/dialects/"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            literal = isinstance(node, ast.Constant) and node.value in names
            if literal and not (node.value == dialects.CHAT and where == "semula/core/fingerprint.py"):
                named.append(f"{where}:{node.lineno}: {node.value!r}")
            constant = getattr(node, "attr", None) or getattr(node, "id", None)
            imported = [alias.name for alias in node.names] if isinstance(node, ast.ImportFrom) else []
            for name in {constant, *imported} & constants:
                named.append(f"{where}:{node.lineno}: {name}")
    assert not named, "APIs named outside the registry:\n" + "\n".join(named)

from __future__ import annotations

from collections.abc import Iterator

import pytest

from semula.service import projects, tokens
from tests.helpers import Server


@pytest.fixture
def start_server(db_url, tmp_path):
    """Start real `semula serve` processes on the test database; all are stopped afterwards."""
    servers: list[Server] = []

    def start(**kwargs) -> Server:
        server = Server(db_url, tmp_path / f"server{len(servers)}.log", **kwargs)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def module_server(db_url, tmp_path_factory) -> Iterator[Server]:
    """The `semula serve` of a module that shares one (tests/acceptance/shared.py: its `db_url` is
    module-scoped; `server` hands this out)."""
    server = Server(db_url, tmp_path_factory.mktemp("module-server") / "server.log")
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def token(ctx) -> str:
    """An admin token with full scope, as an app or a test suite would use."""
    return tokens.create(ctx, {"role": "admin", "scope": "full"})["token"]


@pytest.fixture
def shop(ctx):
    """Project `shop` in record mode with a short record_timeout."""
    return projects.create(ctx, {"name": "shop", "mode": "record", "record_timeout": 60})


def _sdk_clients(sdk_class, path: str, token: str):
    """A factory of one official SDK's clients for a server and project (closed afterwards): no
    retries, so every call counts once."""
    made = []

    def make(server, project: str = "shop", *, api_key: str | None = None, timeout: float = 120):
        client = sdk_class(
            base_url=f"{server.url}/p/{project}{path}",
            api_key=api_key or token,
            max_retries=0,
            timeout=timeout,
        )
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


@pytest.fixture
def openai_client(token):
    """An official OpenAI SDK client for a server and project; no retries, so every call counts once."""
    from openai import OpenAI

    yield from _sdk_clients(OpenAI, "/v1", token)


@pytest.fixture
def anthropic_client(token):
    """An official Anthropic SDK client for a server and project (ANTHROPIC_BASE_URL as Claude Code sets
    it: the SDK appends /v1/messages); the token goes as x-api-key; no retries."""
    from anthropic import Anthropic

    yield from _sdk_clients(Anthropic, "", token)


@pytest.fixture
def start_answerer(db_url, tmp_path):
    """Start real `semula-answerer` processes on the test database; all are stopped afterwards."""
    from tests.answerer_helpers import AnswererProcess

    started: list[AnswererProcess] = []

    def start(argv, *, args: list[str] | None = None, **env: str) -> AnswererProcess:
        proc = AnswererProcess(db_url, tmp_path / f"answerer{len(started)}.log", argv, args=args, **env)
        started.append(proc)
        return proc.start()

    yield start
    for proc in started:
        proc.stop()

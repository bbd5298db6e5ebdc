"""Issue 4 acceptance: agents answer a held openai SDK call through `semula mcp` and the `semula` CLI.

A real gunicorn + gevent server holds the application's request; the agent surfaces run as real
processes and talk to it over REST with SEMULA_URL and SEMULA_TOKEN. Issue #23: each kind of call
(text, tool, json_schema, stream, image) takes the agent two round trips, claim and answer, counted
by a proxy between the agent and the server.
"""

from __future__ import annotations

import base64
import json
import os
import select
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import openai
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from semula.service import projects, tokens
from semula.surfaces.client import Client
from tests.agent_helpers import PNG, PNG_URL, WEATHER_TOOL, image_messages
from tests.helpers import CountingProxy, wait_for

pytestmark = pytest.mark.acceptance


@pytest.fixture
def shop(ctx, start_server):
    """A server, project shop, an application token (viewer, record) and an agent token (editor, record)."""
    projects.create(ctx, {"name": "shop"})
    server = start_server()
    return {
        "server": server,
        "app_token": tokens.create(ctx, {"role": "viewer", "scope": "record", "name": "app"})["token"],
        "agent_token": tokens.create(ctx, {"role": "editor", "scope": "record", "name": "agent"})["token"],
    }


def held_call(shop, **request) -> tuple[threading.Thread, dict]:
    """Make an openai SDK call in a thread; it parks and waits. The dict gets its result or error."""
    out: dict = {}
    client = openai.OpenAI(
        base_url=shop["server"].url + "/p/shop/v1", api_key=shop["app_token"], timeout=60, max_retries=0
    )

    def run():
        try:
            response = client.chat.completions.create(model="gpt-4o-mini", **request)
            out["chunks" if request.get("stream") else "completion"] = (
                list(response) if request.get("stream") else response
            )
        except openai.OpenAIError as exc:  # reported by the test's assertions
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def agent_env(shop, token: str | None = None, url: str | None = None) -> dict[str, str]:
    """The agent's environment; url (default: the server's) is where its REST requests go."""
    return {
        **os.environ,
        "SEMULA_URL": url or shop["server"].url,
        "SEMULA_TOKEN": token or shop["agent_token"],
    }


def semula(
    shop, *args: str, token: str | None = None, url: str | None = None, timeout: float = 30
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "semula", *args],
        env=agent_env(shop, token, url),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_mcp_over_stdio_answers_a_held_openai_call(shop, tmp_path):
    thread, out = held_call(
        shop, messages=[{"role": "user", "content": "Weather in Paris?"}], tools=[WEATHER_TOOL]
    )
    rest = Client(shop["server"].url, shop["agent_token"])
    wait_for(lambda: rest.list_pending()["data"], what="the call to park")

    params = StdioServerParameters(
        command=sys.executable, args=["-m", "semula", "mcp"], env=agent_env(shop), cwd=str(tmp_path)
    )
    errlog_path = tmp_path / "mcp-stderr.log"

    async def agent():
        with open(errlog_path, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                names = {tool.name for tool in (await session.list_tools()).tools}
                listed = await session.call_tool("list_pending", {})
                claimed = await session.call_tool("claim_next", {"worker": "mcp-agent"})
                call = claimed.structured_content
                skeleton = call["shape"]["skeleton"]
                skeleton["tool_calls"][0]["arguments"]["town"] = "Paris"  # a mistake the agent must fix
                wrong = await session.call_tool(
                    "answer_pending", {"pending_id": call["id"], "answer": skeleton}
                )
                skeleton["tool_calls"][0]["arguments"] = {"city": "Paris"}
                right = await session.call_tool(
                    "answer_pending", {"pending_id": call["id"], "answer": skeleton}
                )
                return names, listed, call, wrong, right

    names, listed, call, wrong, right = anyio.run(agent)
    assert names >= {"list_pending", "get_pending", "claim_next", "answer_pending", "release_claim"}
    assert [p["id"] for p in listed.structured_content["data"]] == [call["id"]]
    assert call["claimed"] and call["claimed_by"] == "mcp-agent"
    assert call["conversation"]["messages"][0]["content"] == "Weather in Paris?" and "request" not in call
    assert wrong.is_error and "invalid_answer" in wrong.content[0].text
    assert right.is_error is False and right.structured_content["status"] == "answered"

    thread.join(30)
    assert "error" not in out, out.get("error")
    choice = out["completion"].choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "get_weather"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"city": "Paris"}
    secret = shop["agent_token"]
    assert secret not in errlog_path.read_text() and secret not in shop["server"].log()


def test_cli_claim_wait_then_answer_releases_the_held_call(shop):
    # The agent's loop starts first and waits; the application's call arrives later.
    waiting = subprocess.Popen(
        [sys.executable, "-m", "semula", "claim", "--wait", "--json", "--worker", "cli-agent"],
        env=agent_env(shop),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Only once it has found the queue empty does the call arrive, so --wait really waits.
        assert select.select([waiting.stderr], [], [], 30)[0], "semula claim --wait printed nothing"
        assert waiting.stderr.readline().startswith("waiting for a call")
        thread, out = held_call(shop, messages=[{"role": "user", "content": "Say hello"}])
        stdout, stderr = waiting.communicate(timeout=60)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 0, stderr
    call = json.loads(stdout)
    assert call["request"]["messages"] == [{"role": "user", "content": "Say hello"}]
    assert call["claim"]["worker"] == "cli-agent"

    listing = semula(shop, "pending")
    assert listing.returncode == 0 and call["id"] in listing.stdout and "cli-agent" in listing.stdout
    answered = semula(shop, "answer", call["id"], "Hello!")
    assert answered.returncode == 0, answered.stderr

    thread.join(30)
    assert "error" not in out, out.get("error")
    assert out["completion"].choices[0].message.content == "Hello!"
    empty = semula(shop, "claim")
    assert empty.returncode == 3 and empty.stdout == ""
    assert shop["agent_token"] not in shop["server"].log()


def test_cli_refuses_a_viewer_and_names_the_reason(shop, ctx):
    viewer = tokens.create(ctx, {"role": "viewer", "scope": "record"})["token"]
    result = semula(shop, "claim", token=viewer)
    assert result.returncode == 1 and "needs editor" in result.stderr
    assert viewer not in result.stdout + result.stderr
    unreachable = subprocess.run(
        [sys.executable, "-m", "semula", "pending"],
        env={**agent_env(shop), "SEMULA_URL": "http://127.0.0.1:9"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert unreachable.returncode == 1 and "cannot reach semula" in unreachable.stderr


ORDER = {
    "type": "json_schema",
    "json_schema": {
        "name": "order",
        "schema": {
            "type": "object",
            "properties": {"total": {"type": "integer"}, "currency": {"type": "string"}},
            "required": ["total", "currency"],
            "additionalProperties": False,
        },
    },
}


@dataclass
class Kind:
    """One kind of call: the app's request, the skeleton its claim shows, the agent's filled-in answer,
    and what the app's SDK call returns then."""

    request: dict[str, Any]
    skeleton: Any
    answer: Any
    reply: Callable[[dict[str, Any]], Any]
    expected: Any


def _content(out: dict[str, Any]) -> Any:
    return out["completion"].choices[0].message.content


def _tool_call(out: dict[str, Any]) -> Any:
    call = out["completion"].choices[0].message.tool_calls[0].function
    return call.name, json.loads(call.arguments)


def _streamed(out: dict[str, Any]) -> Any:
    return "".join(chunk.choices[0].delta.content or "" for chunk in out["chunks"] if chunk.choices)


KINDS = {
    "text": Kind(
        {"messages": [{"role": "user", "content": "Say hello"}]},
        {"content": ""},
        {"content": "Hello!"},
        _content,
        "Hello!",
    ),
    "tool": Kind(
        {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": [WEATHER_TOOL]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]},
        {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
        _tool_call,
        ("get_weather", {"city": "Paris"}),
    ),
    "json_schema": Kind(
        {"messages": [{"role": "user", "content": "Total of order 7?"}], "response_format": ORDER},
        {"total": 0, "currency": ""},
        {"total": 7, "currency": "EUR"},
        lambda out: json.loads(_content(out)),
        {"total": 7, "currency": "EUR"},
    ),
    "stream": Kind(
        {"messages": [{"role": "user", "content": "Count to three"}], "stream": True},
        {"content": ""},
        {"content": "One, two, three."},
        _streamed,
        "One, two, three.",
    ),
    "image": Kind(
        {"messages": image_messages("What is in this picture?")},
        {"content": ""},
        {"content": "A transparent pixel."},
        _content,
        "A transparent pixel.",
    ),
}


def form(value: Any) -> Any:
    """A JSON value's form: its keys and lengths, with the type of each leaf instead of its value."""
    if isinstance(value, dict):
        return {key: form(item) for key, item in value.items()}
    if isinstance(value, list):
        return [form(item) for item in value]
    return type(value).__name__


@pytest.fixture
def counted(shop):
    """A proxy in front of the server: the agent's requests to the REST API, by method and path."""
    proxy = CountingProxy(shop["server"].url)
    yield proxy
    proxy.close()


def park_and_wait(shop, kind: Kind) -> tuple[threading.Thread, dict]:
    """The app's call, held by the server; returns once it is parked (polled past the proxy)."""
    thread, out = held_call(shop, **kind.request)
    rest = Client(shop["server"].url, shop["agent_token"])
    wait_for(lambda: rest.list_pending()["data"] or "error" in out, what="the call to park")
    assert "error" not in out, out["error"]
    return thread, out


def assert_answered(name: str, kind: Kind, thread: threading.Thread, out: dict) -> None:
    thread.join(30)
    assert not thread.is_alive(), f"{name}: the app's call is still held"
    assert "error" not in out, f"{name}: {out.get('error')}"
    assert kind.reply(out) == kind.expected, name


def two_round_trips(pending_id: str) -> list[tuple[str, str]]:
    return [("POST", "/api/v1/pending/claim"), ("POST", f"/api/v1/pending/{pending_id}/answer")]


def test_every_call_kind_takes_two_round_trips_with_the_cli(shop, counted, tmp_path):
    for name, kind in KINDS.items():
        thread, out = park_and_wait(shop, kind)
        counted.take()
        # The agent claims once and reads the call as printed; it saves images where it can open them.
        images = tmp_path / name
        claimed = semula(shop, "claim", "--save-images", str(images), url=counted.url)
        assert claimed.returncode == 0, f"{name}: {claimed.stderr}"
        pending_id = claimed.stdout.split()[0]
        skeleton = json.loads(claimed.stdout.partition("answer skeleton:\n")[2].splitlines()[0])
        assert skeleton == kind.skeleton, name
        assert form(kind.answer) == form(skeleton), f"{name}: the answer fills the skeleton in"
        answered = semula(shop, "answer", pending_id, "--json", json.dumps(kind.answer), url=counted.url)
        assert answered.returncode == 0, f"{name}: {answered.stderr}"
        assert counted.take() == two_round_trips(pending_id), name
        assert_answered(name, kind, thread, out)
        if name == "image":
            saved = images / f"{pending_id}-0-1.png"
            assert saved.read_bytes() == PNG and f"messages[0].content[1]: {saved}" in claimed.stdout
            assert f"[image image/png {len(PNG)} B]" in claimed.stdout
            assert PNG_URL.partition(",")[2] not in claimed.stdout
        else:
            assert not images.exists(), name


def test_every_call_kind_takes_two_round_trips_with_mcp(shop, counted, tmp_path):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "semula", "mcp"],
        env=agent_env(shop, url=counted.url),
        cwd=str(tmp_path),
    )

    async def agent():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            for name, kind in KINDS.items():
                thread, out = await anyio.to_thread.run_sync(park_and_wait, shop, kind)
                counted.take()
                claimed = await session.call_tool("claim_next", {})
                call = claimed.structured_content
                skeleton = call["shape"]["skeleton"]
                assert call["claimed"] and skeleton == kind.skeleton, name
                assert form(kind.answer) == form(skeleton), f"{name}: the answer fills the skeleton in"
                answered = await session.call_tool(
                    "answer_pending", {"pending_id": call["id"], "answer": kind.answer}
                )
                assert answered.is_error is False, f"{name}: {answered.content}"
                assert counted.take() == two_round_trips(call["id"]), name
                await anyio.to_thread.run_sync(assert_answered, name, kind, thread, out)
                seen = [base64.b64decode(c.data) for c in claimed.content if c.type == "image"]
                assert seen == ([PNG] if name == "image" else []), name
                assert PNG_URL.partition(",")[2] not in json.dumps(call), name

    anyio.run(agent)


def test_set_up_errors_name_the_variables(shop):
    base = semula(shop, "pending")
    assert base.returncode == 0
    wrong = subprocess.run(
        [sys.executable, "-m", "semula", "claim"],
        env={**agent_env(shop), "SEMULA_URL": shop["server"].url + "/p/shop/v1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert wrong.returncode == 1 and f"set SEMULA_URL={shop['server'].url}" in wrong.stderr
    no_token = subprocess.run(
        [sys.executable, "-m", "semula", "claim"],
        env={k: v for k, v in agent_env(shop).items() if k != "SEMULA_TOKEN"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert no_token.returncode == 1 and "SEMULA_TOKEN is not set" in no_token.stderr

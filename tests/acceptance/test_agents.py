"""Issue 4 acceptance: agents answer a held openai SDK call through `semula mcp` and the `semula` CLI.

A real gunicorn + gevent server holds the application's request; the agent surfaces run as real
processes and talk to it over REST with SEMULA_URL and SEMULA_TOKEN.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading

import anyio
import openai
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from semula.client import Client
from semula.service import projects, tokens
from tests.agent_helpers import WEATHER_TOOL
from tests.helpers import wait_for

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
            out["completion"] = client.chat.completions.create(model="gpt-4o-mini", **request)
        except openai.OpenAIError as exc:  # reported by the test's assertions
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def agent_env(shop, token: str | None = None) -> dict[str, str]:
    return {**os.environ, "SEMULA_URL": shop["server"].url, "SEMULA_TOKEN": token or shop["agent_token"]}


def semula(shop, *args: str, token: str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "semula", *args],
        env=agent_env(shop, token),
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
    assert call["request"]["messages"][0]["content"] == "Weather in Paris?"
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


def test_a_json_schema_call_takes_two_round_trips_with_the_cli_and_with_mcp(shop, tmp_path):
    ask = {"messages": [{"role": "user", "content": "Total of order 7?"}], "response_format": ORDER}

    # The CLI: claim shows the skeleton (the object itself); the agent fills it in and sends it.
    thread, out = held_call(shop, **ask)
    claimed = semula(shop, "claim", "--wait", "--timeout", "20", "--json")
    assert claimed.returncode == 0, claimed.stderr
    call = json.loads(claimed.stdout)
    skeleton = call["shape"]["skeleton"]
    assert skeleton == {"total": 0, "currency": ""}
    answered = semula(
        shop, "answer", call["id"], "--json", json.dumps({**skeleton, "total": 7, "currency": "EUR"})
    )
    assert answered.returncode == 0, answered.stderr
    thread.join(30)
    assert json.loads(out["completion"].choices[0].message.content) == {"total": 7, "currency": "EUR"}

    # MCP: claim_next, then answer_pending with the filled skeleton.
    thread, out = held_call(shop, **{**ask, "messages": [{"role": "user", "content": "Total of order 8?"}]})
    rest = Client(shop["server"].url, shop["agent_token"])
    wait_for(lambda: rest.list_pending()["data"], what="the call to park")
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "semula", "mcp"], env=agent_env(shop), cwd=str(tmp_path)
    )

    async def agent():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            call = (await session.call_tool("claim_next", {})).structured_content
            answer = {**call["shape"]["skeleton"], "total": 8, "currency": "EUR"}
            return await session.call_tool("answer_pending", {"pending_id": call["id"], "answer": answer})

    result = anyio.run(agent)
    assert result.is_error is False, result.content
    thread.join(30)
    assert json.loads(out["completion"].choices[0].message.content) == {"total": 8, "currency": "EUR"}


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

"""Helpers for the agent surfaces: park calls fast, and a REST client that talks to a Flask test client."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import BaseAdapter
from requests.structures import CaseInsensitiveDict

from semula.service import Context
from semula.service import pending as pending_service
from semula.service import projects as projects_service
from semula.surfaces.client import Client

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


# A 1x1 transparent PNG, as an app sends it in a data URL.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PNG_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
REMOTE_IMAGE = "https://example.com/cat.png"


def image_messages(text: str, *, remote: bool = False) -> list[dict[str, Any]]:
    """One user message with text and the PNG (and a remote image, if asked)."""
    parts: list[dict[str, Any]] = [
        {"type": "text", "text": text},
        {"type": "image_url", "image_url": {"url": PNG_URL}},
    ]
    if remote:
        parts.append({"type": "image_url", "image_url": {"url": REMOTE_IMAGE}})
    return [{"role": "user", "content": parts}]


def chat_request(text: str, *, tools: bool = False, model: str = "gpt-4o-mini") -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": text}]}
    if tools:
        body["tools"] = [WEATHER_TOOL]
    return body


def park(
    ctx: Context, project: str, text: str, *, tools: bool = False, image: bool = False, api: str = "chat"
) -> str:
    """Park a call as the proxy would on a miss (without anyone holding it); its pending id.

    With image, the message is text, the PNG and a remote image; api "responses" asks it of the
    Responses API (input_text and input_image parts) instead of Chat Completions."""
    row = projects_service.get_row(ctx, project)
    request = chat_request(text, tools=tools)
    if image:
        request["messages"] = image_messages(text, remote=True)
    if api == "responses":
        parts = [{"type": "input_text", "text": text}]
        if image:
            parts += [{"type": "input_image", "image_url": u} for u in (PNG_URL, REMOTE_IMAGE)]
        request = {"model": request["model"], "input": [{"role": "user", "content": parts}]}
    pending_id = pending_service.park(
        ctx, row, f"v1:test:{project}:{text}", request, False, api=f"openai.{api}"
    )
    assert pending_id is not None
    return pending_id


def two_project_queue(ctx: Context) -> dict[str, str]:
    """Projects alpha and beta with one parked call each (beta's with a tool): their pending ids."""
    projects_service.create(ctx, {"name": "alpha"})
    projects_service.create(ctx, {"name": "beta"})
    return {
        "a1": park(ctx, "alpha", "What is 2+2?"),
        "b1": park(ctx, "beta", "Weather in Paris?", tools=True),
    }


def secret(headers: dict[str, str]) -> str:
    """The token secret of a make_token() header."""
    return headers["Authorization"].removeprefix("Bearer ")


class FlaskAdapter(BaseAdapter):
    """Send requests' requests to a Flask test client, so client.py runs against the app in-process."""

    def __init__(self, app: Any):
        super().__init__()
        self.test_client = app.test_client()

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        url = urlsplit(request.url)
        result = self.test_client.open(
            url.path,
            query_string=url.query,
            method=request.method,
            headers=dict(request.headers),
            data=request.body,
        )
        response = requests.Response()
        response.status_code = result.status_code
        response._content = result.get_data()
        response.headers = CaseInsensitiveDict(result.headers)
        response.url = request.url
        response.request = request
        response.encoding = "utf-8"
        return response

    def close(self) -> None:
        pass


def in_process_client(app: Any, headers: dict[str, str] | None = None) -> Client:
    """A semula Client whose requests go to app in-process; headers are a make_token() result."""
    session = requests.Session()
    session.mount("http://semula.test", FlaskAdapter(app))
    return Client("http://semula.test", secret(headers) if headers else "", session=session)


def cli_claim_and_answer(env: dict[str, str], answer: Any) -> str:
    """`semula claim`, then `semula answer ID --json ANSWER`, as an agent at a shell would; returns
    what claim showed."""
    import json
    import subprocess
    import sys

    shown = subprocess.run(
        [sys.executable, "-m", "semula", "claim"], env=env, capture_output=True, text=True, timeout=30
    )
    assert shown.returncode == 0, shown.stderr
    done = subprocess.run(
        [sys.executable, "-m", "semula", "answer", shown.stdout.split()[0], "--json", json.dumps(answer)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return shown.stdout


def mcp_claim_and_answer(env: dict[str, str], cwd: str, answer: Any) -> tuple[dict[str, Any], Any]:
    """Through `semula mcp` over stdio: claim_next, then answer_pending; returns both results."""
    import sys

    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=["-m", "semula", "mcp"], env=env, cwd=cwd)

    async def agent():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            claimed = (await session.call_tool("claim_next", {"worker": "mcp-agent"})).structured_content
            answered = await session.call_tool(
                "answer_pending", {"pending_id": claimed["id"], "answer": answer}
            )
            return claimed, answered

    return anyio.run(agent)

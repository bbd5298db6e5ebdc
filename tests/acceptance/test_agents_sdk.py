"""An OpenAI Agents SDK agent on its default (Responses API) model, recorded through semula, then replayed."""

from __future__ import annotations

import threading

import pytest

from semula.service import pending, projects
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance

agents = pytest.importorskip("agents", reason="the openai-agents test dependency is not installed")


def answer_in_order(ctx, shop, payloads: list) -> threading.Thread:
    """Answer the project's parked calls one after another with `payloads`."""

    def run():
        seen: set[str] = set()
        for payload in payloads:

            def fresh():
                rows = ctx.store.all("parked_in_project", project_id=shop["id"])
                return [r["id"] for r in rows if r["id"] not in seen]

            [pending_id] = wait_for(fresh, timeout=60, what="the agent's next call")
            seen.add(pending_id)
            pending.answer(ctx, pending_id, payload)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def logged(ctx, shop, count: int) -> list | None:
    rows = ctx.store.all("calls_in_project", project_id=shop["id"])
    return rows if len(rows) >= count else None


def test_an_agent_with_a_function_tool_records_then_replays_offline(start_server, ctx, shop, token):
    from openai import AsyncOpenAI

    server = start_server()
    asked: list[str] = []

    @agents.function_tool
    def get_weather(city: str) -> str:
        """The weather in a city."""
        asked.append(city)
        return f"21 degrees and sunny in {city}"

    agent = agents.Agent(name="Weather", instructions="Answer with the weather tool.", tools=[get_weather])
    client = AsyncOpenAI(base_url=f"{server.url}/p/shop/v1", api_key=token, max_retries=0)
    agents.set_default_openai_client(client, use_for_tracing=False)
    agents.set_tracing_disabled(True)
    try:
        answering = answer_in_order(
            ctx,
            shop,
            [
                {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
                "It is 21 degrees and sunny in Paris.",
            ],
        )
        recorded = agents.Runner.run_sync(agent, "What is the weather in Paris?")
        answering.join(30)
        assert recorded.final_output == "It is 21 degrees and sunny in Paris." and asked == ["Paris"]
        # The server writes its call log in batches: wait for the rows.
        calls = wait_for(lambda: logged(ctx, shop, 2), what="two call-log rows")
        assert [c["api"] for c in calls] == ["openai.responses", "openai.responses"]

        # Offline: replay mode answers both turns from the recordings; the tool runs again locally.
        projects.update(ctx, "shop", {"mode": "replay"})
        replayed = agents.Runner.run_sync(agent, "What is the weather in Paris?")
        assert replayed.final_output == recorded.final_output and asked == ["Paris", "Paris"]
        outcomes = [c["outcome"] for c in wait_for(lambda: logged(ctx, shop, 4), what="four call-log rows")]
        assert outcomes == ["answered", "answered", "hit", "hit"]
    finally:
        agents.set_default_openai_client(AsyncOpenAI(api_key="unused"), use_for_tracing=False)

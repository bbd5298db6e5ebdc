"""The real coding agents through real semula: a tool-using task recorded with an answerer answering
parked calls over REST, then replayed by a fresh semula process, with the same final answer and no miss.

The agents are the pinned versions `make agents` installs (tests/data/agents/README.md); without them
these tests are skipped. Each run gets fresh task and home directories (tests/agents/capture.py), so
the replay is a new session of the agent: new session ids, new tool-output timings.
"""

from __future__ import annotations

import shutil
import threading
from typing import Any

import pytest

from semula import dialects
from semula.service import calllog, projects
from semula.surfaces.client import Client, ClientError
from tests.agents import capture
from tests.helpers import wait_for
from tests.unit.test_agent_traffic import documented_codex_rules, xfail_if

pytestmark = pytest.mark.acceptance

TIMEOUT = 240  # seconds an agent's run may take; its calls are answered in well under a second each
# The agents run here and why one does not replay yet (a strict xfail: the lead flips it when it does).
RUNS = {
    "claude-code": None,
    "codex": None,
    "codex-classic": None,
    "gemini-cli": None,  # semula gives each functionCall an id, which the CLI sends back
}


class Answerer(threading.Thread):
    """Answers a project's parked calls over REST as a coding agent would: the first call that offers
    the task's listing tool with a call of it, every other one with the final text."""

    def __init__(self, url: str, token: str, project: str):
        super().__init__(daemon=True)
        self.client = Client(url, token, timeout=30)
        self.project = project
        self.stopping = threading.Event()
        self.answered: list[str] = []
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                claimed = self.client.claim_next(project=self.project, lease_seconds=120)
                if claimed is None:
                    self.stopping.wait(0.05)
                    continue
                self.client.answer_pending(claimed["id"], answer(claimed["conversation"]))
                self.answered.append(claimed["id"])
            except ClientError as exc:
                self.failures.append(str(exc))
                return

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=30)


def answer(view: dict[str, Any]) -> Any:
    form = view.get("response_format") or {}
    if form.get("type") == "json_schema":  # Gemini CLI's routing classifier
        return capture.sample(form["json_schema"]["schema"])
    tools = {t["function"]["name"]: t["function"].get("parameters") or {} for t in view.get("tools", [])}
    call = capture.listing_call(tools)
    if call and not any(m["role"] == "tool" for m in view["messages"]):
        return {"tool_calls": [{"name": call[0], "arguments": call[1]}]}
    return capture.FINAL_TEXT


def installed(agent: str) -> None:
    args, _ = capture.AGENTS[agent]("http://127.0.0.1:9", "key")
    if shutil.which(args[0], path=capture.base_env()["PATH"]) is None:
        pytest.skip(f"{args[0]} is not installed under {capture.AGENTS_PREFIX}: run `make agents` (npm)")
    if agent == "gemini-cli" and not hasattr(dialects, "GEMINI"):
        pytest.skip("semula speaks no native Gemini API yet (issue #47 part 4)")


def run(agent: str, url: str, token: str) -> str:
    done = capture.run_agent(agent, f"{url}/p/shop", token, TIMEOUT)
    assert done.returncode == 0, f"{agent} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return capture.final_text(agent, done.stdout)


@pytest.mark.parametrize("agent", [pytest.param(a, marks=xfail_if(r)) for a, r in RUNS.items()])
def test_an_agents_run_records_then_replays_in_a_fresh_process(agent, start_server, ctx, shop, token):
    installed(agent)
    if agent.startswith("codex"):  # its tool output's timings and ids (docs/agents/codex.md)
        projects.update(ctx, "shop", {"normalize": documented_codex_rules()})
    server = start_server()
    answerer = Answerer(server.url, token, "shop")
    answerer.start()
    try:
        recorded = run(agent, server.url, token)
    finally:
        answerer.stop()
    assert answerer.failures == []
    assert recorded == capture.FINAL_TEXT
    assert len(answerer.answered) >= 2  # the tool call and the answer after its result
    server.stop()

    projects.update(ctx, "shop", {"mode": "replay"})
    replayed = run(agent, start_server().url, token)
    assert replayed == recorded

    def outcomes() -> list[str]:
        return [call["outcome"] for call in calllog.list_calls(ctx, "shop", limit=500)["data"]]

    wait_for(lambda: outcomes().count("hit") >= len(answerer.answered), what="the replay's hits logged")
    assert "replay_miss" not in outcomes()

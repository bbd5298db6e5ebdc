"""What the real coding agents send, replayed through semula's dialects in-process (no npm needed).

tests/data/agents/AGENT/runN/ holds every request Claude Code, Codex and Gemini CLI made in two runs of
one small tool-using task (tests/agents/capture.py made them; tests/data/agents/README.md says which
versions and how). Each must pass its API's check, the agent's tool must reach the conversation view an
answerer sees, and the two runs' requests must fingerprint alike with a project's default settings, or
a recorded run never replays (issue #47). What differs between the runs is pinned here too: it is the
evidence docs/agents/*.md describe, and a new capture that changes it fails until they are updated.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from semula import dialects
from semula.core import fingerprint
from semula.service.projects import DEFAULTS
from tests.agents import capture

DATA = Path(__file__).resolve().parents[1] / "data" / "agents"
AGENTS = ("claude-code", "codex", "codex-classic", "gemini-cli")
GEMINI_PATH = re.compile(r"/models/(?P<model>[^/:]+):(?P<method>\w+)$")
# The tool each agent ran (the capture's fake provider called it) and the request that asked for it.
CALLED = {
    "claude-code": ("Bash", "01-messages.json"),
    "codex": ("exec", "01-responses.json"),
    "codex-classic": ("exec_command", "01-responses.json"),
    "gemini-cli": ("list_directory", "02-gemini-3.8-flash-streamGenerateContent.json"),
}
CODEX_OUTPUT = (
    "by design: Codex's tool output carries a new Chunk ID and Wall time on every run, which only the "
    "codex preset leaves out (test_two_runs_fingerprint_alike_with_the_agents_preset)"
)
# Requests whose two runs fingerprint differently with default settings today, and why.
NOT_ALIKE = {
    ("codex", "02-responses.json"): CODEX_OUTPUT,
    ("codex-classic", "02-responses.json"): CODEX_OUTPUT,
}


def documented_codex_rules() -> list[dict[str, str]]:
    """The normalize rules docs/agents/codex.md gives for the timings and ids in Codex's tool output."""
    text = (DATA.parents[2] / "docs/agents/codex.md").read_text()
    rules = json.loads(re.search(r"normalize='(\[.*?\])'", text, re.DOTALL)[1])
    return fingerprint.validate_normalize(rules)  # as `semula project set` takes them


# Every body member (JSON pointer, `*` for any list index) whose value differed between the two runs.
VOLATILE = {
    "claude-code": {"/metadata/user_id"},
    "codex": {
        "/client_metadata/root_turn_id",
        "/client_metadata/session_id",
        "/client_metadata/thread_id",
        "/client_metadata/turn_id",
        "/client_metadata/x-codex-installation-id",
        "/client_metadata/x-codex-turn-metadata",
        "/client_metadata/x-codex-window-id",
        "/input/*/id",
        "/input/*/output/*/text",
        "/prompt_cache_key",
    },
    "gemini-cli": {"/contents/*/parts/*/functionCall/id", "/contents/*/parts/*/functionResponse/id"},
}
VOLATILE["codex-classic"] = VOLATILE["codex"] - {"/input/*/output/*/text"} | {"/input/*/output"}


def captured(agent: str, run: str) -> dict[str, dict[str, Any]]:
    """One run's requests, by file name."""
    return {path.name: json.loads(path.read_text()) for path in sorted((DATA / agent / run).glob("*.json"))}


def speaking(record: dict[str, Any]) -> tuple[dialects.Dialect, Any]:
    """The dialect a captured request is for and its body as semula's proxy hands it to that dialect."""
    path = record["path"]
    if path.endswith("/messages"):
        dialect = dialects.get(dialects.ANTHROPIC)
        return dialect, dialect.with_headers(record["body"], lambda name: record["headers"].get(name.lower()))
    if path.endswith("/responses"):
        return dialects.get(dialects.RESPONSES), record["body"]
    found = GEMINI_PATH.search(path)
    assert found, f"a captured request semula has no route for: {path}"
    if not hasattr(dialects, "GEMINI"):
        pytest.skip(
            "semula speaks no native Gemini API yet (issue #47 part 4 adds semula/dialects/gemini.py)"
        )
    dialect = dialects.get(dialects.GEMINI)
    return dialect, dialect.with_route(record["body"], found["model"], found["method"])


def requests_of(agents=AGENTS, run: str = "run1") -> list[Any]:
    return [
        pytest.param(agent, name, record, id=f"{agent}-{name}")
        for agent in agents
        for name, record in captured(agent, run).items()
    ]


def xfail_if(reason: str | None) -> list[Any]:
    """A strict xfail for what semula does not do yet (the test passes, and so fails, once it does)."""
    return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []


def runs_alike() -> list[Any]:
    params = []
    for agent in AGENTS:
        second = captured(agent, "run2")
        for name, record in captured(agent, "run1").items():
            marks = xfail_if(NOT_ALIKE.get((agent, name)))
            params.append(pytest.param(record, second[name], marks=marks, id=f"{agent}-{name}"))
    return params


def test_every_agent_was_captured_twice_alike():
    for agent in AGENTS:
        first, second = captured(agent, "run1"), captured(agent, "run2")
        assert first and list(first) == list(second), f"{agent}: the two runs made different calls"


@pytest.mark.parametrize("agent,name,record", requests_of(AGENTS, "run1") + requests_of(AGENTS, "run2"))
def test_the_captures_hold_no_keys(agent, name, record):
    for header in capture.SECRET_HEADERS:
        assert record["headers"].get(header, "<redacted>") in ("", "<redacted>"), f"{agent} {name}: {header}"
    assert capture.KEY not in json.dumps(record), f"{agent} {name}: the key the agent was given"


@pytest.mark.parametrize("agent,name,record", requests_of())
def test_each_request_passes_its_apis_check(agent, name, record):
    dialect, body = speaking(record)
    req = dialect.check(body)
    assert req.model == body["model"]
    assert req.stream is (body.get("stream") is True)


@pytest.mark.parametrize("first,second", runs_alike())
def test_two_runs_fingerprint_alike_with_default_settings(first, second):
    dialect, one = speaking(first)
    _, other = speaking(second)
    rules = DEFAULTS["ignore_fields"], DEFAULTS["normalize"]
    assert dialect.fingerprint(one, *rules) == dialect.fingerprint(other, *rules)


@pytest.mark.parametrize("agent", AGENTS)
def test_what_changes_between_runs_is_what_the_docs_list(agent):
    first, second = captured(agent, "run1"), captured(agent, "run2")
    changed = set().union(*(capture.differing(first[name]["body"], second[name]["body"]) for name in first))
    assert changed == VOLATILE[agent]


@pytest.mark.parametrize("agent", AGENTS)
def test_the_agents_tool_call_reaches_the_answerers_view(agent):
    """The request that offered the tool shows it to an answerer, and the next one shows the call and
    its result as an assistant tool call and a tool message: else no answerer can run the agent."""
    tool, asked = CALLED[agent]
    requests = captured(agent, "run1")
    names = list(requests)
    dialect, body = speaking(requests[asked])
    offered = [t["function"]["name"] for t in dialect.conversation(body).get("tools", [])]
    assert tool in offered
    dialect, body = speaking(requests[names[names.index(asked) + 1]])
    messages = dialect.conversation(body)["messages"]
    calls = [
        c["function"]["name"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or ()
    ]
    assert calls == [tool]
    assert [m["role"] for m in messages][-1] == "tool"


@pytest.mark.parametrize("agent", ("codex", "codex-classic"))
def test_normalize_rules_make_codexs_tool_output_alike(agent):
    outputs = []
    for run in ("run1", "run2"):
        dialect, body = speaking(captured(agent, run)["02-responses.json"])
        canonical = dialect.canonical(body, [], documented_codex_rules())
        outputs.append([i["output"] for i in canonical["input"] if i.get("type", "").endswith("_output")])
    assert outputs[0] and outputs[0] == outputs[1]


PRESETS = {
    "claude-code": "claude-code",
    "codex": "codex",
    "codex-classic": "codex",
    "gemini-cli": "gemini-cli",
}


def runs_of(agents) -> list[Any]:
    return [
        pytest.param(agent, record, captured(agent, "run2")[name], id=f"{agent}-{name}")
        for agent in agents
        for name, record in captured(agent, "run1").items()
    ]


@pytest.mark.parametrize("agent,first,second", runs_of(("claude-code", "codex", "codex-classic")))
def test_two_runs_fingerprint_alike_with_the_agents_preset(agent, first, second):
    """A project that turns on its agent's preset ({"preset": NAME} in normalize) replays every request
    of a second run, the tool output's timings and ids included."""
    dialect, one = speaking(first)
    _, other = speaking(second)
    rules = [], fingerprint.validate_normalize([{"preset": PRESETS[agent]}])
    assert dialect.fingerprint(one, *rules) == dialect.fingerprint(other, *rules)


def test_gemini_clis_skills_in_another_order_fingerprint_alike_with_default_settings():
    """Gemini CLI 0.61 lists its two built-in skills in the order its file searches finished in: on a
    loaded machine a replay sent them the other way round and missed (decision 0055)."""
    for name, record in captured("gemini-cli", "run1").items():
        dialect, body = speaking(record)
        text = (body.get("systemInstruction") or {"parts": [{"text": ""}]})["parts"][0]["text"]
        skills = re.findall(r"  <skill>\n.*?\n  </skill>", text, re.S)
        if len(skills) < 2:
            continue
        swapped = text.replace("\n".join(skills), "\n".join(reversed(skills)))
        assert swapped != text, name
        other = {**body, "systemInstruction": {**body["systemInstruction"], "parts": [{"text": swapped}]}}
        rules = DEFAULTS["ignore_fields"], DEFAULTS["normalize"]
        assert dialect.fingerprint(body, *rules) == dialect.fingerprint(other, *rules), name

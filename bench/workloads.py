"""Requests of realistic sizes for the replay benchmarks (issue #22), deterministic, and their answers.

`agent_request(target_bytes, variant)` is a Chat Completions request as a coding agent sends it: a
system prompt, dozens of tool definitions where the size allows, a first user message, round trips of
an assistant tool call and a ~3.5 KB JSON tool result, then a user question. Everything but the last
question is the same for every variant, so variants are distinct recordings of one agent session.
`pair_request(variant)` is the 1.6 KB pair of bench.pair with the customer's question varied.

The workloads of `python -m bench sizes`: A, one ~88 KB agent request (A0: the same without tool
definitions); B, 1,000 recordings of the pair; C, 10,000; C100k, 100,000 (every connection of wrk
cycles through all of a workload's bodies).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bench import pair

MODEL = "gpt-4o"
SEED = 20261130
TOOL_OUTPUT_BYTES = 3500
NONCE = "semula-bench-nonce"  # the `user` of a first-sight probe; wrk puts a fresh value in its place


@dataclass(frozen=True)
class Recording:
    """One recorded pair: the request as an app sends it and the chat.completion recorded for it."""

    request: dict[str, Any]
    response: dict[str, Any]

    def request_bytes(self) -> bytes:
        return json.dumps(self.request, separators=(",", ":")).encode()

    def answer_text(self) -> str:
        return self.response["choices"][0]["message"]["content"]


# --- the agent's fixed parts --------------------------------------------------------------------------

_RULES = (
    "You are a coding agent working in the user's repository through the tools listed below.",
    "Read the code before you change it, and prefer the smallest change that fixes the problem.",
    "Run the project's tests after every change and report failures verbatim, never paraphrased.",
    "Never run commands that delete data outside the working tree or push to a remote.",
    "When a tool fails, read its error, correct the call and try again at most twice.",
    "Keep answers short: the change you made, why, and what the user should check.",
    "Quote file paths relative to the repository root and line numbers as path:line.",
    "Respect the repository's style guide, its linters and its formatting settings.",
    "Do not add dependencies without asking; say which package and why it is needed.",
    "Secrets in environment files are never printed, logged or copied into code.",
    "When the request is ambiguous, state the assumption you make and go on.",
    "Explain a failing test by the assertion that failed, the value it saw and the one it wanted.",
    "Prefer the standard library; when a library is already a dependency, use it.",
    "Write tests that fail on the unchanged code before fixing a bug.",
)
_WORDS = (
    "parser",
    "config",
    "cache",
    "worker",
    "session",
    "request",
    "handler",
    "queue",
    "schema",
    "token",
    "index",
    "buffer",
    "migration",
    "fixture",
    "client",
    "server",
    "router",
    "template",
    "logger",
    "metric",
    "budget",
    "project",
    "entry",
)
_TOOL_NAMES = (
    "read_file",
    "write_file",
    "edit_file",
    "list_directory",
    "search_code",
    "grep_files",
    "run_tests",
    "run_command",
    "git_status",
    "git_diff",
    "git_log",
    "git_blame",
    "open_pull_request",
    "list_issues",
    "read_issue",
    "comment_issue",
    "fetch_url",
    "web_search",
    "python_eval",
    "format_code",
    "lint_code",
    "type_check",
    "install_package",
    "list_packages",
    "read_logs",
    "tail_logs",
    "query_database",
    "describe_table",
    "explain_query",
    "http_request",
    "start_server",
    "stop_server",
    "list_processes",
    "read_env_example",
    "create_branch",
    "checkout_branch",
    "apply_patch",
    "revert_file",
    "find_symbol",
    "find_references",
    "rename_symbol",
)


def _tool(rng: random.Random, name: str) -> dict[str, Any]:
    params = {
        w: {"type": rng.choice(["string", "integer", "boolean"]), "description": f"The {w} to use."}
        for w in rng.sample(_WORDS, rng.randint(2, 5))
    }
    required = sorted(params)[: rng.randint(1, len(params))]
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name.replace('_', ' ').capitalize()} in the user's workspace. "
            + " ".join(rng.sample(_RULES, 1)),
            "parameters": {
                "type": "object",
                "properties": params,
                "required": required,
                "additionalProperties": False,
            },
        },
    }


def _tool_output(rng: random.Random, call: int) -> str:
    """A JSON tool result of about TOOL_OUTPUT_BYTES: search hits in files of a repository."""
    hits: list[dict[str, Any]] = []
    out = ""
    while len(out) < TOOL_OUTPUT_BYTES:
        words = rng.sample(_WORDS, 3)
        hits.append(
            {
                "path": f"src/{words[0]}/{words[1]}_{call}.py",
                "line": rng.randint(1, 900),
                "text": f"    {words[2]} = self.{words[0]}.get({words[1]!r}, default=None)  # {words[2]}",
            }
        )
        out = json.dumps({"status": "ok", "call": call, "matches": len(hits), "results": hits})
    return out


def _system(length: int) -> str:
    """The system prompt: the rules again and again, cut at a word to `length` characters."""
    text, n = "", 0
    while len(text) < length:
        text += _RULES[n % len(_RULES)] + (" " if n % 5 else "\n")
        n += 1
    return text[:length].rsplit(" ", 1)[0] if len(text) > length else text


def _question(variant: int) -> str:
    return (
        f"Now fix ticket #{variant}: the tests above fail since the last refactor of the cache. "
        "Tell me which change caused it, fix it, and run the tests again."
    )


def agent_request(target_bytes: int, variant: int = 0, *, tools: bool = True) -> dict[str, Any]:
    """A Chat Completions request of about target_bytes (±10% from 1 KB up), the same for a variant.

    Without `tools`, the request carries no tool definitions (its round trips call `search_code`).
    """
    rng = random.Random(SEED)
    room = max(0, target_bytes - 1200)  # what is left after the shortest request (model, users, system)
    trips = int(0.8 * room) // (TOOL_OUTPUT_BYTES + 450)
    defined = min(len(_TOOL_NAMES), int(0.12 * room) // 450) if tools else 0
    tools_ = [_tool(rng, name) for name in _TOOL_NAMES[:defined]]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": ""},
        {"role": "user", "content": "The test suite fails on main since this morning; find out why."},
    ]
    for call in range(trips):
        name = tools_[call % len(tools_)]["function"]["name"] if tools_ else "search_code"
        call_id = f"call_{rng.getrandbits(96):024x}"
        arguments = json.dumps({"query": " ".join(rng.sample(_WORDS, 2)), "limit": 20})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                ],
            }
        )
        messages.append({"role": "tool", "tool_call_id": call_id, "content": _tool_output(rng, call)})
    messages.append({"role": "user", "content": _question(0)})  # sized on variant 0: all share the rest
    body: dict[str, Any] = {"model": MODEL, "messages": messages, "temperature": 0, "max_tokens": 1024}
    if tools_:
        body |= {"tools": tools_, "tool_choice": "auto", "parallel_tool_calls": False}
    body["user"] = "agent-42"
    size = len(json.dumps(body, separators=(",", ":")))
    messages[0]["content"] = _system(max(200, target_bytes - size))
    messages[-1]["content"] = _question(variant)
    return body


def pair_request(variant: int) -> dict[str, Any]:
    """bench.pair's 1.6 KB request with the customer's question varied (variant 0 is a variant too)."""
    body = pair.request_body()
    last = body["messages"][-1]
    last["content"] = f"[ticket {variant}] " + last["content"]
    return body


def answer(request: dict[str, Any], variant: int) -> dict[str, Any]:
    """The chat.completion recorded for a request (bench.pair's answer, naming the variant)."""
    completion = pair.completion()
    message = completion["choices"][0]["message"]
    message["content"] = f"Ticket {variant}: {message['content']}"
    completion["model"] = request["model"]
    return completion


def agent_recording(target_bytes: int, variant: int = 0, *, tools: bool = True) -> Recording:
    request = agent_request(target_bytes, variant, tools=tools)
    return Recording(request, answer(request, variant))


def pair_recording(variant: int) -> Recording:
    request = pair_request(variant)
    return Recording(request, answer(request, variant))


# --- the workloads ------------------------------------------------------------------------------------

AGENT_BYTES = 88 * 1024


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    count: int
    make: Callable[[int], Recording]

    def recordings(self) -> Iterator[Recording]:
        return (self.make(variant) for variant in range(self.count))


WORKLOADS = {
    w.name: w
    for w in (
        Workload("A", "one ~88 KB agent request", 1, lambda v: agent_recording(AGENT_BYTES, v)),
        Workload(
            "A0",
            "one ~88 KB agent request without tool definitions (issue #22's first A)",
            1,
            lambda v: agent_recording(AGENT_BYTES, v, tools=False),
        ),
        Workload("B", "1,000 recordings of the 1.6 KB pair, user text varying", 1_000, pair_recording),
        Workload("C", "10,000 recordings of the 1.6 KB pair", 10_000, pair_recording),
        Workload("C100k", "100,000 recordings of the 1.6 KB pair", 100_000, pair_recording),
    )
}
DEFAULT = ("A", "B", "C", "C100k")

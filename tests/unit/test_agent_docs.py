"""docs/agents.md keeps up with the agent commands and MCP tools, and each says what it does."""

from __future__ import annotations

from pathlib import Path

import anyio

from semula.surfaces import cli_agent
from semula.surfaces.client import Client
from semula.surfaces.mcp_server import build

DOC = (Path(__file__).resolve().parents[2] / "docs" / "agents.md").read_text()


def test_every_agent_command_has_help_and_is_documented():
    for command in cli_agent.COMMANDS:
        assert command.help and len(command.help) > 20, command.name
        assert f"semula {command.name}" in DOC, command.name


def test_every_mcp_tool_has_a_description_and_is_documented():
    tools = anyio.run(build(Client("http://127.0.0.1:9", token="")).list_tools)
    assert {tool.name for tool in tools} == {
        "list_pending",
        "get_pending",
        "claim_next",
        "answer_pending",
        "release_claim",
        "cancel_pending",
        "get_entry",
        "get_entry_answer",
        "edit_entry_answer",
        "pin_entry_answer",
        "delete_entry_answer",
        "reorder_entry_answers",
        "list_faults",
        "add_fault",
        "clear_faults",
    }
    for tool in tools:
        assert tool.description and len(tool.description) > 100, tool.name
        assert f"`{tool.name}`" in DOC, tool.name

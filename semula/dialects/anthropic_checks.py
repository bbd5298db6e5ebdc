"""The Anthropic Messages API's request checks: the 400s the API answers, worded as it words them.

Paths are the API's (`messages.1.content.0.tool_use_id: ...`). The rule (decision 0059): refuse only
what the API refuses today, as its current reference says. Block types, fields and betas semula does not
know are let through (the provider judges them on record-through); consecutive messages of one role are
one turn, as the API merges them; `system` messages may stand anywhere in `messages`.
"""

from __future__ import annotations

import re
from typing import Any

from semula.core import toolsets
from semula.core.errors import BadRequest
from semula.core.limits import MAX_BLOCKS, blocks

ROLES = ("user", "assistant", "system")
TOOL_CHOICES = ("auto", "any", "tool", "none")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}\Z")
IMAGE_SOURCES = ("base64", "url", "file")
# Request keys that are HTTP headers of the app's request, kept in the stored request by semula.
HEADER_FIELDS = ("anthropic-beta", "anthropic-version")
MAX_MESSAGES = 100_000  # the API's limit on messages in one request


def bad(message: str, param: str | None = None) -> BadRequest:
    """A 400 as the API words it: `path: message`; the code is the envelope's type, so no prefix."""
    return BadRequest(f"{param}: {message}" if param else message, param=param, code="invalid_request_error")


def check(body: Any, *, counting: bool = False) -> None:
    """Refuse what the API refuses; `counting` is /v1/messages/count_tokens (no max_tokens)."""
    if not isinstance(body, dict):
        raise bad("The body must be a JSON object.")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise bad("Field required", "model")
    if not counting:
        # 0 is allowed: it warms the prompt cache without generating a response.
        _integer(body, "max_tokens", low=0, required=True)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise bad("Field required" if messages is None else "Input should be a valid list", "messages")
    if len(messages) > MAX_MESSAGES:  # before they are looked at (decision 0054)
        raise bad(f"too many messages: {len(messages)}; at most {MAX_MESSAGES} in a request", "messages")
    content_blocks = blocks(messages, "content")
    if content_blocks > MAX_BLOCKS:  # decision 0063
        raise bad(f"too many content blocks: {content_blocks}; at most {MAX_BLOCKS} in a request", "messages")
    _check_system(body.get("system"))
    # The tool_use ids of the assistant turn before the current user turn: what a tool_result may
    # answer. Consecutive messages of one role are one turn; a system message ends no turn.
    previous_uses: set[str] = set()
    turn_uses: set[str] = set()
    last_role = None
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "assistant" and last_role != "assistant":
            turn_uses = set()
        if role == "user" and last_role == "assistant":
            previous_uses = turn_uses
        turn_uses |= _check_message(message, i, previous_uses if role == "user" else set())
        if role in ("user", "assistant"):
            last_role = role
    toolsets.checked("anthropic.messages", body.get("tools"), _check_tools)  # once per tool set
    _check_tool_choice(body.get("tool_choice"))
    for name, high in (("temperature", 1.0), ("top_p", 1.0)):
        _number(body, name, high)
    _integer(body, "top_k", low=0)
    stops = body.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise bad("Input should be a valid list of strings", "stop_sequences")
    if body.get("stream") is not None and not isinstance(body["stream"], bool):
        raise bad("Input should be a valid boolean", "stream")
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and isinstance(thinking.get("type"), str)):
        raise bad("Input should be an object with a type", "thinking")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise bad("Input should be a valid dictionary", "metadata")


def _integer(body: dict[str, Any], name: str, *, low: int, required: bool = False) -> None:
    value = body.get(name)
    if value is None:
        if required:
            raise bad("Field required", name)
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad("Input should be a valid integer", name)
    if value < low:
        raise bad(f"Input should be greater than or equal to {low}", name)


def _number(body: dict[str, Any], name: str, high: float) -> None:
    value = body.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad("Input should be a valid number", name)
    if not 0 <= value <= high:
        raise bad(f"Input should be between 0 and {high:g}", name)


def _check_system(system: Any) -> None:
    if system is None or isinstance(system, str):
        return
    if not isinstance(system, list):
        raise bad("Input should be a valid string or a list of text blocks", "system")
    for j, block in enumerate(system):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            raise bad("Input should be a text block with a text string", f"system.{j}")


def _check_message(message: Any, i: int, previous_uses: set[str]) -> set[str]:
    """Check one message; returns the tool_use ids it makes (what the next user turn may answer)."""
    where = f"messages.{i}"
    if not isinstance(message, dict):
        raise bad("Input should be a valid dictionary", where)
    role = message.get("role")
    if role not in ROLES:
        raise bad("Input should be 'user', 'assistant' or 'system'", f"{where}.role")
    content = message.get("content")
    if isinstance(content, str):
        return set()
    if not isinstance(content, list):
        raise bad("Input should be a valid string or a list of content blocks", f"{where}.content")
    uses: set[str] = set()
    for j, block in enumerate(content):
        _check_block(block, f"{where}.content.{j}", role, previous_uses, uses)
    return uses


def _check_block(block: Any, where: str, role: str, previous_uses: set[str], uses: set[str]) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise bad("Input should be a content block with a type", where)
    kind = block["type"]
    if kind == "text" and not isinstance(block.get("text"), str):
        raise bad("Field required", f"{where}.text")
    if kind in ("image", "document"):
        source = block.get("source")
        if not isinstance(source, dict) or not isinstance(source.get("type"), str):
            raise bad("Field required", f"{where}.source")
        if kind == "image" and source["type"] not in IMAGE_SOURCES:
            raise bad(
                "Input tag found using 'type' does not match 'base64', 'url' or 'file'", f"{where}.source"
            )
    if kind == "tool_use":
        if role != "assistant":
            raise bad("tool_use blocks may only appear in assistant messages", where)
        for key, kinds in (("id", str), ("name", str), ("input", dict)):
            if not isinstance(block.get(key), kinds):
                raise bad("Field required", f"{where}.{key}")
        uses.add(block["id"])
    if kind == "tool_result":
        if role != "user":
            raise bad("tool_result blocks may only appear in user messages", where)
        use_id = block.get("tool_use_id")
        if not isinstance(use_id, str):
            raise bad("Field required", f"{where}.tool_use_id")
        if use_id not in previous_uses:
            raise bad(
                f"unexpected `tool_use_id` found in `tool_result` blocks: {use_id}. Each `tool_result` block "
                "must have a corresponding `tool_use` block in the previous message.",
                where,
            )
        result = block.get("content")
        if result is not None and not isinstance(result, str | list):
            raise bad("Input should be a valid string or a list of content blocks", f"{where}.content")
    if kind in ("thinking", "redacted_thinking") and role != "assistant":
        raise bad(f"{kind} blocks may only appear in assistant messages", where)


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise bad("Input should be a valid list", "tools")
    names: set[str] = set()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise bad("Input should be a valid dictionary", f"tools.{i}")
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise bad("String should match pattern '^[a-zA-Z0-9_-]{1,128}$'", f"tools.{i}.name")
        if name in names:
            raise bad(f"Tool names must be unique: {name}", "tools")
        names.add(name)
        if tool.get("type") in (None, "custom") and not isinstance(tool.get("input_schema"), dict):
            raise bad("Field required", f"tools.{i}.input_schema")


def _check_tool_choice(choice: Any) -> None:
    if choice is None:
        return
    if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICES:
        raise bad(
            "Input tag found using 'type' does not match any of the expected tags: 'auto', 'any', 'tool', "
            "'none'",
            "tool_choice",
        )
    if choice["type"] == "tool" and not isinstance(choice.get("name"), str):
        raise bad("Field required", "tool_choice.name")
    if choice.get("disable_parallel_tool_use") is not None and not isinstance(
        choice["disable_parallel_tool_use"], bool
    ):
        raise bad("Input should be a valid boolean", "tool_choice.disable_parallel_tool_use")

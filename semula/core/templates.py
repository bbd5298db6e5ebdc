"""Replay-time templates: exactly `{{now}}`, `{{uuid}}` and `{{request.model}}`, nothing else (pure).

A template is a fixed token, not an expression: `{{ now }}`, `{{env.HOME}}` or `{{7*7}}` stay as written,
so an answer can never read the server's environment or run code.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

_TOKEN = re.compile(r"\{\{(now|uuid|request\.model)\}\}")


def expand(obj: Any, request_model: str, now: float | None = None) -> Any:
    """A copy of a JSON value with the templates in its strings expanded; `now` is a Unix time."""
    return _expand(obj, _expander(request_model, now, in_json=False))


def expand_json_text(text: str, request_model: str, now: float | None = None) -> str:
    """Templates expanded inside JSON text (tool call arguments): what they insert is escaped as JSON."""
    return _expander(request_model, now, in_json=True)(text)


def expand_completion(
    completion: dict[str, Any], request_model: str, now: float | None = None
) -> dict[str, Any]:
    """A new completion with templates expanded in message content and tool call arguments only."""
    expander = _expander(request_model, now, in_json=False)
    in_json = _expander(request_model, now, in_json=True)
    result = dict(completion)
    result["choices"] = [
        _expand_choice(choice, "message", expander, in_json) for choice in completion.get("choices", [])
    ]
    return result


def expand_chunks(
    chunks: list[dict[str, Any]], request_model: str, now: float | None = None
) -> list[dict[str, Any]]:
    """New chunks with templates expanded in deltas; a token split across two chunks stays as it is."""
    expander = _expander(request_model, now, in_json=False)
    in_json = _expander(request_model, now, in_json=True)
    result = []
    for chunk in chunks:
        chunk = dict(chunk)
        if isinstance(chunk.get("choices"), list):
            chunk["choices"] = [
                _expand_choice(choice, "delta", expander, in_json) for choice in chunk["choices"]
            ]
        result.append(chunk)
    return result


def _expander(request_model: str, now: float | None, in_json: bool) -> Callable[[str], str]:
    # One timestamp per response, so every {{now}} in an answer agrees; a fresh uuid per occurrence.
    moment = datetime.fromtimestamp(time.time() if now is None else now, tz=UTC)
    stamp = moment.isoformat(timespec="seconds").replace("+00:00", "Z")
    model = request_model
    if in_json:
        # Tool arguments are JSON text: the model name goes into a JSON string, so it is escaped as one.
        model = json.dumps(request_model, ensure_ascii=False)[1:-1]

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "now":
            return stamp
        if name == "uuid":
            return str(uuid.uuid4())
        return model

    def expand_text(text: str) -> str:
        if "{{" not in text:
            return text
        return _TOKEN.sub(replace, text)

    return expand_text


def _expand(obj: Any, expand_text: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return expand_text(obj)
    if isinstance(obj, dict):
        return {key: _expand(value, expand_text) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_expand(value, expand_text) for value in obj]
    return obj


def _expand_choice(
    choice: Any, key: str, expand_text: Callable[[str], str], expand_json: Callable[[str], str]
) -> Any:
    if not isinstance(choice, dict) or not isinstance(choice.get(key), dict):
        return choice
    message = dict(choice[key])
    if isinstance(message.get("content"), str):
        message["content"] = expand_text(message["content"])
    if isinstance(message.get("tool_calls"), list):
        calls = []
        for call in message["tool_calls"]:
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and isinstance(function.get("arguments"), str):
                call = {**call, "function": {**function, "arguments": expand_json(function["arguments"])}}
            calls.append(call)
        message["tool_calls"] = calls
    return {**choice, key: message}

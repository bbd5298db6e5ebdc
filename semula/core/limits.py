"""Caps on how much one request may hold, checked with a len() or a sum of lengths before any item is
looked at, so that a request past one costs its JSON parse (decisions 0054 and 0063).

No provider documents a cap on Responses input items, Gemini contents, or content blocks and parts
in a request; the one conversation-size limit documented is Anthropic's 100,000 messages. semula
takes that figure for all of them: generous to any real conversation (a model's context fills long
before), and a third of what the body limit admits in items of a few bytes each.
"""

from __future__ import annotations

from typing import Any

MAX_ITEMS = 100_000  # input items (Responses), contents (Gemini), messages (Chat Completions)
MAX_BLOCKS = 100_000  # content blocks or parts, summed over a request's items


def blocks(items: list[Any], key: str) -> int:
    """How many blocks the items hold in their `key` lists, summed (a string there holds none)."""
    return sum(len(v) for item in items if type(item) is dict and type(v := item.get(key)) is list)

"""Tool sets seen before (pure, no I/O): an agent sends the same tool definitions with every request,
so what semula does with them that does not depend on the rest of the request is done once per
distinct tool set (issue #52, docs/decisions/0068-counted-sequences-and-tool-sets.md).

A tool set is known by the SHA-256 of its JSON as orjson writes it (which tells 1 from 1.0 and true
from 1). What is remembered of it, in one bounded table per process:

- the JSON policy's walk over it (semula.core.jsonio.read: its depth, its numbers, whether its floats
  are plain), done for the request's `tools` member apart from the rest of the body;
- each API's check of it (`checked()`): Chat Completions' (with its JSON Schemas), Responses',
  Anthropic's and Gemini's.

The digest of the request being read is remembered with the list it was made of (`digest()`), so the
check that follows the reading does not write and hash the set again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import orjson

MAX_SETS = 4096  # entries of the table (a walk's result or an API's check): cleared when full
_known: dict[tuple[str, bytes], Any] = {}
_last: tuple[Any, bytes | None] = (None, None)  # the list a digest was last made of, held, and the digest


def digest(tools: list[Any]) -> bytes | None:
    """The SHA-256 of a tool set's JSON (None for one orjson cannot write: an integer past 64 bits, a
    lone surrogate, a nesting past its limit; such a set is walked and checked every time)."""
    global _last
    held, made = _last
    if held is tools:  # the list itself is held, so no other list can have its identity meanwhile
        return made
    try:
        made = hashlib.sha256(orjson.dumps(tools)).digest()
    except TypeError:  # orjson.JSONEncodeError is one
        made = None
    _last = (tools, made)
    return made


def recall(kind: str, key: bytes | None) -> Any:
    """What was remembered of the set `key` under `kind`, or None."""
    return _known.get((kind, key)) if key is not None else None


def remember(kind: str, key: bytes | None, value: Any) -> None:
    if key is None or value is None:
        return
    if len(_known) >= MAX_SETS:
        _known.clear()  # a cache of pure functions: dropping it changes no answer
    _known[(kind, key)] = value


def checked(kind: str, tools: Any, check: Callable[[Any], None]) -> None:
    """Run `check(tools)` (which raises for a set its API refuses) unless this set passed it before."""
    if type(tools) is not list or not tools:
        check(tools)
        return
    key = digest(tools)
    if recall(kind, key):
        return
    check(tools)
    remember(kind, key, True)

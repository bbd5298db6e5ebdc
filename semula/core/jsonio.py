"""The JSON every entrance accepts (pure, no I/O): standard JSON, I-JSON strings, a bounded depth.

Proxy bodies, REST bodies, dashboard forms and bundle imports are all read through here, so one
policy decides what semula stores (docs/decisions/0026-input-hardening.md):

* only standard JSON: `NaN`, `Infinity` and numbers too large for a double (`1e400`) are refused,
  as OpenAI refuses them; so are integers past 64 bits (a signed one), which semula's own bundle
  reader could not read back from an export;
* no lone UTF-16 surrogates (`"\\ud800"`): RFC 7493 (I-JSON) forbids them, and neither UTF-8 text
  nor the databases can hold them;
* containers nest at most MAX_DEPTH deep, so every recursive walk over a stored value (fingerprint,
  redaction, templates, JSON Schema) stays far from Python's recursion limit.

orjson reads a document about four times faster than json; what it reads differently (integers past
64 bits it makes floats of, a byte order mark or UTF-16 it refuses, lone surrogates it refuses) and
every error go through json as before, so the values and the error texts are json's.
"""

from __future__ import annotations

import gc
import json
import math
import re
from collections.abc import Iterable
from typing import Any

import orjson

from semula.core import toolsets
from semula.core.errors import BadRequest

MAX_DEPTH = 64
# Where a lone surrogate could come from: a \uD800-\uDFFF escape (raw ones are not valid UTF-8).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
# orjson reads an integer past 64 bits as a float: one this large may have been such an integer.
_BIG = float(2**63)
# Integers must fit a signed 64-bit integer: what the bundle reader (yajl) and most JSON tools read.
_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1


class InvalidJSON(BadRequest):
    """The body must be valid JSON."""


def _constant(name: str) -> Any:
    raise InvalidJSON(f"{name} is not valid JSON (numbers must be finite).")


def _int(text: str) -> int:
    value = int(text)
    if not _INT_MIN <= value <= _INT_MAX:
        raise InvalidJSON(f"The number {text[:40]} is too large (integers must fit in 64 bits).")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJSON(f"The number {text[:40]} is too large (numbers must fit a double).")
    return value


def loads(raw: bytes | str, what: str = "The body") -> Any:
    """Parse one JSON document by the policy above; BadRequest (400) naming `what` when it breaks it."""
    return _read(raw, what, plain=False)[0]


def read(raw: bytes | str, what: str = "The body") -> tuple[Any, bool]:
    """loads(), and whether the value is `plain`: read by orjson, and every float in it one that
    orjson writes as repr() does and that is not a whole number. orjson then writes the value exactly
    as json.dumps would (semula.core.fingerprint hashes it without a walk of its own)."""
    return _read(raw, what, plain=True)


def _read(raw: bytes | str, what: str, *, plain: bool) -> tuple[Any, bool]:
    # `plain`: whether to vouch for the floats (the proxy's bodies); other readers (an answer with
    # thousands of vector floats) want no such answer and do not pay for it.
    if isinstance(raw, bytes | str):
        try:
            value = _parse(raw)
        except orjson.JSONDecodeError:
            pass  # json names the error (or reads what orjson refuses: a byte order mark, UTF-16)
        else:
            # orjson refuses NaN, infinities and lone surrogates itself; the depth is ours to check.
            found = _ordinary_body(value) if plain else _ordinary(value)
            if found is not None:
                return value, found
    return _loads(raw, what), False


# Past this size a body is parsed with Python's cyclic GC paused: the 100,000s of objects orjson makes
# for a large body each count towards a collection, and the collections, which walk every object
# alive, took most of the parse (a 4.9 MB body of 100,000 items: 144 ms of CPU, 57 ms paused;
# decision 0063). orjson never runs Python code in between, so no other greenlet runs while paused.
# The parse then freezes what is alive (gc.freeze): a body's objects, all still in the youngest
# generation, would otherwise make the very next collection walk them all (58 ms of a Gemini request
# at the caps, decision 0074); frozen, no collection looks at them, and the body's objects are freed
# all the same when it is dropped (they hold no cycle). The next large parse unfreezes what it froze
# (into the oldest generation), so cyclic garbage among the objects alive at one parse waits at most
# until the next one.
PAUSE_GC_ABOVE = 256 * 1024


def _parse(raw: bytes | str) -> Any:
    if len(raw) <= PAUSE_GC_ABOVE or not gc.isenabled():
        return orjson.loads(raw)
    gc.disable()
    try:
        gc.unfreeze()
        value = orjson.loads(raw)
        gc.freeze()  # before the collections resume: none walks the body's objects
        return value
    finally:
        gc.enable()


def stored(text: str | bytes) -> Any:
    """A JSON document semula wrote itself (an entry's response), read as json.loads reads it, by orjson
    when that gives the same value: no policy, no error text of ours."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)  # a lone surrogate escape, NaN: json reads what orjson refuses
    return value if _ordinary(value) is not None else json.loads(text)


def compact(value: Any) -> bytes:
    """Compact JSON for the wire (an SSE event's data), written by orjson: ~10x json's speed.

    What orjson cannot write as json would (a lone surrogate, which is not UTF-8; an integer past
    64 bits; a key that is not a string) is written by json with ASCII escapes instead, so every
    value goes out as valid JSON in valid UTF-8.
    """
    try:
        return orjson.dumps(value)
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def plain_float(value: float) -> bool:
    """Whether orjson writes a float as json (repr) does, and it is not a whole number (which a
    fingerprint hashes as the integer: JSON has one number type)."""
    if value.is_integer() and abs(value) < 2**53:
        return False
    return orjson.dumps(value) == repr(value).encode()


def _ordinary(value: Any, *, plain: bool = False) -> bool | None:
    """Whether orjson's reading needs no second look (None when it does): nested at most MAX_DEPTH
    deep, and no float that may have been an integer too large for 64 bits. With `plain`, True when,
    besides, every float is plain_float() (the proxy's bodies: a few floats; an embeddings answer
    read back has thousands, and its reader wants no answer). One walk, level by level."""
    level, depth = [value], 0
    while level:
        below: list[Any] = []
        nested = False
        for item in level:
            kind = type(item)
            if kind is str:
                continue
            if kind is dict:
                nested = True
                below.extend(item.values())
            elif kind is list:
                nested = True
                below.extend(item)
            elif kind is int:
                if not _INT_MIN <= item <= _INT_MAX:
                    return None  # json's reading says which number
            elif kind is float:
                if not -_BIG < item < _BIG:
                    return None
                if plain and not plain_float(item):
                    plain = False
        if nested:
            depth += 1
            if depth > MAX_DEPTH:
                return None
        level = below
    return plain


def _ordinary_body(value: Any) -> bool | None:
    """_ordinary(value, plain=True), with a request's `tools` walked once per distinct tool set
    (semula.core.toolsets): an agent sends the same tools with every request, and they were two
    thirds of the walk over an 88 KB agent request."""
    tools = value.get("tools") if type(value) is dict else None
    if type(tools) is not list or not tools:
        return _ordinary(value, plain=True)
    key = toolsets.digest(tools)
    found = toolsets.recall("walk", key)
    if found is None:
        # As deep as in the body: the walk's depth counts from the root.
        found = _ordinary({"tools": tools}, plain=True)
        if found is None:
            return None
        toolsets.remember("walk", key, (found,))
    else:
        [found] = found
    rest = _ordinary({name: item for name, item in value.items() if name != "tools"}, plain=True)
    return None if rest is None else rest and found


def _loads(raw: bytes | str, what: str) -> Any:
    try:
        value = json.loads(raw, parse_constant=_constant, parse_float=_float, parse_int=_int)
    except InvalidJSON:
        raise
    except RecursionError:
        raise too_deep(what) from None
    except ValueError as exc:  # JSONDecodeError, and UnicodeDecodeError for bytes that are not UTF-8
        raise InvalidJSON(f"{what} must be valid JSON: {str(exc)[:200]}") from None
    pattern = _SURROGATE_ESCAPE_BYTES if isinstance(raw, bytes | bytearray) else _SURROGATE_ESCAPE
    check(value, what, strings=pattern.search(raw) is not None)
    return value


def too_deep(what: str = "The body") -> InvalidJSON:
    return InvalidJSON(f"{what} nests deeper than {MAX_DEPTH} levels of arrays and objects.")


def check(value: Any, what: str = "The body", *, strings: bool = True) -> None:
    """Refuse a parsed value nested deeper than MAX_DEPTH or (when `strings`) holding a lone surrogate."""
    stack: list[tuple[Iterable[Any], int]] = [([value], 0)]
    while stack:
        items, depth = stack.pop()
        for item in items:
            if isinstance(item, dict):
                if depth + 1 > MAX_DEPTH:
                    raise too_deep(what)
                if strings:
                    _check_strings(item.keys(), what)
                stack.append((item.values(), depth + 1))
            elif isinstance(item, list):
                if depth + 1 > MAX_DEPTH:
                    raise too_deep(what)
                stack.append((item, depth + 1))
            elif strings and isinstance(item, str):
                _check_strings((item,), what)


def _check_strings(strings: Iterable[str], what: str) -> None:
    for text in strings:
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJSON(
                    f"{what} holds a lone UTF-16 surrogate (\\ud800-\\udfff without its pair), "
                    "which is not valid Unicode text."
                ) from None

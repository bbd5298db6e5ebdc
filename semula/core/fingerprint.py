"""Canonical request -> fingerprint: what makes two chat completion requests "the same" (pure, no I/O)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from difflib import SequenceMatcher
from typing import Any

import orjson

from semula.core import jsonio, presets, safe_regex
from semula.core.errors import BadRequest

VERSION = "v1"
CHAT_API = "openai.chat"

# Fields that change how the answer is delivered or billed, not what it says.
TRANSPORT_FIELDS = frozenset(
    {
        "stream",
        "stream_options",
        "user",
        "metadata",
        "store",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
    }
)

MAX_IGNORE_FIELDS = 100
WILDCARD = "*"  # an ignore_fields token that stands for every member of an array or object
MAX_NORMALIZE_RULES = 50
MAX_PATTERN_LENGTH = 500

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ARRAY_INDEX = re.compile(r"(?:0|[1-9][0-9]*)\Z")
# A JSON pointer's "~" must be followed by 0 or 1 (RFC 6901, section 3).
_BAD_ESCAPE = re.compile(r"~(?![01])")
# The types orjson writes as json.dumps does (floats are checked one by one).
_SCALARS = frozenset({str, int, bool, type(None)})
# closeness() compares at most this many characters of a changed string region, to stay cheap.
_CLOSENESS_CAP = 2000
# ... and at most this many fields of each request, the first in document order: a replay miss's
# "closest entry" is a hint, which must not cost a request of 100,000 items seconds (decision 0063).
CLOSENESS_FIELDS = 5000


def canonical_json(obj: Any) -> str:
    """The one JSON serialisation every fingerprint is computed from: sorted keys, no whitespace."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def validate_ignore_fields(value: Any, never: frozenset[str] = frozenset()) -> list[str]:
    """Check a project's `ignore_fields` setting: a list of JSON pointers (RFC 6901) in which a token
    `*` stands for every member of an array or object (`/input/*/id`). A pointer that could never
    match is refused: a `*` inside a token, one that names the whole request, or one under a field in
    `never` (fields no fingerprint holds: every API's transport fields)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("ignore_fields must be a list of JSON pointers", param="ignore_fields")
    if len(value) > MAX_IGNORE_FIELDS:
        raise BadRequest(f"ignore_fields has at most {MAX_IGNORE_FIELDS} pointers", param="ignore_fields")
    for pointer in value:
        if not isinstance(pointer, str) or (pointer and not pointer.startswith("/")):
            raise BadRequest(
                f"ignore_fields: {pointer!r} is not a JSON pointer like /temperature or /input/*/id",
                param="ignore_fields",
            )
        if _BAD_ESCAPE.search(pointer):
            raise BadRequest(
                f"ignore_fields: {pointer!r} has a '~' not followed by 0 or 1", param="ignore_fields"
            )
        tokens = pointer_tokens(pointer)
        if any("*" in token and token != WILDCARD for token in tokens):
            raise BadRequest(
                f"ignore_fields: {pointer!r} would never match: a wildcard stands for a whole token, as "
                "in /input/*/id",
                param="ignore_fields",
            )
        if tokens == [WILDCARD]:
            raise BadRequest(
                f"ignore_fields: {pointer!r} names every field: every request would match every entry",
                param="ignore_fields",
            )
        if tokens and tokens[0] in never:
            raise BadRequest(
                f"ignore_fields: {pointer!r} would never match: {tokens[0]} is never part of a fingerprint",
                param="ignore_fields",
            )
    return list(value)


def pointer_tokens(pointer: str) -> list[str]:
    """A JSON pointer's reference tokens, unescaped (the empty pointer has none)."""
    if not pointer:
        return []
    return [token.replace("~1", "/").replace("~0", "~") for token in pointer[1:].split("/")]


def validate_normalize(value: Any) -> list[dict[str, str]]:
    """Check a project's `normalize` setting: a list of {"pattern": regex, "replacement": str} rules."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest("normalize must be a list of {pattern, replacement} rules", param="normalize")
    if len(value) > MAX_NORMALIZE_RULES:
        raise BadRequest(f"normalize has at most {MAX_NORMALIZE_RULES} rules", param="normalize")
    rules = []
    for i, rule in enumerate(value):
        if not isinstance(rule, dict):
            raise BadRequest("a normalize rule is an object {pattern, replacement}", param=f"normalize[{i}]")
        if "preset" in rule:
            rules.append(_checked_preset(rule, i))
            continue
        unknown = sorted(set(rule) - {"pattern", "replacement"})
        if unknown:
            raise BadRequest(f"unknown key {unknown[0]!r} in a normalize rule", param=f"normalize[{i}]")
        pattern, replacement = rule.get("pattern"), rule.get("replacement", "")
        if not isinstance(pattern, str) or not pattern:
            raise BadRequest("pattern must be a non-empty string", param=f"normalize[{i}].pattern")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise BadRequest(
                f"pattern is longer than {MAX_PATTERN_LENGTH} characters", param=f"normalize[{i}].pattern"
            )
        try:
            safe_regex.compile(pattern)
        except safe_regex.PatternError as exc:
            raise BadRequest(str(exc), param=f"normalize[{i}].pattern") from None
        if not isinstance(replacement, str):
            raise BadRequest("replacement must be a string", param=f"normalize[{i}].replacement")
        try:
            safe_regex.Substitution(pattern, replacement)
        except safe_regex.PatternError as exc:
            raise BadRequest(
                f"replacement is not valid for this pattern: {exc}", param=f"normalize[{i}].replacement"
            ) from None
        rules.append({"pattern": pattern, "replacement": replacement})
    return rules


def _checked_preset(rule: dict[str, Any], i: int) -> dict[str, str]:
    """A {"preset": NAME} rule: one of semula/core/presets.py's names, alone in its object."""
    if set(rule) != {"preset"}:
        raise BadRequest('a preset rule is {"preset": NAME} alone', param=f"normalize[{i}]")
    if not isinstance(rule["preset"], str) or rule["preset"] not in presets.PRESETS:
        known = ", ".join(sorted(presets.PRESETS))
        raise BadRequest(
            f"unknown preset {str(rule['preset'])[:40]!r}; the presets are: {known}",
            param=f"normalize[{i}].preset",
        )
    return {"preset": rule["preset"]}


def message_texts(request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
    """(container, key) of each chat message text: string contents and text parts."""
    messages = request.get("messages")
    if not isinstance(messages, list):
        return
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            yield message, "content"
        elif isinstance(content, list):
            for part in content:
                if (
                    isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                ):
                    yield part, "text"


Texts = Callable[[dict[str, Any]], Iterator[tuple[Any, Any]]]


def canonical_request(
    body: Mapping[str, Any],
    ignore_fields: Iterable[str] = (),
    normalize: Iterable[Mapping[str, str]] = (),
    *,
    transport: frozenset[str] = TRANSPORT_FIELDS,
    texts: Texts = message_texts,
    dropped: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """A fresh copy of the request as hashed: no transport fields, ignored fields removed, text normalised.

    `transport` and `texts` are the API's (semula.dialects); the defaults are Chat Completions'.
    `dropped` names keys left out at every depth (Anthropic's `cache_control` hints).
    """
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    try:
        if dropped:
            canonical = {
                key: _copy_without(value, dropped) for key, value in body.items() if key not in transport
            }
        else:
            canonical = {key: _copy(value) for key, value in body.items() if key not in transport}
    except RecursionError:
        raise BadRequest("the request body is nested too deeply") from None
    canonical = without(canonical, ignore_fields)
    try:
        # A rule stored before settings were saved as checked may lack its replacement: "" it is.
        rules = [
            safe_regex.Substitution(rule["pattern"], rule.get("replacement", ""))
            for rule in presets.expand(list(normalize))
        ]
    except safe_regex.PatternError as exc:
        # A rule saved before patterns ran on RE2; saving the setting again names which one.
        raise BadRequest(f"the project's normalize setting: {exc}", param="normalize") from None
    if rules:
        for container, key in list(texts(canonical)):
            container[key] = _apply(container[key], rules)
    return canonical


def fingerprint(
    body: Mapping[str, Any],
    ignore_fields: Iterable[str] = (),
    normalize: Iterable[Mapping[str, str]] = (),
    *,
    transport: frozenset[str] = TRANSPORT_FIELDS,
    texts: Texts = message_texts,
    api: str | None = None,
    dropped: frozenset[str] = frozenset(),
    plain: bool = False,
) -> str:
    """`v1:` + SHA-256 of the canonical request's canonical JSON.

    Chat Completions requests hash as they always have; another API's requests hash together with the
    API's name, so the same JSON sent to two APIs is two requests. `plain` says that the body is as
    semula.core.jsonio.read() found it plain: its values are JSON's and orjson writes its floats as
    json does, so orjson's sorted bytes need no walk to vouch for them.
    """
    data = None
    if type(body) is dict and not ignore_fields and not normalize:
        # The common case: the canonical request is the body without its transport fields, unless a
        # walk finds something _copy would change (an integral float, a dropped key).
        canonical: Any = {key: value for key, value in body.items() if key not in transport}
        if plain and not dropped:
            data = _orjson_sorted(_with_api(canonical, api))
        else:
            data = _orjson_canonical(_with_api(canonical, api), dropped)
    if data is None:
        canonical = canonical_request(
            body, ignore_fields, normalize, transport=transport, texts=texts, dropped=dropped
        )
        data = _orjson_canonical(_with_api(canonical, api), frozenset())
    if data is None:
        # A lone surrogate ("\ud800") is valid JSON input; hash it rather than fail the request.
        data = canonical_json(_with_api(canonical, api)).encode("utf-8", "surrogatepass")
    return f"{VERSION}:{hashlib.sha256(data).hexdigest()}"


def _with_api(canonical: Any, api: str | None) -> Any:
    return {"api": api, "request": canonical} if api is not None and api != CHAT_API else canonical


def _orjson_canonical(value: Any, dropped: frozenset[str]) -> bytes | None:
    """canonical_json(value) as UTF-8, written by orjson (five times faster), or None where orjson's
    bytes could differ: a float orjson writes otherwise than repr() or that _copy makes an integer,
    a `dropped` key, a type other than JSON's, or what orjson refuses (lone surrogates, integers
    past 64 bits, nesting past its limit)."""
    level = [value]
    while level:  # level by level, each container's items added in one call
        below: list[Any] = []
        for item in level:
            kind = type(item)
            if kind in _SCALARS:
                continue
            if kind is dict:
                if dropped and not dropped.isdisjoint(item):
                    return None
                below.extend(item.values())
            elif kind is list:
                below.extend(item)
            elif kind is not float or not jsonio.plain_float(item):
                return None
        level = below
    return _orjson_sorted(value)


def _orjson_sorted(value: Any) -> bytes | None:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError: what orjson refuses (lone surrogates, huge integers)
        return None


class _Absent:
    """ABSENT's type: one value, the same once pickled (a difference found by semula.heavy's helper)."""

    def __reduce__(self) -> str:
        return "ABSENT"


# The value of a field one side does not have, in difference().
ABSENT = _Absent()


def first_difference(a: Any, b: Any) -> str | None:
    """The first path (`messages[1].content`) where two canonical requests differ, or None if equal."""
    found = difference(a, b)
    return found[0] if found is not None else None


def difference(a: Any, b: Any) -> tuple[str, Any, Any] | None:
    """The first path where two canonical requests differ and the value of each there (ABSENT when
    one has no such field), or None if they are equal."""
    return _first_difference(a, b, "")


def closeness(a: Any, b: Any) -> float:
    """A similarity score in [0, 1] between two canonical requests, to pick the nearest recorded entry."""
    return fields_closeness(fields(a), fields(b))


def fields(request: Any) -> dict[str, Any]:
    """A canonical request's first CLOSENESS_FIELDS fields by path, what closeness() compares (made
    once for a request compared with many)."""
    return dict(itertools.islice(_leaves(request, ""), CLOSENESS_FIELDS))


def cut(body: Any) -> tuple[Any, frozenset[str]]:
    """The body with each top-level list longer than CLOSENESS_FIELDS cut to that many items, and the
    names of the lists cut. fields() of a cut request is fields() of the whole one (every item holds
    at least one field), and a difference() found inside a cut list is the first of the whole
    requests too; a replay miss compares cut requests, so a request of 100,000 items is not copied
    whole for each entry it is compared with (issue #49)."""
    if type(body) is not dict:
        return body, frozenset()
    long = frozenset(k for k, v in body.items() if type(v) is list and len(v) > CLOSENESS_FIELDS)
    if not long:
        return body, long
    return {k: v[:CLOSENESS_FIELDS] if k in long else v for k, v in body.items()}, long


def within(found: tuple[str, Any, Any] | None, lists: frozenset[str]) -> bool:
    """Whether a difference() of cut requests is inside one of the `lists` cut (so is the whole
    requests' first), or nothing was cut."""
    if not lists:
        return True
    return found is not None and any(found[0].startswith(f"{join_path('', key)}[") for key in lists)


def fields_closeness(left: dict[str, Any], right: dict[str, Any]) -> float:
    """closeness() of two requests' fields()."""
    paths = left.keys() | right.keys()
    if not paths:
        return 1.0
    total = 0.0
    for path in paths:
        if path in left and path in right:
            x, y = left[path], right[path]
            if type(x) is type(y) and x == y:
                total += 1.0
            elif isinstance(x, str) and isinstance(y, str):
                total += _text_ratio(x, y)
    return total / len(paths)


def join_path(path: str, key: str | int) -> str:
    """Extend a field path as error params spell it: `messages[1].content`, `arguments["first name"]`."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if not _IDENTIFIER.match(key):
        return f"{path}[{json.dumps(key, ensure_ascii=False)}]"
    return f"{path}.{key}" if path else key


def _copy(value: Any) -> Any:
    # Copying by hand is much faster than copy.deepcopy on the hot path, and lets 1.0 hash like 1:
    # JSON has one number type, and a Python client sends 1.0 where a JavaScript client sends 1.
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    return value


def _copy_without(value: Any, dropped: frozenset[str]) -> Any:
    # _copy, leaving out `dropped` keys wherever they are; a second function keeps _copy's loop lean.
    if isinstance(value, dict):
        return {key: _copy_without(item, dropped) for key, item in value.items() if key not in dropped}
    if isinstance(value, list):
        return [_copy_without(item, dropped) for item in value]
    return _copy(value)


def without(body: Any, pointers: Iterable[str]) -> Any:
    """`body` with what `pointers` (wildcards allowed) name left out, copying only the containers on the
    way to a removed member: `body` itself when none is there (cheap enough for every request)."""
    for pointer in pointers:
        tokens = pointer_tokens(pointer)
        if tokens:
            body = _pruned(body, tokens)
    return body


def _pruned(node: Any, tokens: list[str]) -> Any:
    token, rest = tokens[0], tokens[1:]
    if isinstance(node, dict):
        keys = node.keys() if token == WILDCARD else (token,) if token in node else ()
    elif isinstance(node, list):
        if token == WILDCARD:
            keys = range(len(node))
        else:
            keys = (int(token),) if _ARRAY_INDEX.match(token) and int(token) < len(node) else ()
    else:
        return node
    if not keys:
        return node
    if not rest:
        if isinstance(node, dict):
            return {key: value for key, value in node.items() if key not in keys}
        dropped = set(keys)
        return [value for index, value in enumerate(node) if index not in dropped]
    changed = {}
    for key in keys:
        child = node[key]
        pruned = _pruned(child, rest)
        if pruned is not child:
            changed[key] = pruned
    if not changed:
        return node
    copy = dict(node) if isinstance(node, dict) else list(node)
    for key, value in changed.items():
        copy[key] = value
    return copy


def _apply(text: str, rules: list[safe_regex.Substitution]) -> str:
    for rule in rules:
        text = rule.sub(text)
    return text


def _first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any] | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a or key not in b:
                return join_path(path, key), a.get(key, ABSENT), b.get(key, ABSENT)
            found = _first_difference(a[key], b[key], join_path(path, key))
            if found is not None:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            found = _first_difference(x, y, join_path(path, index))
            if found is not None:
                return found
        if len(a) != len(b):
            index = min(len(a), len(b))
            return (
                join_path(path, index),
                a[index] if index < len(a) else ABSENT,
                b[index] if index < len(b) else ABSENT,
            )
        return None
    # type() as well as ==, because True == 1 in Python but not in JSON.
    if type(a) is type(b) and a == b:
        return None
    return path or "$", a, b


def _leaves(value: Any, path: str) -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from _leaves(item, join_path(path, key))
    elif isinstance(value, list) and value:
        for index, item in enumerate(value):
            yield from _leaves(item, join_path(path, index))
    else:
        yield path, value


def _text_ratio(x: str, y: str) -> float:
    # Long prompts usually differ in one place: strip the common ends, then compare a capped middle.
    limit = min(len(x), len(y))
    prefix = _longest(lambda n: x[:n] == y[:n], limit)
    suffix = _longest(lambda n: x[len(x) - n :] == y[len(y) - n :], limit - prefix)
    middle_x, middle_y = x[prefix : len(x) - suffix], y[prefix : len(y) - suffix]
    matcher = SequenceMatcher(None, middle_x[:_CLOSENESS_CAP], middle_y[:_CLOSENESS_CAP], autojunk=False)
    matched = prefix + suffix + sum(block.size for block in matcher.get_matching_blocks())
    return 2.0 * matched / (len(x) + len(y))


def _longest(matches: Callable[[int], bool], limit: int) -> int:
    # Binary search with slice comparisons runs in C; a character loop is slow on 100 KB prompts.
    low, high = 0, limit
    while low < high:
        middle = (low + high + 1) // 2
        if matches(middle):
            low = middle
        else:
            high = middle - 1
    return low

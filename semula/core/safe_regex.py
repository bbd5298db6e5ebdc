"""Regular expressions from requests, schemas and settings, run on RE2 so matching is linear-time (pure).

Python's `re` backtracks: `^(a+)+$` against 31 a's and a "!" takes seconds, so a pattern an app or a
project admin wrote must never reach it. RE2 has no backreferences and no lookaround; a pattern that
uses them is refused with `PatternError`, whose message names the pattern, never silently run elsewhere.
"""

from __future__ import annotations

import functools
import re
import string
from typing import Any

import re2

# RE2 prints every refused pattern to stderr (absl logging) unless told not to: patterns come from
# requests, and stderr ends up in the server's log.
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False
# Patterns whose compiled program would pass this are refused rather than allowed to grow memory.
_OPTIONS.max_mem = 8 << 20

# Python's replacement-template escapes (re._parser.parse_template), reproduced because re2's own
# expand() decodes the template as latin-1 and mangles anything outside ASCII.
_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "\\": "\\"}
_OCTAL = frozenset("01234567")


class PatternError(ValueError):
    """A pattern RE2 cannot run, or a replacement that does not fit its pattern."""


@functools.lru_cache(maxsize=512)
def compile(pattern: str) -> Any:  # noqa: A001 - the module reads like `re`
    """The pattern compiled by RE2, or PatternError naming it."""
    if not isinstance(pattern, str):
        raise PatternError(f"a pattern must be a string, not {type(pattern).__name__}")
    try:
        return re2.compile(pattern, options=_OPTIONS)
    except re2.error as exc:
        reason = (
            exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else exc
        )
        raise PatternError(
            f"pattern {_show(pattern)} is not supported ({reason}); semula runs patterns on RE2, "
            "which has no backreferences or lookaround"
        ) from None


def search(pattern: str, text: str) -> bool:
    """Whether `pattern` matches anywhere in `text` (JSON Schema's `pattern` semantics)."""
    return compile(pattern).search(text) is not None


class Substitution:
    """A compiled pattern with a Python-style replacement template (\\1, \\g<name>), checked up front."""

    def __init__(self, pattern: str, replacement: str):
        self.regex = compile(pattern)
        self.parts = _parse_template(replacement, self.regex.groups, tuple(self.regex.groupindex.items()))

    def sub(self, text: str) -> str:
        """Replace every match in `text`, like `re.sub`."""
        return self.regex.sub(self._expand, text)

    def _expand(self, match: Any) -> str:
        return "".join(part if isinstance(part, str) else (match.group(part) or "") for part in self.parts)


@functools.lru_cache(maxsize=512)
def _parse_template(template: str, groups: int, named: tuple[tuple[str, int], ...]) -> tuple[str | int, ...]:
    # Cached: normalize rules are rebuilt for every proxied request.
    groupindex = dict(named)
    parts: list[str | int] = []
    literal: list[str] = []

    def group(index: int) -> None:
        if index > groups:
            raise PatternError(f"replacement refers to group {index}, the pattern has {groups}")
        parts.append("".join(literal))
        literal.clear()
        parts.append(index)

    i, n = 0, len(template)
    while i < n:
        char = template[i]
        if char != "\\":
            literal.append(char)
            i += 1
            continue
        if i + 1 == n:
            raise PatternError("replacement ends with a lone backslash")
        nxt = template[i + 1]
        if nxt == "g":
            end = template.find(">", i + 3)
            if template[i + 2 : i + 3] != "<" or end == -1:
                raise PatternError("replacement has \\g without <name>")
            name = template[i + 3 : end]
            if name.isdecimal() and name.isascii():
                group(int(name))
            elif name in groupindex:
                group(groupindex[name])
            else:
                raise PatternError(f"replacement refers to unknown group {name!r}")
            i = end + 1
        elif nxt == "0":
            digits = nxt
            while len(digits) < 3 and i + 1 + len(digits) < n and template[i + 1 + len(digits)] in _OCTAL:
                digits += template[i + 1 + len(digits)]
            literal.append(chr(int(digits, 8)))
            i += 1 + len(digits)
        elif nxt in "123456789":
            three = template[i + 1 : i + 4]
            if len(three) == 3 and set(three) <= _OCTAL:
                if int(three, 8) > 0o377:
                    raise PatternError(f"replacement has an octal escape \\{three} above \\377")
                literal.append(chr(int(three, 8)))
                i += 4
            else:
                digits = template[i + 1 : i + 3] if template[i + 2 : i + 3].isdigit() else nxt
                group(int(digits))
                i += 1 + len(digits)
        elif nxt in _ESCAPES:
            literal.append(_ESCAPES[nxt])
            i += 2
        elif nxt in string.ascii_letters:
            raise PatternError(f"replacement has an unknown escape \\{nxt}")
        else:
            literal.append(template[i : i + 2])
            i += 2
    parts.append("".join(literal))
    return tuple(part for part in parts if part != "")


def _show(pattern: str) -> str:
    return repr(pattern if len(pattern) <= 80 else pattern[:77] + "...")


# JSON Schema: the keywords that run a schema's regexes, re-done on RE2. jsonschema calls `re.search`
# directly in `pattern`, `patternProperties`, `additionalProperties` (which properties a pattern
# covers) and `unevaluatedProperties` (which properties were evaluated), so all four are replaced.
# `format` is not asserted by semula's validation (no format checker), so "format": "regex" runs nothing.
# jsonschema is imported by the first schema checked, not with this module: a fifth of a start's imports
# (`semula replay`, a worker), most of whose calls have no schema to check (decision 0062).


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if validator.is_type(instance, "string") and not search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, pattern_properties: dict[str, Any], instance: Any, schema: Any
) -> Any:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in pattern_properties.items():
        for key, value in instance.items():
            if search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _covered_by_patterns(schema: Any, key: str) -> bool:
    patterns = schema.get("patternProperties") or {}
    return any(search(pattern, key) for pattern in patterns)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties") or {}
    extras = [key for key in instance if key not in properties and not _covered_by_patterns(schema, key)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        listed = ", ".join(repr(extra) for extra in sorted(extras))
        yield ValidationError(f"Additional properties are not allowed ({listed} unexpected)")


def _evaluated_keys(validator: Any, instance: dict[str, Any], schema: Any) -> set[str]:
    # jsonschema._utils.find_evaluated_property_keys_by_schema, with patternProperties matched on RE2.
    if validator.is_type(schema, "boolean") or not isinstance(schema, dict):
        return set()
    keys: set[str] = set()
    for keyword in ("$ref", "$dynamicRef"):
        ref = schema.get(keyword)
        if ref is not None:
            resolved = validator._resolver.lookup(ref)
            child = validator.evolve(schema=resolved.contents, _resolver=resolved.resolver)
            keys |= _evaluated_keys(child, instance, resolved.contents)
    properties = schema.get("properties")
    if validator.is_type(properties, "object"):
        keys |= properties.keys() & instance.keys()
    for keyword in ("additionalProperties", "unevaluatedProperties"):
        subschema = schema.get(keyword)
        if subschema is not None:
            keys |= {key for key, value in instance.items() if _valid(validator.descend(value, subschema))}
    keys |= {key for key in instance if _covered_by_patterns(schema, key)}
    for name, subschema in (schema.get("dependentSchemas") or {}).items():
        if name in instance:
            keys |= _evaluated_keys(validator, instance, subschema)
    for keyword in ("allOf", "oneOf", "anyOf"):
        for subschema in schema.get(keyword, []):
            if _valid(validator.descend(instance, subschema)):
                keys |= _evaluated_keys(validator, instance, subschema)
    if "if" in schema:
        if validator.evolve(schema=schema["if"]).is_valid(instance):
            keys |= _evaluated_keys(validator, instance, schema["if"])
            if "then" in schema:
                keys |= _evaluated_keys(validator, instance, schema["then"])
        elif "else" in schema:
            keys |= _evaluated_keys(validator, instance, schema["else"])
    return keys


def _unevaluated_properties(validator: Any, unevaluated: Any, instance: Any, schema: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "object"):
        return
    evaluated = _evaluated_keys(validator, instance, schema)
    bad = [
        key
        for key in instance
        if key not in evaluated and not _valid(validator.descend(instance[key], unevaluated, path=key))
    ]
    if bad:
        listed = ", ".join(repr(key) for key in sorted(bad))
        if unevaluated is False:
            yield ValidationError(f"Unevaluated properties are not allowed ({listed} unexpected)")
        else:
            yield ValidationError(f"Unevaluated properties are not valid under the given schema ({listed})")


def _valid(errors: Any) -> bool:
    return next(errors, None) is None


def _is_regex(instance: Any) -> bool:
    # A schema's pattern is a regex if either engine parses it: one RE2 refuses but Python parses
    # (a backreference) is then named by PatternError when an answer is checked, not waved through
    # as a broken schema. Compiling is linear; only matching backtracks.
    if not isinstance(instance, str):
        return True
    try:
        compile(instance)
        return True
    except PatternError:
        pass
    try:
        re.compile(instance)
        return True
    except (re.error, RecursionError, OverflowError):
        return False


@functools.cache
def _schema_support() -> dict[str, Any]:
    from jsonschema import Draft202012Validator, FormatChecker, validators

    validator = validators.extend(
        Draft202012Validator,
        {
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
            "unevaluatedProperties": _unevaluated_properties,
        },
    )
    formats = FormatChecker(formats=())
    formats.checks("regex")(_is_regex)
    return {"SchemaValidator": validator, "SCHEMA_FORMATS": formats}


def __getattr__(name: str) -> Any:
    """`SchemaValidator`: Draft 2020-12 with every regex on RE2; a pattern RE2 refuses raises
    PatternError out of iter_errors. `SCHEMA_FORMATS`: the format checker for checking a schema itself,
    its "format": "regex" fields on both engines. Both made (and jsonschema imported) at first use."""
    support = _schema_support() if name in ("SchemaValidator", "SCHEMA_FORMATS") else {}
    if name not in support:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return support[name]

"""Patterns from requests, schemas and settings run in linear time, and refuse what RE2 cannot run."""

from __future__ import annotations

import contextlib
import re
import time

import pytest

from semula.core import safe_regex
from semula.core.answers import parse_answer, validate_against_request
from semula.core.errors import BadRequest, InvalidAnswer
from semula.core.fingerprint import canonical_request, validate_normalize

EVIL = "^(a+)+$"
# Python's re needs seconds for this (2**28 backtracking steps); RE2 needs microseconds.
EVIL_TEXT = "a" * 28 + "!"
QUICK = 1.0


def tool_request(parameters):
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }


def answer(request, arguments):
    validate_against_request(
        parse_answer({"tool_calls": [{"name": "f", "arguments": arguments}]}, request), request
    )


def elapsed(fn, *args):
    start = time.monotonic()
    with contextlib.suppress(InvalidAnswer, BadRequest):
        fn(*args)
    return time.monotonic() - start


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "object", "properties": {"q": {"type": "string", "pattern": EVIL}}},
        {"type": "object", "patternProperties": {EVIL: {"type": "integer"}}},
        {"type": "object", "patternProperties": {EVIL: {}}, "additionalProperties": False},
        {"type": "object", "patternProperties": {EVIL: {}}, "unevaluatedProperties": False},
        {"type": "object", "propertyNames": {"pattern": EVIL}},
    ],
    ids=["pattern", "patternProperties", "additionalProperties", "unevaluatedProperties", "propertyNames"],
)
def test_a_catastrophic_schema_pattern_is_checked_in_linear_time(parameters):
    request = tool_request(parameters)
    arguments = {"q": EVIL_TEXT, EVIL_TEXT: "x"}
    assert elapsed(answer, request, arguments) < QUICK


def test_schema_patterns_still_decide_validity():
    request = tool_request(
        {
            "type": "object",
            "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
            "additionalProperties": False,
        }
    )
    answer(request, {"zip": "75001", "x-count": 3})
    with pytest.raises(InvalidAnswer) as caught:
        answer(request, {"zip": "7500"})
    assert caught.value.param == "tool_calls[0].arguments.zip"
    with pytest.raises(InvalidAnswer):
        answer(request, {"x-count": "three"})
    with pytest.raises(InvalidAnswer):
        answer(request, {"other": 1})
    unevaluated = tool_request(
        {"type": "object", "patternProperties": {"^x-": {}}, "unevaluatedProperties": False}
    )
    answer(unevaluated, {"x-a": 1})
    with pytest.raises(InvalidAnswer):
        answer(unevaluated, {"y": 1})


def test_a_unicode_class_only_re2_parses_is_enforced():
    request = tool_request(
        {"type": "object", "properties": {"q": {"type": "string", "pattern": r"^\p{L}+$"}}}
    )
    answer(request, {"q": "héllo"})
    with pytest.raises(InvalidAnswer):
        answer(request, {"q": "h3llo"})


@pytest.mark.parametrize("pattern", [r"^(a)\1$", r"^(?=a)a$", r"(?<!x)a"])
def test_a_schema_pattern_re2_cannot_run_is_named_when_the_answer_is_checked(pattern):
    request = tool_request({"type": "object", "properties": {"q": {"type": "string", "pattern": pattern}}})
    with pytest.raises(InvalidAnswer) as caught:
        answer(request, {"q": "aa"})
    assert repr(pattern) in caught.value.message and "RE2" in caught.value.message
    assert caught.value.param == "tool_calls[0].arguments"


def test_a_catastrophic_normalize_rule_costs_linear_time():
    rules = validate_normalize([{"pattern": "(a+)+$", "replacement": "A"}])
    body = {"model": "m", "messages": [{"role": "user", "content": EVIL_TEXT}]}
    start = time.monotonic()
    canonical_request(body, normalize=rules)
    assert time.monotonic() - start < QUICK


@pytest.mark.parametrize("pattern", [r"(\w)\1", r"id(?=\d)", r"(?<=id)\d+"])
def test_a_normalize_rule_re2_cannot_run_is_refused_when_saved(pattern):
    with pytest.raises(BadRequest) as caught:
        validate_normalize([{"pattern": pattern, "replacement": ""}])
    assert caught.value.param == "normalize[0].pattern"
    assert repr(pattern) in caught.value.message


def test_a_stored_rule_re2_cannot_run_is_a_clear_400_not_a_crash():
    with pytest.raises(BadRequest) as caught:
        canonical_request({"messages": []}, normalize=[{"pattern": r"(a)\1", "replacement": ""}])
    assert caught.value.param == "normalize"


@pytest.mark.parametrize(
    ("pattern", "replacement", "text"),
    [
        (r"\d+", "N", "a 12 b 345"),
        (r"(\d+)-(\d+)", r"\2-\1", "1-2 and 30-40"),
        (r"(?P<id>order-\d+)", r"<\g<id>>", "fetch order-7 now"),
        (r"(x)?y", r"[\1]", "y xy"),
        (r"\d", r"\g<0>\g<0>", "a1b2"),
        (r"a", "日付 é", "banana"),
        (r"a", r"\\n\n\t\.", "a"),
        (r"a", r"\101\0\07", "a"),
        (r"(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)", r"\10\1", "abcdefghij"),
    ],
)
def test_substitution_matches_python_re(pattern, replacement, text):
    assert safe_regex.Substitution(pattern, replacement).sub(text) == re.sub(pattern, replacement, text)


@pytest.mark.parametrize(
    ("pattern", "replacement"), [("(a)", r"\2"), ("a", r"\g<x>"), ("a", r"\q"), ("a", "\\")]
)
def test_a_replacement_python_re_refuses_is_refused(pattern, replacement):
    with pytest.raises((re.error, IndexError)):
        re.sub(pattern, replacement, "a")
    with pytest.raises(safe_regex.PatternError):
        safe_regex.Substitution(pattern, replacement)


def test_refused_patterns_are_not_logged_by_re2(capfd):
    with pytest.raises(safe_regex.PatternError):
        safe_regex.compile(r"(a)\1 never logged")
    assert "never logged" not in capfd.readouterr().err


def test_a_pattern_whose_program_would_pass_the_memory_cap_is_refused():
    """RE2 is told to refuse a program above 8 MiB: a schema or rule cannot make a worker allocate
    hundreds of megabytes to compile it (uncapped, this one takes ~130 MB)."""
    safe_regex.compile(r"\pL{300}")  # a large program within the cap
    with pytest.raises(safe_regex.PatternError, match="pattern too large"):
        safe_regex.compile(r"\pL{1000}")

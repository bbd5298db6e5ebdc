"""A bundle's lone UTF-16 surrogate escapes are refused, whatever the reads cut (pure, no storage)."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semula.core import bundle_format

PIECES = [
    b"\\\\",
    b"\\ud83d",
    b"\\uDBFF",
    b"\\ude00",
    b"\\uDC01",
    b"\\u0041",
    b"a",
    b"\\n",
    b'\\"',
    b"\xc3\xa9",
]


def refused(raw: bytes, size: int) -> bool:
    reader = bundle_format.Surrogates(io.BytesIO(raw))
    try:
        while reader.read(size):
            pass
    except bundle_format.InvalidBundle as exc:
        assert "lone UTF-16 surrogate" in exc.message
        return True
    return False


def lone(raw: bytes) -> bool:
    try:
        json.loads(raw)["k"].encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@settings(max_examples=500, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(PIECES), max_size=10), size=st.sampled_from([1, 2, 3, 5, 6, 7, 11, -1])
)
def test_a_string_is_refused_exactly_when_json_reads_a_lone_surrogate_from_it(pieces, size):
    raw = b'{"k": "' + b"".join(pieces) + b'"}'
    assert refused(raw, size) == lone(raw)


@pytest.mark.parametrize(
    "raw, expected",
    [
        (b'"\\ud83d\\ude00"', False),  # a pair: the emoji
        (b'"\\\\ud800"', False),  # an escaped backslash, then the text ud800
        (b'"\\\\\\ud800"', True),
        (b'"\\ud800\\u0041"', True),
        (b'"' + b"x" * 5000 + b'\\ud83d"', True),  # a high one at the very end
        (b'"' + b"\\\\" * 3000 + b'\\ude00"', True),  # past a long run of escaped backslashes
    ],
)
def test_cases_read_in_small_and_whole_reads(raw, expected):
    for size in (1, 4, 64, -1):
        assert refused(b'{"k": ' + raw + b"}", size) is expected


@pytest.mark.parametrize("escape", [b"\\udc00", b"\\ud800", b"\\ude00x"])
@pytest.mark.parametrize("padding", [0, 1, 5, 100])
def test_the_parser_refuses_a_lone_surrogate_as_one_wherever_the_read_ends(escape, padding):
    # The parser itself fails on a low one (a decoding error), sometimes in the bytes the scan holds
    # back for the next read: the message must still name the surrogate.
    raw = b'{"bundle": "' + b"x" * padding + escape + b'"}'
    with pytest.raises(bundle_format.InvalidBundle) as refused:
        list(bundle_format.read_bundle(io.BytesIO(raw)))
    assert "lone UTF-16 surrogate" in refused.value.message

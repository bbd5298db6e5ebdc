"""The one JSON policy of every entrance: standard JSON, no lone surrogates, bounded depth."""

from __future__ import annotations

import io
import json

import ijson
import pytest

from semula.core import jsonio
from semula.core.errors import BadRequest


def nested(depth: int) -> str:
    """A document whose containers nest exactly `depth` deep (arrays and objects alternating)."""
    opens = ["[" if level % 2 == 0 else '{"a":' for level in range(depth)]
    closes = ["]" if level % 2 == 0 else "}" for level in reversed(range(depth))]
    return "".join(opens) + "1" + "".join(closes)


@pytest.mark.parametrize("raw", [nested(jsonio.MAX_DEPTH), '{"a": "\\ud83d\\ude00"}', "1.5e300", '"é"'])
def test_standard_json_within_the_limit_is_read(raw):
    assert jsonio.loads(raw) == json.loads(raw)
    assert jsonio.loads(raw.encode()) == json.loads(raw)


@pytest.mark.parametrize("depth", [jsonio.MAX_DEPTH + 1, 5000, 100_000])
def test_deeper_than_the_limit_is_400(depth):
    with pytest.raises(BadRequest, match="nests deeper than 64"):
        jsonio.loads(nested(depth).encode())


@pytest.mark.parametrize("raw", ['{"t": NaN}', "[Infinity]", "[-Infinity]", "[1e400]", "[-1e999]"])
def test_non_standard_numbers_are_400(raw):
    with pytest.raises(BadRequest) as caught:
        jsonio.loads(raw)
    assert caught.value.status == 400
    assert "finite" in caught.value.message or "double" in caught.value.message


@pytest.mark.parametrize("raw", ['"\\ud800"', '{"\\udfff": 1}', '["ok", {"a": "x\\ude00\\ud83d"}]'])
def test_lone_surrogates_are_400(raw):
    with pytest.raises(BadRequest, match="lone UTF-16 surrogate"):
        jsonio.loads(raw.encode())


@pytest.mark.parametrize("raw", [b"", b"{not json", b"\xff\xfe{", b"[1,2"])
def test_malformed_json_is_400_without_echoing_the_body(raw):
    with pytest.raises(BadRequest, match="must be valid JSON") as caught:
        jsonio.loads(raw)
    assert "not json" not in caught.value.message


def test_streamed_events_are_limited_with_the_container_allowance():
    allowed = nested(jsonio.MAX_DEPTH + 2).encode()
    assert list(jsonio.checked_events(ijson.basic_parse(io.BytesIO(allowed)), base=2))
    too_deep = nested(jsonio.MAX_DEPTH + 3).encode()
    with pytest.raises(BadRequest, match="The bundle nests deeper"):
        list(jsonio.checked_events(ijson.basic_parse(io.BytesIO(too_deep)), base=2))

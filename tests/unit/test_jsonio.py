"""The one JSON policy of every entrance: standard JSON, no lone surrogates, bounded depth."""

from __future__ import annotations

import io
import json

import pytest

from semula.core import bundle_format, jsonio
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


@pytest.mark.parametrize("key", ["request", "response"])
def test_a_streamed_bundle_is_limited_with_the_container_allowance(key):
    def bundle(depth: int) -> io.BytesIO:
        entry = f'{{"{key}": {nested(depth)}}}'
        return io.BytesIO(f'{{"bundle": {{"format": "semula-bundle"}}, "entries": [{entry}]}}'.encode())

    # A request or response nests as deep as a body may, inside the root, the entries and the entry.
    assert [kind for kind, _ in bundle_format.read_bundle(bundle(jsonio.MAX_DEPTH))] == ["bundle", "entry"]
    with pytest.raises(BadRequest, match="The bundle nests deeper"):
        list(bundle_format.read_bundle(bundle(jsonio.MAX_DEPTH + 1)))


@pytest.mark.parametrize(
    "raw",
    [
        b"[9223372036854775807, -9223372036854775808, 123456789012345678901234567890.0]",
        b'{"n": 9223372036854775807, "m": -9223372036854775808, "f": 1.8446744073709552e19}',
        b'\xef\xbb\xbf{"bom": true}',
        '{"utf16": "é"}'.encode("utf-16"),
        b'{"a": 1, "a": 2, "z": [0.1, 1E5, -0.0, 1e-400, "\\u0000\\u2028\xc3\xa9"]}',
    ],
)
def test_what_standard_json_reads_is_read_the_same(raw):
    # Integers at 64 bits' ends stay exact; a byte order mark and UTF-16 are read as json reads them.
    value = jsonio.loads(raw)
    assert value == json.loads(raw)
    assert json.dumps(value) == json.dumps(json.loads(raw))


@pytest.mark.parametrize(
    "number", ["9223372036854775808", "18446744073709551615", "-9223372036854775809", "1" + "0" * 30]
)
def test_integers_past_64_bits_are_400(number):
    # An export holding one could not be imported again: the bundle reader reads 64-bit integers.
    with pytest.raises(BadRequest) as refused:
        jsonio.loads(f'{{"model": "m", "seed": {number}}}'.encode())
    assert f"The number {number[:40]} is too large (integers must fit in 64 bits)." == refused.value.message


def test_a_large_body_is_parsed_with_orjson(monkeypatch):
    # json.loads is the fallback for what orjson cannot read as json would; a plain body never needs it.
    calls = []
    monkeypatch.setattr(jsonio.json, "loads", lambda *a, **k: calls.append(1))
    body = {"messages": [{"role": "user", "content": "x" * 1000, "n": i, "t": 0.5} for i in range(50)]}
    assert jsonio.loads(json.dumps(body).encode()) == body
    assert calls == []


@pytest.mark.parametrize(
    "text",
    [
        '{"id": "x", "n": 123456789012345678901234567890, "v": [0.25, -1e-7, 3]}',
        '{"text": "\\ud800 lone", "f": NaN}',
        nested(jsonio.MAX_DEPTH + 5),
    ],
)
def test_stored_json_reads_as_json_reads_it(text):
    assert json.dumps(jsonio.stored(text)) == json.dumps(json.loads(text))


def test_a_large_body_is_parsed_with_the_gc_paused_and_the_gc_is_left_as_it_was(monkeypatch):
    """Decision 0063: the collections orjson's allocations set off took most of a large body's parse."""
    import gc

    seen = []
    real = jsonio.orjson.loads
    monkeypatch.setattr(jsonio.orjson, "loads", lambda raw: seen.append(gc.isenabled()) or real(raw))
    large = json.dumps({"input": ["x" * 100] * (jsonio.PAUSE_GC_ABOVE // 100)}).encode()
    assert jsonio.read(large)[0] == json.loads(large)
    assert jsonio.read(b'{"small": true}')[0] == {"small": True}
    assert seen == [False, True] and gc.isenabled()
    gc.disable()
    try:
        jsonio.read(large)
        assert not gc.isenabled()  # paused by someone else: left so
    finally:
        gc.enable()


def test_a_large_body_s_objects_are_left_out_of_the_collections_and_freed_when_dropped():
    """Decision 0074: the objects orjson made for a large body, all young, made the next collection walk
    them all (58 ms of a Gemini request at the caps). They are frozen with what else was alive at the
    parse (until the next large parse), and freed when the body is dropped all the same."""
    import gc

    n = 20_000
    large = json.dumps({"contents": [{"parts": [{"text": f"item {i}"}]} for i in range(n)]}).encode()
    assert len(large) > jsonio.PAUSE_GC_ABOVE
    try:
        body = jsonio.read(large)[0]
        assert gc.get_count()[0] < n // 10  # not counted towards the next collection
        frozen = gc.get_freeze_count()
        assert frozen >= 2 * n  # each content's dict and parts list
        del body
        assert gc.get_freeze_count() <= frozen - 2 * n
    finally:
        gc.unfreeze()

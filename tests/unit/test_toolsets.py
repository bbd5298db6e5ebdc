"""Tool sets seen before (semula.core.toolsets, decision 0068): the JSON policy's walk and each API's
check of a request's tools are done once per distinct tool set, with the same outcome as every time."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semula.core import chat_requests, jsonio, toolsets
from semula.core.errors import BadRequest
from semula.dialects import ANTHROPIC, GEMINI, RESPONSES, get
from tests.unit.test_fingerprint import json_values


@pytest.fixture(autouse=True)
def forgotten(monkeypatch):
    """Each test starts with no tool set seen."""
    monkeypatch.setattr(toolsets, "_known", {})
    monkeypatch.setattr(toolsets, "_last", (None, None))


def tool(name="lookup", **parameters):
    schema = {"type": "object", "properties": {}, **parameters}
    return {"type": "function", "function": {"name": name, "parameters": schema}}


def chat(tools, **rest):
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools, **rest}


def whole_walk(raw: bytes):
    """What read() found before tool sets were remembered: the policy's walk over the whole body."""
    import orjson

    return jsonio._ordinary(orjson.loads(raw), plain=True)


@settings(max_examples=300, deadline=None)
@given(tools=st.lists(json_values, min_size=1, max_size=4), rest=json_values)
def test_reading_a_known_tool_set_finds_what_the_whole_walk_finds(tools, rest):
    try:
        raw = json.dumps(chat(tools, extra=rest), allow_nan=False).encode("utf-8", "surrogatepass")
        expected = whole_walk(raw)
    except ValueError:  # NaN, a lone surrogate: not what this test is about
        return
    if expected is None:  # the json path decides (and may refuse) every time
        return
    for _ in range(2):  # the first time walked, the second remembered
        toolsets._last = (None, None)  # a new request's list
        assert jsonio.read(raw)[1] is expected


def test_a_known_tool_set_does_not_vouch_for_the_rest_of_the_body():
    tools = [tool(minimum=0.5)]
    assert jsonio.read(json.dumps(chat(tools)).encode())[1] is True
    # The same tools, and a float orjson writes otherwise than json does elsewhere: not plain.
    assert jsonio.read(json.dumps(chat(tools, temperature=1e-05)).encode())[1] is False
    # A float in the tools that is not plain is remembered as such.
    other = [tool(minimum=1e-05)]
    for _ in range(2):
        assert jsonio.read(json.dumps(chat(other)).encode())[1] is False


def test_tools_too_deep_are_refused_every_time():
    deep: object = "x"
    for _ in range(jsonio.MAX_DEPTH):
        deep = [deep]
    raw = json.dumps(chat([{"type": "function", "nested": deep}])).encode()
    for _ in range(2):
        with pytest.raises(BadRequest, match="nests deeper"):
            jsonio.read(raw)


def test_a_check_runs_once_per_tool_set_and_a_refused_set_is_checked_every_time():
    runs = []

    def check(tools):
        runs.append(len(tools))
        if tools[0] == "bad":
            raise BadRequest("no")

    toolsets.checked("x", [1, 2], check)
    toolsets.checked("x", [1, 2], check)  # another list with the same JSON
    toolsets.checked("y", [1, 2], check)  # another API's check of it
    toolsets.checked("x", [1, 2, 3], check)
    for _ in range(2):
        with pytest.raises(BadRequest):
            toolsets.checked("x", ["bad"], check)
    assert runs == [2, 2, 3, 1, 1]


def test_a_list_changed_in_place_is_not_taken_for_the_one_it_was():
    tools = [tool("a")]
    first = toolsets.digest(tools)
    assert toolsets.digest(tools) == first
    toolsets._last = (None, None)
    tools.append(tool("b"))
    assert toolsets.digest(tools) != first


BAD_TOOLS = {
    "openai.chat": ([tool("a b")], "tools[0].function.name"),
    RESPONSES: ([{"type": "function", "name": "a b"}], "tools[0].name"),
    ANTHROPIC: ([{"name": "a b", "input_schema": {}}], "tools.0.name"),
    GEMINI: ([{"functionDeclarations": [{"name": ""}]}], "tools[0].functionDeclarations[0].name"),
}
GOOD_TOOLS = {
    "openai.chat": [tool("a")],
    RESPONSES: [{"type": "function", "name": "a"}],
    ANTHROPIC: [{"name": "a", "input_schema": {}}],
    GEMINI: [{"functionDeclarations": [{"name": "a"}]}],
}


def request(api, tools):
    if api == "openai.chat":
        return chat(tools)
    if api == RESPONSES:
        return {"model": "m", "input": "hi", "tools": tools}
    if api == ANTHROPIC:
        messages = [{"role": "user", "content": "hi"}]
        return {"model": "m", "max_tokens": 5, "messages": messages, "tools": tools}
    return {"model": "m", "contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": tools}


@pytest.mark.parametrize("api", list(BAD_TOOLS))
def test_every_api_refuses_a_bad_tool_set_after_a_good_one_was_remembered(api):
    dialect = get(api)
    for _ in range(2):
        dialect.check(request(api, GOOD_TOOLS[api]))
    bad, param = BAD_TOOLS[api]
    for _ in range(2):
        with pytest.raises(BadRequest) as raised:
            dialect.check(request(api, bad))
        assert raised.value.param == param


def test_chat_checks_a_tool_set_once(monkeypatch):
    seen = []
    real = chat_requests._tool
    monkeypatch.setattr(chat_requests, "_tool", lambda t, p: (seen.append(p), real(t, p)))
    for _ in range(3):
        chat_requests.check(chat([tool("a"), tool("b")]))
    assert seen == ["tools[0]", "tools[1]"]

"""Requests OpenAI refuses with a 400 are refused before they can park, with OpenAI's param and code."""

from __future__ import annotations

import pytest

from semula.core import chat_requests
from semula.core.errors import BadRequest


def body(**changes):
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], **changes}


def tool(name="lookup", parameters=None):
    function = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
    return {"type": "function", "function": function}


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "42"}


def calling(*calls):
    return body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": list(calls)}])


VALID = [
    body(),
    body(
        messages=[
            {"role": r, "content": "x", **({"tool_call_id": "c1"} if r == "tool" else {})}
            for r in chat_requests.ROLES
        ]
    ),
    body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [CALL]}, RESULT]),
    body(
        messages=[
            {"role": "assistant", "tool_calls": [{"id": "c2", "type": "custom", "custom": {"name": "x"}}]}
        ]
    ),
    body(messages=[{"role": "user", "content": [{"type": "text", "text": "hi"}]}]),
    body(messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": None}]),
    body(tools=[tool("get_weather-2"), tool("a" * 64)]),
    body(tools=[{"type": "custom", "custom": {"name": "any name"}}]),
    body(response_format={"type": "text"}),
    body(response_format={"type": "json_object"}),
    body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}}),
]

INVALID = {
    "tool_calls as text": (
        body(messages=[{"role": "assistant", "tool_calls": "x"}]),
        "messages[0].tool_calls",
        "invalid_type",
    ),
    "a tool call not an object": (calling(1), "messages[1].tool_calls[0]", "invalid_type"),
    "a tool call without id": (
        calling({**CALL, "id": None}),
        "messages[1].tool_calls[0].id",
        "missing_required_parameter",
    ),
    "a tool call without function": (
        calling({"id": "c1", "type": "function"}),
        "messages[1].tool_calls[0].function",
        "missing_required_parameter",
    ),
    "a tool call's arguments as an object": (
        calling({**CALL, "function": {"name": "f", "arguments": {}}}),
        "messages[1].tool_calls[0].function.arguments",
        "invalid_type",
    ),
    "a tool result without tool_call_id": (
        body(messages=[{"role": "tool", "content": "42"}]),
        "messages[0].tool_call_id",
        "missing_required_parameter",
    ),
    "unknown role": (
        body(messages=[{"role": "wizard", "content": "x"}]),
        "messages[0].role",
        "invalid_value",
    ),
    "role missing": (body(messages=[{"content": "x"}]), "messages[0].role", "missing_required_parameter"),
    "message not an object": (body(messages=["hi"]), "messages[0]", "invalid_type"),
    "content an object": (
        body(messages=[{"role": "user", "content": "x"}, {"role": "user", "content": {"text": "hi"}}]),
        "messages[1].content",
        "invalid_type",
    ),
    "content a number": (
        body(messages=[{"role": "user", "content": 3}]),
        "messages[0].content",
        "invalid_type",
    ),
    "content part not an object": (
        body(messages=[{"role": "user", "content": ["hi"]}]),
        "messages[0].content[0]",
        "invalid_type",
    ),
    "content part without type": (
        body(messages=[{"role": "user", "content": [{"text": "hi"}]}]),
        "messages[0].content[0].type",
        "missing_required_parameter",
    ),
    "tool name with a space": (body(tools=[tool("get weather")]), "tools[0].function.name", "invalid_value"),
    "tool name with a dot": (body(tools=[tool(), tool("a.b")]), "tools[1].function.name", "invalid_value"),
    "tool name too long": (body(tools=[tool("a" * 65)]), "tools[0].function.name", "invalid_value"),
    "tool name empty": (body(tools=[tool("")]), "tools[0].function.name", "invalid_value"),
    "tools not a list": (body(tools={"a": 1}), "tools", "invalid_type"),
    "schema with an unknown type": (
        body(tools=[tool(parameters={"type": "object", "properties": {"a": {"type": "nope"}}})]),
        "tools[0].function.parameters.properties.a.type",
        "invalid_function_parameters",
    ),
    "schema not an object": (
        body(tools=[tool(parameters=["type", "object"])]),
        "tools[0].function.parameters",
        "invalid_function_parameters",
    ),
    "schema with required as text": (
        body(tools=[tool(parameters={"type": "object", "required": "a"})]),
        "tools[0].function.parameters.required",
        "invalid_function_parameters",
    ),
    "unknown response_format": (
        body(response_format={"type": "yaml"}),
        "response_format.type",
        "invalid_value",
    ),
    "response_format without type": (
        body(response_format={}),
        "response_format.type",
        "missing_required_parameter",
    ),
    "response_format schema broken": (
        body(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 1}}}),
        "response_format.json_schema.schema.type",
        "invalid_function_parameters",
    ),
}


@pytest.mark.parametrize("request_body", VALID)
def test_requests_openai_accepts_pass(request_body):
    chat_requests.check(request_body)


@pytest.mark.parametrize("case", sorted(INVALID))
def test_requests_openai_refuses_are_400_naming_the_field(case):
    request_body, param, code = INVALID[case]
    with pytest.raises(BadRequest) as refused:
        chat_requests.check(request_body)
    error = refused.value.to_dict()["error"]
    assert refused.value.status == 400 and error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code), error
    assert param.split(".")[0].split("[")[0] in error["message"] or "schema" in error["message"]


def test_a_tools_list_seen_before_is_not_walked_again_and_a_changed_one_is(monkeypatch):
    walked = []
    tool_check = chat_requests._tool
    monkeypatch.setattr(chat_requests, "_VALID_SCHEMAS", {})
    monkeypatch.setattr(chat_requests, "_tool", lambda t, p: walked.append(p) or tool_check(t, p))
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    tools = [tool("a", schema), tool("b", schema)]
    for _ in range(3):
        chat_requests.check(body(tools=tools))
    assert walked == ["tools[0]", "tools[1]"]
    renamed = [tool("a", schema), tool("b c", schema)]
    for _ in range(2):
        with pytest.raises(BadRequest, match="tools\\[1\\].function.name"):
            chat_requests.check(body(tools=renamed))


def test_a_tool_schema_seen_before_is_not_checked_again(monkeypatch):
    # Agents send the same tools with every request; checking each schema costs about a millisecond.
    from jsonschema import Draft202012Validator  # what chat_requests imports at its first schema

    checked = []
    check_schema = Draft202012Validator.check_schema
    monkeypatch.setattr(chat_requests, "_VALID_SCHEMAS", {})
    monkeypatch.setattr(
        Draft202012Validator,
        "check_schema",
        lambda schema: checked.append(schema) or check_schema(schema),
    )
    schema = {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}}
    for _ in range(3):
        chat_requests.check(body(tools=[tool("a", schema), tool("b", schema)]))
    assert checked == [schema]
    # Only a schema found valid is remembered: a bad one is refused every time, as before.
    bad = {"type": "object", "properties": {"q": {"type": 12}}}
    for _ in range(2):
        with pytest.raises(BadRequest, match="Invalid schema for function 'a'"):
            chat_requests.check(body(tools=[tool("a", bad)]))
    # 1 and 1.0, true and 1 are different schemas to remember.
    for limit in (1, 1.0, True):
        with_limit = {**schema, "minProperties": limit}
        if limit is True:
            with pytest.raises(BadRequest):
                chat_requests.check(body(tools=[tool("a", with_limit)]))
        else:
            chat_requests.check(body(tools=[tool("a", with_limit)]))


def _tool(i: int) -> dict:
    return {"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}}


def test_more_tools_or_tool_calls_than_the_api_takes_are_refused_before_they_are_checked(monkeypatch):
    """128 of each, as OpenAI: 20,000 tools took 1.8 s to check one by one (issue #49)."""
    from semula.core import chat_requests

    message = {"role": "user", "content": "hi"}
    chat_requests.check({"messages": [message], "tools": [_tool(i) for i in range(128)]})
    monkeypatch.setattr(chat_requests, "_tool", lambda *a: pytest.fail("a tool checked"))
    with pytest.raises(BadRequest) as info:
        chat_requests.check({"messages": [message], "tools": [_tool(i) for i in range(20_000)]})
    assert info.value.to_dict()["error"] == {
        "message": "Invalid 'tools': array too long. Expected an array with maximum length 128, but got an "
        "array with length 20000 instead.",
        "type": "invalid_request_error",
        "param": "tools",
        "code": "array_above_max_length",
    }
    call = {"id": "c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
    with pytest.raises(BadRequest) as info:
        chat_requests.check({"messages": [message, {"role": "assistant", "tool_calls": [call] * 129}]})
    assert info.value.param == "messages[1].tool_calls" and info.value.code == "array_above_max_length"


def test_the_responses_api_takes_at_most_128_tools_too():
    from semula import dialects

    responses = dialects.get(dialects.RESPONSES)
    tool = {"type": "function", "name": "t", "parameters": {"type": "object"}}
    assert responses.check({"model": "m", "input": "hi", "tools": [tool] * 128}).model == "m"
    with pytest.raises(BadRequest) as info:
        responses.check({"model": "m", "input": "hi", "tools": [tool] * 20_000})
    assert info.value.param == "tools" and info.value.code == "array_above_max_length"

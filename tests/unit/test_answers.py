from __future__ import annotations

import json
import urllib.request

import pytest
from openai.types.chat import ChatCompletion

from semula.core.answers import (
    MAX_FORM_TEXT,
    accept_answer,
    expected_form,
    parse_answer,
    shape,
    skeleton_from_schema,
    validate_against_request,
)
from semula.core.errors import InvalidAnswer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "address": {
                    "type": "object",
                    "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                },
                "days": {"type": "array", "items": {"type": "integer", "minimum": 0}},
            },
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {"name": "search", "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}},
}
TOOLS_REQUEST = {
    "model": "gpt-4o-mini",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": [WEATHER, SEARCH],
}
PLAIN_REQUEST = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Say hi"}]}
PERSON_SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}
JSON_SCHEMA_REQUEST = {
    **PLAIN_REQUEST,
    "response_format": {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON_SCHEMA}},
}


def message_of(completion):
    return completion["choices"][0]["message"]


def call(name, arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def invalid(payload, request=TOOLS_REQUEST):
    """The InvalidAnswer that parsing and then validating this payload raises."""
    with pytest.raises(InvalidAnswer) as caught:
        validate_against_request(parse_answer(payload, request), request)
    return caught.value


def test_plain_text_becomes_a_completion():
    completion = parse_answer("Hi there", PLAIN_REQUEST)
    assert completion == {
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi there"},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        # Estimated at four characters a token: 36 characters of messages JSON, 8 of content.
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }
    assert "id" not in completion and "created" not in completion


@pytest.mark.parametrize(
    "payload",
    [
        {"content": "Hi there"},
        {"role": "assistant", "content": "Hi there"},
        {"message": {"role": "assistant", "content": "Hi there"}},
        {
            "id": "chatcmpl-abc",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-2024-08-06",
            "system_fingerprint": "fp_1",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "Hi there",
                        "refusal": None,
                        "annotations": [],
                    },
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
        },
    ],
)
def test_every_answer_form_gives_the_same_message(payload):
    completion = parse_answer(payload, PLAIN_REQUEST)
    assert message_of(completion) == {"role": "assistant", "content": "Hi there"}
    assert completion["model"] == "gpt-4o-mini"


def test_finish_reason_and_usage_are_kept_and_completed():
    completion = parse_answer(
        {"content": "cut", "finish_reason": "length", "usage": {"prompt_tokens": 7, "completion_tokens": 3}},
        PLAIN_REQUEST,
    )
    assert completion["choices"][0]["finish_reason"] == "length"
    assert completion["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def test_usage_from_a_whole_completion_is_kept():
    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 2,
        "total_tokens": 7,
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    payload = {
        "choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": usage,
    }
    assert parse_answer(payload, PLAIN_REQUEST)["usage"] == usage


def test_simple_tool_calls_are_normalised():
    completion = parse_answer(call("get_weather", {"city": "Paris"}), TOOLS_REQUEST)
    message = message_of(completion)
    assert message["content"] is None
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    (tool_call,) = message["tool_calls"]
    assert tool_call["type"] == "function"
    assert tool_call["id"].startswith("call_")
    assert tool_call["function"] == {"name": "get_weather", "arguments": '{"city":"Paris"}'}


def test_string_arguments_and_openai_form_are_accepted():
    payload = {
        "content": "Checking.",
        "tool_calls": [
            {"name": "search", "arguments": '{"q": "paris"}'},
            {
                "id": "call_given",
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "P"}},
            },
        ],
    }
    message = message_of(parse_answer(payload, TOOLS_REQUEST))
    assert message["content"] == "Checking."
    assert message["tool_calls"][0]["function"]["arguments"] == '{"q": "paris"}'
    assert message["tool_calls"][1]["id"] == "call_given"


def test_generated_tool_call_ids_are_stable_and_distinct():
    payload = {"tool_calls": [{"name": "search", "arguments": {"q": "a"}}] * 2}
    first = [c["id"] for c in message_of(parse_answer(payload, TOOLS_REQUEST))["tool_calls"]]
    again = [c["id"] for c in message_of(parse_answer(payload, TOOLS_REQUEST))["tool_calls"]]
    assert first == again
    assert first[0] != first[1]


def test_empty_content_beside_tool_calls_becomes_null():
    message = message_of(parse_answer({"content": "", "tool_calls": [{"name": "search"}]}, TOOLS_REQUEST))
    assert message["content"] is None
    assert len(message["tool_calls"]) == 1


def test_missing_arguments_mean_an_empty_object():
    message = message_of(parse_answer({"tool_calls": [{"name": "search"}]}, TOOLS_REQUEST))
    assert message["tool_calls"][0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    "payload, param",
    [
        ({"contnet": "typo"}, "contnet"),
        ({"content": 42}, "content"),
        ({"content": ""}, "content"),
        ({}, "content"),
        ({"content": None, "tool_calls": []}, "content"),
        ({"role": "user", "content": "hi"}, "role"),
        ({"content": "hi", "finish_reason": "done"}, "finish_reason"),
        ({"content": "hi", "usage": {"prompt_tokens": -1}}, "usage.prompt_tokens"),
        ({"content": "hi", "usage": {"prompt_tokens": True}}, "usage.prompt_tokens"),
        ({"content": "hi", "usage": {"cost": 1}}, "usage.cost"),
        ({"content": "hi", "function_call": {"name": "x"}}, "function_call"),
        ({"tool_calls": {"name": "x"}}, "tool_calls"),
        ({"tool_calls": ["search"]}, "tool_calls[0]"),
        ({"tool_calls": [{"arguments": {}}]}, "tool_calls[0].name"),
        ({"tool_calls": [{"name": "search", "args": {}}]}, "tool_calls[0].args"),
        ({"tool_calls": [{"name": "search", "arguments": ["q"]}]}, "tool_calls[0].arguments"),
        ({"tool_calls": [{"name": "search", "arguments": "{not json"}]}, "tool_calls[0].arguments"),
        ({"tool_calls": [{"name": "search", "arguments": "[1, 2]"}]}, "tool_calls[0].arguments"),
        ({"tool_calls": [{"type": "code", "function": {"name": "x"}}]}, "tool_calls[0].type"),
        (
            {"tool_calls": [{"type": "function", "function": {"name": "x", "strict": 1}}]},
            "tool_calls[0].function.strict",
        ),
        ({"tool_calls": [{"id": 7, "name": "search"}]}, "tool_calls[0].id"),
        ({"message": "hi"}, "message"),
        ({"message": {"content": "hi"}, "extra": 1}, "extra"),
        ({"choices": []}, "choices"),
        ({"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}]}, "choices"),
        ({"choices": [{"text": "legacy"}]}, "choices[0].message"),
        ({"object": "chat.completion.chunk", "choices": [{"message": {"content": "a"}}]}, "object"),
    ],
)
def test_malformed_answers_name_the_field(payload, param):
    with pytest.raises(InvalidAnswer) as caught:
        parse_answer(payload, TOOLS_REQUEST)
    assert caught.value.param == param
    assert caught.value.status == 422 and caught.value.code == "invalid_answer"


@pytest.mark.parametrize("payload", [None, 3, ["content"]])
def test_an_answer_must_be_text_or_an_object(payload):
    with pytest.raises(InvalidAnswer):
        parse_answer(payload, PLAIN_REQUEST)


def test_answer_text_is_data_never_evaluated():
    text = "__import__('os').system('touch /tmp/pwned') {{7*7}} ${HOME} $(id)"
    assert message_of(parse_answer(text, PLAIN_REQUEST))["content"] == text


def test_valid_tool_calls_pass():
    answer = {
        "tool_calls": [
            {
                "name": "get_weather",
                "arguments": {"city": "Paris", "unit": "celsius", "address": {"zip": "75001"}},
            },
            {"name": "search", "arguments": {"q": "paris"}},
        ]
    }
    validate_against_request(parse_answer(answer, TOOLS_REQUEST), TOOLS_REQUEST)


@pytest.mark.parametrize(
    "arguments, param",
    [
        ({}, "tool_calls[0].arguments.city"),
        ({"city": 3}, "tool_calls[0].arguments.city"),
        ({"city": "Paris", "unit": "kelvin"}, "tool_calls[0].arguments.unit"),
        ({"city": "Paris", "address": {"zip": "abc"}}, "tool_calls[0].arguments.address.zip"),
        ({"city": "Paris", "days": [1, -2]}, "tool_calls[0].arguments.days[1]"),
        ({"city": "Paris", "country": "FR"}, "tool_calls[0].arguments.country"),
    ],
)
def test_arguments_are_checked_against_the_tool_schema(arguments, param):
    error = invalid(call("get_weather", arguments))
    assert error.param == param
    assert param in error.message


def test_an_unknown_tool_is_rejected_and_the_offered_tools_are_named():
    error = invalid(
        {"tool_calls": [{"name": "search", "arguments": {}}, {"name": "get_wether", "arguments": {}}]}
    )
    assert error.param == "tool_calls[1].name"
    assert "get_weather" in error.message and "search" in error.message


def test_tool_calls_need_tools_in_the_request():
    assert invalid(call("search", {}), PLAIN_REQUEST).param == "tool_calls"
    assert invalid(call("search", {}), {**TOOLS_REQUEST, "tool_choice": "none"}).param == "tool_calls"


def test_tool_choice_and_parallel_tool_calls_are_honoured():
    assert invalid("just text", {**TOOLS_REQUEST, "tool_choice": "required"}).param == "tool_calls"
    forced = {**TOOLS_REQUEST, "tool_choice": {"type": "function", "function": {"name": "search"}}}
    assert invalid(call("get_weather", {"city": "P"}), forced).param == "tool_calls[0].name"
    validate_against_request(parse_answer(call("search", {"q": "x"}), forced), forced)
    serial = {**TOOLS_REQUEST, "parallel_tool_calls": False}
    two = {"tool_calls": [{"name": "search", "arguments": {}}] * 2}
    assert invalid(two, serial).param == "tool_calls"


def test_text_answers_are_fine_when_tools_are_optional():
    validate_against_request(parse_answer("No tool needed.", TOOLS_REQUEST), TOOLS_REQUEST)


def test_json_schema_response_format_checks_content():
    validate_against_request(
        parse_answer('{"name": "Ada", "age": 36}', JSON_SCHEMA_REQUEST), JSON_SCHEMA_REQUEST
    )
    assert invalid('{"name": "Ada", "age": "old"}', JSON_SCHEMA_REQUEST).param == "content.age"
    assert invalid('{"name": "Ada"}', JSON_SCHEMA_REQUEST).param == "content.age"
    assert invalid("Ada, 36", JSON_SCHEMA_REQUEST).param == "content"


def test_json_object_response_format_needs_an_object():
    request = {**PLAIN_REQUEST, "response_format": {"type": "json_object"}}
    validate_against_request(parse_answer('{"ok": true}', request), request)
    assert invalid("[1, 2]", request).param == "content"


@pytest.mark.parametrize(
    "parameters",
    [
        {"type": "objekt"},
        {"type": "object", "properties": {"q": {"type": "string", "pattern": "("}}},
        {"type": "object", "properties": {"q": {"$ref": "#/$defs/missing"}}},
        {"$ref": "#"},
        "not a schema",
    ],
)
def test_a_broken_schema_in_the_request_is_permissive(parameters):
    request = {
        **TOOLS_REQUEST,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }
    validate_against_request(parse_answer(call("f", {"q": "anything"}), request), request)


def test_a_remote_ref_is_never_fetched(monkeypatch):
    fetched = []

    def no_network(url, *args, **kwargs):
        # jsonschema would turn an exception raised here into "unresolvable", so record the attempt too.
        fetched.append(url)
        raise OSError("no network in unit tests")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    parameters = {"type": "object", "properties": {"q": {"$ref": "https://example.com/schema.json"}}}
    request = {
        **TOOLS_REQUEST,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": parameters}}],
    }
    validate_against_request(parse_answer(call("f", {"q": 1}), request), request)
    assert fetched == []


@pytest.mark.parametrize(
    "payload, request_body",
    [
        ("Hi", PLAIN_REQUEST),
        (call("get_weather", {"city": "Paris"}), TOOLS_REQUEST),
        (
            {"content": "Let me check.", **call("search", '{"q":"x"}'), "usage": {"prompt_tokens": 3}},
            TOOLS_REQUEST,
        ),
    ],
)
def test_the_openai_sdk_accepts_parsed_answers(payload, request_body):
    completion = parse_answer(payload, request_body)
    parsed = ChatCompletion.model_validate({**completion, "id": "chatcmpl-1", "created": 1700000000})
    assert parsed.model == "gpt-4o-mini"
    assert parsed.usage is not None and parsed.usage.total_tokens > 0


def test_shape_lists_tools_and_a_tool_call_skeleton():
    view = shape(TOOLS_REQUEST)
    assert [t["name"] for t in view["tools"]] == ["get_weather", "search"]
    assert view["tools"][0]["description"] == "Current weather in a city."
    assert view["tools"][0]["parameters"] == WEATHER["function"]["parameters"]
    assert view["response_format"] is None
    assert view["skeleton"] == {
        "tool_calls": [
            {
                "name": "get_weather",
                "arguments": {"city": "", "unit": "celsius", "address": {"zip": ""}, "days": []},
            }
        ]
    }


def test_a_filled_skeleton_is_an_answer_the_server_accepts():
    skeleton = shape(TOOLS_REQUEST)["skeleton"]
    skeleton["tool_calls"][0]["arguments"]["address"]["zip"] = "75001"
    validate_against_request(parse_answer(skeleton, TOOLS_REQUEST), TOOLS_REQUEST)


def test_shape_follows_tool_choice():
    forced = {**TOOLS_REQUEST, "tool_choice": {"type": "function", "function": {"name": "search"}}}
    assert shape(forced)["skeleton"] == {"tool_calls": [{"name": "search", "arguments": {"q": ""}}]}
    assert shape({**TOOLS_REQUEST, "tool_choice": "none"})["skeleton"] == {"content": ""}


def test_shape_of_structured_output_and_plain_requests():
    view = shape(JSON_SCHEMA_REQUEST)
    assert view["response_format"] == PERSON_SCHEMA
    assert view["skeleton"] == {"name": "", "age": 0}
    validate_against_request(parse_answer(view["skeleton"], JSON_SCHEMA_REQUEST), JSON_SCHEMA_REQUEST)
    assert shape({**PLAIN_REQUEST, "response_format": {"type": "json_object"}})["response_format"] == {
        "type": "object"
    }
    assert shape(PLAIN_REQUEST) == {"tools": [], "response_format": None, "skeleton": {"content": ""}}


def test_a_json_output_takes_the_object_itself_as_the_answer():
    person = {"name": "Ada", "age": 36}
    for payload in (person, {"content": person}, {"content": json.dumps(person)}, json.dumps(person)):
        completion = parse_answer(payload, JSON_SCHEMA_REQUEST)
        validate_against_request(completion, JSON_SCHEMA_REQUEST)
        assert json.loads(message_of(completion)["content"]) == person
    with pytest.raises(InvalidAnswer) as info:
        validate_against_request(parse_answer({"name": "Ada"}, JSON_SCHEMA_REQUEST), JSON_SCHEMA_REQUEST)
    assert info.value.param == "content.age"  # of the completion the answer is made into
    json_object = {**PLAIN_REQUEST, "response_format": {"type": "json_object"}}
    assert json.loads(message_of(parse_answer({"any": [1]}, json_object))["content"]) == {"any": [1]}
    # Without a JSON output an object is an answer form, checked strictly as before.
    with pytest.raises(InvalidAnswer, match="unknown field 'age'"):
        parse_answer(person, PLAIN_REQUEST)
    with pytest.raises(InvalidAnswer, match="content must be a string"):
        parse_answer({"content": person}, PLAIN_REQUEST)


def test_a_schema_with_a_content_property_keeps_the_skeleton_as_text():
    schema = {"type": "object", "properties": {"content": {"type": "string"}, "n": {"type": "integer"}}}
    request = {**PLAIN_REQUEST, "response_format": {"type": "json_schema", "json_schema": {"schema": schema}}}
    skeleton = shape(request)["skeleton"]
    assert json.loads(skeleton["content"]) == {"content": "", "n": 0}
    validate_against_request(parse_answer(skeleton, request), request)


def test_expected_form_is_one_line_and_bounded():
    assert expected_form(JSON_SCHEMA_REQUEST) == '{"name": "", "age": 0}'
    assert expected_form(TOOLS_REQUEST).startswith('{"tool_calls": [{"name": "get_weather"')
    big = {"type": "object", "properties": {f"field_{i}": {"type": "string"} for i in range(200)}}
    request = {**PLAIN_REQUEST, "response_format": {"type": "json_schema", "json_schema": {"schema": big}}}
    assert len(expected_form(request)) == MAX_FORM_TEXT and "\n" not in expected_form(request)


def test_skeleton_placeholders():
    schema = {
        "type": "object",
        "properties": {
            "s": {"type": "string"},
            "i": {"type": "integer"},
            "n": {"type": "number"},
            "b": {"type": "boolean"},
            "maybe": {"type": ["string", "null"]},
            "choice": {"enum": ["a", "b"]},
            "fixed": {"const": 7},
            "tags": {"type": "array", "items": {"type": "string"}},
            "pair": {"type": "array", "items": {"type": "integer"}, "minItems": 2},
            "either": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
            "home": {"$ref": "#/$defs/address"},
            "both": {
                "allOf": [
                    {"properties": {"x": {"type": "integer"}}},
                    {"properties": {"y": {"type": "string"}}},
                ]
            },
        },
        "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}}}},
    }
    assert skeleton_from_schema(schema) == {
        "s": "",
        "i": 0,
        "n": 0,
        "b": False,
        "maybe": "",
        "choice": "a",
        "fixed": 7,
        "tags": [],
        "pair": [0, 0],
        "either": False,
        "home": {"street": ""},
        "both": {"x": 0, "y": ""},
    }


def test_skeleton_of_a_recursive_schema_is_bounded():
    tree = {"type": "object", "properties": {"name": {"type": "string"}, "child": {"$ref": "#"}}}
    skeleton = skeleton_from_schema(tree)
    depth = 0
    while isinstance(skeleton, dict) and skeleton.get("child") is not None:
        skeleton, depth = skeleton["child"], depth + 1
    assert 1 <= depth <= 10


def test_a_whole_completion_with_usage_that_is_not_an_object_is_refused_not_replaced():
    from semula.core.answers import check_completion

    completion = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": "x"}
    with pytest.raises(InvalidAnswer) as refused:
        check_completion(completion, PLAIN_REQUEST)
    assert refused.value.param == "usage"
    check_completion({**completion, "usage": None}, PLAIN_REQUEST)  # absent or null: estimated later


@pytest.mark.parametrize(
    ("payload", "param", "message"),
    [
        ({"name": "Ada"}, "age", "age: 'age' is a required property"),  # the object itself
        ({"name": "Ada", "age": "old"}, "age", "age: 'old' is not of type 'integer'"),
        ({"content": {"name": "Ada"}}, "content.age", "content.age: 'age' is a required property"),
        ({"content": '{"name": "Ada"}'}, "content.age", "content.age: 'age' is a required property"),
        ('{"name": "Ada"}', "content.age", "content.age: 'age' is a required property"),
    ],
)
def test_a_refusal_names_the_path_as_the_answer_was_sent(payload, param, message):
    with pytest.raises(InvalidAnswer) as info:
        accept_answer(payload, JSON_SCHEMA_REQUEST)
    assert (info.value.param, info.value.message) == (param, message)


def test_a_refusal_of_the_whole_object_sent_as_itself_names_no_path():
    closed = {"type": "object", "properties": {}, "additionalProperties": False}
    request = {
        **PLAIN_REQUEST,
        "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": closed}},
    }
    with pytest.raises(InvalidAnswer) as info:
        accept_answer({"a": 1, "b": 2}, request)
    assert info.value.param is None
    assert info.value.message == "Additional properties are not allowed ('a', 'b' unexpected)"

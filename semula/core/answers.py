"""Answers to parked calls: normalise what an answerer sent, check it fits the request, show its shape.

Pure, no I/O. Nothing in an answer is executed or evaluated: it is parsed as data and checked with jsonschema.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from semula.core import jsonio, safe_regex
from semula.core.errors import BadRequest, InvalidAnswer
from semula.core.fingerprint import canonical_json, join_path
from semula.core.safe_regex import PatternError

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter", "function_call"})
MAX_SKELETON_DEPTH = 8
MAX_FORM_TEXT = 600

_MESSAGE_KEYS = frozenset(
    {"role", "content", "tool_calls", "refusal", "annotations", "audio", "function_call"}
)
_USAGE_COUNTS = ("prompt_tokens", "completion_tokens", "total_tokens")
_USAGE_DETAILS = ("prompt_tokens_details", "completion_tokens_details")
# Keys that make a payload an answer form; a JSON output whose object has none of them is the content itself.
_ANSWER_KEYS = frozenset({"content", "tool_calls", "message", "choices", "refusal"})
_PLACEHOLDERS: dict[str, Any] = {"string": "", "integer": 0, "number": 0, "boolean": False, "null": None}
_MAX_ERROR_TEXT = 300


def estimate_tokens(text: str) -> int:
    """A rough token count (four characters a token), at least 1, for usage nobody reported."""
    return max(1, len(text) // 4)


def parse_answer(payload: Any, request: Mapping[str, Any]) -> dict[str, Any]:
    """Normalise any accepted answer form into a `chat.completion` without `id` and `created`.

    Field errors raise InvalidAnswer whose param is relative to the assistant message (`tool_calls[0].name`).
    """
    if isinstance(payload, str):
        payload = {"content": payload}
    payload = _json_output(payload, request)
    if not isinstance(payload, dict):
        raise InvalidAnswer("an answer is text, or an object with content, tool_calls, message or choices")
    if "choices" in payload:
        message, finish_reason, usage = _from_completion(payload)
    elif "message" in payload:
        _reject_unknown(payload, {"message", "finish_reason", "usage"}, "")
        message = payload["message"]
        if not isinstance(message, dict):
            raise InvalidAnswer("message must be an assistant message object", param="message")
        finish_reason, usage = payload.get("finish_reason"), payload.get("usage")
    else:
        # The flat form is an assistant message plus finish_reason and usage.
        message = {key: value for key, value in payload.items() if key not in ("finish_reason", "usage")}
        finish_reason, usage = payload.get("finish_reason"), payload.get("usage")

    content, refusal, tool_calls = _parse_message(message)
    if tool_calls and content == "":
        content = None
    if not content and not tool_calls and not refusal:
        raise InvalidAnswer("the answer is empty: give content or tool_calls", param="content")
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    elif finish_reason not in FINISH_REASONS:
        raise InvalidAnswer(
            f"finish_reason must be one of {', '.join(sorted(FINISH_REASONS))}", param="finish_reason"
        )

    out_message: dict[str, Any] = {"role": "assistant", "content": content}
    if refusal:
        out_message["refusal"] = refusal
    if tool_calls:
        out_message["tool_calls"] = tool_calls
    return {
        "object": "chat.completion",
        "model": str(request.get("model") or ""),
        "choices": [{"index": 0, "message": out_message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": _parse_usage(usage, request, out_message),
    }


def accept_answer(payload: Any, request: Mapping[str, Any]) -> dict[str, Any]:
    """parse_answer, then validate_against_request, with a refusal's path named as the answer was
    sent: for a JSON output given as the object itself, `total` rather than `content.total`."""
    completion = parse_answer(payload, request)
    try:
        validate_against_request(completion, request)
    except InvalidAnswer as exc:
        param = exc.param or ""
        itself = isinstance(payload, dict) and wants_json(request) and not _ANSWER_KEYS & set(payload)
        if not itself or not (param == "content" or param.startswith(("content.", "content["))):
            raise
        sent = param.removeprefix("content").removeprefix(".")
        message = exc.message
        if message.startswith(f"{param}: "):
            message = message[len(param) + 2 :] if not sent else f"{sent}: {message[len(param) + 2 :]}"
        raise InvalidAnswer(message, param=sent or None) from None
    return completion


def check_completion(completion: Mapping[str, Any], request: Mapping[str, Any]) -> None:
    """Check a whole chat.completion as a provider (or an answerer pasting one) gave it.

    What must hold is checked for every choice (an assistant message, tool calls that fit the request's
    tools and schemas, content that fits its response_format); fields semula does not know are left
    alone, so a recording keeps what the provider sent. Errors name the field (`choices[1].message.…`).
    """
    if completion.get("object", "chat.completion") != "chat.completion":
        raise InvalidAnswer("a whole completion must have object chat.completion", param="object")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices:
        raise InvalidAnswer("a whole completion has a non-empty list of choices", param="choices")
    usage = completion.get("usage")
    if usage is not None and not isinstance(usage, dict):
        # An estimate would stand in for it unseen: what was given is refused instead.
        raise InvalidAnswer("usage must be an object of token counts", param="usage")
    for i, choice in enumerate(choices):
        where = f"choices[{i}]"
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise InvalidAnswer("each choice has an assistant message", param=f"{where}.message")
        known = {key: value for key, value in message.items() if key in _MESSAGE_KEYS}
        try:
            parsed = parse_answer({"message": known}, request)
            validate_against_request(parsed, request)
        except InvalidAnswer as exc:
            raise InvalidAnswer(exc.message, param=join_path(f"{where}.message", exc.param or "")) from None


WORDS = re.compile(r"\S*\s+|\S+")  # a word with the whitespace after it: how answers are cut into tokens


def synthetic_logprobs(text: str | None, top: Any) -> dict[str, Any]:
    """Logprobs for an answer that came without them, to a request that asks for them: each word of the
    text a token, sure of itself (logprob 0), its own only alternative when `top` alternatives are asked."""
    tokens = []
    for word in WORDS.findall(text or ""):
        entry = {"token": word, "logprob": 0.0, "bytes": list(word.encode("utf-8"))}
        tokens.append({**entry, "top_logprobs": [dict(entry)] if isinstance(top, int) and top > 0 else []})
    return {"content": tokens, "refusal": None}


def complete_completion(completion: Mapping[str, Any], request: Mapping[str, Any]) -> dict[str, Any]:
    """A checked whole completion with the fields the API always has filled in where missing.

    Nothing present is changed or dropped; only absent required fields are added (object, model,
    index, finish_reason, logprobs, refusal, tool call ids, an estimated usage).
    """
    out = dict(completion)
    out.setdefault("object", "chat.completion")
    out.setdefault("model", str(request.get("model") or ""))
    choices = []
    for i, choice in enumerate(completion["choices"]):
        message = dict(choice["message"])
        message.setdefault("role", "assistant")
        message.setdefault("content", None)
        message.setdefault("refusal", None)
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            message["tool_calls"] = [
                {**call, "id": call.get("id") or _parse_tool_call(call, n)["id"]}
                for n, call in enumerate(calls)
            ]
        logprobs = None
        if request.get("logprobs") is True and choice.get("logprobs") is None:
            logprobs = synthetic_logprobs(message.get("content"), request.get("top_logprobs"))
        choices.append(
            {
                "index": i,
                "finish_reason": "tool_calls" if calls else "stop",
                **choice,
                "logprobs": choice.get("logprobs") if logprobs is None else logprobs,
                "message": message,
            }
        )
    out["choices"] = choices
    if not isinstance(out.get("usage"), dict):
        first = parse_answer(
            {"message": {k: v for k, v in choices[0]["message"].items() if k in _MESSAGE_KEYS}}, request
        )
        out["usage"] = first["usage"]
    return out


def validate_against_request(completion: Mapping[str, Any], request: Mapping[str, Any]) -> None:
    """Check the answer's tool calls against the request's tools and its content against `response_format`.

    Raises InvalidAnswer naming the field, like `tool_calls[0].arguments.city`.
    """
    message = _message_of(completion)
    calls = message.get("tool_calls") or []
    tools = _function_tools(request)
    tool_choice = request.get("tool_choice")
    forced = _forced_tool(tool_choice)

    if calls:
        if not tools:
            raise InvalidAnswer(
                "the request offers no tools, so the answer cannot call one", param="tool_calls"
            )
        if tool_choice == "none":
            raise InvalidAnswer(
                'the request says tool_choice "none": answer with content', param="tool_calls"
            )
        if request.get("parallel_tool_calls") is False and len(calls) > 1:
            raise InvalidAnswer(
                "the request allows one tool call (parallel_tool_calls is false)", param="tool_calls"
            )
    elif tools and (tool_choice == "required" or forced):
        raise InvalidAnswer("the request's tool_choice requires a tool call", param="tool_calls")

    for i, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if name not in tools:
            offered = ", ".join(sorted(tools))[:_MAX_ERROR_TEXT]
            raise InvalidAnswer(
                f"no tool named {name!r} in the request; it offers: {offered}", param=f"tool_calls[{i}].name"
            )
        if forced and name != forced:
            raise InvalidAnswer(
                f"the request's tool_choice requires {forced!r}", param=f"tool_calls[{i}].name"
            )
        param = f"tool_calls[{i}].arguments"
        arguments = _parse_json(function.get("arguments"), param)
        if not isinstance(arguments, dict):
            raise InvalidAnswer("arguments must be a JSON object", param=param)
        _check_schema(arguments, tools[name], param)

    _check_response_format(message, request)


def shape(request: Mapping[str, Any]) -> dict[str, Any]:
    """What an answerer needs: the tool schemas, the response schema, and a skeleton answer to fill in."""
    wanted_vectors = request.get("embeddings")
    if isinstance(wanted_vectors, dict):
        # An embeddings call's view: one vector per input, each `dimensions` long (when known).
        slots = [[] for _ in range(int(wanted_vectors.get("inputs") or 0))]
        return {
            "tools": [],
            "response_format": None,
            "embeddings": wanted_vectors,
            "skeleton": {"embeddings": slots},
        }
    tools = []
    for tool in request.get("tools") or []:
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            tools.append(
                {
                    "name": function["name"],
                    "description": function.get("description"),
                    "parameters": function.get("parameters"),
                }
            )
    response_format = _response_schema(request)

    tool_choice = request.get("tool_choice")
    if tools and tool_choice != "none":
        forced = _forced_tool(tool_choice)
        tool = next((t for t in tools if t["name"] == forced), tools[0])
        arguments = skeleton_from_schema(tool["parameters"] or {"type": "object"})
        skeleton: dict[str, Any] = {"tool_calls": [{"name": tool["name"], "arguments": arguments}]}
    elif response_format is not None:
        value = skeleton_from_schema(response_format)
        # The object itself is the easiest form to fill in; as text in content only when the object
        # could be mistaken for an answer form (its schema has a property named content, ...).
        if isinstance(value, dict) and not _ANSWER_KEYS & set(value):
            skeleton = value
        else:
            skeleton = {"content": json.dumps(value, ensure_ascii=False)}
    else:
        skeleton = {"content": ""}
    wanted = choices_wanted(request)
    if wanted > 1:
        # n > 1: one answer per choice, as a whole completion's choices.
        return {
            "tools": tools,
            "response_format": response_format,
            "choices": wanted,
            "skeleton": {"choices": [{"message": skeleton} for _ in range(wanted)]},
        }
    return {"tools": tools, "response_format": response_format, "skeleton": skeleton}


def choices_wanted(request: Mapping[str, Any]) -> int:
    """How many choices the request asks for (`n`, 1 when absent or not a small positive integer)."""
    n = request.get("n")
    return n if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= 128 else 1


def expected_form(view: Mapping[str, Any]) -> str:
    """The skeleton of this call as one line, for refusals: what to send instead."""
    text = json.dumps(shape(view)["skeleton"], ensure_ascii=False)
    return text if len(text) <= MAX_FORM_TEXT else text[: MAX_FORM_TEXT - 1] + "…"


def skeleton_from_schema(schema: Any) -> Any:
    """A placeholder value of the schema's shape: every property filled, "" / 0 / false / [] / {} leaves."""
    return _skeleton(schema, schema, 0)


def takes_summary(payload: Any) -> bool:
    """Whether an answer's top-level `summary` is the revision's note rather than part of the answer:
    only in an answer form (content, tool_calls, message, choices, embeddings). A JSON output's
    object is the answer itself, and its own `summary` field is its own."""
    return (
        isinstance(payload, dict)
        and "summary" in payload
        and bool((_ANSWER_KEYS | {"embeddings"}) & set(payload))
    )


def wants_json(request: Mapping[str, Any]) -> bool:
    """Whether the request asks for JSON output (response_format json_schema or json_object)."""
    response_format = request.get("response_format")
    return isinstance(response_format, dict) and response_format.get("type") in ("json_schema", "json_object")


def _json_output(payload: Any, request: Mapping[str, Any]) -> Any:
    """For a JSON output, the JSON value itself as the answer: an object that is no answer form, or
    content given as an object or a list, becomes content text (validated against the schema later)."""
    if not isinstance(payload, dict) or not wants_json(request):
        return payload
    if not _ANSWER_KEYS & set(payload):
        return {"content": _dump(payload)}
    if isinstance(payload.get("content"), dict | list):
        return {**payload, "content": _dump(payload["content"])}
    return payload


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _reject_unknown(value: Mapping[str, Any], allowed: set[str] | frozenset[str], path: str) -> None:
    unknown = sorted(key for key in value if key not in allowed)
    if unknown:
        expected = ", ".join(sorted(allowed))
        raise InvalidAnswer(
            f"unknown field {unknown[0]!r}; expected some of: {expected}", param=join_path(path, unknown[0])
        )


def _from_completion(payload: dict[str, Any]) -> tuple[dict[str, Any], Any, Any]:
    # A pasted chat.completion keeps whatever else its provider added (id, system_fingerprint, ...):
    # those are ignored rather than rejected, only the message itself is checked strictly.
    if payload.get("object", "chat.completion") != "chat.completion":
        raise InvalidAnswer("a whole completion must have object chat.completion", param="object")
    choices = payload["choices"]
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise InvalidAnswer("a whole completion must have exactly one choice", param="choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise InvalidAnswer("choices[0].message must be an assistant message", param="choices[0].message")
    return message, choices[0].get("finish_reason"), payload.get("usage")


def _parse_message(message: dict[str, Any]) -> tuple[str | None, str | None, list[dict[str, Any]]]:
    _reject_unknown(message, _MESSAGE_KEYS, "")
    if message.get("role", "assistant") != "assistant":
        raise InvalidAnswer("an answer is an assistant message", param="role")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise InvalidAnswer("content must be a string", param="content")
    refusal = message.get("refusal")
    if refusal is not None and not isinstance(refusal, str):
        raise InvalidAnswer("refusal must be a string", param="refusal")
    if message.get("audio") is not None:
        raise InvalidAnswer("audio answers are not supported", param="audio")
    if message.get("function_call") is not None:
        raise InvalidAnswer("function_call is the old form: give tool_calls instead", param="function_call")
    if not isinstance(message.get("annotations", []), list | None):
        raise InvalidAnswer("annotations must be a list", param="annotations")
    raw_calls = message.get("tool_calls")
    if raw_calls is None:
        raw_calls = []
    if not isinstance(raw_calls, list):
        raise InvalidAnswer("tool_calls must be a list", param="tool_calls")
    return content, refusal, [_parse_tool_call(call, i) for i, call in enumerate(raw_calls)]


def _parse_tool_call(call: Any, i: int) -> dict[str, Any]:
    param = f"tool_calls[{i}]"
    if not isinstance(call, dict):
        raise InvalidAnswer("a tool call is an object with name and arguments", param=param)
    if "function" in call or "type" in call:
        # OpenAI's own form: {"id", "type": "function", "function": {"name", "arguments"}}.
        _reject_unknown(call, {"id", "type", "function"}, param)
        if call.get("type", "function") != "function":
            raise InvalidAnswer('a tool call has type "function"', param=f"{param}.type")
        function = call.get("function")
        if not isinstance(function, dict):
            raise InvalidAnswer(
                "function must be an object with name and arguments", param=f"{param}.function"
            )
        _reject_unknown(function, {"name", "arguments"}, f"{param}.function")
    else:
        _reject_unknown(call, {"id", "name", "arguments"}, param)
        function = call
    name, arguments, call_id = function.get("name"), function.get("arguments"), call.get("id")

    if not isinstance(name, str) or not name:
        raise InvalidAnswer("a tool call needs the tool's name", param=f"{param}.name")
    if arguments is None:
        arguments = "{}"
    elif isinstance(arguments, dict):
        arguments = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    elif isinstance(arguments, str):
        if not isinstance(_parse_json(arguments, f"{param}.arguments"), dict):
            raise InvalidAnswer("arguments must be a JSON object", param=f"{param}.arguments")
    else:
        raise InvalidAnswer("arguments must be an object or a JSON string", param=f"{param}.arguments")
    if call_id is None:
        # Deterministic, not random: the app's next request quotes this id (tool_call_id), and a fresh id
        # on every replay would change that request's fingerprint and turn every follow-up into a miss.
        digest = hashlib.sha256(f"{i}\0{name}\0{arguments}".encode("utf-8", "surrogatepass")).hexdigest()
        call_id = f"call_{digest[:24]}"
    elif not isinstance(call_id, str) or not call_id:
        raise InvalidAnswer("a tool call id is a non-empty string", param=f"{param}.id")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _parse_usage(usage: Any, request: Mapping[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    if usage is None:
        usage = {}
    if not isinstance(usage, dict):
        raise InvalidAnswer("usage must be an object", param="usage")
    _reject_unknown(usage, set(_USAGE_COUNTS + _USAGE_DETAILS), "usage")
    for key in _USAGE_COUNTS:
        value = usage.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise InvalidAnswer(f"{key} must be a non-negative integer", param=f"usage.{key}")
    for key in _USAGE_DETAILS:
        if not isinstance(usage.get(key, {}), dict | None):
            raise InvalidAnswer(f"{key} must be an object", param=f"usage.{key}")

    prompt = usage.get("prompt_tokens")
    if prompt is None:
        prompt = estimate_tokens(canonical_json(request.get("messages") or []))
    completion = usage.get("completion_tokens")
    if completion is None:
        text = (message.get("content") or "") + (message.get("refusal") or "")
        for call in message.get("tool_calls", []):
            text += call["function"]["name"] + call["function"]["arguments"]
        completion = estimate_tokens(text)
    total = usage.get("total_tokens")
    result = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion if total is None else total,
    }
    result.update({key: usage[key] for key in _USAGE_DETAILS if usage.get(key) is not None})
    return result


def _message_of(completion: Mapping[str, Any]) -> dict[str, Any]:
    choices = completion.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict):
            return message
    raise InvalidAnswer("the answer has no assistant message", param="choices")


def _function_tools(request: Mapping[str, Any]) -> dict[str, Any]:
    tools = {}
    for tool in request.get("tools") or []:
        if (
            isinstance(tool, dict)
            and tool.get("type") == "function"
            and isinstance(tool.get("function"), dict)
        ):
            name = tool["function"].get("name")
            if isinstance(name, str):
                tools[name] = tool["function"].get("parameters")
    return tools


def _forced_tool(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        function = tool_choice.get("function")
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    return None


def _parse_json(text: Any, param: str) -> Any:
    if not isinstance(text, str):
        raise InvalidAnswer("expected a JSON string", param=param)
    try:
        return jsonio.loads(text, "The text")
    except BadRequest as exc:
        raise InvalidAnswer(f"not valid JSON: {exc.message[:_MAX_ERROR_TEXT]}", param=param) from None


def _check_schema(instance: Any, schema: Any, param: str) -> None:
    # A schema in the request that is itself broken is the application's bug, not the answerer's: such a
    # schema is treated as permissive (anything goes), never as a crash or an answer nobody can give.
    if schema is None:
        return
    # jsonschema is imported by the first schema checked, not with the module (decision 0062).
    from jsonschema.exceptions import SchemaError, best_match
    from referencing.exceptions import Unresolvable

    validator = safe_regex.SchemaValidator
    try:
        validator.check_schema(schema, format_checker=safe_regex.SCHEMA_FORMATS)
        error = best_match(validator(schema, registry=_no_remote_refs()).iter_errors(instance))
    except (SchemaError, Unresolvable, RecursionError):
        return
    except PatternError as exc:
        # Patterns run on RE2 (linear time); one it cannot run is named rather than ignored or backtracked.
        raise InvalidAnswer(
            f"the request's schema for {param}: {exc}"[:_MAX_ERROR_TEXT], param=param
        ) from None
    if error is not None:
        where = _error_path(error, param)
        raise InvalidAnswer(f"{where}: {error.message}"[:_MAX_ERROR_TEXT], param=where)


@functools.cache
def _no_remote_refs() -> Any:
    """An empty registry: a "$ref" to a URL in a request's schema must never make the server fetch it."""
    from referencing import Registry

    return Registry()


def _error_path(error: ValidationError, base: str) -> str:
    path = base
    for key in error.absolute_path:
        path = join_path(path, key)
    instance = error.instance
    # Point at the property itself, not at the object that lacks it (or has one too many).
    if error.validator == "required" and isinstance(instance, dict):
        missing = [name for name in error.validator_value if name not in instance]
        if missing:
            path = join_path(path, missing[0])
    elif error.validator == "additionalProperties" and isinstance(instance, dict):
        known = error.schema.get("properties") or {}
        extra = [name for name in instance if name not in known]
        if len(extra) == 1 and not error.schema.get("patternProperties"):
            path = join_path(path, extra[0])
    return path


def _check_response_format(message: dict[str, Any], request: Mapping[str, Any]) -> None:
    response_format = request.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    if kind not in ("json_schema", "json_object"):
        return
    content = message.get("content")
    if content is None:
        # A model asked for JSON may still call a tool or refuse instead; then there is no content to check.
        if message.get("tool_calls") or message.get("refusal"):
            return
        raise InvalidAnswer("the request asks for a JSON answer in content", param="content")
    value = _parse_json(content, "content")
    if kind == "json_object":
        if not isinstance(value, dict):
            raise InvalidAnswer("the request asks for a JSON object in content", param="content")
        return
    _check_schema(value, _response_schema(request), "content")


def _response_schema(request: Mapping[str, Any]) -> Any:
    response_format = request.get("response_format")
    if not isinstance(response_format, dict):
        return None
    if response_format.get("type") == "json_object":
        return {"type": "object"}
    if response_format.get("type") == "json_schema":
        json_schema = response_format.get("json_schema")
        schema = json_schema.get("schema") if isinstance(json_schema, dict) else None
        return schema if schema is not None else {}
    return None


def _resolve_local(ref: Any, root: Any) -> Any:
    # Only refs inside the same schema ("#/$defs/Address"); anything else gets no skeleton.
    if not isinstance(ref, str) or not ref.startswith("#"):
        return None
    node = root
    for token in ref[1:].lstrip("/").split("/") if ref[1:] else []:
        token = token.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
            node = node[int(token)]
        else:
            return None
    return node


def _skeleton(schema: Any, root: Any, depth: int) -> Any:
    # The depth cap stops recursive schemas ({"$ref": "#"}, trees) from recursing forever.
    if not isinstance(schema, dict) or depth > MAX_SKELETON_DEPTH:
        return None
    if "$ref" in schema:
        target = _resolve_local(schema["$ref"], root)
        rest = {key: value for key, value in schema.items() if key != "$ref"}
        return _skeleton({**target, **rest} if isinstance(target, dict) else rest, root, depth + 1)
    if "const" in schema:
        return schema["const"]
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if "default" in schema:
        return schema["default"]
    for keyword in ("anyOf", "oneOf"):
        options = schema.get(keyword)
        if isinstance(options, list) and options:
            not_null = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
            return _skeleton((not_null or options)[0], root, depth + 1)
    if isinstance(schema.get("allOf"), list):
        merged = {key: value for key, value in schema.items() if key != "allOf"}
        properties = dict(merged.get("properties") or {})
        for part in schema["allOf"]:
            if isinstance(part, dict) and "$ref" in part:
                part = _resolve_local(part["$ref"], root)
            if isinstance(part, dict):
                properties.update(part.get("properties") or {})
                if "type" not in merged and "type" in part:
                    merged["type"] = part["type"]
        if properties:
            merged["properties"] = properties
        return _skeleton(merged, root, depth + 1)

    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None:
        kind = "object" if "properties" in schema else "array" if "items" in schema else None
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict) or depth == MAX_SKELETON_DEPTH:
            return {}
        return {name: _skeleton(sub, root, depth + 1) for name, sub in properties.items()}
    if kind == "array":
        count = schema.get("minItems")
        count = min(count, 3) if isinstance(count, int) and not isinstance(count, bool) else 0
        return [_skeleton(schema.get("items"), root, depth + 1) for _ in range(count)]
    return _PLACEHOLDERS.get(kind) if isinstance(kind, str) else None

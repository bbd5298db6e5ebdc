"""What OpenAI's chat completions API refuses with a 400, refused here too (pure, no I/O).

A request the real API would never accept must not be parked, or someone records an answer to it.
Messages and codes follow OpenAI's (`invalid_value`, `invalid_type`, `param` like
`messages[0].role`), so the SDKs raise the same BadRequestError they would against the real API.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import orjson

from semula.core import toolsets
from semula.core.errors import BadRequest
from semula.core.fingerprint import CHAT_API
from semula.core.limits import MAX_BLOCKS, MAX_ITEMS, blocks

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
RESPONSE_FORMATS = ("text", "json_object", "json_schema")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
# Digests of the tool schemas and response schemas found valid: checking a schema against the
# metaschema costs about a millisecond (whole tool sets: semula.core.toolsets).
_VALID_SCHEMAS: dict[bytes, None] = {}
_VALID_SCHEMAS_SIZE = 4096
# OpenAI's caps on arrays, checked before their items so that a request far past one is refused for
# the cost of a len() (decision 0054): 128 tools, 128 tool calls in an assistant message.
MAX_TOOLS = 128
MAX_TOOL_CALLS = 128


def check(body: dict[str, Any]) -> None:
    """400 for the first field of a chat completion request that OpenAI would refuse."""
    messages = body["messages"]
    check_length("messages", messages, MAX_ITEMS)  # the caps first (decision 0063)
    parts = blocks(messages, "content")
    if parts > MAX_BLOCKS:
        raise BadRequest(
            f"Invalid 'messages': too many content parts: {parts}; at most {MAX_BLOCKS} in a request.",
            param="messages",
            code="array_above_max_length",
        )
    for index, message in enumerate(messages):
        _message(message, index)
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _type("tools", "an array", tools)
        check_length("tools", tools, MAX_TOOLS)
        # An agent sends the same tools with every request: checked once per tool set.
        toolsets.checked(CHAT_API, tools, _tools)
    response_format = body.get("response_format")
    if response_format is not None:
        _response_format(response_format)


def _message(message: Any, index: int) -> None:
    """messages[index]; the error's `param` is written only when there is an error (an agent's request
    carries dozens of messages, each checked on every first sight)."""
    if not isinstance(message, dict):
        raise _type(f"messages[{index}]", "an object", message)
    role = message.get("role")
    if role not in ROLES:
        if role is None:
            raise _missing(f"messages[{index}].role")
        raise _value(f"messages[{index}].role", role, ROLES)
    if role == "tool" and type(message.get("tool_call_id")) is not str:
        if message.get("tool_call_id") is None:
            raise _missing(f"messages[{index}].tool_call_id")
        if not isinstance(message["tool_call_id"], str):
            raise _type(f"messages[{index}].tool_call_id", "a string", message["tool_call_id"])
    if role == "assistant":
        tool_calls = message.get("tool_calls")
        if tool_calls is not None:
            _tool_calls(tool_calls, index)
    content = message.get("content")
    if content is None or isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _type(f"messages[{index}].content", "one of a string or array of objects", content)
    for at, part in enumerate(content):
        if not isinstance(part, dict):
            raise _type(f"messages[{index}].content[{at}]", "an object", part)
        if not isinstance(part.get("type"), str):
            raise _missing(f"messages[{index}].content[{at}].type")


def _tool_calls(calls: Any, index: int) -> None:
    """An assistant message's earlier tool calls, as OpenAI requires them: id, type, function."""
    param = f"messages[{index}].tool_calls"
    if not isinstance(calls, list):
        raise _type(param, "an array of objects", calls)
    check_length(param, calls, MAX_TOOL_CALLS)
    for at, call in enumerate(calls):
        if type(call) is dict and type(call.get("id")) is str and call.get("type") == "function":
            function = call.get("function")
            if (
                type(function) is dict
                and type(function.get("name")) is str
                and type(function.get("arguments")) is str
            ):
                continue  # the common case, checked without writing a `param`
        _tool_call(call, f"{param}[{at}]")


def _tool_call(call: Any, where: str) -> None:
    """One tool call the quick look in _tool_calls did not pass: its error, if it has one."""
    if not isinstance(call, dict):
        raise _type(where, "an object", call)
    for key in ("id", "type"):
        if call.get(key) is None:
            raise _missing(f"{where}.{key}")
    if not isinstance(call["id"], str):
        raise _type(f"{where}.id", "a string", call["id"])
    if call["type"] != "function":
        return  # a custom tool call carries `custom` instead: recorded as sent
    function = call.get("function")
    if function is None:
        raise _missing(f"{where}.function")
    if not isinstance(function, dict):
        raise _type(f"{where}.function", "an object", function)
    for key in ("name", "arguments"):
        if function.get(key) is None:
            raise _missing(f"{where}.function.{key}")
        if not isinstance(function[key], str):
            raise _type(f"{where}.function.{key}", "a string", function[key])


def _tools(tools: list[Any]) -> None:
    for index, tool in enumerate(tools):
        _tool(tool, f"tools[{index}]")


def _tool(tool: Any, param: str) -> None:
    if not isinstance(tool, dict):
        raise _type(param, "an object", tool)
    function = tool.get("function")
    if tool.get("type") != "function" or not isinstance(function, dict):
        # Other tool types (custom tools, built-ins) are not checked: semula records them as sent.
        return
    name = function.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise BadRequest(
            f"Invalid '{param}.function.name': string does not match pattern. "
            "Expected a string that matches the pattern '^[a-zA-Z0-9_-]{1,64}$'.",
            param=f"{param}.function.name",
            code="invalid_value",
        )
    parameters = function.get("parameters")
    if parameters is not None:
        _schema(parameters, f"{param}.function.parameters", f"Invalid schema for function '{name}'")


def _response_format(value: Any) -> None:
    if not isinstance(value, dict):
        raise _type("response_format", "an object", value)
    kind = value.get("type")
    if kind is None:
        raise _missing("response_format.type")
    if kind not in RESPONSE_FORMATS:
        raise _value("response_format.type", kind, RESPONSE_FORMATS)
    if kind == "json_schema":
        spec = value.get("json_schema")
        if not isinstance(spec, dict):
            raise _type("response_format.json_schema", "an object", spec)
        if "schema" in spec:
            _schema(
                spec["schema"], "response_format.json_schema.schema", "Invalid schema for response_format"
            )


def _schema(schema: Any, param: str, what: str) -> None:
    if not isinstance(schema, dict):
        raise BadRequest(
            f"{what}: schema must be a JSON Schema of 'type: \"object\"', got {_kind(schema)}.",
            param=param,
            code="invalid_function_parameters",
        )
    digest = _digest(schema)
    if digest is not None and digest in _VALID_SCHEMAS:
        return
    # jsonschema is imported by the first schema checked, not with the module (decision 0062).
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        raise BadRequest(
            f"{what}: {param}{where}: {exc.message}"[:500],
            param=param + where,
            code="invalid_function_parameters",
        ) from None
    _remember(digest)


def _digest(value: dict[str, Any]) -> bytes | None:
    """The memo key of a schema."""
    try:
        # orjson's bytes tell 1 from 1.0 and true from 1, as the metaschema does.
        return hashlib.sha256(orjson.dumps(value)).digest()
    except TypeError:  # what orjson cannot write (integers past 64 bits, lone surrogates): no memo
        return None


def _remember(digest: bytes | None) -> None:
    if digest is not None:
        if len(_VALID_SCHEMAS) >= _VALID_SCHEMAS_SIZE:
            _VALID_SCHEMAS.clear()
        _VALID_SCHEMAS[digest] = None


def _kind(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number"
    return _KINDS.get(type(value), "a value")


def _type(param: str, expected: str, value: Any) -> BadRequest:
    return BadRequest(
        f"Invalid type for '{param}': expected {expected}, but got {_kind(value)} instead.",
        param=param,
        code="invalid_type",
    )


def _value(param: str, value: Any, supported: tuple[str, ...]) -> BadRequest:
    shown = f"'{value}'" if isinstance(value, str) else _kind(value)
    listed = ", ".join(f"'{s}'" for s in supported[:-1]) + f", and '{supported[-1]}'"
    return BadRequest(
        f"Invalid value for '{param}': {shown[:80]}. Supported values are: {listed}.",
        param=param,
        code="invalid_value",
    )


def check_length(param: str, items: list[Any], most: int) -> None:
    """OpenAI's 400 for an array longer than it takes (also the Responses API's)."""
    if len(items) > most:
        raise BadRequest(
            f"Invalid '{param}': array too long. Expected an array with maximum length {most}, but got "
            f"an array with length {len(items)} instead.",
            param=param,
            code="array_above_max_length",
        )


def _missing(param: str) -> BadRequest:
    return BadRequest(
        f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter"
    )

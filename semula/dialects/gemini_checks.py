"""The Gemini API's request checks (`generateContent`, `countTokens`): the 400s Google answers.

Google words a failed check as `* GenerateContentRequest.<path>: <what>` (a field the request
names in snake case) or `Invalid value at '<path>' (<TYPE>), <value>` for a value of the wrong type.
Fields semula does not know are let through: a newer client is not refused here, and record-through
passes them on for the provider to judge (docs/decisions/0055-gemini-api.md).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from semula.core import toolsets
from semula.core.errors import BadRequest
from semula.core.limits import MAX_BLOCKS, MAX_ITEMS, blocks

OWN = "invalid_argument"  # the code of the dialect's own 400s: their message needs no prefix
ROLES = ("user", "model", "function")
# A part holds exactly one of these (Google's `data` oneof); `thought`, `thoughtSignature`,
# `videoMetadata` and `partMetadata` describe a part and may go with any of them.
PART_DATA = (
    "text",
    "inlineData",
    "fileData",
    "functionCall",
    "functionResponse",
    "executableCode",
    "codeExecutionResult",
)
CALLING_MODES = ("MODE_UNSPECIFIED", "AUTO", "ANY", "NONE", "VALIDATED")
MIME_TYPES = ("text/plain", "application/json", "application/xml", "application/yaml", "text/x.enum")
SCHEMA_MIME_TYPES = ("application/json", "text/x.enum")
FUNCTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}\Z")


# Google's JSON parser takes every field by its proto name (`system_instruction`, as Google's own curl
# examples write them) or by its JSON name (`systemInstruction`, as the SDKs send them). The request
# semula stores, checks, views and forwards names each field it knows the second way: a message type's
# fields, each with the type of its value (None: a scalar, an enum or free JSON, not walked).
_FIELDS: dict[str, dict[str, str | None]] = {
    "request": {  # generateContent, countTokens, embedContent and batchEmbedContents, in one
        "contents": "content",
        "systemInstruction": "content",
        "tools": "tool",
        "toolConfig": "toolConfig",
        "safetySettings": None,
        "generationConfig": "generationConfig",
        "cachedContent": None,
        "generateContentRequest": "request",
        "requests": "request",
        "content": "content",
        "taskType": None,
        "outputDimensionality": None,
    },
    "content": {"parts": "part"},
    "part": {
        "inlineData": "blob",
        "fileData": "blob",
        "functionCall": None,
        "functionResponse": "functionResponse",
        "executableCode": None,
        "codeExecutionResult": None,
        "thoughtSignature": None,
        "videoMetadata": "videoMetadata",
        "partMetadata": None,
        "mediaResolution": None,
    },
    "blob": {"mimeType": None, "fileUri": None, "displayName": None},
    "videoMetadata": {"startOffset": None, "endOffset": None},
    "functionResponse": {"willContinue": None, "parts": "part"},
    "tool": {
        "functionDeclarations": "declaration",
        "googleSearch": None,
        "googleSearchRetrieval": None,
        "codeExecution": None,
        "urlContext": None,
        "computerUse": None,
        "fileSearch": None,
        "googleMaps": None,
    },
    "declaration": {
        "parameters": "schema",
        "parametersJsonSchema": None,
        "response": "schema",
        "responseJsonSchema": None,
    },
    "toolConfig": {"functionCallingConfig": "callingConfig", "retrievalConfig": None},
    "callingConfig": {"allowedFunctionNames": None},
    "generationConfig": {
        "stopSequences": None,
        "responseMimeType": None,
        "responseSchema": "schema",
        "responseJsonSchema": None,
        "responseModalities": None,
        "candidateCount": None,
        "maxOutputTokens": None,
        "topP": None,
        "topK": None,
        "presencePenalty": None,
        "frequencyPenalty": None,
        "responseLogprobs": None,
        "enableEnhancedCivicAnswers": None,
        "speechConfig": None,
        "thinkingConfig": "thinkingConfig",
        "imageConfig": None,
        "mediaResolution": None,
    },
    "thinkingConfig": {"includeThoughts": None, "thinkingBudget": None, "thinkingLevel": None},
    "schema": {  # Google's OpenAPI-style Schema: `properties` maps names (kept as written) to schemas
        "properties": "schemas",
        "items": "schema",
        "anyOf": "schema",
        "propertyOrdering": None,
        "maxItems": None,
        "minItems": None,
        "maxLength": None,
        "minLength": None,
        "maxProperties": None,
        "minProperties": None,
    },
}


def json_names(body: Any, kind: str = "request") -> Any:
    """The request with every field semula knows named as Google's JSON names it (lowerCamelCase),
    whichever way the client wrote it; a field written both ways is a 400, as Google's parser says.
    A request without a key holding `_` is itself (the SDKs write every field that way)."""
    if kind == "request" and isinstance(body, dict) and not _underscored(body):
        return body
    return _json_names(body, kind)


# A key holding `_` in orjson's JSON: a key is the only string followed by `:`, and a `"` inside a
# string is written `\"`, so `[^"\\]*` stays within one string.
_UNDERSCORED_KEY = re.compile(rb'_[^"\\]*":')


def _underscored(body: dict[str, Any]) -> bool:
    """Whether a key of `body`, at any depth, may hold `_` (so may be a snake_case field name): a
    search of its JSON as orjson writes it, ~1/30 of a walk over 100,000 contents (issue #49: a
    Gemini request at the caps); True when orjson cannot write it."""
    try:
        data = orjson.dumps(body)
    except TypeError:  # orjson.JSONEncodeError: a lone surrogate, an integer past 64 bits
        return True
    return _UNDERSCORED_KEY.search(data) is not None


def _json_names(body: Any, kind: str) -> Any:
    if isinstance(body, list):
        return [_json_names(item, kind) for item in body]
    if not isinstance(body, dict):
        return body
    if kind == "schemas":
        return {name: _json_names(schema, "schema") for name, schema in body.items()}
    fields = _FIELDS[kind]
    out: dict[str, Any] = {}
    for key, value in body.items():
        name = _camel(key) if "_" in key else key
        if name != key and name not in fields:
            name = key  # not a field semula knows: kept as written
        if name in out:
            raise BadRequest(
                f'Invalid JSON payload received. Duplicate field "{_snake(name)}" (given as both '
                f"{_snake(name)} and {name}).",
                param=name,
                code=OWN,
            )
        child = fields.get(name)
        out[name] = _json_names(value, child) if child else value
    return out


def _camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m[1].upper(), name)


def bad(message: str, param: str | None = None) -> BadRequest:
    """A 400 as Google words a failed check: `* GenerateContentRequest.<param>: <message>`."""
    text = f"* GenerateContentRequest.{_snake(param)}: {message}" if param else message
    return BadRequest(text, param=param, code=OWN)


def wrong_type(param: str, kind: str, value: Any) -> BadRequest:
    """A 400 for a value of the wrong JSON type, as Google's JSON parser words it."""
    shown = json.dumps(value, ensure_ascii=False)[:80]
    return BadRequest(f"Invalid value at '{_snake(param)}' ({kind}), {shown}", param=param, code=OWN)


def _snake(path: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", lambda m: "_" + m[1].lower(), path)


def check(body: Any, *, counting: bool = False) -> None:
    """Refuse what the API refuses. `counting`: :countTokens, whose body may also be
    `{"generateContentRequest": {...}}` (checked as a generateContent request)."""
    if not isinstance(body, dict):
        raise BadRequest("Invalid JSON payload received. The body must be a JSON object.", code=OWN)
    if counting and isinstance(body.get("generateContentRequest"), dict):
        body = body["generateContentRequest"]
    contents = body.get("contents")
    if contents is None or contents == []:
        if counting:
            return
        raise bad("contents is not specified", "contents")
    if not isinstance(contents, list):
        raise wrong_type("contents", "TYPE_MESSAGE", contents)
    if len(contents) > MAX_ITEMS:  # the caps first (decision 0063)
        raise bad(f"too many contents: {len(contents)}; at most {MAX_ITEMS} in a request", "contents")
    parts = blocks(contents, "parts")
    if parts > MAX_BLOCKS:
        raise bad(f"too many parts: {parts}; at most {MAX_BLOCKS} in a request", "contents")
    for i, content in enumerate(contents):
        if not _text_turn(content):  # most turns: passed without making their paths (issue #49)
            _check_content(content, f"contents[{i}]")
    system = body.get("systemInstruction")
    if system is not None:
        _check_content(system, "systemInstruction", system=True)
    toolsets.checked("gemini.generate_content", body.get("tools"), _check_tools)  # once per tool set
    _check_tool_config(body.get("toolConfig"))
    _check_generation(body.get("generationConfig"))


_TURN_ROLES = (None, "", *ROLES)


def _text_turn(content: Any) -> bool:
    """Whether a turn is one _check_content() passes holding text parts only (checked here without
    the paths its errors would name)."""
    if type(content) is not dict or content.get("role") not in _TURN_ROLES:
        return False
    parts = content.get("parts")
    if type(parts) is not list or not parts:
        return False
    for part in parts:
        if type(part) is not dict or type(part.get("text")) is not str:
            return False
        if len(part) > 1 and any(part.get(name) is not None for name in PART_DATA[1:]):
            return False
    return True


def _check_content(content: Any, where: str, *, system: bool = False) -> None:
    if not isinstance(content, dict):
        raise wrong_type(where, "TYPE_MESSAGE", content)
    role = content.get("role")
    if role not in (None, "", *ROLES) and not system:
        raise BadRequest("Please use a valid role: user, model.", param=f"{where}.role", code=OWN)
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        if parts is not None and not isinstance(parts, list):
            raise wrong_type(f"{where}.parts", "TYPE_MESSAGE", parts)
        raise bad("contents.parts must not be empty.", f"{where}.parts")
    for j, part in enumerate(parts):
        _check_part(part, f"{where}.parts[{j}]")


def _check_part(part: Any, where: str) -> None:
    if not isinstance(part, dict):
        raise wrong_type(where, "TYPE_MESSAGE", part)
    held = [name for name in PART_DATA if part.get(name) is not None]
    if not held:
        raise bad("required oneof field 'data' must have one initialized field", f"{where}.data")
    if len(held) > 1:
        raise BadRequest(
            f"Invalid JSON payload received. Oneof field 'data' is already set. Cannot set '{held[1]}'",
            param=f"{where}.{held[1]}",
            code=OWN,
        )
    kind, value = held[0], part[held[0]]
    if kind == "text":
        if not isinstance(value, str):
            raise wrong_type(f"{where}.text", "TYPE_STRING", value)
        return
    if not isinstance(value, dict):
        raise wrong_type(f"{where}.{kind}", "TYPE_MESSAGE", value)
    if kind == "inlineData":
        for key in ("mimeType", "data"):
            if not isinstance(value.get(key), str):
                raise bad(f"{key} is required and is a string", f"{where}.inlineData.{key}")
    elif kind in ("functionCall", "functionResponse"):
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise bad("Name cannot be empty.", f"{where}.{kind}.name")
        field = "args" if kind == "functionCall" else "response"
        if value.get(field) is not None and not isinstance(value[field], dict):
            raise wrong_type(f"{where}.{kind}.{field}", "TYPE_MESSAGE", value[field])


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise wrong_type("tools", "TYPE_MESSAGE", tools)
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise wrong_type(f"tools[{i}]", "TYPE_MESSAGE", tool)
        declarations = tool.get("functionDeclarations")
        if declarations is None:
            continue
        if not isinstance(declarations, list):
            raise wrong_type(f"tools[{i}].functionDeclarations", "TYPE_MESSAGE", declarations)
        for j, declaration in enumerate(declarations):
            where = f"tools[{i}].functionDeclarations[{j}]"
            if not isinstance(declaration, dict):
                raise wrong_type(where, "TYPE_MESSAGE", declaration)
            name = declaration.get("name")
            if not isinstance(name, str) or not name:
                raise bad("Name cannot be empty.", f"{where}.name")
            if not FUNCTION_NAME.match(name):
                raise bad(
                    "Invalid function name. Must start with a letter or an underscore. Must be alphameric "
                    "(a-z, A-Z, 0-9), underscores (_), dots (.), colons (:), or dashes (-), with a "
                    "maximum length of 128.",
                    f"{where}.name",
                )
            if (
                declaration.get("parameters") is not None
                and declaration.get("parametersJsonSchema") is not None
            ):
                raise bad(
                    "parameters and parameters_json_schema are mutually exclusive", f"{where}.parameters"
                )
            for key in ("parameters", "parametersJsonSchema", "response", "responseJsonSchema"):
                if declaration.get(key) is not None and not isinstance(declaration[key], dict):
                    raise wrong_type(f"{where}.{key}", "TYPE_MESSAGE", declaration[key])


def _check_tool_config(config: Any) -> None:
    if config is None:
        return
    if not isinstance(config, dict):
        raise wrong_type("toolConfig", "TYPE_MESSAGE", config)
    calling = config.get("functionCallingConfig")
    if calling is None:
        return
    if not isinstance(calling, dict):
        raise wrong_type("toolConfig.functionCallingConfig", "TYPE_MESSAGE", calling)
    mode = calling.get("mode")
    if mode is not None and mode not in CALLING_MODES:
        raise wrong_type("toolConfig.functionCallingConfig.mode", "TYPE_ENUM", mode)
    names = calling.get("allowedFunctionNames")
    if names is not None:
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            raise wrong_type("toolConfig.functionCallingConfig.allowedFunctionNames", "TYPE_STRING", names)
        if names and mode not in ("ANY", "VALIDATED"):
            raise bad(
                "allowed_function_names can only be set when the mode is ANY or VALIDATED.",
                "toolConfig.functionCallingConfig.allowedFunctionNames",
            )


def _check_generation(config: Any) -> None:
    if config is None:
        return
    where = "generationConfig"
    if not isinstance(config, dict):
        raise wrong_type(where, "TYPE_MESSAGE", config)
    for name, low, high in (("temperature", 0, 2), ("topP", 0, 1)):
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise wrong_type(f"{where}.{name}", "TYPE_FLOAT", value)
        if not low <= value <= high:
            raise bad(f"{name} must be in the range [{low}, {high}]", f"{where}.{name}")
    for name, low in (("topK", 1), ("candidateCount", 1), ("maxOutputTokens", 1)):
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong_type(f"{where}.{name}", "TYPE_INT32", value)
        if value < low:
            raise bad(f"{name} must be at least {low}", f"{where}.{name}")
    stops = config.get("stopSequences")
    if stops is not None and not (isinstance(stops, list) and all(isinstance(s, str) for s in stops)):
        raise wrong_type(f"{where}.stopSequences", "TYPE_STRING", stops)
    mime = config.get("responseMimeType")
    if mime is not None and mime not in MIME_TYPES:
        raise bad(
            f"response_mime_type: allowed mimetypes are {', '.join(f'`{m}`' for m in MIME_TYPES)}.",
            f"{where}.responseMimeType",
        )
    schema, json_schema = config.get("responseSchema"), config.get("responseJsonSchema")
    if schema is not None and json_schema is not None:
        raise bad(
            "response_schema and response_json_schema are mutually exclusive", f"{where}.responseSchema"
        )
    if schema is not None or json_schema is not None:
        key = "responseSchema" if schema is not None else "responseJsonSchema"
        if not isinstance(config[key], dict):
            raise wrong_type(f"{where}.{key}", "TYPE_MESSAGE", config[key])
        if mime not in SCHEMA_MIME_TYPES:
            raise bad(
                f"response_mime_type must be one of {list(SCHEMA_MIME_TYPES)} when {_snake(key)} is set.",
                f"{where}.responseMimeType",
            )
    thinking = config.get("thinkingConfig")
    if thinking is not None:
        if not isinstance(thinking, dict):
            raise wrong_type(f"{where}.thinkingConfig", "TYPE_MESSAGE", thinking)
        budget = thinking.get("thinkingBudget")
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
            raise wrong_type(f"{where}.thinkingConfig.thinkingBudget", "TYPE_INT32", budget)
        include = thinking.get("includeThoughts")
        if include is not None and not isinstance(include, bool):
            raise wrong_type(f"{where}.thinkingConfig.includeThoughts", "TYPE_BOOL", include)

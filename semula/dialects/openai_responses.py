"""The OpenAI Responses API (`POST /v1/responses`, `GET /v1/responses/{id}`).

A Responses request becomes the common conversation view (instructions as a system message, input
items as messages, `function_call` items as assistant tool calls, `function_call_output` items as
tool messages, flat function tools as chat tools, `text.format` as `response_format`), answers are
validated against that view, and a validated answer is rendered as a `response` object. Recorded
responses keep their `id` on every replay (a follow-up names it in `previous_response_id`); only
`created_at` is stamped afresh.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import secrets
import time
from collections.abc import Iterator
from typing import Any

from semula.core import answers, jsonio, stream, templates, toolsets
from semula.core.chat_requests import MAX_TOOLS, check_length
from semula.core.errors import BadRequest, InvalidAnswer, SemulaError
from semula.core.limits import MAX_BLOCKS, MAX_ITEMS, blocks
from semula.dialects import RESPONSES, Dialect, Request, typed_sse
from semula.dialects.routes import Handler, Route, Served, Socket

STORED = r"/v1/responses/(?P<id>[A-Za-z0-9_.:-]{1,200})"  # a recorded response's path

NAME = RESPONSES
ROLES = ("assistant", "system", "developer", "user")
PART_TYPES = ("input_text", "input_image", "input_file", "input_audio", "output_text", "refusal")
TEXT_FORMATS = ("text", "json_object", "json_schema")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}\Z")
TRANSPORT = frozenset(
    {
        "stream",
        "stream_options",
        "store",
        "user",
        "metadata",
        "service_tier",
        "prompt_cache_key",
        "safety_identifier",
        "background",
        "client_metadata",  # a client's own session and turn ids (Codex)
    }
)
# Input and output items that only a provider's own tools produce; an answerer cannot make them up.
_BUILTIN_CALLS = ("web_search_call", "file_search_call", "code_interpreter_call", "computer_call", "mcp_call")


def _id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(24)}"


def _bad(message: str, param: str, code: str | None = "invalid_value") -> BadRequest:
    return BadRequest(message, param=param, code=code)


# The JSON types of the create parameters an answer does not depend on the shape of, as the API
# checks them (null is each one's default). Item and tool types are not closed lists here: the API
# adds new ones, and semula records what it does not know as sent.
_NUMBER, _INTEGER = "a number", "an integer"
PARAMETER_TYPES: dict[str, tuple[str, ...]] = {
    "tool_choice": ("a string", "an object"),
    "reasoning": ("an object",),
    "include": ("an array",),
    "truncation": ("a string",),
    "parallel_tool_calls": ("a boolean",),
    "max_output_tokens": (_INTEGER,),
    "max_tool_calls": (_INTEGER,),
    "top_logprobs": (_INTEGER,),
    "temperature": (_NUMBER,),
    "top_p": (_NUMBER,),
    "store": ("a boolean",),
    "background": ("a boolean",),
    "metadata": ("an object",),
    "user": ("a string",),
    "service_tier": ("a string",),
    "prompt_cache_key": ("a string",),
    "safety_identifier": ("a string",),
}
CHOICES = {"tool_choice": ("none", "auto", "required"), "truncation": ("auto", "disabled")}


def _has_own_id(item: Any) -> bool:
    return isinstance(item, dict) and "id" in item and item.get("type") != "item_reference"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return _INTEGER
    if isinstance(value, float):
        return _NUMBER
    return {str: "a string", dict: "an object", list: "an array"}.get(type(value), "a value")


def _check_parameters(body: dict[str, Any]) -> None:
    for name, allowed in PARAMETER_TYPES.items():
        value = body.get(name)
        if value is None:
            continue
        kind = _kind(value)
        if kind not in allowed and not (kind == _INTEGER and _NUMBER in allowed):
            expected = " or ".join(allowed)
            message = f"Invalid type for '{name}': expected {expected}, but got {kind} instead."
            raise _bad(message, name, "invalid_type")
        if isinstance(value, str) and name in CHOICES and value not in CHOICES[name]:
            listed = ", ".join(f"'{choice}'" for choice in CHOICES[name])
            raise _bad(f"Invalid value: '{value[:80]}'. Supported values are: {listed}.", name)
    for i, included in enumerate(body.get("include") or ()):
        if not isinstance(included, str):
            raise _bad(
                f"Invalid type for 'include[{i}]': expected a string, but got {_kind(included)} instead.",
                f"include[{i}]",
                "invalid_type",
            )


def _stored_response(served: Served) -> dict[str, Any]:
    """GET /v1/responses/{id}: a recorded response as it was recorded. DELETE is acknowledged, but the
    recording stays (an app's clean-up must not delete what its next replay needs)."""
    _, response, chunks = served.recorded(served.values[0])
    if served.method == "DELETE":
        return {"id": served.values[0], "object": "response", "deleted": True}
    return served.dialect.common_response(response, chunks)


def _stored_input_items(served: Served) -> dict[str, Any]:
    """GET /v1/responses/{id}/input_items: the input items of a recorded response's request."""
    request, _, _ = served.recorded(served.values[0])
    items = served.dialect.input_items(request)
    return {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }


class _Socket(Socket):
    def error_event(self, exc: SemulaError, dialect: Dialect) -> dict[str, Any]:
        """The Responses WebSocket's error event: the HTTP error's status and the API's error object,
        with the headers the HTTP error would carry (a 429's Retry-After and rate-limits), as the
        event's `error.headers` has them (the openai SDK's ResponseWsError)."""
        error = dialect.error_body(exc)["error"]
        headers = {name.lower(): value for name, value in exc.headers if name.lower() != "connection"}
        if headers:  # the connection's own header is the HTTP response's, not the error's
            error = {**error, "headers": headers}
        return {"type": "error", "status": exc.status, "error": error}


# The socket mode as the openai SDKs' `client.responses.connect()` and Codex use it (decision 0056): a
# `response.create` event is a call, with the body of POST /v1/responses; the lane the SDKs may name
# (`stream_id`) is echoed on the turn's events; Codex acknowledges each response it has handled with
# `response.processed`, which the API answers with nothing (Codex would take an error event for the
# failure of its next turn); a background response is no stream, so no turn.
SOCKET = _Socket("response.create", lane="stream_id", quiet=("response.processed",), refused=("background",))


class OpenAIResponses(Dialect):
    name = NAME
    title = "Responses"
    routes = (
        Route("/v1/responses", "/v1/responses", websocket=SOCKET),  # decision 0056
        Route(STORED, "/v1/responses/{id}", Handler(("GET", "DELETE"), _stored_response)),
        Route(
            STORED + "/input_items", "/v1/responses/{id}/input_items", Handler(("GET",), _stored_input_items)
        ),
    )
    summary = "POST /v1/responses and GET /v1/responses/{id}"
    stamped = ("created_at",)
    upstream_path = "/responses"
    transport_fields = TRANSPORT

    def steady(self, body: Any) -> Any:
        """Without the ids a client gives the input items it sends (Codex: msg_<uuid>, fco_<uuid>, new on
        every run). An item_reference is its id, so it keeps it (decision 0059)."""
        items = body.get("input") if isinstance(body, dict) else None
        if not isinstance(items, list) or not any(_has_own_id(item) for item in items):
            return body
        steady = [
            {key: value for key, value in item.items() if key != "id"} if _has_own_id(item) else item
            for item in items
        ]
        return {**body, "input": steady}

    # Requests

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _bad("Missing required parameter: 'model'.", "model", "missing_required_parameter")
        if body.get("conversation") is not None:
            raise _bad(
                "semula does not support the Conversations API (conversation); send the earlier turns "
                "in input, or continue a recorded response with previous_response_id.",
                "conversation",
                "unsupported_parameter",
            )
        items = body.get("input")
        if items is None and not body.get("previous_response_id"):
            raise _bad("Missing required parameter: 'input'.", "input", "missing_required_parameter")
        if isinstance(items, list):
            check_length("input", items, MAX_ITEMS)  # the caps first (decision 0063)
            parts = blocks(items, "content")
            if parts > MAX_BLOCKS:
                raise _bad(
                    f"Invalid 'input': too many content parts: {parts}; at most {MAX_BLOCKS} in a request.",
                    "input",
                    "array_above_max_length",
                )
            for i, item in enumerate(items):
                _check_item(item, f"input[{i}]")
        elif items is not None and not isinstance(items, str):
            raise _bad("input must be a string or an array of input items.", "input", "invalid_type")
        if body.get("instructions") is not None and not isinstance(body["instructions"], str):
            raise _bad("instructions must be a string.", "instructions", "invalid_type")
        toolsets.checked("openai.responses", body.get("tools"), _check_tools)  # once per tool set
        _check_text(body.get("text"))
        _check_parameters(body)
        if body.get("previous_response_id") is not None and not isinstance(body["previous_response_id"], str):
            raise _bad("previous_response_id must be a string.", "previous_response_id", "invalid_type")
        if "stream" in body and body["stream"] is not None and not isinstance(body["stream"], bool):
            raise _bad("stream must be a boolean.", "stream", "invalid_type")
        return Request(model, body.get("stream") is True)

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        if isinstance(request.get("instructions"), str):
            yield request, "instructions"
        items = request.get("input")
        if isinstance(items, str):
            yield request, "input"
            return
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            # A message's content, or a tool's output (function_call_output, custom_tool_call_output):
            # a string, or parts whose text is input_text or output_text.
            key = "output" if str(item.get("type", "")).endswith("_call_output") else "content"
            content = item.get(key)
            if isinstance(content, str):
                yield item, key
            elif isinstance(content, list):
                for part in content:
                    if (
                        isinstance(part, dict)
                        and part.get("type") in ("input_text", "output_text")
                        and isinstance(part.get("text"), str)
                    ):
                        yield part, "text"

    def previous(self, request: dict[str, Any]) -> str | None:
        previous = request.get("previous_response_id")
        return previous if isinstance(previous, str) and previous else None

    # The conversation view

    def conversation(self, request, history=()):
        messages: list[dict[str, Any]] = []
        if isinstance(request.get("instructions"), str) and request["instructions"]:
            messages.append({"role": "system", "content": request["instructions"]})
        for earlier_request, earlier_response in history:
            messages.extend(_input_messages(earlier_request.get("input")))
            messages.extend(_output_messages(earlier_response))
        messages.extend(_input_messages(request.get("input")))
        view: dict[str, Any] = {"model": request.get("model"), "messages": messages}
        tools, builtin = [], []
        for tool in offered_tools(request):
            if tool.get("type") == "function":
                function = {"name": tool.get("name"), "parameters": tool.get("parameters")}
                if tool.get("description") is not None:
                    function["description"] = tool["description"]
                if tool.get("strict") is not None:
                    function["strict"] = tool["strict"]
                tools.append({"type": "function", "function": function})
            elif tool.get("type") == "custom":
                tools.append({"type": "function", "function": _custom_view(tool)})
            else:
                builtin.append(str(tool.get("type")))
        if tools:
            view["tools"] = tools
        choice = request.get("tool_choice")
        if isinstance(choice, str):
            view["tool_choice"] = choice
        elif isinstance(choice, dict) and choice.get("type") == "function":
            view["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        if request.get("parallel_tool_calls") is not None:
            view["parallel_tool_calls"] = request["parallel_tool_calls"]
        response_format = _response_format(request.get("text"))
        if response_format is not None:
            view["response_format"] = response_format
        if builtin:
            view["notes"] = [
                f"The request offers built-in tools ({', '.join(builtin)}). An answer can only be text "
                "or a function call; results of built-in tools come only from a provider (record-through)."
            ]
        return view

    # Answers

    def respond(self, completion, request, *, response_id=None):
        message = completion["choices"][0]["message"]
        output: list[dict[str, Any]] = []
        parts: list[dict[str, Any]] = []
        if message.get("content") is not None:
            parts.append(
                {"type": "output_text", "text": message["content"], "annotations": [], "logprobs": []}
            )
        if message.get("refusal"):
            parts.append({"type": "refusal", "refusal": message["refusal"]})
        if parts:
            output.append(
                {
                    "id": _id("msg"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": parts,
                }
            )
        custom = {tool.get("name") for tool in offered_tools(request) if tool.get("type") == "custom"}
        for call in message.get("tool_calls") or []:
            name = call["function"]["name"]
            if name in custom:
                # A custom tool takes free text: the view offered it as one string argument, `input`.
                text = json.loads(call["function"]["arguments"]).get("input", "")
                output.append(
                    {
                        "id": _id("ctc"),
                        "type": "custom_tool_call",
                        "status": "completed",
                        "call_id": call["id"],
                        "name": name,
                        "input": text,
                    }
                )
                continue
            output.append(
                {
                    "id": _id("fc"),
                    "type": "function_call",
                    "status": "completed",
                    "arguments": call["function"]["arguments"],
                    "call_id": call["id"],
                    "name": name,
                }
            )
        usage = completion.get("usage") or {}
        prompt, produced = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
        return envelope(
            request,
            response_id or _id("resp"),
            output,
            {
                "input_tokens": prompt,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": produced,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage.get("total_tokens", prompt + produced),
            },
        )

    def common(self, response, chunks):
        if not response.get("output") and chunks:
            response = final_response(chunks) or response
        texts, refusals, calls = [], [], []
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                for part in item.get("content") or []:
                    if isinstance(part, dict) and part.get("type") == "output_text":
                        texts.append(str(part.get("text") or ""))
                    elif isinstance(part, dict) and part.get("type") == "refusal":
                        refusals.append(str(part.get("refusal") or ""))
            elif item.get("type") in ("function_call", "custom_tool_call"):
                calls.append(_call_view(item))
        message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
        if refusals:
            message["refusal"] = "".join(refusals)
        if calls:
            message["tool_calls"] = calls
        usage = response.get("usage") or {}
        prompt, produced = int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)
        incomplete = response.get("status") == "incomplete"
        return {
            "object": "chat.completion",
            "model": response.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if calls else "length" if incomplete else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": produced,
                "total_tokens": prompt + produced,
            },
        }

    def pasted(self, payload):
        return isinstance(payload, dict) and ("output" in payload or payload.get("object") == "response")

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict) and chunks:
            response = final_response(chunks)
        if not isinstance(response, dict) or not isinstance(response.get("output"), list):
            raise InvalidAnswer("a response has an output list", param="output")
        if response.get("object") != "response":
            response = envelope(
                request, response.get("id") or _id("resp"), response["output"], response.get("usage")
            )
        elif not isinstance(response.get("id"), str) or not response["id"]:
            response = {**response, "id": _id("resp")}
        answers.validate_against_request(self.common(response, None), view)
        return response, chunks

    def common_response(
        self, response: dict[str, Any], chunks: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """A stored response as recorded (from its final event when only the stream was kept)."""
        if not response.get("output") and chunks:
            return final_response(chunks) or response
        return response

    def input_items(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """The request's input as the API lists it: items with ids, newest first."""
        items = request.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        listed = []
        for number, item in enumerate(items if isinstance(items, list) else []):
            if not isinstance(item, dict):
                continue
            item = {"type": "message", **item}
            if isinstance(item.get("content"), str) and item["type"] == "message":
                kind = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": kind, "text": item["content"]}]
            if not item.get("id"):
                digest = hashlib.sha256(json.dumps(item, sort_keys=True).encode("utf-8", "surrogatepass"))
                item["id"] = (
                    f"{'msg' if item['type'] == 'message' else 'item'}_{number}{digest.hexdigest()[:24]}"
                )
            listed.append(item)
        return listed[::-1]

    def response_id(self, response):
        rid = response.get("id")
        return rid if isinstance(rid, str) else None

    def usage(self, response):
        usage = response.get("usage") or {}
        return int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0)

    # Responses and streams

    def render(self, req, response, chunks, expand, now):
        if not response.get("output") and chunks:
            response = final_response(chunks) or response
        if expand:
            response = _expand(response, req.model, now)
            chunks = None  # templates are expanded in the response; its events are made from it
        if not req.stream:
            return self.restamp(response, req, now), None
        events = chunks if chunks else synthesize_events(response)
        if not req.fresh:
            return None, events  # restamp `recorded`: the events' own created_at
        return None, [_restamp_event(event, int(now)) for event in events]

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """The recorded id always (follow-ups name it); `created_at` of this reply, or with restamp
        `recorded` the one recorded (when it has one)."""
        if not req.fresh and isinstance(body.get("created_at"), int):
            return body
        return {**body, "created_at": int(now)}

    def keeps_json(self, req: Request, recorded: dict[str, Any]) -> bool:
        # With restamp `recorded`, a response without a created_at of its own gets this reply's each render.
        return req.fresh or isinstance(recorded.get("created_at"), int)

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        return typed_sse(events)

    def stamps(self, body: dict[str, Any]) -> dict[str, Any]:
        # A stream is kept with its first event (response.created), whose response holds the stamp.
        response = body.get("response") if body.get("type") == "response.created" else body
        return super().stamps(response) if isinstance(response, dict) else {}

    def keeps_stream(self, req: Request) -> bool:
        # render() stamps every event's response with the reply's created_at (with restamp
        # `recorded`, nothing), nothing else.
        return True

    def stream_stamps(self, first: dict[str, Any], data: bytes) -> dict[str, Any]:
        """The stamp, and where each of its values starts in `data` (AT): a reply puts its own
        there without searching 17 KB twice (a sixth of a kept WebSocket turn's CPU in process)."""
        stamps = self.stamps(first)
        if not isinstance(stamps.get("created_at"), int):
            return stamps
        key, value = b'"created_at":', jsonio.compact(stamps["created_at"])
        found, at = [], data.find(key + value)
        while at != -1:
            end = at + len(key) + len(value)
            if data[end : end + 1] in (b",", b"}"):  # the whole number, not the start of a longer one
                found.append(at + len(key))
            at = data.find(key + value, end)
        return {**stamps, AT: found}

    def restamp_sse(self, data: bytes, first: dict[str, Any], req: Request, now: float) -> bytes:
        """The events' responses carry the reply's `created_at` (render()): each is replaced.

        Inside a JSON string a quote is escaped, so `"created_at":` is always a key; the events'
        responses are the only objects the API stamps with it. A stream without one is sent as kept.
        """
        if "created_at" not in first or not req.fresh:
            return data
        old, new = jsonio.compact(first["created_at"]), b"%d" % int(now)
        where = first.get(AT)
        if where is not None:  # kept with where its values are (stream_stamps): spliced in
            pieces, last = [], 0
            for at in where:
                pieces += (data[last:at], new)
                last = at + len(old)
            pieces.append(data[last:])
            return b"".join(pieces)
        old, new = b'"created_at":' + old, b'"created_at":' + new
        return data.replace(old + b",", new + b",").replace(old + b"}", new + b"}")

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return body

    def stream_error(self, exc: Any, req: Request) -> bytes:
        error = exc.to_dict()["error"]
        event = {"type": "error", "code": error["code"], "message": error["message"], "param": error["param"]}
        return self.sse([event]).__next__()

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        response = final_response(events)
        if response is None:
            raise ValueError("the stream ended without response.completed")
        return response, events


def envelope(
    request: dict[str, Any], response_id: str, output: list[dict[str, Any]], usage: Any
) -> dict[str, Any]:
    """A `response` object around `output`, echoing the request's settings as the API does."""
    text = request.get("text") if isinstance(request.get("text"), dict) else {}
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "background": False,
        "error": None,
        "incomplete_details": None,
        "instructions": request.get("instructions"),
        "max_output_tokens": request.get("max_output_tokens"),
        "max_tool_calls": request.get("max_tool_calls"),
        "model": request.get("model"),
        "output": output,
        "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "previous_response_id": request.get("previous_response_id"),
        "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
        "service_tier": request.get("service_tier") or "default",
        "store": request.get("store", True),
        "temperature": request.get("temperature", 1.0),
        "text": {"format": {"type": "text"}, "verbosity": "medium", **text},
        "tool_choice": request.get("tool_choice", "auto"),
        "tools": [_echoed_tool(tool) for tool in request.get("tools") or []],
        "top_logprobs": request.get("top_logprobs", 0),
        "top_p": request.get("top_p", 1.0),
        "truncation": request.get("truncation", "disabled"),
        "usage": usage,
        "metadata": request.get("metadata") or {},
    } | ({"user": request["user"]} if isinstance(request.get("user"), str) else {})


def _echoed_tool(tool: Any) -> Any:
    """A function tool as the API echoes it: with its description (or null) and strict (default on)."""
    if isinstance(tool, dict) and tool.get("type") == "function":
        return {"description": None, "strict": True, **tool}
    return tool


def final_response(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The response a stream of events ends with (response.completed, .incomplete or .failed)."""
    for event in reversed(events):
        if isinstance(event, dict) and event.get("type") in (
            "response.completed",
            "response.incomplete",
            "response.failed",
        ):
            response = event.get("response")
            return response if isinstance(response, dict) else None
    return None


# The output items whose text streams in pieces: the member that holds it, and its events' prefix.
STREAMED_CALLS = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}


def synthesize_events(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The typed events the API would have streamed for this response, numbered from 0."""
    numbers = itertools.count()
    events: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        events.append({"type": kind, "sequence_number": next(numbers), **fields})

    opening = {k: v for k, v in response.items() if k != "usage"} | {"status": "in_progress", "output": []}
    emit("response.created", response=opening)
    emit("response.in_progress", response=opening)
    for index, item in enumerate(response.get("output") or []):
        kind = item.get("type")
        if kind == "message":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            for number, part in enumerate(item.get("content") or []):
                _emit_part(emit, item["id"], index, number, part)
        elif kind in STREAMED_CALLS:
            field, prefix = STREAMED_CALLS[kind]
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", field: ""},
            )
            text = item.get(field) or ""
            for piece in stream.pieces(text, words=False):
                emit(f"{prefix}.delta", item_id=item.get("id"), output_index=index, delta=piece)
            named = {"name": item.get("name")} if kind == "function_call" else {}
            emit(f"{prefix}.done", item_id=item.get("id"), output_index=index, **named, **{field: text})
        else:
            emit("response.output_item.added", output_index=index, item=item)
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=response)
    return events


def _emit_part(emit: Any, item_id: str, index: int, number: int, part: dict[str, Any]) -> None:
    where = {"item_id": item_id, "output_index": index, "content_index": number}
    if part.get("type") == "output_text":
        text = part.get("text") or ""
        emit("response.content_part.added", **where, part={**part, "text": "", "annotations": []})
        for piece in stream.pieces(text, words=True):
            emit("response.output_text.delta", **where, delta=piece, logprobs=[])
        emit("response.output_text.done", **where, text=text, logprobs=[])
    elif part.get("type") == "refusal":
        refusal = part.get("refusal") or ""
        emit("response.content_part.added", **where, part={**part, "refusal": ""})
        emit("response.refusal.delta", **where, delta=refusal)
        emit("response.refusal.done", **where, refusal=refusal)
    else:
        emit("response.content_part.added", **where, part=part)
    emit("response.content_part.done", **where, part=part)


AT = "created_at at"  # stream_stamps(): where the kept bytes hold the stamp's values


def _restamp_event(event: dict[str, Any], created_at: int) -> dict[str, Any]:
    response = event.get("response")
    if isinstance(response, dict) and "created_at" in response:
        return {**event, "response": {**response, "created_at": created_at}}
    return event


def _expand(response: dict[str, Any], model: str, now: float) -> dict[str, Any]:
    output = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            item = {**item, "content": templates.expand(item.get("content"), model, now)}
        elif isinstance(item, dict) and item.get("type") == "function_call":
            item = {
                **item,
                "arguments": templates.expand_json_text(str(item.get("arguments") or ""), model, now),
            }
        output.append(item)
    return {**response, "output": output}


def _check_item(item: Any, param: str) -> None:
    if not isinstance(item, dict):
        raise _bad("An input item must be an object.", param, "invalid_type")
    kind = item.get("type", "message")
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise _bad(
                f"Invalid value: {role!r}. Supported values are: "
                "'assistant', 'system', 'developer', and 'user'.",
                f"{param}.role",
            )
        content = item.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or part.get("type") not in PART_TYPES:
                    found = part.get("type") if isinstance(part, dict) else part
                    raise _bad(
                        f"Invalid value: {found!r}. Supported values are: {', '.join(PART_TYPES)}.",
                        f"{param}.content[{j}].type",
                    )
        elif not isinstance(content, str):
            raise _bad(
                "content must be a string or an array of content parts.", f"{param}.content", "invalid_type"
            )
    elif kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise _bad(
                    f"Missing required parameter: '{param}.{key}'.",
                    f"{param}.{key}",
                    "missing_required_parameter",
                )
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise _bad(
                f"Missing required parameter: '{param}.call_id'.",
                f"{param}.call_id",
                "missing_required_parameter",
            )
        if not isinstance(item.get("output"), str | list):
            raise _bad("output must be a string or an array.", f"{param}.output", "invalid_type")


def _check_tools(tools: Any) -> None:
    if tools is None:
        return
    if not isinstance(tools, list):
        raise _bad("tools must be an array.", "tools", "invalid_type")
    check_length("tools", tools, MAX_TOOLS)
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or not isinstance(tool.get("type"), str):
            raise _bad("A tool must be an object with a type.", f"tools[{i}]", "invalid_type")
        if tool["type"] != "function":
            continue
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.match(name):
            raise _bad(
                f"Invalid 'tools[{i}].name': string does not match pattern. Expected a string that matches "
                "the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters.",
                f"tools[{i}].name",
            )
        if tool.get("parameters") is not None and not isinstance(tool["parameters"], dict):
            raise _bad("parameters must be a JSON Schema object.", f"tools[{i}].parameters", "invalid_type")


def _check_text(text: Any) -> None:
    if text is None:
        return
    if not isinstance(text, dict):
        raise _bad("text must be an object.", "text", "invalid_type")
    form = text.get("format")
    if form is None:
        return
    if not isinstance(form, dict) or form.get("type") not in TEXT_FORMATS:
        found = form.get("type") if isinstance(form, dict) else form
        raise _bad(
            f"Invalid value: {found!r}. Supported values are: 'text', 'json_object', and 'json_schema'.",
            "text.format.type",
        )
    if form["type"] == "json_schema":
        if not isinstance(form.get("name"), str) or not form["name"]:
            raise _bad(
                "Missing required parameter: 'text.format.name'.",
                "text.format.name",
                "missing_required_parameter",
            )
        if not isinstance(form.get("schema"), dict):
            raise _bad(
                "Missing required parameter: 'text.format.schema'.",
                "text.format.schema",
                "missing_required_parameter",
            )


def _response_format(text: Any) -> dict[str, Any] | None:
    form = text.get("format") if isinstance(text, dict) else None
    if not isinstance(form, dict):
        return None
    if form.get("type") == "json_object":
        return {"type": "json_object"}
    if form.get("type") == "json_schema":
        spec = {"name": form.get("name"), "schema": form.get("schema")}
        if form.get("strict") is not None:
            spec["strict"] = form["strict"]
        return {"type": "json_schema", "json_schema": spec}
    return None


def _part_view(part: Any) -> dict[str, Any]:
    kind = part.get("type") if isinstance(part, dict) else None
    if kind in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind == "refusal":
        return {"type": "text", "text": part.get("refusal", "")}
    if kind == "input_image":
        url = part.get("image_url") or (f"file:{part['file_id']}" if part.get("file_id") else "")
        return {"type": "image_url", "image_url": {"url": url, "detail": part.get("detail", "auto")}}
    if kind == "input_file":
        name = part.get("filename") or part.get("file_id") or part.get("file_url") or "file"
        return {"type": "text", "text": f"[file {name}]"}
    return {"type": "text", "text": f"[{kind}]"}


def offered_tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool a request offers, flat: its `tools`, then those of its `additional_tools` input items
    (Codex sends its tools there), each namespace's tools in its place."""
    found: list[Any] = list(request.get("tools") or [])
    items = request.get("input")
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            found.extend(item.get("tools") or [])
    flat: list[dict[str, Any]] = []
    while found:
        tool = found.pop(0)
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            found[:0] = tool.get("tools") or []
        else:
            flat.append(tool)
    return flat


def _custom_view(tool: dict[str, Any]) -> dict[str, Any]:
    """A custom tool (free-text input, maybe a grammar) as the view offers it: a function of one string
    argument, `input`, with the grammar in its description."""
    described = str(tool.get("description") or "")
    form = tool.get("format")
    if isinstance(form, dict) and form.get("type") == "grammar":
        described += f"\n\nThe input follows this {form.get('syntax')} grammar:\n{form.get('definition')}"
    parameters = {
        "type": "object",
        "properties": {"input": {"type": "string", "description": "The tool's input, as free text."}},
        "required": ["input"],
        "additionalProperties": False,
    }
    return {"name": tool.get("name"), "description": described.strip(), "parameters": parameters}


def _call_view(item: dict[str, Any]) -> dict[str, Any]:
    """A function_call or custom_tool_call item as a chat tool call (a custom tool's text as `input`)."""
    if item.get("type") == "custom_tool_call":
        arguments = json.dumps({"input": item.get("input") or ""}, ensure_ascii=False)
    else:
        arguments = item.get("arguments") or "{}"
    return {
        "id": item.get("call_id"),
        "type": "function",
        "function": {"name": item.get("name"), "arguments": arguments},
    }


def _output_text(item: dict[str, Any]) -> str:
    """A tool output item's text: its string, or its text parts joined by lines."""
    output = item.get("output")
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in output
    ):
        return "\n".join(part["text"] for part in output)
    return json.dumps(output, ensure_ascii=False)


def _input_messages(items: Any) -> list[dict[str, Any]]:
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = [_part_view(part) for part in content]
            messages.append({"role": item.get("role"), "content": content})
        elif kind in ("function_call", "custom_tool_call"):
            call = _call_view(item)
            last = messages[-1] if messages else None
            if last is not None and last.get("role") == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": _output_text(item)}
            )
        elif kind in _BUILTIN_CALLS:
            messages.append({"role": "assistant", "content": f"[{kind}]"})
    return messages


def _output_messages(response: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            items.append({"type": "message", "role": "assistant", "content": item.get("content") or []})
        elif isinstance(item, dict):
            items.append(item)
    return _input_messages(items)

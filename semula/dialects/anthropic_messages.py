"""The Anthropic Messages API (`POST /v1/messages`, `POST /v1/messages/count_tokens`).

A Messages request becomes the common conversation view (`system` as a system message, `tool_use`
blocks as assistant tool calls, `tool_result` blocks as tool messages, images and documents as
placeholders, custom tools as function tools, `tool_choice` `any`/`tool` as `required`/a forced
function), answers are validated against that view, and a validated answer is rendered as a
`message` with content blocks. The `anthropic-beta` header is kept in the stored request (it is part
of what the request asks), `cache_control` hints are left out of the fingerprint
(docs/decisions/0031-anthropic-messages.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from semula.core import answers, jsonio, stream, templates
from semula.core.errors import InvalidAnswer, SemulaError
from semula.dialects import (
    ANTHROPIC,
    SPANS,
    Dialect,
    Request,
    answer_of,
    common_answer,
    splice,
    stamp_spans,
    tool_call,
    typed_sse,
)
from semula.dialects.anthropic_checks import HEADER_FIELDS, bad, check
from semula.dialects.routes import COUNT_TOKENS, Route

DEFAULT_VERSION = "2023-06-01"
TRANSPORT = frozenset({"stream", "metadata", "service_tier", "anthropic-version"})
# Anthropic's error type for each status; semula's own statuses (424, 502, ...) fall back by class.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "conflict_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# Tools the provider runs itself: an answerer cannot make their results up.
SERVER_TOOLS = ("web_search", "web_fetch", "code_execution", "tool_search", "mcp")


def message_id() -> str:
    return "msg_01" + secrets.token_hex(12)


def tool_use_id(call_id: str) -> str:
    """The `toolu_…` id for a common answer's call id: the same call id always gives the same one,
    so the app's `tool_result` follow-up quotes it and matches its recording on replay."""
    if call_id.startswith(("toolu_", "srvtoolu_")):
        return call_id
    return "toolu_01" + hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:24]


class AnthropicMessages(Dialect):
    name = ANTHROPIC
    title = "Anthropic Messages"
    routes = (
        Route("/v1/messages", "/v1/messages"),
        Route("/v1/messages/count_tokens", "/v1/messages/count_tokens", COUNT_TOKENS),
    )
    summary = "POST /v1/messages and POST /v1/messages/count_tokens"
    request_id_header = "request-id"  # what the Anthropic SDKs expose as _request_id
    # The Anthropic SDK appends /v1/messages to its base URL itself.
    sdk_env = (("ANTHROPIC_BASE_URL", "{root}"), ("ANTHROPIC_API_KEY", "{key}"))
    stamped = ("id",)
    upstream_model_applies = False  # a project's upstream_model names an OpenAI model
    upstream_path = "/messages"
    transport_fields = TRANSPORT
    dropped_fields = frozenset({"cache_control"})
    answer_headers = ("HTTP_ANTHROPIC_BETA",)

    # Requests

    def api_key(self, environ: Mapping[str, Any]) -> str | None:
        return environ.get("HTTP_X_API_KEY")  # the Anthropic SDKs send their key as x-api-key

    def with_headers(self, body: Any, header: Callable[[str], str | None]) -> Any:
        if not isinstance(body, dict):
            return body
        for name in HEADER_FIELDS:
            if name in body:
                raise bad("Extra inputs are not permitted", name)
        extra: dict[str, Any] = {}
        betas = sorted({b.strip() for b in (header("anthropic-beta") or "").split(",") if b.strip()})
        if betas:
            extra["anthropic-beta"] = betas
        version = (header("anthropic-version") or "").strip()
        if version:
            extra["anthropic-version"] = version
        return {**body, **extra} if extra else body

    def error_body(self, exc: SemulaError) -> dict[str, Any]:
        kind = ERROR_TYPES.get(exc.status) or ("api_error" if exc.status >= 500 else "invalid_request_error")
        # semula's own conditions keep their code, so the reader sees which one it is.
        message = exc.message if exc.code == kind else f"{exc.code}: {exc.message}"
        return {"type": "error", "error": {"type": kind, "message": message}}

    overloaded_status = 529  # Anthropic's overloaded_error, which its SDKs retry

    def rate_limit_headers(self, retry_after: float, now: float) -> tuple[tuple[str, str], ...]:
        reset = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + retry_after))
        return (
            ("anthropic-ratelimit-requests-limit", "60"),
            ("anthropic-ratelimit-requests-remaining", "0"),
            ("anthropic-ratelimit-requests-reset", reset),
        )

    def check(self, body: Any) -> Request:
        check(body)
        return Request(body["model"], body.get("stream") is True)

    def count_tokens(self, body: Any) -> dict[str, Any]:
        """/v1/messages/count_tokens: an estimate (four characters a token), not the provider's count."""
        check(body, counting=True)
        counted = {key: body.get(key) for key in ("system", "messages", "tools") if body.get(key)}
        return {"input_tokens": answers.estimate_tokens(json.dumps(counted, ensure_ascii=False))}

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        if isinstance(request.get("system"), str):
            yield request, "system"
        else:
            yield from _text_blocks(request.get("system"))
        for message in request.get("messages") or ():
            if not isinstance(message, dict):
                continue
            if isinstance(message.get("content"), str):
                yield message, "content"
                continue
            yield from _text_blocks(message.get("content"))
            for block in message.get("content") or ():
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    if isinstance(block.get("content"), str):
                        yield block, "content"
                    else:
                        yield from _text_blocks(block.get("content"))

    # The conversation view

    def conversation(self, request, history=()):
        messages: list[dict[str, Any]] = []
        system = _system_text(request.get("system"))
        if system:
            messages.append({"role": "system", "content": system})
        for message in request.get("messages") or ():
            if isinstance(message, dict):
                messages.extend(_view_messages(message))
        view: dict[str, Any] = {"model": request.get("model"), "messages": messages}
        tools, server = [], []
        for tool in request.get("tools") or ():
            if not isinstance(tool, dict):
                continue
            kind = str(tool.get("type") or "custom")
            if kind.startswith(SERVER_TOOLS):
                server.append(kind)
                continue
            # Anthropic-defined client tools (bash, text_editor, ...) have no schema: any input goes.
            function = {"name": tool.get("name"), "parameters": tool.get("input_schema")}
            if tool.get("description") is not None:
                function["description"] = tool["description"]
            tools.append({"type": "function", "function": function})
        if tools:
            view["tools"] = tools
        choice = request.get("tool_choice")
        if isinstance(choice, dict):
            kind = choice.get("type")
            if kind == "tool":
                view["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
            elif kind in ("auto", "any", "none"):
                view["tool_choice"] = "required" if kind == "any" else kind
            if choice.get("disable_parallel_tool_use") is True:
                view["parallel_tool_calls"] = False
        notes = []
        if server:
            notes.append(
                f"The request offers server tools ({', '.join(server)}). An answer can only be text or a "
                "tool call; results of server tools come only from a provider (record-through)."
            )
        thinking = request.get("thinking")
        if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
            notes.append(
                "The request asks for extended thinking. A text or tool-call answer has no thinking block; "
                "paste a whole Anthropic message to give one."
            )
        if notes:
            view["notes"] = notes
        return view

    # Answers

    def respond(self, completion, request, *, response_id=None):
        finish, text, calls = answer_of(completion)
        content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        for call_id, name, arguments in calls:
            content.append({"type": "tool_use", "id": tool_use_id(call_id), "name": name, "input": arguments})
        usage = completion.get("usage") or {}
        return envelope(
            request,
            content,
            STOP_REASONS.get(finish, "end_turn"),
            {
                "input_tokens": usage.get("prompt_tokens", 0),
                "output_tokens": usage.get("completion_tokens", 0),
            },
            response_id,
        )

    def common(self, response, chunks):
        if not isinstance(response.get("content"), list) and chunks:
            response = assemble(chunks)
        texts, calls = [], []
        for block in response.get("content") or ():
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text") or ""))
            elif block.get("type") == "tool_use":
                calls.append(tool_call(block.get("id"), block.get("name"), block.get("input")))
        finish = FINISH_REASONS.get(response.get("stop_reason"), "tool_calls" if calls else "stop")
        return common_answer(response.get("model"), texts, calls, finish, *self.usage(response))

    def pasted(self, payload):
        return isinstance(payload, dict) and (
            payload.get("type") == "message" or isinstance(payload.get("content"), list)
        )

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict) and chunks:
            response = assemble(chunks)
        if not isinstance(response, dict) or not isinstance(response.get("content"), list):
            raise InvalidAnswer("an Anthropic message has a content list", param="content")
        content = [_checked_block(block, i) for i, block in enumerate(response["content"])]
        has_calls = any(block["type"] == "tool_use" for block in content)
        given_id = response.get("id") if isinstance(response.get("id"), str) and response["id"] else None
        # What the provider (or the paster) sent is kept, its unknown fields too; what is missing is filled.
        response = {
            **envelope(
                request,
                content,
                "tool_use" if has_calls else "end_turn",
                _estimated_usage(request, content),
                given_id,
            ),
            **{key: value for key, value in response.items() if value is not None and key != "id"},
            "type": "message",
            "content": content,
        }
        answers.validate_against_request(self.common(response, None), view)
        return response, chunks

    def usage(self, response):
        usage = response.get("usage") or {}
        # Cache writes and reads are input tokens too (the provider bills all three).
        prompt = sum(
            int(usage.get(key) or 0)
            for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
        )
        return prompt, int(usage.get("output_tokens") or 0)

    # Responses and streams

    def render(self, req, response, chunks, expand, now):
        if not isinstance(response.get("content"), list) and chunks:
            response = assemble(chunks)
        if expand:
            response = {
                **response,
                "content": [_expand_block(b, req.model, now) for b in response["content"]],
            }
            chunks = None  # templates are expanded in the message; its events are made from it
        if not req.stream:
            return self.restamp(response, req, now), None
        events = chunks if chunks else synthesize_events(response)
        start = next((event for event in events if event.get("type") == "message_start"), {})
        if not req.fresh and _recorded_id(start.get("message")):
            return None, events  # restamp `recorded`: the stream's own message id
        fresh = message_id()
        return None, [_restamp_event(event, fresh) for event in events]

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """A fresh `msg_…` id for each reply; with restamp `recorded`, the one recorded (when it has one)."""
        if not req.fresh and _recorded_id(body):
            return body
        return {**body, "id": message_id()}

    def keeps_json(self, req: Request, recorded: dict[str, Any]) -> bool:
        # With restamp `recorded`, a message without an id of its own gets a fresh one each render.
        return req.fresh or _recorded_id(recorded)

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        return typed_sse(events)

    def keeps_stream(self, req: Request) -> bool:
        # render() gives the message_start event's message a fresh id; with restamp `recorded`, a
        # stream keeps its own (or gets a fresh one when it has none): rendered each time.
        return req.fresh

    def stream_stamps(self, first: dict[str, Any], data: bytes) -> dict[str, Any] | None:
        """The message id of the stream's first event (its message_start) and where it is (SPANS);
        None (not kept) when the stream does not start with a message_start holding one there."""
        message = first.get("message") if first.get("type") == "message_start" else None
        if not _recorded_id(message):
            return None
        spans = stamp_spans(data, b'"id":', jsonio.compact(message["id"]))
        event = data.find(b"\n\n")  # the end of the first event: the id must be in it
        if not spans or event == -1 or spans[1] > event:
            return None
        return {"id": message["id"], SPANS: spans[:2]}

    def restamp_sse(self, data: bytes, first: dict[str, Any], req: Request, now: float) -> bytes:
        """The message_start event's message id (render()) replaced by a fresh one."""
        return splice(data, first[SPANS], jsonio.compact(message_id()))

    def stream_error(self, exc: SemulaError, req: Request) -> bytes:
        """The API's own `error` event, which the SDK raises: an event with no name it passes over,
        so the app would see its stream end as if whole."""
        return next(typed_sse([self.error_body(exc)]))

    def upstream(self, settings: Any) -> tuple[str, str | None]:
        return settings.anthropic_url, settings.anthropic_key

    def upstream_headers(self, key: str, body: dict[str, Any]) -> dict[str, str]:
        headers = {
            "x-api-key": key,
            "anthropic-version": str(body.get("anthropic-version") or DEFAULT_VERSION),
            "Content-Type": "application/json",
        }
        if body.get("anthropic-beta"):
            headers["anthropic-beta"] = ",".join(body["anthropic-beta"])
        return headers

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in body.items() if key not in HEADER_FIELDS}

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        for event in events:
            if event.get("type") == "error":
                raise ValueError("the provider's stream ended with an error event")
        if not any(event.get("type") == "message_stop" for event in events):
            raise ValueError("the provider's stream ended before message_stop")
        return assemble(events), list(events)  # as sent, pings included: a replay sends them too


def envelope(
    request: dict[str, Any],
    content: list[dict[str, Any]],
    stop_reason: str,
    usage: dict[str, Any],
    response_id: str | None = None,
) -> dict[str, Any]:
    """A `message` object around `content`, as the API answers one."""
    return {
        "id": response_id or message_id(),
        "type": "message",
        "role": "assistant",
        "model": request.get("model"),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, **usage},
    }


def assemble(events: list[dict[str, Any]]) -> dict[str, Any]:
    """The `message` a stream of events adds up to (as the SDK's `get_final_message()` builds it)."""
    message: dict[str, Any] | None = None
    buffers: dict[int, str] = {}
    for event in events:
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "message_start":
            message = {**event["message"], "content": list(event["message"].get("content") or [])}
            message["usage"] = dict(message.get("usage") or {})
        elif message is None:
            continue
        elif kind == "content_block_start":
            message["content"].append(dict(event["content_block"]))
        elif kind == "content_block_delta":
            index, delta = event["index"], event.get("delta") or {}
            block = message["content"][index]
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                buffers[index] = buffers.get(index, "") + delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif delta.get("type") == "signature_delta":
                block["signature"] = delta.get("signature")
            elif delta.get("type") == "citations_delta":
                block["citations"] = [*(block.get("citations") or []), delta.get("citation")]
        elif kind == "message_delta":
            message.update(
                {k: v for k, v in (event.get("delta") or {}).items() if k in ("stop_reason", "stop_sequence")}
            )
            message["usage"].update({k: v for k, v in (event.get("usage") or {}).items() if v is not None})
    if message is None:
        raise ValueError("the stream has no message_start")
    for index, text in buffers.items():
        message["content"][index]["input"] = json.loads(text) if text else {}
    return message


def synthesize_events(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The events the API would have streamed for this message."""
    usage = message.get("usage") or {}
    opening = {
        **message,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {**usage, "output_tokens": min(1, int(usage.get("output_tokens") or 0))},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": opening}]
    for index, block in enumerate(message.get("content") or ()):
        kind = block.get("type")
        if kind == "text":
            events.append(_block_start(index, {**block, "text": ""}))
            deltas = [
                {"type": "text_delta", "text": p} for p in stream.pieces(block.get("text") or "", words=True)
            ]
        elif kind == "tool_use":
            events.append(_block_start(index, {**block, "input": {}}))
            arguments = json.dumps(block.get("input") or {}, separators=(",", ":"), ensure_ascii=False)
            deltas = [
                {"type": "input_json_delta", "partial_json": p}
                for p in (stream.pieces(arguments, words=False) if arguments != "{}" else [])
            ]
        elif kind == "thinking":
            events.append(_block_start(index, {**block, "thinking": "", "signature": ""}))
            deltas = [
                {"type": "thinking_delta", "thinking": p}
                for p in stream.pieces(block.get("thinking") or "", words=True)
            ]
            deltas.append({"type": "signature_delta", "signature": block.get("signature") or ""})
        else:
            events.append(_block_start(index, block))
            deltas = []
        if index == 0:
            events.append({"type": "ping"})
        events.extend({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas)
        events.append({"type": "content_block_stop", "index": index})
    events.append(
        {
            "type": "message_delta",
            "delta": {
                "stop_reason": message.get("stop_reason"),
                "stop_sequence": message.get("stop_sequence"),
            },
            "usage": {"output_tokens": int(usage.get("output_tokens") or 0)},
        }
    )
    events.append({"type": "message_stop"})
    return events


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _recorded_id(message: Any) -> bool:
    """Whether a message (a response, or a message_start event's) has an id of its own to keep."""
    return isinstance(message, dict) and isinstance(message.get("id"), str) and bool(message["id"])


def _restamp_event(event: dict[str, Any], fresh_id: str) -> dict[str, Any]:
    if event.get("type") == "message_start" and isinstance(event.get("message"), dict):
        return {**event, "message": {**event["message"], "id": fresh_id}}
    return event


def _expand_block(block: dict[str, Any], model: str, now: float) -> dict[str, Any]:
    if block.get("type") == "text":
        return {**block, "text": templates.expand(block.get("text") or "", model, now)}
    if block.get("type") == "tool_use":
        return {**block, "input": templates.expand(block.get("input") or {}, model, now)}
    return block


def _checked_block(block: Any, i: int) -> dict[str, Any]:
    """A content block of a pasted or recorded message, checked enough to render and replay."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise InvalidAnswer("a content block is an object with a type", param=f"content[{i}]")
    if block["type"] == "text" and not isinstance(block.get("text"), str):
        raise InvalidAnswer("a text block has a text string", param=f"content[{i}].text")
    if block["type"] == "tool_use":
        if not isinstance(block.get("name"), str) or not block["name"]:
            raise InvalidAnswer("a tool_use block names its tool", param=f"content[{i}].name")
        if not isinstance(block.get("input", {}), dict):
            raise InvalidAnswer("a tool_use block's input is an object", param=f"content[{i}].input")
        block = {**block, "input": block.get("input", {})}
        if not isinstance(block.get("id"), str) or not block["id"]:
            # Deterministic, as the common answer's call ids are: the follow-up quotes it.
            digest = json.dumps([i, block["name"], block["input"]], sort_keys=True)
            block["id"] = tool_use_id(f"call_{hashlib.sha256(digest.encode()).hexdigest()[:24]}")
    return block


def _estimated_usage(request: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, int]:
    asked = {key: request.get(key) for key in ("system", "messages")}
    return {
        "input_tokens": answers.estimate_tokens(json.dumps(asked, ensure_ascii=False)),
        "output_tokens": answers.estimate_tokens(json.dumps(content, ensure_ascii=False)),
    }


def _text_blocks(blocks: Any) -> Iterator[tuple[Any, Any]]:
    for block in blocks if isinstance(blocks, list) else ():
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            yield block, "text"


def _system_text(system: Any) -> str:
    if isinstance(system, str):
        return system
    return "\n\n".join(block["text"] for block, _ in _text_blocks(system))


def _size(data: Any) -> str:
    try:
        return f"{len(base64.b64decode(str(data), validate=False))} bytes"
    except (binascii.Error, ValueError):
        return f"{len(str(data))} base64 characters"


def _placeholder(block: dict[str, Any]) -> str:
    """An image or document as the view shows it: its kind, media type and size, never its bytes."""
    kind, source = block.get("type"), block.get("source") or {}
    if source.get("type") == "base64":
        return f"[{kind} {source.get('media_type')}, {_size(source.get('data'))}]"
    if source.get("type") == "url":
        return f"[{kind} {source.get('url')}]"
    if source.get("type") == "file":
        return f"[{kind} file {source.get('file_id')}]"
    return f"[{kind} {source.get('type')}]"


def _part(block: Any) -> dict[str, Any]:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "document" and (block.get("source") or {}).get("type") == "text":
        title = f" {block['title']}" if block.get("title") else ""
        return {"type": "text", "text": f"[document{title}]\n{block['source'].get('data', '')}"}
    if kind in ("image", "document"):
        return {"type": "text", "text": _placeholder(block)}
    return {"type": "text", "text": f"[{kind}]"}


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        content = "\n".join(_part(part)["text"] for part in content)
    text = content if isinstance(content, str) else ""
    return f"[error] {text}" if block.get("is_error") else text


def _view_messages(message: dict[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as chat messages: tool results become tool messages, tool uses tool calls."""
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    out: list[dict[str, Any]] = []
    parts, calls = [], []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            out.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": _result_text(block)}
            )
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, separators=(",", ":"), ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind not in ("thinking", "redacted_thinking"):
            parts.append(_part(block))
    if role == "assistant":
        if parts or calls:
            text = "".join(part["text"] for part in parts)
            reply: dict[str, Any] = {"role": "assistant", "content": text or None}
            if calls:
                reply["tool_calls"] = calls
            out.append(reply)
    elif parts:
        out.append({"role": role, "content": parts})
    return out

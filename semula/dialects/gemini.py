"""The Gemini API (`POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`,
`:countTokens`), Google's own API rather than its OpenAI-compatible one.

The model and the method are in the path, not the body: the stored request is the body with the
path's model as `model` and, for `:streamGenerateContent`, `stream: true` (transport, as every
dialect's stream flag), so entries, the view and bundles name the model as every other API's do.
A request becomes the common conversation view (`systemInstruction` as a system message, `model`
turns as assistant messages, `functionCall` parts as tool calls, `functionResponse` parts as tool
messages matched to their call by id or else by name, function declarations as function tools, a
response schema as a json_schema response format), and a validated answer is rendered as a
`GenerateContentResponse` (docs/decisions/0055-gemini-api.md).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
import secrets
import urllib.parse
from collections.abc import Iterable, Iterator
from typing import Any

from semula.core import answers, jsonio, stream, templates
from semula.core.errors import InvalidAnswer, SemulaError
from semula.dialects import (
    GEMINI,
    SPANS,
    Dialect,
    Request,
    answer_of,
    common_answer,
    splice,
    stamp_spans,
    tool_call,
)
from semula.dialects.gemini_checks import OWN, check, json_names
from semula.dialects.routes import CALL, COUNT_TOKENS, MODEL, MODELS, Handler, Route, keyed, model_seen

VERSIONS = ("v1beta", "v1")  # google-genai 1.x+ calls /v1, earlier clients /v1beta
MODEL_IN_PATH = r"(?P<model>[^/:?#]{1,200})"


def methods(*served: tuple[str, Handler | None]) -> tuple[Route, ...]:
    """The routes of a model's methods (`/{version}/models/{model}:METHOD`), under both versions; the
    method is the route's argument after the model."""
    return tuple(
        Route(
            f"/{version}/models/{MODEL_IN_PATH}:{method}",
            f"/{version}/models/{{model}}:{method}",
            serves,
            (method,),
        )
        for version in VERSIONS
        for method, serves in served
    )


# GET /v1beta/models and /v1beta/models/{model}: the models seen in the project's entries, as the
# Gemini API describes them (a model no recording uses is a 404).
MODEL_LIST = Handler(("GET",), lambda s: {"models": [model_object(m) for m in s.models()]})
ONE_MODEL = Handler(("GET",), lambda s: model_object(model_seen(s, model_id(s.values[0]))))


def google_key(environ: Any) -> str | None:
    """The key a Google client sends: the `x-goog-api-key` header, else the `key` query parameter."""
    header = environ.get("HTTP_X_GOOG_API_KEY")
    if header is not None:
        return header
    for pair in environ.get("QUERY_STRING", "").split("&"):
        name, _, value = pair.partition("=")
        if name == "key":
            return urllib.parse.unquote_plus(value)
    return None


# Google's status name for each HTTP status; semula's own statuses get the nearest one.
STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    409: "ABORTED",
    413: "INVALID_ARGUMENT",
    422: "INVALID_ARGUMENT",
    424: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
FINISH_REASONS = {"stop": "STOP", "length": "MAX_TOKENS", "tool_calls": "STOP", "content_filter": "SAFETY"}
COMMON_FINISH = {"MAX_TOKENS": "length", "SAFETY": "content_filter", "RECITATION": "content_filter"}
TRANSPORT = frozenset({"stream"})
ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST = "type.googleapis.com/google.rpc.BadRequest"


def response_id() -> str:
    """A fresh `responseId`, of the kind Google sends (URL-safe base64 characters)."""
    return secrets.token_urlsafe(18).replace("-", "x").replace("_", "y")


def _recorded_id(response: Any) -> bool:
    """Whether a response (or a streamed chunk) has a `responseId` of its own to keep."""
    return (
        isinstance(response, dict)
        and isinstance(response.get("responseId"), str)
        and response["responseId"] != ""
    )


def model_id(path_model: str) -> str:
    """The model of a path (`models/gemini-2.5-flash` or `gemini-2.5-flash`) without `models/`."""
    return path_model.removeprefix("models/")


def model_object(model: str) -> dict[str, Any]:
    """A model as the Gemini API's models.get describes it (what semula knows of it: its name)."""
    return {
        "name": f"models/{model}",
        "baseModelId": model,
        "version": "semula",
        "displayName": model,
        "description": "A model seen in this project's recordings (semula).",
        "supportedGenerationMethods": [
            "generateContent",
            "countTokens",
            "embedContent",
            "batchEmbedContents",
        ],
    }


def call_id(name: Any, args: Any, index: int) -> str:
    """A function call's id in the view when the call has none: the same call always gets the same one."""
    text = json.dumps([index, name, args], sort_keys=True, ensure_ascii=False)
    return "call_" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def to_json_schema(schema: Any) -> Any:
    """Gemini's OpenAPI-style `Schema` (types in capitals, `nullable`) as JSON Schema, for validation."""
    if isinstance(schema, list):
        return [to_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "type" and isinstance(value, str):
            out["type"] = value.lower()
        elif key in ("properties", "$defs", "definitions") and isinstance(value, dict):
            out[key] = {name: to_json_schema(sub) for name, sub in value.items()}
        elif key in ("items", "anyOf", "oneOf", "allOf", "not", "additionalProperties"):
            out[key] = to_json_schema(value)
        elif key not in ("nullable", "propertyOrdering"):
            out[key] = value
    if schema.get("nullable") is True and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    return out


_EVENT_END = re.compile(rb"\r?\n\r?\n")


def json_array(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """A stream's server-sent events as Google streams `:streamGenerateContent` without `alt=sse`: one
    JSON array whose elements are the events' data, each sent as soon as its event has come whole."""
    pending, opened = b"", False
    for piece in pieces:
        *events, pending = _EVENT_END.split(pending + piece)
        out = []
        for event in events:
            data = _event_data(event)
            if data:
                out.append((b",\r\n" if opened else b"[") + data)
                opened = True
        if out:
            yield b"".join(out)
    data = _event_data(pending)
    if data:
        yield (b",\r\n" if opened else b"[") + data + b"]"
    else:
        yield b"]" if opened else b"[]"


def _event_data(event: bytes) -> bytes:
    """An event's data (its `data:` lines joined), or b"" for an event without any."""
    return b"\n".join(line[5:].removeprefix(b" ") for line in event.splitlines() if line.startswith(b"data:"))


class Gemini(Dialect):
    name = GEMINI
    title = "Gemini"
    routes = (
        *methods(("generateContent", CALL), ("streamGenerateContent", CALL), ("countTokens", COUNT_TOKENS)),
        Route("/v1beta/models", "/v1beta/models", MODEL_LIST),
        Route(f"/v1beta/models/{MODEL_IN_PATH}", "/v1beta/models/{model}", ONE_MODEL),
        # GET /v1/models from a Google client is this API's model list, which google-genai calls under /v1.
        keyed(MODELS, MODEL_LIST),
        keyed(MODEL, ONE_MODEL),
    )
    summary = (
        "POST /v1beta/models/{model}:generateContent, :streamGenerateContent and :countTokens"
        " and GET /v1beta/models"
    )
    owns_prefix = "v1beta"
    # The Google SDKs append /v1beta/models/... (or /v1/...) to their base URL themselves.
    sdk_env = (("GOOGLE_GEMINI_BASE_URL", "{root}"), ("GEMINI_API_KEY", "{key}"))
    stamped = ("responseId",)
    upstream_model_applies = False  # a project's upstream_model names an OpenAI model
    upstream_path = "/models"  # the model and the method follow (upstream_target)
    transport_fields = TRANSPORT

    # Requests

    def api_key(self, environ: Any) -> str | None:
        return google_key(environ)

    def with_route(self, body: Any, model: str, method: str) -> Any:
        """The body as stored: fields by their JSON names (`system_instruction` as `systemInstruction`),
        the path's model in `model`, `stream: true` for a streamed method."""
        if not isinstance(body, dict):
            return body
        stored = {**json_names(body), "model": model_id(model)}
        stored.pop("stream", None)
        if method == "streamGenerateContent":
            stored["stream"] = True
        return stored

    def steady(self, body: Any) -> Any:
        """Without the ids a client made for function calls that came without one: Gemini CLI names such
        a call `<tool>_<epoch ms>_<n>`, new on every run (a provider's answer through record-through
        carries none). An id semula or a provider gave is kept (decision 0059). And with the skills
        Gemini CLI lists in its system prompt in one order (decision 0055)."""
        body = _steady_skills(body)
        contents = body.get("contents") if isinstance(body, dict) else None
        if not isinstance(contents, list) or not _any_made_ids(contents):
            return body
        steady = []
        for turn in contents:
            if not _made_ids(turn):
                steady.append(turn)
                continue
            parts = []
            for part in turn["parts"]:
                kind = _made_id(part)
                if kind:
                    part = {**part, kind: {k: v for k, v in part[kind].items() if k != "id"}}
                parts.append(part)
            steady.append({**turn, "parts": parts})
        return {**body, "contents": steady}

    def upstream_target(self, body: dict[str, Any]) -> str:
        """The provider's path for this request, under its base URL."""
        model = urllib.parse.quote(str(body["model"]), safe="")
        if body.get("stream") is True:
            return f"/models/{model}:streamGenerateContent?alt=sse"
        return f"/models/{model}:generateContent"

    def error_body(self, exc: SemulaError) -> dict[str, Any]:
        return google_error(exc)

    def check(self, body: Any) -> Request:
        check(body)
        return Request(str(body["model"]), body.get("stream") is True)

    def count_tokens(self, body: Any) -> dict[str, Any]:
        """:countTokens: an estimate (four characters a token), not the provider's tokenizer."""
        body = json_names(body)
        check(body, counting=True)
        inner = (
            body.get("generateContentRequest")
            if isinstance(body.get("generateContentRequest"), dict)
            else body
        )
        counted = {k: inner.get(k) for k in ("contents", "systemInstruction", "tools") if inner.get(k)}
        total = answers.estimate_tokens(json.dumps(counted, ensure_ascii=False)) if counted else 0
        return {"totalTokens": total, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": total}]}

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        system = request.get("systemInstruction")
        for content in [system, *(request.get("contents") or ())]:
            for part in _parts(content):
                if isinstance(part.get("text"), str):
                    yield part, "text"

    # The conversation view

    def conversation(self, request, history=()):
        messages: list[dict[str, Any]] = []
        system = "\n\n".join(p["text"] for p in _parts(request.get("systemInstruction")) if "text" in p)
        if system:
            messages.append({"role": "system", "content": system})
        open_calls: list[dict[str, Any]] = []  # the model's calls not yet answered, oldest first
        for content in request.get("contents") or ():
            messages.extend(_view_messages(content, open_calls))
        view: dict[str, Any] = {"model": request.get("model"), "messages": messages}
        tools, builtin = [], []
        for tool in request.get("tools") or ():
            if not isinstance(tool, dict):
                continue
            builtin.extend(key for key in tool if key != "functionDeclarations")
            for declaration in tool.get("functionDeclarations") or ():
                if isinstance(declaration, dict):
                    tools.append({"type": "function", "function": _function(declaration)})
        if tools:
            view["tools"] = tools
        calling = ((request.get("toolConfig") or {}).get("functionCallingConfig")) or {}
        mode, allowed = calling.get("mode"), calling.get("allowedFunctionNames") or []
        if mode in ("ANY", "VALIDATED") and len(allowed) == 1:
            view["tool_choice"] = {"type": "function", "function": {"name": allowed[0]}}
        elif mode == "ANY":
            view["tool_choice"] = "required"
        elif mode == "NONE":
            view["tool_choice"] = "none"
        config = request.get("generationConfig") or {}
        response_format = _response_format(config)
        if response_format is not None:
            view["response_format"] = response_format
        notes = []
        if builtin:
            notes.append(
                f"The request offers Google's built-in tools ({', '.join(sorted(set(builtin)))}). An answer "
                "can only be text or a function call; their results come only from a provider "
                "(record-through)."
            )
        if config.get("responseMimeType") == "text/x.enum":
            notes.append(
                "The request asks for one value of an enum (text/x.enum): answer that value as text."
            )
        if (config.get("candidateCount") or 1) > 1:
            notes.append("The request asks for several candidates; an answer gives one.")
        if (config.get("thinkingConfig") or {}).get("includeThoughts") is True:
            notes.append(
                "The request asks for thought summaries. A text or function-call answer has none; paste a "
                "whole GenerateContentResponse to give thought parts."
            )
        if notes:
            view["notes"] = notes
        return view

    # Answers

    def respond(self, completion, request, *, response_id=None):
        finish, text, calls = answer_of(completion)
        parts: list[dict[str, Any]] = [{"text": text}] if text else []
        # Each call carries its id (stable: made from what it calls): a client that names the calls it
        # gets without one (Gemini CLI: <tool>_<epoch ms>_<n>) would make every follow-up new.
        parts += [
            {"functionCall": {"id": call, "name": name, "args": arguments}} for call, name, arguments in calls
        ]
        usage = completion.get("usage") or {}
        return envelope(
            request,
            parts or [{"text": ""}],
            FINISH_REASONS.get(finish, "STOP"),
            int(usage.get("prompt_tokens") or 0),
            int(usage.get("completion_tokens") or 0),
            response_id,
        )

    def common(self, response, chunks):
        if not isinstance(response.get("candidates"), list) and chunks:
            response = assemble(chunks)
        candidate = _first_candidate(response)
        texts, calls = [], []
        for index, part in enumerate(_parts(candidate.get("content"))):
            if part.get("thought") is True:
                continue
            if isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part.get("functionCall"), dict):
                calls.append(_common_call(part["functionCall"], index))
        finish = "tool_calls" if calls else COMMON_FINISH.get(candidate.get("finishReason"), "stop")
        return common_answer(response.get("modelVersion"), texts, calls, finish, *self.usage(response))

    def pasted(self, payload):
        return isinstance(payload, dict) and isinstance(payload.get("candidates"), list)

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict) and chunks:
            response = assemble(chunks)
        if not isinstance(response, dict) or not isinstance(response.get("candidates"), list):
            raise InvalidAnswer("a GenerateContentResponse has a candidates list", param="candidates")
        if not response["candidates"]:
            raise InvalidAnswer("a GenerateContentResponse has at least one candidate", param="candidates")
        for i, candidate in enumerate(response["candidates"]):
            parts = (candidate.get("content") or {}).get("parts") if isinstance(candidate, dict) else None
            if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
                raise InvalidAnswer(
                    "a candidate has content.parts, a list of parts", param=f"candidates[{i}].content.parts"
                )
            for j, part in enumerate(parts):
                call = part.get("functionCall")
                if call is not None and not (isinstance(call, dict) and isinstance(call.get("name"), str)):
                    raise InvalidAnswer(
                        "a functionCall names its function",
                        param=f"candidates[{i}].content.parts[{j}].functionCall",
                    )
        produced = answers.estimate_tokens(json.dumps(response["candidates"], ensure_ascii=False))
        filled = envelope(request, [], "STOP", _estimated_prompt(request), produced)
        # What the provider (or the paster) sent is kept, its unknown fields too; what is missing is filled.
        response = {**filled, **{key: value for key, value in response.items() if value is not None}}
        answers.validate_against_request(self.common(response, None), view)
        return response, chunks

    def usage(self, response):
        usage = response.get("usageMetadata") or {}
        prompt = int(usage.get("promptTokenCount") or 0) + int(usage.get("toolUsePromptTokenCount") or 0)
        # Thinking is billed as output.
        return prompt, int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)

    # Responses and streams

    def render(self, req, response, chunks, expand, now):
        if not isinstance(response.get("candidates"), list) and chunks:
            response = assemble(chunks)
        if expand:
            response = templates.expand(response, req.model, now)
            chunks = None  # templates are expanded in the response; its chunks are made from it
        if not req.stream:
            return self.restamp(response, req, now), None
        events = chunks if chunks else synthesize_chunks(response)
        if not req.fresh and events and _recorded_id(events[0]):
            return None, events  # restamp `recorded`: the stream's own responseId
        fresh = response_id()
        return None, [{**event, "responseId": fresh} if "responseId" in event else event for event in events]

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """A fresh `responseId` for each reply; with restamp `recorded`, the recorded one (if any)."""
        if not req.fresh and _recorded_id(body):
            return body
        return {**body, "responseId": response_id()}

    def keeps_json(self, req: Request, recorded: dict[str, Any]) -> bool:
        # With restamp `recorded`, a response without an id of its own gets a fresh one each render.
        return req.fresh or _recorded_id(recorded)

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        for event in events:
            yield b"data: " + jsonio.compact(event) + b"\r\n\r\n"

    def keeps_stream(self, req: Request) -> bool:
        # render() gives every chunk that has a responseId the reply's fresh one; with restamp
        # `recorded`, a stream keeps its own (or gets a fresh one when it has none): rendered each time.
        return req.fresh

    def stream_stamps(self, first: dict[str, Any], data: bytes) -> dict[str, Any] | None:
        """The stream's responseId and where each chunk holds it (SPANS); None (not kept) when its
        first chunk has none (so no id to find) yet a later one has."""
        stamps = self.stamps(first)
        if not isinstance(stamps.get("responseId"), str):
            return None if b'"responseId":' in data else stamps
        return {**stamps, SPANS: stamp_spans(data, b'"responseId":', jsonio.compact(stamps["responseId"]))}

    def restamp_sse(self, data: bytes, first: dict[str, Any], req: Request, now: float) -> bytes:
        """Every chunk's `responseId` (render()) replaced by a fresh one. Inside a JSON string a quote
        is escaped, so `"responseId":"…"` can only be a chunk's own key."""
        spans = first.get(SPANS)
        if not spans:
            return data
        return splice(data, spans, jsonio.compact(response_id()))

    def streams_array(self, in_path: tuple[str, ...], query: str) -> bool:
        # Google streams :streamGenerateContent as one JSON array unless asked for `alt=sse`.
        return in_path[-1:] == ("streamGenerateContent",) and "alt=sse" not in query

    def json_array(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        return json_array(pieces)

    def upstream(self, settings: Any) -> tuple[str, str | None]:
        return settings.gemini_url, settings.gemini_key

    def upstream_headers(self, key: str, body: dict[str, Any]) -> dict[str, str]:
        return {"x-goog-api-key": key, "Content-Type": "application/json"}

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {key: value for key, value in body.items() if key not in ("model", "stream")}

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        for event in events:
            if "error" in event:
                raise ValueError("the provider's stream ended with an error")
        response = assemble(events)
        # The API has no end event: its last chunk says why the candidate finished.
        if not response["candidates"][0].get("finishReason"):
            raise ValueError("the provider's stream ended before its candidate finished")
        return response, events

    def relay(self, block: bytes, data: Any, req: Request) -> bytes | None:
        return block + b"\r\n\r\n"

    def stream_error(self, exc: SemulaError, req: Request) -> bytes:
        return b"data: " + jsonio.compact(self.error_body(exc)) + b"\r\n\r\n"


def google_error(exc: SemulaError) -> dict[str, Any]:
    """The error in Google's envelope: the HTTP status as `code`, its gRPC name as `status`. semula's own
    conditions keep their code, in the message and as an ErrorInfo reason, so the reader sees which."""
    status = STATUSES.get(exc.status) or ("INTERNAL" if exc.status >= 500 else "FAILED_PRECONDITION")
    error: dict[str, Any] = {"code": exc.status, "status": status}
    if exc.code == OWN:
        error["message"] = exc.message
        if exc.param:
            violation = {"field": exc.param, "description": exc.message}
            error["details"] = [{"@type": BAD_REQUEST, "fieldViolations": [violation]}]
    else:
        error["message"] = f"{exc.code}: {exc.message}"
        info: dict[str, Any] = {"@type": ERROR_INFO, "reason": exc.code, "domain": "semula"}
        if exc.param:
            info["metadata"] = {"param": exc.param}
        error["details"] = [info]
    return {"error": error}


def envelope(
    request: dict[str, Any],
    parts: list[dict[str, Any]],
    finish_reason: str,
    prompt: int,
    produced: int,
    given_id: str | None = None,
) -> dict[str, Any]:
    """A GenerateContentResponse of one candidate around `parts`, as the API answers one."""
    return {
        "candidates": [
            {"content": {"parts": parts, "role": "model"}, "finishReason": finish_reason, "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": produced,
            "totalTokenCount": prompt + produced,
        },
        "modelVersion": request.get("model"),
        "responseId": given_id or response_id(),
    }


def assemble(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """The response a stream of chunks adds up to: text parts of the same kind joined, other parts kept,
    the last finishReason and usageMetadata."""
    if not chunks:
        raise ValueError("the stream has no chunks")
    response: dict[str, Any] = {k: v for k, v in chunks[0].items() if k != "candidates"}
    candidate: dict[str, Any] = {"content": {"parts": [], "role": "model"}, "index": 0}
    parts = candidate["content"]["parts"]
    for chunk in chunks:
        response.update({k: v for k, v in chunk.items() if k not in ("candidates", "responseId")})
        for piece in chunk.get("candidates") or ():
            if not isinstance(piece, dict) or piece.get("index", 0) != 0:
                continue
            candidate.update({k: v for k, v in piece.items() if k not in ("content", "index")})
            for part in _parts(piece.get("content")):
                last = parts[-1] if parts else None
                if (
                    last is not None
                    and isinstance(part.get("text"), str)
                    and isinstance(last.get("text"), str)
                    and last.get("thought") == part.get("thought")
                    and "thoughtSignature" not in part
                ):
                    parts[-1] = {**last, "text": last["text"] + part["text"]}
                else:
                    parts.append(dict(part))
    response["candidates"] = [candidate]
    return response


def synthesize_chunks(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The chunks the API would have streamed for this response: text in pieces, other parts whole,
    the finishReason and the usage on the last."""
    candidate = _first_candidate(response)
    shell = {k: v for k, v in response.items() if k not in ("candidates", "usageMetadata")}
    pieces: list[dict[str, Any]] = []
    for part in _parts(candidate.get("content")):
        if isinstance(part.get("text"), str) and part["text"]:
            # Every piece of a thought is a thought; a signature and the like go with the first.
            first = {k: v for k, v in part.items() if k != "text"}
            rest = {"thought": part["thought"]} if "thought" in part else {}
            for number, text in enumerate(stream.pieces(part["text"], words=True)):
                pieces.append({**(rest if number else first), "text": text})
        else:
            pieces.append(part)
    pieces = pieces or [{"text": ""}]
    chunks = [
        {**shell, "candidates": [{"content": {"parts": [part], "role": "model"}, "index": 0}]}
        for part in pieces
    ]
    last = chunks[-1]["candidates"][0]
    last.update({k: v for k, v in candidate.items() if k not in ("content", "index")})
    if response.get("usageMetadata") is not None:
        chunks[-1]["usageMetadata"] = response["usageMetadata"]
    return chunks


def _first_candidate(response: dict[str, Any]) -> dict[str, Any]:
    candidates = response.get("candidates")
    first = candidates[0] if isinstance(candidates, list) and candidates else None
    return first if isinstance(first, dict) else {}


def _parts(content: Any) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def _function(declaration: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": declaration.get("name")}
    if declaration.get("description") is not None:
        function["description"] = declaration["description"]
    if declaration.get("parametersJsonSchema") is not None:
        function["parameters"] = declaration["parametersJsonSchema"]
    elif declaration.get("parameters") is not None:
        function["parameters"] = to_json_schema(declaration["parameters"])
    return function


def _response_format(config: dict[str, Any]) -> dict[str, Any] | None:
    if config.get("responseMimeType") != "application/json":
        return None
    if config.get("responseJsonSchema") is not None:
        schema = config["responseJsonSchema"]
    elif config.get("responseSchema") is not None:
        schema = to_json_schema(config["responseSchema"])
    else:
        return {"type": "json_object"}
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def _size(data: Any) -> str:
    try:
        return f"{len(base64.b64decode(str(data), validate=False))} bytes"
    except (binascii.Error, ValueError):
        return f"{len(str(data))} base64 characters"


def _part_text(part: dict[str, Any]) -> str | None:
    """A part of a turn as the view's text; None for a function call or response (handled apart)."""
    if isinstance(part.get("text"), str):
        return part["text"]
    if isinstance(part.get("inlineData"), dict):
        return f"[inlineData {part['inlineData'].get('mimeType')}, {_size(part['inlineData'].get('data'))}]"
    if isinstance(part.get("fileData"), dict):
        return f"[fileData {part['fileData'].get('mimeType')} {part['fileData'].get('fileUri')}]"
    if isinstance(part.get("executableCode"), dict):
        return f"[executableCode]\n{part['executableCode'].get('code', '')}"
    if isinstance(part.get("codeExecutionResult"), dict):
        return f"[codeExecutionResult]\n{part['codeExecutionResult'].get('output', '')}"
    return None


def _view_messages(content: Any, open_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One turn as chat messages: function responses become tool messages, function calls tool calls."""
    if not isinstance(content, dict):
        return []
    role = "assistant" if content.get("role") == "model" else "user"
    out: list[dict[str, Any]] = []
    texts, calls = [], []
    for position, part in enumerate(_parts(content)):
        if part.get("thought") is True:
            continue
        if isinstance(part.get("functionCall"), dict):
            calls.append(_common_call(part["functionCall"], position))
        elif isinstance(part.get("functionResponse"), dict):
            answer = part["functionResponse"]
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": _answered_call(answer, open_calls),
                    "content": json.dumps(answer.get("response") or {}, ensure_ascii=False),
                }
            )
        else:
            text = _part_text(part)
            if text is not None:
                texts.append(text)
    if role == "assistant":
        if texts or calls:
            reply: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
            if calls:
                reply["tool_calls"] = calls
                open_calls.extend(calls)
            out.append(reply)
    elif texts:
        out.append({"role": "user", "content": "\n".join(texts)})
    return out


def _answered_call(answer: dict[str, Any], open_calls: list[dict[str, Any]]) -> str:
    """The id of the call a functionResponse answers: the open call with its id, else the oldest open
    call of its name (the API matches them so); a response to no call keeps a made-up id."""
    for matches in (
        lambda call: answer.get("id") is not None and call["id"] == answer.get("id"),
        lambda call: call["function"]["name"] == answer.get("name"),
    ):
        for call in open_calls:
            if matches(call):
                open_calls.remove(call)
                return call["id"]
    return str(answer.get("id") or call_id(answer.get("name"), "response", -1))


# Gemini CLI's list of agent skills in its system prompt: one `<skill>` element per skill, in the order
# its file search found them, which varies from run to run (two searches finish in either order).
_SKILLS = re.compile(r"(<available_skills>\n)(.*?)(\n</available_skills>)", re.S)
_SKILL = re.compile(r"[ \t]*<skill>\n.*?\n[ \t]*</skill>", re.S)


def _sorted_skills(block: re.Match[str]) -> str:
    entries = block[2].split("\n")
    skills, current = [], []
    for line in entries:  # the lines of one element, up to its closing tag
        current.append(line)
        if line.strip() == "</skill>":
            skills.append("\n".join(current))
            current = []
    if current or len(skills) < 2 or not all(_SKILL.fullmatch(skill) for skill in skills):
        return block[0]  # not the CLI's list of elements: left as sent
    return block[1] + "\n".join(sorted(skills)) + block[3]


def _steady_skills(body: Any) -> Any:
    """`body` with the `<skill>` elements of an `<available_skills>` list in its system instruction
    sorted, in a copy of the containers on the way (`body` itself when it has no such list)."""
    system = body.get("systemInstruction") if isinstance(body, dict) else None
    parts = system.get("parts") if isinstance(system, dict) else None
    if not isinstance(parts, list):
        return body
    steady, changed = [], False
    for part in parts:
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str) and "<available_skills>" in text:
            sorted_text = _SKILLS.sub(_sorted_skills, text)
            if sorted_text != text:
                part, changed = {**part, "text": sorted_text}, True
        steady.append(part)
    return {**body, "systemInstruction": {**system, "parts": steady}} if changed else body


_CLIENT_CALL_ID = re.compile(r"(?P<name>.+)_[0-9]{13}_[0-9]+\Z")


def _made_id(part: Any) -> str | None:
    """ "functionCall" or "functionResponse" when the part's id is one a client made (<tool>_<ms>_<n>)."""
    if not isinstance(part, dict) or ("functionCall" not in part and "functionResponse" not in part):
        return None
    for kind in ("functionCall", "functionResponse"):
        inner = part.get(kind)
        if isinstance(inner, dict) and isinstance(inner.get("id"), str):
            made = _CLIENT_CALL_ID.match(inner["id"])
            if made and made["name"] == inner.get("name"):
                return kind
    return None


def _any_made_ids(contents: list[Any]) -> bool:
    """any(map(_made_ids, contents)), in one loop: a request of 100,000 text turns is looked at in
    a few ms (issue #49)."""
    for turn in contents:
        parts = turn.get("parts") if type(turn) is dict else None
        if type(parts) is list:
            for part in parts:
                calls = type(part) is dict and ("functionCall" in part or "functionResponse" in part)
                if calls and _made_id(part):
                    return True
    return False


def _made_ids(turn: Any) -> bool:
    return (
        isinstance(turn, dict) and isinstance(turn.get("parts"), list) and any(map(_made_id, turn["parts"]))
    )


def _common_call(call: dict[str, Any], index: int) -> dict[str, Any]:
    """A functionCall part as a common tool call: its own id, else one made from what it calls."""
    args = call.get("args") or {}
    return tool_call(call.get("id") or call_id(call.get("name"), args, index), call.get("name"), args)


def _estimated_prompt(request: dict[str, Any]) -> int:
    asked = {key: request.get(key) for key in ("systemInstruction", "contents")}
    return answers.estimate_tokens(json.dumps(asked, ensure_ascii=False))

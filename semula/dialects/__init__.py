"""The APIs semula speaks, one module each (a "dialect"); everything else is shared and dialect-blind.

A dialect owns what differs between APIs: its route, its request checks, which fields are transport
(left out of the fingerprint) and where the text lives that `normalize` rules rewrite, the
**conversation view** of a request, rendering a validated answer as its API's response, its stream
events, its usage fields and its upstream path. The view is one common shape for every API (a
Chat-Completions-style request: `messages`, `tools`, `tool_choice`, `response_format`), so parking,
the claim lease, answers and their validation, the CLI, MCP, the dashboard and the answerer daemon
need no per-API code (docs/decisions/0030-dialects.md).
"""

from __future__ import annotations

import functools
import json
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from semula.core import answers, jsonio, recorded_meta
from semula.core import fingerprint as fp
from semula.core.errors import BadRequest, SemulaError
from semula.dialects.routes import Route, Table

CHAT = fp.CHAT_API  # the default API: the one of rows, bundles and fingerprints from before the others
RESPONSES = "openai.responses"
EMBEDDINGS = "openai.embeddings"
ANTHROPIC = "anthropic.messages"
GEMINI = "gemini.generate_content"
GEMINI_EMBEDDINGS = "gemini.embed_content"


@dataclass(frozen=True)
class Request:
    """What the shared code needs to know of a checked request."""

    model: str
    stream: bool
    include_usage: bool = False
    fresh: bool = True  # ids and times stamped afresh on replay (the project's restamp setting)


class Dialect:
    """The interface every API module implements; the defaults are the ones most APIs share."""

    def kept_headers(self, headers: Mapping[str, str]) -> dict[str, str]:
        """The provider's response headers a recording keeps (semula/core/recorded_meta.py)."""
        return recorded_meta.safe_headers(headers)

    name: ClassVar[str]
    title: ClassVar[str]  # the API's name for people: "Chat Completions", "Anthropic Messages"
    # Its HTTP routes (semula/dialects/routes.py): every route's errors are in this API's envelope.
    routes: ClassVar[tuple[Route, ...]] = ()
    # Its routes in words, for the error that names the APIs semula speaks (else its POST routes).
    summary: ClassVar[str | None] = None
    # The version prefix of its paths (without a slash), when unknown paths under it are this API's.
    owns_prefix: ClassVar[str | None] = None
    # The header besides x-request-id its SDKs read a response's request id from (Anthropic's).
    request_id_header: ClassVar[str | None] = None
    # The environment variables its SDKs read their base URL and key from, and their values for a
    # semula server at `{root}` (its /v1 routes at {root}/v1) with the key `{key}`: OpenAI's SDKs'.
    sdk_env: ClassVar[tuple[tuple[str, str], ...]] = (
        ("OPENAI_BASE_URL", "{root}/v1"),
        ("OPENAI_API_KEY", "{key}"),
    )
    upstream_path: ClassVar[str]
    transport_fields: ClassVar[frozenset[str]]
    upstream_model_applies: ClassVar[bool] = True  # whether a project's upstream_model replaces the model
    # Keys left out of the canonical request at every depth.
    dropped_fields: ClassVar[frozenset[str]] = frozenset()
    # WSGI environ keys of the request headers that change the answer (part of a kept hit's key).
    answer_headers: ClassVar[tuple[str, ...]] = ()
    # The top-level members of a response body that restamp() renews for each reply (ids, times).
    stamped: ClassVar[tuple[str, ...]] = ()
    # An embeddings API: with the project setting `embeddings: synthetic` a miss is answered with
    # synthetic_response() (semula/service/synthetic.py), refused past synthetic_bytes().
    makes_vectors: ClassVar[bool] = False

    def synthetic_bytes(self, request: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def synthetic_response(self, request: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def api_key(self, environ: Mapping[str, Any]) -> str | None:
        """The semula token a client of this API sends where its provider takes its key, when not in
        the Authorization header (Anthropic's x-api-key, Google's x-goog-api-key or ?key=)."""
        return None

    def with_headers(self, body: Any, header: Callable[[str], str | None]) -> Any:
        """The body with what the API carries in headers and a recording must keep (Anthropic's betas)."""
        return body

    def with_route(self, body: Any, model: str, method: str) -> Any:
        """The body with what the API carries in its path (the Gemini API's model and method)."""
        return body

    def count_tokens(self, body: Any) -> dict[str, Any]:
        """The API's token-counting route, for the APIs that have one (an estimate)."""
        raise NotImplementedError

    def error_body(self, exc: SemulaError) -> dict[str, Any]:
        """The error as this API's envelope."""
        return exc.to_dict()

    # The status an injected `overloaded` fault answers with (X-Semula-Fault, semula/core/faults.py).
    overloaded_status: ClassVar[int] = 503

    def rate_limit_headers(self, retry_after: float, now: float) -> tuple[tuple[str, str], ...]:
        """The provider's rate-limit headers on a 429 (an injected rate_limit fault): OpenAI's."""
        return (
            ("x-ratelimit-limit-requests", "60"),
            ("x-ratelimit-remaining-requests", "0"),
            ("x-ratelimit-reset-requests", f"{retry_after:g}s"),
        )

    def check(self, body: Any) -> Request:
        """Refuse, with the API's own 400, a request the real API would refuse."""
        raise NotImplementedError

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        """(container, key) of every prompt text `normalize` rules apply to, in a canonical request."""
        raise NotImplementedError

    def fingerprint(
        self, body: Mapping[str, Any], ignore_fields: Iterable[str], normalize: Any, *, plain: bool = False
    ) -> str:
        return fp.fingerprint(
            self.steady(body),
            ignore_fields,
            normalize,
            transport=self.transport_fields,
            texts=self.texts,
            api=self.name,
            dropped=self.dropped_fields,
            plain=plain,
        )

    def steady(self, body: Any) -> Any:
        """The body without the values a client makes afresh on every run (ids of its own making),
        which no fingerprint holds whatever the project's settings: `body` itself when it has none,
        else a copy of the containers on the way to them (decision 0059)."""
        return body

    def canonical(self, body: Mapping[str, Any], ignore_fields: Iterable[str], normalize: Any) -> Any:
        return fp.canonical_request(
            self.steady(body),
            ignore_fields,
            normalize,
            transport=self.transport_fields,
            texts=self.texts,
            dropped=self.dropped_fields,
        )

    def conversation(
        self, request: dict[str, Any], history: list[tuple[dict[str, Any], dict[str, Any]]] = ()
    ) -> dict[str, Any]:
        """The request in the common shape every answerer sees and every answer is validated against.

        `history` is the earlier turns the request refers to (request, response), oldest first.
        """
        raise NotImplementedError

    def previous(self, request: dict[str, Any]) -> str | None:
        """The id of a stored response this request continues, if the API has such a reference."""
        return None

    def common_response(
        self, response: dict[str, Any], chunks: list[dict[str, Any]] | None
    ) -> dict[str, Any]:
        """A stored response whole, as an earlier turn of a conversation view (previous())."""
        return response

    def respond(
        self, completion: dict[str, Any], request: dict[str, Any], *, response_id: str | None = None
    ) -> dict[str, Any]:
        """The API's response for a validated common answer (a chat.completion without id/created)."""
        raise NotImplementedError

    def common(self, response: dict[str, Any], chunks: list[dict[str, Any]] | None) -> dict[str, Any]:
        """The common answer (a chat.completion) a stored response amounts to: for previews and checks."""
        raise NotImplementedError

    def accept(
        self, payload: Any, request: dict[str, Any], view: dict[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """An answer in any accepted form, validated against the view: the response (and chunks) to store."""
        if self.pasted(payload):
            return self.accept_recorded(payload, None, request, view)
        completion = answers.accept_answer(payload, view)
        return self.respond(completion, request), None

    def pasted(self, payload: Any) -> bool:
        """Whether an answer is this API's own response object, pasted whole."""
        return False

    def accept_recorded(
        self,
        response: Any,
        chunks: list[dict[str, Any]] | None,
        request: dict[str, Any],
        view: dict[str, Any],
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """A response recorded elsewhere (a provider, a bundle), checked: what to store."""
        raise NotImplementedError

    def redact_response(self, response: Any, redact: Callable[[Any], Any]) -> Any:
        """`redact` applied to a response's text. An API whose responses carry binary data as text
        (embeddings' base64 vectors) keeps it out: no secret is written in it, and a pattern that
        matched by chance would corrupt it."""
        return redact(response)

    def response_id(self, response: dict[str, Any]) -> str | None:
        """The id other requests may refer to this response by (Responses API), else None."""
        return None

    def usage(self, response: dict[str, Any]) -> tuple[int, int]:
        """(input, output) tokens a provider reported, for the record-through token cap."""
        raise NotImplementedError

    def render(
        self,
        req: Request,
        response: dict[str, Any],
        chunks: list[dict[str, Any]] | None,
        expand: bool,
        now: float,
    ) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
        """What a replay sends: the response body, or (for a stream request) the events to stream."""
        raise NotImplementedError

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """A kept hit's rendered body, stamped for one more reply (fresh ids or times as the API has them)."""
        raise NotImplementedError

    def stamps(self, body: dict[str, Any]) -> dict[str, Any]:
        """The members of a rendered body that restamp() renews (all `stamped` ones it has)."""
        return {name: body[name] for name in self.stamped if name in body}

    def restamp_json(self, data: bytes, stamps: dict[str, Any], req: Request, now: float) -> bytes:
        """A kept body's bytes (rendered with these `stamps`) stamped afresh for one more reply: each
        stamped member's bytes replaced, as restamp() would renew it. The kept body holds each
        member's bytes exactly once (kept_json()); no other byte changes, so no re-serialisation."""
        fresh = self.restamp(dict(stamps), req, now)
        for name, old in stamps.items():
            new = fresh.get(name, old)
            if new != old:
                data = data.replace(_member(name, old), _member(name, new), 1)
        return data

    def kept_json(
        self, body: dict[str, Any], data: bytes | None = None
    ) -> tuple[bytes, dict[str, Any]] | None:
        """A rendered body as bytes (`data`, when it was sent as jsonio.compact() wrote it) to send
        again through restamp_json(), with its stamps; None when a stamped member's bytes are not
        found exactly once in them (then it is rendered each time)."""
        data, stamps = jsonio.compact(body) if data is None else data, self.stamps(body)
        if all(data.count(_member(name, value)) == 1 for name, value in stamps.items()):
            return data, stamps
        return None

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        """The events as server-sent events on the wire, as the API frames them."""
        raise NotImplementedError

    def streams_array(self, in_path: tuple[str, ...], query: str) -> bool:
        """Whether a call on this route (`in_path`: what its path says, `query`: its query string) wants
        its stream as one JSON array rather than server-sent events (json_array())."""
        return False

    def json_array(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        """A stream's server-sent events (as sse() frames them) as one JSON array, sent as they come."""
        raise NotImplementedError

    def keeps_json(self, req: Request, recorded: dict[str, Any]) -> bool:
        """Whether a rendered body of this recorded response may be kept and sent again through
        restamp_json(): yes when restamp() renews its stamps as render() does (no when, with restamp
        `recorded`, the response has no stamps of its own to keep and each render makes fresh ones)."""
        return True

    def keeps_stream(self, req: Request) -> bool:
        """Whether a replayed stream of this request may be kept as bytes and sent again through
        restamp_sse() (no by default: its events carry ids this dialect does not know how to renew)."""
        return False

    def restamp_sse(self, data: bytes, first: dict[str, Any], req: Request, now: float) -> bytes:
        """A kept stream's bytes, kept with these stamps (stream_stamps()), stamped for one more reply."""
        raise NotImplementedError

    def stream_stamps(self, first: dict[str, Any], data: bytes) -> dict[str, Any] | None:
        """What a kept stream (`data`, whose first event is `first`) is kept with for restamp_sse():
        its stamps, and where a dialect may note where they are in `data` (so that each reply need
        not search for them); None when the stream is not to be kept."""
        return self.stamps(first)

    def upstream(self, settings: Any) -> tuple[str, str | None]:
        """The provider's base URL and key for this API (server configuration only)."""
        return settings.upstream_url, settings.upstream_key

    def upstream_target(self, body: dict[str, Any]) -> str:
        """The provider's path for this request, under its base URL (the Gemini API's names the model)."""
        return self.upstream_path

    def upstream_headers(self, key: str, body: dict[str, Any]) -> dict[str, str]:
        """The headers of the provider request: the server's key, never anything of the app's."""
        return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        """The JSON sent to the provider for this request (the app's own, adjusted where the API needs)."""
        return body

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """A provider's streamed events as (response, chunks) to store."""
        raise NotImplementedError

    def relay(self, block: bytes, data: Any, req: Request) -> bytes | None:
        """What the app gets of one event a provider streams (record-through passes streams on live)."""
        return block + b"\n\n"

    def stream_end(self, req: Request) -> bytes:
        """What ends a stream the app gets, once the provider's has ended."""
        return b""

    def stream_error(self, exc: SemulaError, req: Request) -> bytes:
        """The event that tells the app its stream broke."""
        return b"data: " + json.dumps(exc.to_dict(), separators=(",", ":")).encode() + b"\n\n"


def typed_sse(events: list[dict[str, Any]]) -> Iterator[bytes]:
    """`event: TYPE` + `data: JSON` server-sent events, as the Responses and Anthropic APIs frame them."""
    for event in events:
        kind = str(event.get("type", "message")).encode("ascii", "replace")
        data = jsonio.compact(event)
        yield b"event: " + kind + b"\ndata: " + data + b"\n\n"


def tool_call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    """A common answer's tool call for a call whose arguments an API gives as an object."""
    text = json.dumps(arguments or {}, separators=(",", ":"), ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def common_answer(
    model: Any, texts: list[str], calls: list[dict[str, Any]], finish: str, prompt: int, produced: int
) -> dict[str, Any]:
    """The common answer (a chat.completion) of a response's texts and tool calls, with its usage."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts else None}
    if calls:
        message["tool_calls"] = calls
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": produced, "total_tokens": prompt + produced},
    }


def answer_of(completion: dict[str, Any]) -> tuple[str | None, str | None, list[tuple[str, str, Any]]]:
    """A validated common answer's finish reason, text (or refusal) and tool calls as (id, name,
    arguments as an object): what each API's respond() renders in its own shape."""
    choice = completion["choices"][0]
    message = choice["message"]
    calls = [
        (call["id"], call["function"]["name"], json.loads(call["function"]["arguments"] or "{}"))
        for call in message.get("tool_calls") or ()
    ]
    return choice.get("finish_reason"), message.get("content") or message.get("refusal"), calls


def _builtin() -> tuple[Dialect, ...]:
    from semula.dialects.anthropic_messages import AnthropicMessages
    from semula.dialects.gemini import Gemini
    from semula.dialects.gemini_embeddings import GeminiEmbeddings
    from semula.dialects.openai_chat import OpenAIChat
    from semula.dialects.openai_embeddings import OpenAIEmbeddings
    from semula.dialects.openai_responses import OpenAIResponses

    return (
        OpenAIChat(),
        OpenAIResponses(),
        OpenAIEmbeddings(),
        AnthropicMessages(),
        Gemini(),
        GeminiEmbeddings(),
    )


DIALECTS: dict[str, Dialect] = {}
_table: Table | None = None  # the routes of DIALECTS, remade when it changes


def _load() -> None:
    if not DIALECTS:
        DIALECTS.update((d.name, d) for d in _builtin())  # as register() would, one table for all
        _remake()


def register(dialect: Dialect) -> None:
    """Speak one more API: the one call a new API needs. Its routes are served by the proxy, their
    errors in its envelope, their calls counted under their route templates, and its name is in the
    OpenAPI document's `api` values (docs/decisions/0064-one-registration-per-api.md)."""
    _load()
    if dialect.name in DIALECTS:
        raise ValueError(f"an API called {dialect.name!r} is registered already")
    DIALECTS[dialect.name] = dialect
    _remake()


def unregister(name: str) -> None:
    """Speak an API registered with register() no more."""
    _load()
    del DIALECTS[name]
    _remake()


def _remake() -> None:
    """The route table of the registry as it now is, swapped in whole (a request sees one or the other)."""
    global _table
    _table = Table(DIALECTS.values(), DIALECTS[CHAT])


def table() -> Table:
    """The routes of every registered API (semula/dialects/routes.py)."""
    if _table is None:
        _load()
    return _table  # type: ignore[return-value]


def get(name: str | None) -> Dialect:
    """The dialect called `name` (None is Chat Completions, as rows and bundles from before dialects)."""
    if not DIALECTS:
        _load()
    dialect = DIALECTS.get(name or CHAT)
    if dialect is None:
        raise BadRequest(f"unknown api {name!r}; this server speaks: {', '.join(sorted(DIALECTS))}.")
    return dialect


def transport_fields() -> frozenset[str]:
    """The request fields some API leaves out of its fingerprint. Each is a transport field wherever the
    provider takes it (the others refuse it as unknown), so an ignore_fields pointer under one never
    matches."""
    get(CHAT)
    return frozenset().union(*(dialect.transport_fields for dialect in DIALECTS.values()))


def known(name: str) -> bool:
    """Whether an API called `name` is registered now."""
    if not DIALECTS:
        _load()
    return name in DIALECTS


def spoken() -> str:
    """The APIs registered, for people: "Chat Completions, Responses, … and Gemini embeddings"."""
    if not DIALECTS:
        _load()
    titles = [dialect.title for dialect in DIALECTS.values()]
    return ", ".join(titles[:-1]) + " and " + titles[-1] if len(titles) > 1 else "".join(titles)


def sdk_env(root: str, key: str | None = None) -> dict[str, str]:
    """The environment that points every registered API's SDKs at a semula server at `root` (without
    /v1), with `key` as their key (without one, their base URLs only)."""
    if not DIALECTS:
        _load()
    return {
        name: value.format(root=root, key=key)
        for dialect in DIALECTS.values()
        for name, value in dialect.sdk_env
        if key is not None or "{key}" not in value
    }


def names() -> list[str]:
    get(CHAT)
    return sorted(DIALECTS)


def _member(name: str, value: Any) -> bytes:
    """An object member's bytes as jsonio.compact() writes them: `"name":value`."""
    return jsonio.compact(name) + b":" + jsonio.compact(value)


SPANS = "spans"  # stream_stamps(): where a kept stream's stamp values are in its bytes (stamp_spans())


def stamp_spans(data: bytes, key: bytes, value: bytes, after: bytes = b"") -> list[int]:
    """[start, end, start, end, ...] of each `value` that follows `key` (and is followed by `after`)
    in `data`, in order: where a kept stream holds a stamp, for splice()."""
    found, mark, at = [], key + value + after, data.find(key + value + after)
    while at != -1:
        start = at + len(key)
        found += (start, start + len(value))
        at = data.find(mark, at + len(mark))
    return found


def splice(data: bytes, spans: Sequence[int], new: bytes) -> bytes:
    """`data` with the bytes of each span (stamp_spans()) replaced by `new`: one pass of C code over
    the bytes, where bytes.replace() scans them twice for each stamp (a kept Chat stream of 9 KB
    spent 110,000 instructions a reply there, more than a whole kept hit's rendering)."""
    return new.join(_cutter(tuple(spans))(data))


@functools.lru_cache(maxsize=1024)
def _cutter(spans: tuple[int, ...]) -> Callable[[bytes], tuple[bytes, ...]]:
    """What cuts a kept stream's bytes around these spans: its pieces between them, as a tuple."""
    bounds = (0, *spans, None)
    return operator.itemgetter(*(slice(bounds[i], bounds[i + 1]) for i in range(0, len(bounds), 2)))

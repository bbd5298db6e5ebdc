"""OpenAI Chat Completions (`POST /v1/chat/completions`): the first dialect, and the common shape itself.

A chat request is its own conversation view and a chat.completion is the common answer, so most of
this module hands straight through to the shared answer, fingerprint and stream code.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from semula.core import answers, chat_requests, jsonio, stream, templates
from semula.core import fingerprint as fp
from semula.core.errors import BadRequest, InvalidAnswer
from semula.dialects import CHAT, SPANS, Dialect, Request, splice, stamp_spans
from semula.dialects.routes import Route


def response_id() -> str:
    # An id, not a secret: 96 bits from the process's own generator (reseeded in every forked child)
    # rather than a system call for os.urandom, a twentieth of a kept hit's CPU in a virtual machine.
    return f"chatcmpl-{random.getrandbits(96):024x}"


def stamp_completion(
    completion: dict[str, Any], model: str, now: float, *, fresh: bool = True
) -> dict[str, Any]:
    """A completion as the app receives it: a fresh id and created (unless `fresh` is off and it has
    recorded ones), the model it was recorded with (the request's when it has none)."""
    recorded_id, recorded_created = completion.get("id"), completion.get("created")
    return {
        "id": recorded_id if not fresh and recorded_id else response_id(),
        "object": "chat.completion",
        "created": recorded_created if not fresh and isinstance(recorded_created, int) else int(now),
        "model": completion.get("model") or model,
        **{k: v for k, v in completion.items() if k not in ("id", "object", "created", "model")},
    }


def _with_refusal(completion: dict[str, Any]) -> dict[str, Any]:
    """Messages carry `refusal` (null when none), as the API's own always do: entries from before had none."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or all(
        isinstance(c, dict) and isinstance(c.get("message"), dict) and "refusal" in c["message"]
        for c in choices
    ):
        return completion
    patched = []
    for choice in choices:
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            choice = {**choice, "message": {**choice["message"], "refusal": choice["message"].get("refusal")}}
        patched.append(choice)
    return {**completion, "choices": patched}


class OpenAIChat(Dialect):
    name = CHAT
    title = "Chat Completions"
    routes = (Route("/v1/chat/completions", "/v1/chat/completions"),)
    stamped = ("id", "created")
    upstream_path = "/chat/completions"
    transport_fields = fp.TRANSPORT_FIELDS

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise BadRequest(
                "you must provide a model parameter", param="model", code="missing_required_parameter"
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty array", param="messages")
        chat_requests.check(body)
        stream_on = body.get("stream") is True
        options = body.get("stream_options")
        include_usage = stream_on and isinstance(options, dict) and options.get("include_usage") is True
        return Request(model, stream_on, include_usage)

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        return fp.message_texts(request)

    def conversation(self, request, history=()):
        return request

    def respond(self, completion, request, *, response_id=None):
        return answers.complete_completion(completion, request)

    def common(self, response, chunks):
        if not response.get("choices") and chunks:
            return stream.assemble_chunks(chunks)
        return response

    def accept(self, payload, request, view):
        wanted = answers.choices_wanted(view)
        if isinstance(payload, dict) and "choices" in payload:
            # A whole completion pasted by an answerer: kept as given, checked, what it lacks filled in.
            answers.check_completion(payload, view)
            if wanted > 1 and len(payload["choices"]) != wanted:
                raise InvalidAnswer(
                    f"the request asks for n={wanted} choices; give {wanted}", param="choices"
                )
            return answers.complete_completion(payload, view), None
        if wanted > 1:
            raise InvalidAnswer(
                f"the request asks for n={wanted} choices: answer "
                f'{{"choices": [{{"message": {{"content": "…"}}}}, …]}} with {wanted} of them',
                param="choices",
            )
        completion = answers.accept_answer(payload, view)
        return self.respond(completion, request), None

    def accept_recorded(self, response, chunks, request, view):
        if isinstance(response, dict) and "choices" in response:
            # What a provider sent (or a bundle holds) is stored as it is, once checked.
            answers.check_completion(response, view)
            return response, chunks
        if chunks and not response:
            return self.accept_recorded(stream.assemble_chunks(chunks), chunks, request, view)
        # Any other answer form (a bundle written by hand, say) is an answer like an agent's.
        return self.accept(response, request, view)[0], chunks

    def usage(self, response):
        usage = response.get("usage") or {}
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)

    def render(self, req, response, chunks, expand, now):
        """The response for a stored answer: a completion, or (for stream requests) the chunks to send."""
        if not req.stream:
            completion = response
            if completion is None or not completion.get("choices"):
                completion = stream.assemble_chunks(chunks or [])
            out = templates.expand_completion(completion, req.model, now) if expand else completion
            return stamp_completion(_with_refusal(out), req.model, now, fresh=req.fresh), None
        if chunks:
            body = stream.replay_chunks(
                chunks, req.include_usage, response.get("usage") if response else None
            )
        else:
            body = stream.synthesize_chunks(response, req.include_usage)
        if expand:
            body = templates.expand_chunks(body, req.model, now)
        recorded = next((c for c in chunks or () if c.get("id")), None)
        if not req.fresh and recorded is not None:
            created = recorded.get("created") or int(now)
            return None, stream.stamp_chunks(body, recorded["id"], created, req.model)
        return None, stream.stamp_chunks(body, response_id(), int(now), req.model)

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """A kept hit's response, stamped afresh for one more reply (or kept, with restamp recorded)."""
        return stamp_completion(body, req.model, now, fresh=req.fresh)

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        return stream.sse_lines(events)

    def keeps_json(self, req: Request, recorded: dict[str, Any]) -> bool:
        # With restamp off, a completion keeps its recorded id and created when it has them and gets
        # fresh ones when it has not, each render; a kept hit would repeat its first reply's.
        return req.fresh or bool(
            recorded.get("choices") and recorded.get("id") and isinstance(recorded.get("created"), int)
        )

    def keeps_stream(self, req: Request) -> bool:
        # With restamp off, a stream keeps its recorded id when it has one and gets a fresh one when
        # it has none: such streams are rendered each time rather than kept.
        return req.fresh

    def stream_stamps(self, first: dict[str, Any], data: bytes) -> dict[str, Any]:
        """The stamps, and (SPANS) where each chunk holds them: from its `id`'s value to the end of its
        `created`'s, when every chunk has the same bytes between the two (the chunks render() makes,
        and a provider's); a reply then puts its own there without searching the stream twice."""
        stamps = self.stamps(first)
        if not isinstance(stamps.get("id"), str) or type(stamps.get("created")) is not int:
            return stamps
        old_id, old_created = jsonio.compact(stamps["id"]), str(stamps["created"]).encode()
        ids = stamp_spans(data, b'"id":', old_id, b",")
        createds = stamp_spans(data, b'"created":', old_created, b",")
        if not ids or len(ids) != len(createds):
            return stamps
        between = data[ids[1] : createds[0]]
        spans = []
        for at in range(0, len(ids), 2):
            start, end = ids[at], createds[at + 1]
            if not (spans[-1:] or [0])[0] <= start < end or data[ids[at + 1] : createds[at]] != between:
                return stamps
            spans += (start, end)
        return {**stamps, SPANS: spans}

    def restamp_sse(self, data: bytes, first: dict[str, Any], req: Request, now: float) -> bytes:
        """Every chunk carries the response's `id` and `created` (stamp_chunks()): both are replaced.

        Inside a JSON string a quote is escaped, so `"id":"…"` and `"created":…` can only be the
        chunks' own keys; a tool call's id is another value and stays.
        """
        old_id, old_created = jsonio.compact(first["id"]), str(first["created"]).encode()
        new_id, new_created = jsonio.compact(response_id()), str(int(now)).encode()
        spans = first.get(SPANS)
        if spans:  # kept with where they are (stream_stamps)
            return splice(
                data, spans, new_id + data[spans[0] + len(old_id) : spans[1] - len(old_created)] + new_created
            )
        data = data.replace(b'"id":' + old_id + b",", b'"id":' + new_id + b",")
        return data.replace(b'"created":' + old_created + b",", b'"created":' + new_created + b",")

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream") is True:  # usage is what the token cap counts
            return {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}
        return body

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        # OpenAI's error mid-stream is a chunk holding only `error`; a stream cut short leaves a choice
        # without its finish_reason. Neither is an answer to save.
        if any(isinstance(event, dict) and "error" in event for event in events):
            raise ValueError("the provider's stream carried an error")
        choices = [choice for event in events for choice in event.get("choices") or ()]
        finished = {choice.get("index", 0) for choice in choices if choice.get("finish_reason")}
        if not choices or finished != {choice.get("index", 0) for choice in choices}:
            raise ValueError("the provider's stream ended before its choices finished")
        return stream.assemble_chunks(events), events

    def relay(self, block: bytes, data: Any, req: Request) -> bytes | None:
        if req.include_usage or not isinstance(data, dict):
            return block + b"\n\n"
        # semula asked the provider for usage (the token cap counts it); the app did not.
        if not data.get("choices") and data.get("usage"):
            return None
        if "usage" in data:
            data = {key: value for key, value in data.items() if key != "usage"}
            return b"data: " + json.dumps(data, separators=(",", ":")).encode("ascii") + b"\n\n"
        return block + b"\n\n"

    def stream_end(self, req: Request) -> bytes:
        return stream.DONE

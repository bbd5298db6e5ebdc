"""OpenAI Chat Completions (`POST /v1/chat/completions`): the first dialect, and the common shape itself.

A chat request is its own conversation view and a chat.completion is the common answer, so most of
this module hands straight through to the shared answer, fingerprint and stream code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from semula import chat_requests, stream, templates
from semula import fingerprint as fp
from semula.dialects import CHAT, Dialect, Request
from semula.errors import BadRequest


def response_id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()


def stamp_completion(completion: dict[str, Any], model: str, now: float) -> dict[str, Any]:
    """A completion as the app receives it: a fresh id and created, the request's model."""
    return {
        "id": response_id(),
        "object": "chat.completion",
        "created": int(now),
        "model": model,
        **{k: v for k, v in completion.items() if k not in ("id", "object", "created", "model")},
    }


class OpenAIChat(Dialect):
    name = CHAT
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
        return completion

    def common(self, response, chunks):
        if not response.get("choices") and chunks:
            return stream.assemble_chunks(chunks)
        return response

    def accept_recorded(self, response, chunks, request, view):
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
            return stamp_completion(out, req.model, now), None
        if chunks:
            body = stream.replay_chunks(
                chunks, req.include_usage, response.get("usage") if response else None
            )
        else:
            body = stream.synthesize_chunks(response, req.include_usage)
        if expand:
            body = templates.expand_chunks(body, req.model, now)
        return None, stream.stamp_chunks(body, response_id(), int(now), req.model)

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        """A kept hit's response, stamped afresh for one more reply."""
        return stamp_completion(body, req.model, now)

    def sse(self, events: list[dict[str, Any]]) -> Iterator[bytes]:
        return stream.sse_lines(events)

    def upstream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("stream") is True:  # usage is what the token cap counts
            return {**body, "stream_options": {**(body.get("stream_options") or {}), "include_usage": True}}
        return body

    def from_stream(self, events: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        return stream.assemble_chunks(events), events

"""The Gemini API's embeddings (`POST /v1beta/models/{model}:embedContent` and `:batchEmbedContents`).

As on the other Gemini routes, the path's model is kept in the stored request as `model`. One
`embedContent` request is one input (`content`'s text parts, joined); a `batchEmbedContents` request
is one input per item of `requests`, answered in order. Responses are stored as Google sends them,
numbers as JSON floats (`{"embedding": {"values": […]}}`, `{"embeddings": [{"values": […]}, …]}`).
The view, the answer forms and synthetic vectors are those of OpenAI embeddings
(docs/decisions/0035-embeddings.md, docs/decisions/0055-gemini-api.md).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from semula.core import vectors
from semula.core.errors import BadRequest, InvalidAnswer
from semula.dialects import GEMINI_EMBEDDINGS, Dialect, Request
from semula.dialects.gemini import Gemini, google_error, methods
from semula.dialects.gemini_checks import OWN, bad, wrong_type
from semula.dialects.openai_embeddings import embeddings_view, vector_numbers
from semula.dialects.routes import CALL

MAX_REQUESTS = 250  # Google's limit on one batch's requests
TASK_TYPES = (
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
)
# Vector lengths of the models whose length is known, when the request gives no outputDimensionality.
DEFAULT_DIMENSIONS = {
    "gemini-embedding-001": 3072,
    "text-embedding-004": 768,
    "embedding-001": 768,
}
FALLBACK_DIMENSIONS = 768


def items(request: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The request's inputs as embedContent requests: itself, or each item of a batch's `requests`."""
    batch = request.get("requests")
    if isinstance(batch, list):
        return [item for item in batch if isinstance(item, Mapping)]
    return [request]


def input_text(item: Mapping[str, Any]) -> str:
    """An input's text: the text parts of its `content`, joined."""
    parts = (item.get("content") or {}).get("parts") if isinstance(item.get("content"), dict) else None
    return "".join(p["text"] for p in parts or () if isinstance(p, dict) and isinstance(p.get("text"), str))


def expected_length(request: Mapping[str, Any]) -> int | None:
    """How many numbers each vector has: outputDimensionality (of the first input), else the model's."""
    wanted = items(request)[0].get("outputDimensionality") if items(request) else None
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        return wanted
    return DEFAULT_DIMENSIONS.get(str(request.get("model")))


class GeminiEmbeddings(Dialect):
    name = GEMINI_EMBEDDINGS
    title = "Gemini embeddings"
    routes = methods(("embedContent", CALL), ("batchEmbedContents", CALL))
    summary = "POST /v1beta/models/{model}:embedContent and :batchEmbedContents"
    owns_prefix = "v1beta"
    upstream_model_applies = False
    upstream_path = "/models"
    transport_fields = frozenset()
    makes_vectors = True

    sdk_env = Gemini.sdk_env
    api_key = Gemini.api_key
    with_route = Gemini.with_route
    upstream = Gemini.upstream
    upstream_headers = Gemini.upstream_headers
    upstream_body = Gemini.upstream_body

    def upstream_target(self, body: dict[str, Any]) -> str:
        method = "batchEmbedContents" if "requests" in body else "embedContent"
        return f"/models/{urllib.parse.quote(str(body['model']), safe='')}:{method}"

    def error_body(self, exc):
        return google_error(exc)

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict):
            raise BadRequest("Invalid JSON payload received. The body must be a JSON object.", code=OWN)
        if "requests" in body:
            batch = body["requests"]
            if not isinstance(batch, list):
                raise wrong_type("requests", "TYPE_MESSAGE", batch)
            if not batch:
                raise _bad("requests must not be empty.", "requests")
            if len(batch) > MAX_REQUESTS:
                raise _bad(f"at most {MAX_REQUESTS} requests are allowed per batch.", "requests")
            for i, item in enumerate(batch):
                if not isinstance(item, dict):
                    raise wrong_type(f"requests[{i}]", "TYPE_MESSAGE", item)
                _check_item(item, f"requests[{i}].")
        else:
            _check_item(body, "")
        return Request(str(body["model"]), False)

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        for item in items(request):
            content = item.get("content")
            for part in (content.get("parts") if isinstance(content, dict) else None) or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield part, "text"

    def conversation(self, request, history=()):
        texts = [input_text(item) for item in items(request)]
        return embeddings_view(request.get("model"), texts, expected_length(request))

    # Answers

    def common(self, response, chunks):
        vectors_ = _vectors(response)
        size = len(vectors_[0]) if vectors_ else 0
        text = f"{len(vectors_)} embeddings of {size} numbers"
        return {
            "object": "chat.completion",
            "model": None,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        }

    def accept(self, payload, request, view):
        if isinstance(payload, dict) and ("embedding" in payload or _pasted_batch(payload)):
            return self.accept_recorded(payload, None, request, view)
        if (
            not isinstance(payload, dict)
            or set(payload) != {"embeddings"}
            or not isinstance(payload["embeddings"], list)
        ):
            raise InvalidAnswer(
                f'an answer to an embeddings call is {{"embeddings": [[…], …]}} with one vector per input '
                f"({len(items(request))}), or a whole embedContent or batchEmbedContents response",
                param="embeddings",
            )
        given = [(f"embeddings[{i}]", vector) for i, vector in enumerate(payload["embeddings"])]
        return shaped(request, _checked(given, request)), None

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict):
            raise InvalidAnswer("an embeddings response is a JSON object", param="embedding")
        if "embedding" in response:
            embedding = response["embedding"]
            given = [("embedding.values", embedding.get("values") if isinstance(embedding, dict) else None)]
        elif isinstance(response.get("embeddings"), list):
            given = [
                (f"embeddings[{i}].values", item.get("values") if isinstance(item, dict) else None)
                for i, item in enumerate(response["embeddings"])
            ]
        else:
            raise InvalidAnswer('an embeddings response has "embedding" or "embeddings"', param="embeddings")
        checked = _checked(given, request)
        if "requests" in request and "embedding" in response:
            raise InvalidAnswer("a batch is answered with embeddings, one per request", param="embeddings")
        # What a provider sent is kept as sent (fields semula does not know too), numbers checked.
        return {**response, **shaped(request, checked)}, None

    def usage(self, response):
        usage = response.get("usageMetadata") or {}
        return int(usage.get("promptTokenCount") or 0), 0

    def redact_response(self, response, redact):
        return response  # numbers only: a pattern that matched by chance would corrupt them

    # Responses

    def render(self, req, response, chunks, expand, now):
        return response, None

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        return body  # an embeddings response has no id or time of its own

    # Synthetic vectors (semula/service/synthetic.py)

    def synthetic_bytes(self, request: Mapping[str, Any]) -> int:
        """About how long the synthetic answer is as stored: JSON floats of ~20 characters."""
        return len(items(request)) * (expected_length(request) or FALLBACK_DIMENSIONS) * 20

    def synthetic_response(self, request: Mapping[str, Any]) -> dict[str, Any]:
        model, size = str(request.get("model")), expected_length(request) or FALLBACK_DIMENSIONS
        made = [vectors.synthetic(model, input_text(item), size) for item in items(request)]
        return shaped(request, made)


def shaped(request: Mapping[str, Any], made: list[list[float]]) -> dict[str, Any]:
    """The response for the request's method: one `embedding`, or a batch's `embeddings`."""
    if "requests" in request:
        return {"embeddings": [{"values": values} for values in made]}
    return {"embedding": {"values": made[0]}}


def _bad(message: str, param: str) -> BadRequest:
    error = bad(message, param)
    error.message = error.message.replace("GenerateContentRequest", "EmbedContentRequest")
    return error


def _check_item(item: dict[str, Any], where: str) -> None:
    content = item.get("content")
    if content is None:
        raise _bad("content is not specified", f"{where}content")
    if not isinstance(content, dict):
        raise wrong_type(f"{where}content", "TYPE_MESSAGE", content)
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        raise _bad("content.parts must not be empty.", f"{where}content.parts")
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not part:
            raise _bad(
                "required oneof field 'data' must have one initialized field", f"{where}content.parts[{j}]"
            )
        if "text" in part and not isinstance(part["text"], str):
            raise wrong_type(f"{where}content.parts[{j}].text", "TYPE_STRING", part["text"])
    task = item.get("taskType")
    if task is not None and task not in TASK_TYPES:
        raise wrong_type(f"{where}taskType", "TYPE_ENUM", task)
    size = item.get("outputDimensionality")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int):
            raise wrong_type(f"{where}outputDimensionality", "TYPE_INT32", size)
        if size < 1:
            raise _bad("output_dimensionality must be positive.", f"{where}outputDimensionality")
    title = item.get("title")
    if title is not None and not isinstance(title, str):
        raise wrong_type(f"{where}title", "TYPE_STRING", title)


def _pasted_batch(payload: dict[str, Any]) -> bool:
    found = payload.get("embeddings")
    return isinstance(found, list) and bool(found) and all(isinstance(item, dict) for item in found)


def _vectors(response: Mapping[str, Any]) -> list[list[Any]]:
    if isinstance(response.get("embedding"), dict):
        return [response["embedding"].get("values") or []]
    return [item.get("values") or [] for item in response.get("embeddings") or () if isinstance(item, dict)]


def _checked(given: list[tuple[str, Any]], request: Mapping[str, Any]) -> list[list[float]]:
    """Each vector checked: finite numbers, one per input, all of one length, the length asked for."""
    count = len(items(request))
    if len(given) != count:
        raise InvalidAnswer(
            f"{len(given)} vectors for {count} inputs: give one per input", param="embeddings"
        )
    want, first, out = expected_length(request), None, []
    for param, vector in given:
        if isinstance(vector, str):  # base64 is OpenAI's; Google sends numbers
            raise InvalidAnswer("a vector is a list of numbers", param=param)
        try:
            numbers = vector_numbers(vector)
        except ValueError as exc:
            raise InvalidAnswer(str(exc), param=param) from None
        first = len(numbers) if first is None else first
        if want is not None and len(numbers) != want:
            raise InvalidAnswer(f"a vector of {len(numbers)} numbers; this call wants {want}", param=param)
        if len(numbers) != first:
            raise InvalidAnswer(
                f"a vector of {len(numbers)} numbers, the first has {first}: all have one length", param=param
            )
        out.append(numbers)
    return out

"""OpenAI Embeddings (`POST /v1/embeddings`): one vector per input, as a list object.

`encoding_format` is transport: an entry stores each vector as base64 of little-endian float32 (as
the API sends it for `base64`), and a replay renders floats or base64 as the request asks, so one
recording serves the SDK's default (base64) and `float` alike. A string input and a one-string
array are the same request. A batch is one entry; it is not put together from single-input
entries (docs/decisions/0035-embeddings.md).

The conversation view lists the inputs as user messages, with `embeddings` (how many vectors of
how many numbers) and a note; an answer is `{"embeddings": [[…], …]}` or a whole list response.
"""

from __future__ import annotations

import binascii
import json
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from semula.core import answers, vectors
from semula.core.errors import BadRequest, InvalidAnswer
from semula.dialects import Dialect, Request
from semula.dialects.routes import Route

NAME = "openai.embeddings"
ENCODINGS = ("float", "base64")
MAX_INPUTS = 2048
# Token ids summed over a request's inputs: OpenAI refuses more for every embedding model. Counted
# before the ids are looked at, so a request of a million ids costs its parse (decision 0054).
MAX_REQUEST_TOKENS = 300_000
MAX_DIMENSIONS = 65536
FLOAT32_MAX = 3.4028234663852886e38
# Vector lengths of the models whose length is known, when the request gives no `dimensions`.
DEFAULT_DIMENSIONS = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
}
# A model that always answers its full length (the API refuses `dimensions` for it).
FIXED_DIMENSIONS = ("text-embedding-ada-002",)
# The length of a synthetic vector for a model of unknown length asked without `dimensions`.
FALLBACK_DIMENSIONS = 1536


@dataclass(frozen=True)
class EmbeddingsRequest(Request):
    encoding_format: str = "float"


def _bad(message: str, param: str, code: str | None = "invalid_value") -> BadRequest:
    return BadRequest(message, param=param, code=code)


def inputs(value: Any) -> list[Any]:
    """The request's inputs as a list (a string, or one token array, is a list of one)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(_token(x) for x in value):
        return [value]
    return list(value) if isinstance(value, list) else []


def _token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _check_input(value: Any) -> None:
    form = (
        "'input' is a non-empty string, an array of up to 2048 non-empty strings, an array of token ids, "
        "or an array of such arrays."
    )
    if value is None:
        raise _bad("Missing required parameter: 'input'.", "input", "missing_required_parameter")
    if isinstance(value, str):
        if not value:
            raise _bad(f"Invalid 'input': an empty string. {form}", "input")
        return
    if not isinstance(value, list) or not value:
        raise _bad(f"Invalid 'input'. {form}", "input", "invalid_type")
    if len(value) > MAX_INPUTS:
        raise _bad(f"Invalid 'input': {len(value)} inputs. {form}", "input")
    tokens = sum(len(item) for item in value if isinstance(item, list))
    if tokens > MAX_REQUEST_TOKENS:
        error = BadRequest(
            f"Requested {tokens} tokens, max {MAX_REQUEST_TOKENS} tokens per request",
            code="max_tokens_per_request",
        )
        error.type = "max_tokens_per_request"  # as the API types it
        raise error
    if all(_token(x) for x in value):
        return
    # One form for the whole array: strings, or arrays of token ids (the API takes no mixture).
    strings = isinstance(value[0], str)
    for i, item in enumerate(value):
        if strings:
            good = isinstance(item, str) and item
        else:
            good = isinstance(item, list) and item and all(_token(x) for x in item)
        if not good:
            raise _bad(f"Invalid 'input[{i}]'. {form}", f"input[{i}]")


def expected_length(request: Mapping[str, Any]) -> int | None:
    """How many numbers each vector has: the request's `dimensions`, else the model's known length."""
    dimensions = request.get("dimensions")
    if isinstance(dimensions, int) and not isinstance(dimensions, bool):
        return dimensions
    return DEFAULT_DIMENSIONS.get(str(request.get("model")))


def input_text(item: Any) -> str:
    """An input as text: itself, or a token array as its JSON (what the view shows, what seeds synthetics)."""
    return item if isinstance(item, str) else "tokens: " + json.dumps(item, separators=(",", ":"))


def _canonical_body(body: Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(body, Mapping) and "input" in body and inputs(body["input"]):
        return {**body, "input": inputs(body["input"])}
    return body


class OpenAIEmbeddings(Dialect):
    name = NAME
    title = "Embeddings"
    routes = (Route("/v1/embeddings", "/v1/embeddings"),)
    upstream_path = "/embeddings"
    upstream_model_applies = False  # a project's upstream_model is a chat model: embeddings keep theirs
    transport_fields = frozenset({"encoding_format", "user"})
    makes_vectors = True

    def synthetic_bytes(self, request: Mapping[str, Any]) -> int:
        return synthetic_bytes(request)

    def synthetic_response(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return synthetic_response(request)

    def check(self, body: Any) -> Request:
        if not isinstance(body, dict):
            raise BadRequest("The body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise _bad("you must provide a model parameter", "model", "missing_required_parameter")
        _check_input(body.get("input"))
        dimensions = body.get("dimensions")
        if dimensions is not None:
            if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
                raise _bad("Invalid 'dimensions': it must be a whole number from 1.", "dimensions")
            if model in FIXED_DIMENSIONS:
                raise _bad("This model does not support specifying dimensions.", "dimensions")
            most = DEFAULT_DIMENSIONS.get(model, MAX_DIMENSIONS)
            if dimensions > most:
                raise _bad(f"Invalid 'dimensions': {model} has at most {most}.", "dimensions")
        encoding = body.get("encoding_format")
        if encoding is not None and encoding not in ENCODINGS:
            raise _bad(
                f"Invalid value for 'encoding_format' = {encoding!r}. Supported values are: 'float' and "
                "'base64'.",
                "encoding_format",
            )
        if body.get("user") is not None and not isinstance(body["user"], str):
            raise _bad("user must be a string.", "user", "invalid_type")
        return EmbeddingsRequest(model, False, encoding_format=encoding or "float")

    def texts(self, request: dict[str, Any]) -> Iterator[tuple[Any, Any]]:
        items = request.get("input")
        if isinstance(items, str):
            yield request, "input"
        elif isinstance(items, list):
            for i, item in enumerate(items):
                if isinstance(item, str):
                    yield items, i

    def fingerprint(
        self, body: Mapping[str, Any], ignore_fields: Iterable[str], normalize: Any, *, plain: bool = False
    ) -> str:
        # _canonical_body adds the defaults it fills in: those values were never read, so not plain.
        return super().fingerprint(_canonical_body(body), ignore_fields, normalize)

    def canonical(self, body: Mapping[str, Any], ignore_fields: Iterable[str], normalize: Any) -> Any:
        return super().canonical(_canonical_body(body), ignore_fields, normalize)

    def conversation(self, request, history=()):
        texts = [input_text(item) for item in inputs(request.get("input"))]
        return embeddings_view(request.get("model"), texts, expected_length(request))

    # Answers

    def common(self, response, chunks):
        data = response.get("data") if isinstance(response.get("data"), list) else []
        first = data[0].get("embedding") if data and isinstance(data[0], dict) else None
        size = vectors.length(first) if isinstance(first, str) else len(first or ())
        usage = response.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        return {
            "object": "chat.completion",
            "model": response.get("model"),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": f"{len(data)} embeddings of {size} numbers"},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": prompt, "completion_tokens": 0, "total_tokens": prompt},
        }

    def accept(self, payload, request, view):
        if isinstance(payload, dict) and "data" in payload:
            return self.accept_recorded(payload, None, request, view)
        if not isinstance(payload, dict) or set(payload) != {"embeddings"}:
            items = len(inputs(request.get("input")))
            raise InvalidAnswer(
                f'an answer to an embeddings call is {{"embeddings": [[…], …]}} with one vector per input '
                f'({items}), or a whole list response {{"object": "list", "data": […]}}',
                param="embeddings",
            )
        given = payload["embeddings"]
        if not isinstance(given, list):
            raise InvalidAnswer("embeddings is a list of vectors, one per input", param="embeddings")
        encoded = _checked([(f"embeddings[{i}]", v) for i, v in enumerate(given)], request, "embeddings")
        return list_response(request, encoded), None

    def accept_recorded(self, response, chunks, request, view):
        if not isinstance(response, dict) or not isinstance(response.get("data"), list):
            raise InvalidAnswer('an embeddings response is {"object": "list", "data": [...]}', param="data")
        if response.get("object", "list") != "list":
            raise InvalidAnswer("an embeddings response has object list", param="object")
        items = response["data"]
        for i, item in enumerate(items):
            if not isinstance(item, dict) or "embedding" not in item:
                raise InvalidAnswer("each item has an embedding", param=f"data[{i}].embedding")
            index = item.get("index", i)
            if isinstance(index, bool) or not isinstance(index, int):
                raise InvalidAnswer("index is a whole number", param=f"data[{i}].index")
        ordered = sorted(enumerate(items), key=lambda pair: pair[1].get("index", pair[0]))
        for position, (i, item) in enumerate(ordered):
            if item.get("index", i) != position:
                raise InvalidAnswer(
                    f"the items' indexes are 0 to {len(items) - 1}, once each", param=f"data[{i}].index"
                )
        encoded = _checked(
            [(f"data[{i}].embedding", item["embedding"]) for i, item in ordered], request, "data"
        )
        data = [
            {"object": "embedding", **item, "index": position, "embedding": text}
            for position, ((_, item), text) in enumerate(zip(ordered, encoded, strict=True))
        ]
        # What a provider sent is kept as sent (its model, usage, fields semula does not know).
        out = {**response, "data": data}
        for key, value in list_response(request, encoded).items():
            out.setdefault(key, value)
        return out, None

    def usage(self, response):
        usage = response.get("usage") or {}
        return int(usage.get("prompt_tokens") or 0), 0

    def redact_response(self, response, redact):
        data = response.get("data") if isinstance(response, dict) else None
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            return redact(response)
        # The vectors are numbers (base64 float32 is numbers too): the rest is redacted without them.
        shell = redact(
            {**response, "data": [{k: v for k, v in it.items() if k != "embedding"} for it in data]}
        )
        kept = [
            {key: value if key == "embedding" else shown[key] for key, value in item.items()}
            for item, shown in zip(data, shell["data"], strict=True)
        ]
        return {**shell, "data": kept}

    # Responses

    def render(self, req, response, chunks, expand, now):
        if getattr(req, "encoding_format", "float") == "base64":
            return response, None
        data = [
            {**item, "embedding": vectors.decode(item["embedding"])}
            if isinstance(item.get("embedding"), str)
            else item
            for item in response.get("data") or ()
        ]
        return {**response, "data": data}, None

    def restamp(self, body: dict[str, Any], req: Request, now: float) -> dict[str, Any]:
        return body  # an embeddings response has no id or time of its own


def embeddings_view(model: Any, texts: list[str], want: int | None) -> dict[str, Any]:
    """The conversation view of an embeddings call (of any API): one user message per input."""
    numbers = f"{want} numbers" if want else "the same number of numbers"
    return {
        "model": model,
        "messages": [{"role": "user", "content": text} for text in texts],
        "embeddings": {"inputs": len(texts), "dimensions": want},
        "notes": [
            "An embeddings call: each message is one input. Answer "
            f'{{"embeddings": [[0.1, …], …]}} with one vector per input ({len(texts)}), each of '
            f"{numbers}, in input order; or set the project's embeddings setting to synthetic."
        ],
    }


def list_response(request: Mapping[str, Any], encoded: list[str]) -> dict[str, Any]:
    """The list response for vectors already encoded, in input order, with the usage the API reports."""
    prompt = sum(
        answers.estimate_tokens(item) if isinstance(item, str) else len(item)
        for item in inputs(request.get("input"))
    )
    return {
        "object": "list",
        "data": [{"object": "embedding", "index": i, "embedding": text} for i, text in enumerate(encoded)],
        "model": request.get("model"),
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
    }


def synthetic_length(request: Mapping[str, Any]) -> int:
    """How many numbers each synthetic vector has: the length asked for, else FALLBACK_DIMENSIONS."""
    return expected_length(request) or FALLBACK_DIMENSIONS


def synthetic_bytes(request: Mapping[str, Any]) -> int:
    """About how long the synthetic answer to a checked request is as stored: base64 of float32."""
    size = synthetic_length(request)
    return len(inputs(request.get("input"))) * (size * 4 + 2) // 3 * 4


def synthetic_response(request: Mapping[str, Any]) -> dict[str, Any]:
    """The list response of synthetic vectors for a checked request: one per input, of the length asked
    for (the model's known length, else FALLBACK_DIMENSIONS)."""
    model = str(request.get("model"))
    size = synthetic_length(request)
    encoded = [
        vectors.encode(vectors.synthetic(model, input_text(item), size))
        for item in inputs(request.get("input"))
    ]
    return list_response(request, encoded)


def _checked(given: list[tuple[str, Any]], request: Mapping[str, Any], where: str) -> list[str]:
    """Each vector checked (finite numbers, one per input, all one length, the length asked for) and
    encoded as base64 float32."""
    items = len(inputs(request.get("input")))
    if len(given) != items:
        raise InvalidAnswer(f"{len(given)} vectors for {items} inputs: give one per input", param=where)
    want = expected_length(request)
    encoded, first = [], None
    for param, vector in given:
        try:
            numbers = vector_numbers(vector)
        except ValueError as exc:
            raise InvalidAnswer(str(exc), param=param) from None
        if first is None:
            first = len(numbers)
        if want is not None and len(numbers) != want:
            raise InvalidAnswer(f"a vector of {len(numbers)} numbers; this call wants {want}", param=param)
        if len(numbers) != first:
            raise InvalidAnswer(
                f"a vector of {len(numbers)} numbers, the first has {first}: all have one length", param=param
            )
        encoded.append(vector if isinstance(vector, str) else vectors.encode(numbers))
    return encoded


def vector_numbers(vector: Any) -> list[float]:
    if isinstance(vector, str):
        try:
            numbers = vectors.decode(vector)
        except (ValueError, binascii.Error):
            raise ValueError("a vector is a list of numbers, or base64 of little-endian float32") from None
    elif isinstance(vector, list):
        if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in vector):
            raise ValueError("a vector is a list of numbers")
        numbers = vector
    else:
        raise ValueError("a vector is a list of numbers, or base64 of little-endian float32")
    if not numbers:
        raise ValueError("a vector has at least one number")
    if not all(math.isfinite(x) and abs(x) <= FLOAT32_MAX for x in numbers):
        raise ValueError("a vector's numbers are finite float32 values")
    return numbers

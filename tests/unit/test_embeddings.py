"""The embeddings dialect and its vectors, without a database."""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from semula import dialects
from semula.core import answers, vectors
from semula.core.errors import BadRequest, InvalidAnswer
from semula.dialects import openai_embeddings

EMBEDDINGS = dialects.get(dialects.EMBEDDINGS)
SMALL = "text-embedding-3-small"


def body(inputs, **extra):
    return {"model": SMALL, "input": inputs, **extra}


def test_base64_is_little_endian_float32_as_the_api_sends_it():
    encoded = vectors.encode([1.0, -2.5, 0.1])
    assert base64.b64decode(encoded) == struct.pack("<3f", 1.0, -2.5, 0.1)
    assert vectors.decode(encoded) == list(struct.unpack("<3f", struct.pack("<3f", 1.0, -2.5, 0.1)))
    assert [vectors.length(vectors.encode([0.5] * n)) for n in (1, 2, 3, 1536)] == [1, 2, 3, 1536]


def test_synthetic_vectors_are_stable_unit_and_distinct():
    a = vectors.synthetic(SMALL, "the cat", 1536)
    assert a == vectors.synthetic(SMALL, "the cat", 1536)
    assert math.isclose(math.fsum(x * x for x in a), 1.0, rel_tol=1e-12)
    b = vectors.synthetic(SMALL, "the dog", 1536)
    assert a != b and abs(sum(x * y for x, y in zip(a, b, strict=True))) < 0.2
    assert vectors.synthetic("text-embedding-3-large", "the cat", 1536) != a
    assert len(vectors.synthetic(SMALL, "the cat", 256)) == 256
    # Pinned bytes: a change to the function would change every synthetic recording's replay.
    assert vectors.encode(vectors.synthetic(SMALL, "hello", 4)) == "cdtKv92nprwOfxA/metrvg=="


def test_synthetic_response_has_the_default_length_per_model_and_honours_dimensions():
    def lengths(request):
        response = openai_embeddings.synthetic_response(request)
        return [vectors.length(item["embedding"]) for item in response["data"]]

    assert lengths(body(["a", "b"])) == [1536, 1536]
    assert lengths({"model": "text-embedding-3-large", "input": "a"}) == [3072]
    assert lengths({"model": "text-embedding-ada-002", "input": "a"}) == [1536]
    assert lengths(body("a", dimensions=64)) == [64]
    assert lengths({"model": "my-local-embedder", "input": "a"}) == [1536]


def test_encoding_format_and_user_are_transport_and_a_string_is_a_batch_of_one():
    fingerprint = EMBEDDINGS.fingerprint(body("hi"), [], [])
    assert EMBEDDINGS.fingerprint(body(["hi"], encoding_format="base64", user="u1"), [], []) == fingerprint
    assert EMBEDDINGS.fingerprint(body("hi", dimensions=256), [], []) != fingerprint
    assert EMBEDDINGS.fingerprint(body(["hi", "there"]), [], []) != fingerprint
    # One token array is one input, as an array of them with one in it.
    assert EMBEDDINGS.fingerprint(body([1, 2, 3]), [], []) == EMBEDDINGS.fingerprint(
        body([[1, 2, 3]]), [], []
    )
    # The same JSON as another API's request is another request.
    assert fingerprint != dialects.get(dialects.CHAT).fingerprint(body("hi"), [], [])


def test_normalize_rules_apply_to_each_input():
    rules = [{"pattern": r"\d{4}-\d\d-\d\d", "replacement": "DATE"}]
    one = EMBEDDINGS.fingerprint(body(["on 2026-01-02", "fixed"]), [], rules)
    assert one == EMBEDDINGS.fingerprint(body(["on 2027-12-31", "fixed"]), [], rules)


@pytest.mark.parametrize(
    ("request_body", "param"),
    [
        ({"input": "x"}, "model"),
        ({"model": SMALL}, "input"),
        (body(""), "input"),
        (body([]), "input"),
        (body(["ok", ""]), "input[1]"),
        (body(["ok", 3]), "input[1]"),
        (body([[1, -2]]), "input[0]"),
        (body(["x"] * 2049), "input"),
        (body("x", dimensions=0), "dimensions"),
        (body("x", dimensions=True), "dimensions"),
        (body("x", dimensions=2000), "dimensions"),
        ({"model": "text-embedding-ada-002", "input": "x", "dimensions": 512}, "dimensions"),
        (body("x", encoding_format="int8"), "encoding_format"),
        (body("x", user=5), "user"),
    ],
)
def test_requests_the_api_refuses(request_body, param):
    with pytest.raises(BadRequest) as info:
        EMBEDDINGS.check(request_body)
    assert info.value.param == param


def test_the_view_and_shape_say_what_an_answer_is():
    request = body(["first", [5, 6]], dimensions=3)
    view = EMBEDDINGS.conversation(request)
    assert view["messages"] == [
        {"role": "user", "content": "first"},
        {"role": "user", "content": "tokens: [5,6]"},
    ]
    assert view["embeddings"] == {"inputs": 2, "dimensions": 3}
    assert '{"embeddings"' in view["notes"][0] and "each of 3 numbers" in view["notes"][0]
    shape = answers.shape(view)
    assert shape["skeleton"] == {"embeddings": [[], []]} and shape["embeddings"]["dimensions"] == 3


def test_an_answer_is_checked_and_stored_as_base64():
    request = body(["a", "b"], dimensions=2)
    view = EMBEDDINGS.conversation(request)
    response, chunks = EMBEDDINGS.accept({"embeddings": [[1, 0], [0.6, 0.8]]}, request, view)
    assert chunks is None and response["object"] == "list" and response["model"] == SMALL
    assert [item["index"] for item in response["data"]] == [0, 1]
    assert response["data"][1]["embedding"] == vectors.encode([0.6, 0.8])
    assert response["usage"]["prompt_tokens"] >= 2
    rendered, _ = EMBEDDINGS.render(EMBEDDINGS.check(request), response, None, False, 0)
    assert rendered["data"][0]["embedding"] == [1.0, 0.0]
    as_base64, _ = EMBEDDINGS.render(
        EMBEDDINGS.check({**request, "encoding_format": "base64"}), response, None, False, 0
    )
    assert as_base64 == response


@pytest.mark.parametrize(
    ("payload", "param", "words"),
    [
        ({"embeddings": [[1, 0]]}, "embeddings", "1 vectors for 2 inputs"),
        ({"embeddings": [[1, 0], [1, 0, 0]]}, "embeddings[1]", "wants 2"),
        ({"embeddings": [[1, 0], [1, "x"]]}, "embeddings[1]", "list of numbers"),
        ({"embeddings": [[1, 0], [1, True]]}, "embeddings[1]", "list of numbers"),
        ({"embeddings": [[1, 0], [1, 1e39]]}, "embeddings[1]", "finite"),
        ({"embeddings": [[1, 0], "not base64!"]}, "embeddings[1]", "base64"),
        ({"content": "hello"}, "embeddings", "one vector per input"),
        ("hello", "embeddings", "one vector per input"),
        ({"object": "list", "data": [{"index": 0, "embedding": [1, 0]}]}, "data", "1 vectors for 2"),
        (
            {"data": [{"index": 0, "embedding": [1, 0]}, {"index": 0, "embedding": [1, 0]}]},
            "data[1].index",
            "once each",
        ),
    ],
)
def test_answers_that_do_not_fit_are_refused_naming_the_field(payload, param, words):
    request = body(["a", "b"], dimensions=2)
    with pytest.raises(InvalidAnswer) as info:
        EMBEDDINGS.accept(payload, request, EMBEDDINGS.conversation(request))
    assert info.value.param == param and words in info.value.message


def test_without_dimensions_vectors_have_one_length_and_a_known_model_its_own():
    unknown = {"model": "my-embedder", "input": ["a", "b"]}
    view = EMBEDDINGS.conversation(unknown)
    EMBEDDINGS.accept({"embeddings": [[1, 2, 3], [4, 5, 6]]}, unknown, view)
    with pytest.raises(InvalidAnswer, match="the first has 3"):
        EMBEDDINGS.accept({"embeddings": [[1, 2, 3], [4, 5]]}, unknown, view)
    known = body("a")
    with pytest.raises(InvalidAnswer, match="wants 1536"):
        EMBEDDINGS.accept({"embeddings": [[1, 2, 3]]}, known, EMBEDDINGS.conversation(known))


def test_a_provider_response_is_kept_with_its_fields_in_input_order_and_base64():
    request = body(["a", "b"], dimensions=2)
    sent = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 1, "embedding": vectors.encode([0.0, 1.0])},
            {"object": "embedding", "index": 0, "embedding": [1.0, 0.0]},
        ],
        "model": "text-embedding-3-small",
        "usage": {"prompt_tokens": 2, "total_tokens": 2},
        "provider_extra": {"kept": True},
    }
    stored, _ = EMBEDDINGS.accept_recorded(sent, None, request, EMBEDDINGS.conversation(request))
    assert [item["embedding"] for item in stored["data"]] == [vectors.encode([1, 0]), vectors.encode([0, 1])]
    assert [item["index"] for item in stored["data"]] == [0, 1]
    assert stored["provider_extra"] == {"kept": True} and EMBEDDINGS.usage(stored) == (2, 0)
    preview = EMBEDDINGS.common(stored, None)["choices"][0]["message"]["content"]
    assert preview == "2 embeddings of 2 numbers"


def test_redaction_leaves_the_vectors_alone():
    from semula.core import redact

    # Base64 that an access-key pattern matches by chance: redacting it would corrupt the vector.
    lookalike = "AAA/AKIAABCDEFGHIJKLMNOP/AAAAAAA"
    assert redact.contains_secret(lookalike)
    response = {
        "object": "list",
        "data": [
            {
                "object": "embedding",
                "index": 0,
                "embedding": lookalike,
                "note": "key sk-abc123def456ghi789jkl",
            }
        ],
        "model": SMALL,
    }
    out = EMBEDDINGS.redact_response(response, redact.redact_obj)
    assert out["data"][0]["embedding"] == lookalike and list(out["data"][0]) == list(response["data"][0])
    assert "sk-abc123" not in json.dumps(out)


def test_token_ids_past_the_apis_300k_a_request_are_refused_as_it_refuses_them():
    at_most = [[7] * 1000] * 300
    assert EMBEDDINGS.check(body(at_most)).model == SMALL
    with pytest.raises(BadRequest) as info:
        EMBEDDINGS.check(body(at_most + [[7]]))
    error = info.value.to_dict()["error"]
    assert error == {
        "message": "Requested 300001 tokens, max 300000 tokens per request",
        "type": "max_tokens_per_request",
        "param": None,
        "code": "max_tokens_per_request",
    }

from __future__ import annotations

import copy
import hashlib
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semula.core import jsonio
from semula.core.errors import BadRequest
from semula.core.fingerprint import (
    ABSENT,
    TRANSPORT_FIELDS,
    canonical_json,
    canonical_request,
    closeness,
    difference,
    fingerprint,
    first_difference,
    validate_ignore_fields,
    validate_normalize,
)


def request(**overrides):
    body = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "temperature": 0.2,
    }
    body.update(overrides)
    return body


def test_fingerprint_is_versioned_sha256():
    assert re.fullmatch(r"v1:[0-9a-f]{64}", fingerprint(request()))


def test_canonical_json_sorts_keys_without_whitespace_and_keeps_unicode():
    assert (
        canonical_json({"b": "é", "a": [1, {"d": None, "c": True}]})
        == '{"a":[1,{"c":true,"d":null}],"b":"é"}'
    )


def test_key_order_does_not_matter():
    body = request()
    reordered = dict(reversed(list(body.items())))
    reordered["messages"] = [dict(reversed(list(m.items()))) for m in body["messages"]]
    assert fingerprint(reordered) == fingerprint(body)


# The test's own list, not the code's: a field dropped from TRANSPORT_FIELDS must fail here.
TRANSPORT = [
    "stream",
    "stream_options",
    "user",
    "metadata",
    "store",
    "service_tier",
    "prompt_cache_key",
    "safety_identifier",
]


@pytest.mark.parametrize("field", TRANSPORT)
def test_transport_fields_do_not_change_the_fingerprint(field):
    assert fingerprint(request(**{field: {"anything": 1}})) == fingerprint(request())
    assert fingerprint(request(**{field: "someone-else"})) == fingerprint(request())


def test_no_other_field_is_transport_only():
    assert set(TRANSPORT) == TRANSPORT_FIELDS


@pytest.mark.parametrize(
    "field, value", [("parallel_tool_calls", False), ("n", 2), ("temperature", 0.3), ("model", "gpt-4o")]
)
def test_semantic_fields_change_the_fingerprint(field, value):
    assert fingerprint(request(**{field: value})) != fingerprint(request())


def test_message_text_changes_the_fingerprint():
    changed = request()
    changed["messages"][1]["content"] = "What is the capital of Spain?"
    assert fingerprint(changed) != fingerprint(request())


def test_integral_floats_hash_like_integers_but_booleans_do_not():
    assert fingerprint(request(temperature=1.0)) == fingerprint(request(temperature=1))
    assert fingerprint(request(temperature=1.5)) != fingerprint(request(temperature=1))
    assert fingerprint(request(seed=True)) != fingerprint(request(seed=1))


def test_lone_surrogates_are_hashed_not_rejected():
    assert fingerprint(request(messages=[{"role": "user", "content": "\ud800"}])).startswith("v1:")


def test_canonical_request_is_a_copy():
    body = request(stream=True)
    before = copy.deepcopy(body)
    canonical = canonical_request(body, ["/messages/0/content"], [{"pattern": "France", "replacement": "X"}])
    assert body == before
    assert "stream" not in canonical
    assert canonical["messages"][1]["content"] == "What is the capital of X?"


def test_canonical_request_rejects_a_non_object():
    with pytest.raises(BadRequest):
        canonical_request(["not", "an", "object"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "pointer, expected",
    [
        ("/temperature", {"model": "m", "messages": [{"role": "user", "content": "hi"}], "a/b": 1, "m~n": 2}),
        (
            "/messages/0/content",
            {"model": "m", "messages": [{"role": "user"}], "temperature": 0, "a/b": 1, "m~n": 2},
        ),
        ("/messages/0", {"model": "m", "messages": [], "temperature": 0, "a/b": 1, "m~n": 2}),
        (
            "/a~1b",
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "m~n": 2},
        ),
        (
            "/m~0n",
            {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0, "a/b": 1},
        ),
    ],
)
def test_ignore_fields_remove_json_pointers(pointer, expected):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "temperature": 0,
        "a/b": 1,
        "m~n": 2,
    }
    assert canonical_request(body, [pointer]) == expected


def test_a_pointer_unescapes_tilde_one_before_tilde_zero():
    """RFC 6901: "/a~01b" names the key "a~1b" (not "a/b", which unescaping ~0 first would give)."""
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "a~1b": 1, "a/b": 2}
    assert canonical_request(body, ["/a~01b"]) == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "a/b": 2,
    }


@pytest.mark.parametrize(
    "pointer", ["", "/missing", "/messages/5", "/messages/-", "/messages/01", "/model/x"]
)
def test_ignore_fields_that_match_nothing_are_no_ops(pointer):
    body = request()
    assert canonical_request(body, [pointer]) == body


def test_ignore_fields_make_requests_match():
    a = request(seed=1)
    b = request(seed=2)
    assert fingerprint(a) != fingerprint(b)
    assert fingerprint(a, ["/seed"]) == fingerprint(b, ["/seed"])


def test_normalize_rewrites_string_content_and_text_parts_only():
    rules = [{"pattern": r"\d{4}-\d{2}-\d{2}", "replacement": "<date>"}]
    body = {
        "model": "model-2024-01-01",
        "messages": [
            {"role": "system", "content": "Today is 2024-05-01."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Since 2023-12-31?"},
                    {"type": "image_url", "image_url": {"url": "https://x/2024-01-01.png"}},
                ],
            },
        ],
    }
    canonical = canonical_request(body, normalize=rules)
    assert canonical["model"] == "model-2024-01-01"
    assert canonical["messages"][0]["content"] == "Today is <date>."
    assert canonical["messages"][1]["content"][0]["text"] == "Since <date>?"
    assert canonical["messages"][1]["content"][1]["image_url"]["url"] == "https://x/2024-01-01.png"


def test_normalize_rules_apply_in_order_with_group_references():
    rules = [
        {"pattern": r"id=(\w+)-\d+", "replacement": r"id=\1-N"},
        {"pattern": "N", "replacement": "n"},
    ]
    a = request(messages=[{"role": "user", "content": "fetch id=order-123"}])
    b = request(messages=[{"role": "user", "content": "fetch id=order-987"}])
    assert canonical_request(a, normalize=rules)["messages"][0]["content"] == "fetch id=order-n"
    assert fingerprint(a, normalize=rules) == fingerprint(b, normalize=rules)


def test_validate_ignore_fields_accepts_pointers():
    assert validate_ignore_fields(["", "/seed", "/messages/0/content", "/a~1b~0"]) == [
        "",
        "/seed",
        "/messages/0/content",
        "/a~1b~0",
    ]
    assert validate_ignore_fields(None) == []


@pytest.mark.parametrize("value", ["/seed", ["seed"], [3], ["/a~2"], ["/a~"], ["/x"] * 101])
def test_validate_ignore_fields_rejects(value):
    with pytest.raises(BadRequest) as caught:
        validate_ignore_fields(value)
    assert caught.value.param == "ignore_fields"


def test_validate_normalize_accepts_rules():
    rules = [{"pattern": r"(\d+)", "replacement": r"<\1>"}, {"pattern": "x"}]
    assert validate_normalize(rules) == [
        {"pattern": r"(\d+)", "replacement": r"<\1>"},
        {"pattern": "x", "replacement": ""},
    ]


@pytest.mark.parametrize(
    "value, param",
    [
        ({"pattern": "x"}, "normalize"),
        ([{"pattern": "x", "replacement": ""}] * 51, "normalize"),
        (["x"], "normalize[0]"),
        ([{"pattern": "x", "replacement": "", "flags": "i"}], "normalize[0]"),
        ([{"pattern": "ok", "replacement": ""}, {"pattern": "(", "replacement": ""}], "normalize[1].pattern"),
        ([{"pattern": "", "replacement": ""}], "normalize[0].pattern"),
        ([{"pattern": "a" * 501, "replacement": ""}], "normalize[0].pattern"),
        ([{"pattern": "(a)", "replacement": 1}], "normalize[0].replacement"),
        ([{"pattern": "(a)", "replacement": r"\2"}], "normalize[0].replacement"),
    ],
)
def test_validate_normalize_rejects(value, param):
    with pytest.raises(BadRequest) as caught:
        validate_normalize(value)
    assert caught.value.param == param


def test_first_difference_is_none_for_equal_requests():
    assert first_difference(canonical_request(request()), canonical_request(request(stream=True))) is None


def test_first_difference_names_the_message_field():
    changed = request()
    changed["messages"][1]["content"] = "other"
    assert first_difference(request(), changed) == "messages[1].content"


def test_first_difference_walks_keys_in_sorted_order():
    assert first_difference(request(), request(temperature=0.9, model="x")) == "model"


def test_first_difference_reports_missing_keys_extra_items_and_type_changes():
    assert first_difference(request(), request(seed=1)) == "seed"
    longer = request()
    longer["messages"].append({"role": "user", "content": "more"})
    assert first_difference(request(), longer) == "messages[2]"
    assert first_difference(request(logprobs=True), request(logprobs=1)) == "logprobs"
    assert first_difference(request(logit_bias={"50256": 1}), request(logit_bias={"50256": 2})) == (
        'logit_bias["50256"]'
    )


def test_difference_gives_the_value_on_each_side():
    changed = request()
    changed["messages"][1]["content"] = "Something else"
    assert difference(request(), changed) == (
        "messages[1].content",
        request()["messages"][1]["content"],
        "Something else",
    )
    assert difference(request(), request(seed=1)) == ("seed", ABSENT, 1)
    longer = request()
    longer["messages"].append({"role": "user", "content": "more"})
    assert difference(longer, request()) == ("messages[2]", {"role": "user", "content": "more"}, ABSENT)
    assert difference(request(), request()) is None


def test_closeness_ranks_the_nearest_request_first():
    target = canonical_request(request())
    near = request()
    near["messages"][1]["content"] = "What is the capital of Franse?"
    far = request(model="other", temperature=1.5)
    far["messages"] = [{"role": "user", "content": "Write a poem about the sea."}]
    assert closeness(target, target) == 1.0
    assert 1.0 > closeness(target, near) > closeness(target, far) >= 0.0


def test_closeness_sees_a_small_change_at_the_end_of_a_long_prompt():
    prompt = "background " * 5000
    a = request(messages=[{"role": "user", "content": prompt + "question one"}])
    b = request(messages=[{"role": "user", "content": prompt + "question two"}])
    c = request(messages=[{"role": "user", "content": "something else entirely"}])
    assert closeness(a, b) > 0.95
    assert closeness(a, c) < closeness(a, b)


def test_a_body_nested_too_deeply_is_a_bad_request():
    deep: dict = {}
    node = deep
    for _ in range(100_000):
        node["x"] = {}
        node = node["x"]
    with pytest.raises(BadRequest):
        fingerprint(request(extra=deep))


# Digests computed by the fingerprint code of before the orjson fast path: recordings made then must
# still match. Each body has what a faster serialisation could get wrong (floats, escapes, non-ASCII,
# transport fields, Anthropic's cache_control, embeddings' input).
RECORDED = [
    (
        "openai.chat",
        {
            "model": "gpt-4o",
            "messages": [{"role": "user", "content": 'héllo \u2028 \x01 "q"'}],
            "temperature": 0.2,
            "top_p": 1.0,
            "seed": 1e20,
            "n": -0.0,
            "stream": True,
            "x": 1e-05,
        },
        "v1:58bca66ccc3915d254a3b8010a5027f6011bb55364689174c7ddef7397b36af0",
    ),
    (
        "openai.responses",
        {
            "model": "gpt-4o",
            "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi 😀"}]}],
            "store": False,
        },
        "v1:eb537e8c2f9288b6f122c96831b9f163757861aa02b3bc32ffcb047fa464ea02",
    ),
    (
        "anthropic.messages",
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 100,
            "system": [{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
            "messages": [{"role": "user", "content": "hi"}],
        },
        "v1:066e5d622cf1584bb40a823ec24c802e7653ea5ad7e3357e3e7c57262b6f8308",
    ),
    (
        "openai.embeddings",
        {"model": "text-embedding-3-small", "input": "a b", "encoding_format": "base64"},
        "v1:1ebf71d3b4174d754d551be4fa553589c580b37c4026af3cf6678af204330f49",
    ),
]


@pytest.mark.parametrize("api, body, digest", RECORDED, ids=[case[0] for case in RECORDED])
def test_fingerprints_of_earlier_recordings_are_unchanged(api, body, digest):
    from semula import dialects

    assert dialects.get(api).fingerprint(body, [], []) == digest


def reference_fingerprint(body, ignore_fields=(), normalize=(), *, api=None, dropped=frozenset()):
    """The fingerprint as first defined: json.dumps of the canonical request copy, hashed."""
    canonical = canonical_request(body, ignore_fields, normalize, dropped=dropped)
    if api is not None and api != "openai.chat":
        canonical = {"api": api, "request": canonical}
    text = canonical_json(canonical)
    return "v1:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.sampled_from([1.0, -0.0, 1e-05, 1e16, 1e20, 2.0**53, 0.1 + 0.2, 5e-324])
    | st.text()
    | st.just("lone \ud800 surrogate"),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.text(max_size=3) | st.sampled_from(["cache_control", "stream"]), children, max_size=4
        )
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(
    extra=st.dictionaries(st.text(max_size=4), json_values, max_size=5),
    api=st.sampled_from([None, "openai.chat", "anthropic.messages"]),
    dropped=st.sampled_from([frozenset(), frozenset({"cache_control"})]),
)
def test_the_fingerprint_is_the_reference_digest_of_any_request(extra, api, dropped):
    body = {**request(), **extra}
    assert fingerprint(body, api=api, dropped=dropped) == reference_fingerprint(
        body, api=api, dropped=dropped
    )
    rules = ([], [{"pattern": "a", "replacement": "b"}])
    assert fingerprint(body, *rules, api=api) == reference_fingerprint(body, *rules, api=api)


@settings(max_examples=400, deadline=None)
@given(
    extra=st.dictionaries(st.text(max_size=4), json_values, max_size=5),
    api=st.sampled_from([None, "openai.chat", "anthropic.messages"]),
)
def test_a_body_read_plain_hashes_as_the_reference_without_a_walk(extra, api):
    """The proxy reads a body with jsonio.read(); what it finds plain is hashed from orjson's bytes
    with no walk of fingerprint's own, and must still hash as the reference does."""
    try:
        raw = json.dumps({**request(), **extra}, allow_nan=False).encode("utf-8", "surrogatepass")
    except ValueError:
        return  # NaN and infinities are not JSON: no body can carry them
    try:
        body, plain = jsonio.read(raw)
    except BadRequest:
        return  # a lone surrogate: refused at the door
    assert fingerprint(body, api=api, plain=plain) == reference_fingerprint(body, api=api)


@pytest.mark.parametrize(
    "raw, plain",
    [
        (b'{"model": "m", "messages": [], "n": 2, "x": "1.0"}', True),
        (b'{"model": "m", "temperature": 0.7, "top_p": 0.95}', True),
        (b'{"model": "m", "x": 1e-05}', False),  # orjson writes 1e-5, json 1e-05
        (b'{"model": "m", "temperature": 1.0}', False),  # hashed as 1: JSON has one number type
        (b'{"model": "m", "seed": 1e20}', False),  # orjson writes 1e20, json 1e+20
        (b'{"model": "m", "seed": 9223372036854775807}', True),
    ],
)
def test_which_bodies_are_plain(raw, plain):
    assert jsonio.read(raw)[1] is plain


def test_a_stored_rule_without_its_replacement_replaces_with_nothing():
    """Rules saved before settings were stored as checked may lack "replacement"."""
    late = [{"role": "user", "content": "order-42 is late"}]
    rule = [{"pattern": "order-[0-9]+"}]
    expected = fingerprint(request(messages=[{"role": "user", "content": " is late"}]))
    assert fingerprint(request(messages=late), [], rule) == expected


def test_a_wildcard_token_names_every_member_of_an_array_or_object():
    body = {
        "model": "m",
        "input": [{"id": "msg_1", "type": "message", "content": "hi"}, {"id": "fco_2", "output": "ok"}, "x"],
        "tools": {"a": {"id": 1, "name": "a"}, "b": {"name": "b"}},
    }
    assert canonical_request(body, ["/input/*/id", "/tools/*/id"]) == {
        "model": "m",
        "input": [{"type": "message", "content": "hi"}, {"output": "ok"}, "x"],
        "tools": {"a": {"name": "a"}, "b": {"name": "b"}},
    }
    assert canonical_request(body, ["/input/*"])["input"] == []
    assert body["input"][0]["id"] == "msg_1"  # the request itself is untouched
    fresh = {**body, "input": [{**body["input"][0], "id": "msg_9"}, *body["input"][1:]]}
    assert fingerprint(body, ["/input/*/id"]) == fingerprint(fresh, ["/input/*/id"])
    assert fingerprint(body) != fingerprint(fresh)


def test_without_copies_only_what_it_changes():
    from semula.core.fingerprint import without

    body = {"input": [{"id": "a", "x": 1}, {"y": 2}], "other": {"deep": [1]}}
    assert without(body, ["/input/*/z", "/missing/*/id"]) is body
    pruned = without(body, ["/input/*/id"])
    assert pruned == {"input": [{"x": 1}, {"y": 2}], "other": {"deep": [1]}}
    assert pruned["other"] is body["other"] and pruned["input"][1] is body["input"][1]
    assert body["input"][0] == {"id": "a", "x": 1}


def test_validate_ignore_fields_accepts_wildcards():
    assert validate_ignore_fields(["/input/*/id", "/*/x"]) == ["/input/*/id", "/*/x"]


@pytest.mark.parametrize(
    ("pointer", "says"),
    [
        ("/input/i*d", "a wildcard stands for a whole token"),
        ("/input/**/id", "a wildcard stands for a whole token"),
        ("/*", "every request would match"),
        ("/metadata/user_id", "metadata is never part of a fingerprint"),
    ],
)
def test_validate_ignore_fields_refuses_a_pointer_that_could_never_match(pointer, says):
    with pytest.raises(BadRequest) as caught:
        validate_ignore_fields([pointer], never=frozenset({"metadata", "stream"}))
    assert says in caught.value.message and caught.value.param == "ignore_fields"


def test_closeness_compares_the_first_fields_only_so_a_huge_miss_costs_little():
    """Decision 0063: the closest entry of a replay miss took seconds for 100,000 input items."""
    from semula.core import fingerprint

    items = [{"role": "user", "content": f"item {i}"} for i in range(fingerprint.CLOSENESS_FIELDS)]
    mine = {"input": [*items, {"role": "user", "content": "mine"}]}
    theirs = {"input": [*items, {"role": "user", "content": "theirs"}]}
    assert len(fingerprint.fields(mine)) == fingerprint.CLOSENESS_FIELDS
    assert fingerprint.closeness(mine, theirs) == 1.0  # they differ past what is compared
    assert fingerprint.closeness({"a": "same", "b": "x"}, {"a": "same", "b": "y"}) == 0.5


def _messages(texts):
    return [{"role": "user", "content": text} for text in texts]


@settings(max_examples=300, deadline=None)
@given(
    mine=st.lists(st.sampled_from("abc"), max_size=7),
    theirs=st.lists(st.sampled_from("abc"), max_size=7),
    models=st.sampled_from([("m", "m"), ("m", "n"), ("a", "z")]),
)
def test_requests_cut_to_their_first_items_give_the_whole_requests_fields_and_first_difference(
    mine, theirs, models
):
    """A replay miss compares requests cut to their first CLOSENESS_FIELDS items (issue #49): the
    fields it scores and the first difference it names are the whole requests' (here with the cut at 3;
    `model` sorts after `messages`, `a` before it)."""
    from semula.core import fingerprint as fp

    a = {"messages": _messages(mine), "model": models[0], "a": models[0]}
    b = {"messages": _messages(theirs), "model": models[1], "a": models[1]}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fp, "CLOSENESS_FIELDS", 3)
        (cut_a, long_a), (cut_b, long_b) = fp.cut(a), fp.cut(b)
        assert fp.fields(cut_a) == fp.fields(a)
        found = fp.difference(cut_a, cut_b)
        if not fp.within(found, long_a | long_b):
            found = fp.difference(a, b)
    assert found == fp.difference(a, b)

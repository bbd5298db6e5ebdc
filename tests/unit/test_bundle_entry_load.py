"""An import loads the entries `semula export` writes without marshmallow's work per field: the same
data as the schema gives, and every other entry, each with an error among them, through the schema."""

from __future__ import annotations

import pytest
from marshmallow import ValidationError

from semula.service import bundles

BASE = {
    "chunks": None,
    "fingerprint": "v1:" + "ab" * 32,
    "pinned": False,
    "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
    "response": {"object": "chat.completion", "choices": []},
    "review_status": "unreviewed",
}
VARIANTS = [
    {},
    {"api": "openai.responses"},
    {"pinned": True, "review_status": "approved"},
    {"chunks": [{"object": "chat.completion.chunk"}]},
    {"fingerprint": None},
    {"later_answers": []},
    {"meta": None},
    # Not for the short way: the schema loads them or refuses them, as before.
    {"pinned": 1},
    {"pinned": None},
    {"pinned": "yes"},
    {"review_status": ["approved"]},
    {"review_status": "maybe"},
    {"api": None},
    {"api": "nope"},
    {"api": {"a": 1}},
    {"fingerprint": "v1:short"},
    {"fingerprint": 7},
    {"fingerprint": "v1:" + "ab" * 32 + "\n"},
    {"chunks": [1]},
    {"chunks": {"a": 1}},
    {"later_answers": None},
    {"later_answers": [{"response": {"x": 1}}]},
    {"meta": {}},
    {"meta": "x"},
    {"extra": 1},
    {"request": ["not", "a", "dict"]},
    {"request": None},
    {"response": None},
]


def load(how, value):
    try:
        return "loaded", how(value)
    except ValidationError as exc:
        return "refused", exc.normalized_messages()


@pytest.mark.parametrize("change", VARIANTS, ids=repr)
def test_an_entry_loads_as_the_schema_loads_it(change):
    value = {**BASE, **change}
    assert load(bundles._load_entry, value) == load(bundles._ENTRY.load, value)


@pytest.mark.parametrize("missing", ["request", "response", "chunks", "pinned", "review_status"])
def test_an_entry_without_a_field_loads_as_the_schema_loads_it(missing):
    value = {k: v for k, v in BASE.items() if k != missing}
    assert load(bundles._load_entry, value) == load(bundles._ENTRY.load, value)

"""What a recording keeps besides its body, as record-through writes it and an import checks it."""

from __future__ import annotations

import pytest
from marshmallow import ValidationError

from semula.core import recorded_meta


@pytest.mark.parametrize(
    "name, kept",
    [
        ("openai-processing-ms", True),
        ("X-RateLimit-Remaining-Requests", True),
        ("anthropic-ratelimit-tokens-limit", True),
        ("set-cookie", False),
        ("x-request-id", False),
        ("x-ratelimit-\u212aey", False),  # the Kelvin sign lowers to an ASCII k: not a header name
        ("x-ratelimit-a b", False),
        ("x-ratelimit-é", False),
    ],
)
def test_which_header_names_are_kept(name, kept):
    assert recorded_meta.kept(name) is kept


def test_what_record_through_keeps_always_imports_again():
    provider = {
        "headers": {
            "openai-processing-ms": "12",
            "x-ratelimit-limit": "v" * 5000,  # too long to replay
            "x-ratelimit-\u212aey": "1",
            "openai-model": "gpt\r\nX-Injected: 1",
        },
        "gaps": [0.01, -1.0, 7200.0] + [0.0] * (recorded_meta.MAX_GAPS + 5),
    }
    kept = recorded_meta.recordable(provider)
    assert kept["headers"] == {"openai-processing-ms": "12"}
    assert kept["gaps"][:3] == [0.01, 0.0, recorded_meta.MAX_GAP_SECONDS]
    assert len(kept["gaps"]) == recorded_meta.MAX_GAPS
    assert recorded_meta.MetaSchema().load(kept) == kept
    assert recorded_meta.recordable({"headers": {}, "gaps": []}) == {}


def test_an_import_refuses_what_replay_could_not_send():
    with pytest.raises(ValidationError):
        recorded_meta.MetaSchema().load({"headers": {"x-ratelimit-\u212aey": "1"}})

"""Kept answers packed small (semula.core.packing): what goes in comes out, and packing pays."""

from __future__ import annotations

import json
import os

import pytest

from semula.core import packing

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-0123456789abcdef01234567",
        "object": "chat.completion",
        "created": 1764547200,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Your parcel left the warehouse on Monday and the carrier expects to "
                    "deliver it on Thursday between nine and twelve. You can follow it with the link in "
                    "your confirmation mail; if it has not arrived by Friday, reply here and we send a "
                    "new one at no cost. Is there anything else I can help you with today?",
                    "refusal": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 312, "completion_tokens": 71, "total_tokens": 383},
        "system_fingerprint": "fp_0ba0d124f1",
    },
    separators=(",", ":"),
).encode()


def test_a_completion_packs_to_well_under_its_size_and_comes_back_byte_for_byte():
    packed = packing.pack(COMPLETION)
    assert packed is not None and len(packed) < 0.6 * len(COMPLETION)
    assert packing.unpack(packed) == COMPLETION


def test_the_dictionary_is_what_makes_a_short_answer_pay():
    import zlib

    alone = zlib.compressobj(packing.LEVEL, zlib.DEFLATED, -15)
    without = len(alone.compress(COMPLETION) + alone.flush())
    assert len(packing.pack(COMPLETION)) < 0.85 * without


def test_a_stream_of_chunks_packs_to_a_fraction():
    chunk = 'data: {"id":"chatcmpl-abc","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini",'
    events = "".join(
        chunk + f'"choices":[{{"index":0,"delta":{{"content":"word{i} "}},"finish_reason":null}}]}}\n\n'
        for i in range(90)  # ~14 KB: under MAX_SIZE
    ).encode()
    packed = packing.pack(events + b"data: [DONE]\n\n")
    assert packed is not None and len(packed) < len(events) / 8
    assert packing.unpack(packed) == events + b"data: [DONE]\n\n"


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", b"x" * (packing.MIN_SIZE - 1), os.urandom(4096), b" " * (packing.MAX_SIZE + 1)],
    ids=["empty", "tiny", "under the minimum", "random bytes", "over the maximum"],
)
def test_what_would_not_save_enough_is_left_as_it_is(data):
    assert packing.pack(data) is None


def test_every_byte_value_and_the_longest_packed_answer_come_back_whole():
    data = (bytes(range(256)) * 8 + COMPLETION * 20)[: packing.MAX_SIZE]
    packed = packing.pack(data)
    assert packed is not None and packing.unpack(packed) == data

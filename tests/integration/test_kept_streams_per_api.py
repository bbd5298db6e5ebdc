"""A repeated Gemini stream (`:streamGenerateContent`, what Gemini CLI sends for every turn) and a
repeated Anthropic Messages stream (Claude Code's) are kept hits (semula.service.hits): their bytes are
sent again with a fresh `responseId` in every chunk (Gemini.restamp_sse), a fresh message id in the
message_start event (AnthropicMessages.restamp_sse), as a render would give them, rather than looked
up and rendered each time (a Gemini stream hit was 4x a Chat Completions hit's instructions). And a
kept Chat Completions stream spliced at the places stream_stamps() noted is the same bytes as one
searched again."""

from __future__ import annotations

import json
import random
import re

import pytest

from semula import dialects
from semula.service import pending, projects

MODEL = "gemini-2.5-flash"
SSE = f"/p/shop/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"
ARRAY = f"/p/shop/v1beta/models/{MODEL}:streamGenerateContent"
BODY = {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]}


MESSAGES = "/p/shop/v1/messages"
MESSAGES_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "stream": True,
    "messages": [{"role": "user", "content": "Say hello"}],
}
TEXT = "Hello there, my good friend, how are you today"


@pytest.fixture
def shop(ctx):
    """Project shop, replaying one Gemini answer recorded for BODY and one Messages answer."""
    row = projects.create(ctx, {"name": "shop", "mode": "record"})
    dialect = dialects.get(dialects.GEMINI)
    body = dialect.with_route(BODY, MODEL, "streamGenerateContent")
    pending_id = pending.park(ctx, row, dialect.fingerprint(body, [], []), body, True, api=dialect.name)
    pending.answer(ctx, pending_id, {"content": TEXT})
    anthropic = dialects.get(dialects.ANTHROPIC)
    body = anthropic.with_headers(MESSAGES_BODY, lambda name: None)
    fingerprint = anthropic.fingerprint(body, [], [])
    pending_id = pending.park(ctx, row, fingerprint, body, True, api=anthropic.name)
    pending.answer(ctx, pending_id, {"content": TEXT})
    return projects.update(ctx, "shop", {"mode": "replay"})


def chunks(data: bytes) -> list[dict]:
    return [json.loads(line[6:]) for line in data.decode().split("\r\n") if line.startswith("data: ")]


def test_a_repeated_gemini_stream_is_kept_with_a_fresh_response_id_on_each_reply(
    shop, app, client, make_token
):
    headers = make_token("viewer", scope="replay")
    kept = app.wsgi_app.hits
    replies = [client.post(SSE, json=BODY, headers=headers) for _ in range(2)]  # rendered: seen, kept
    served = kept.served
    replies += [client.post(SSE, json=BODY, headers=headers) for _ in range(3)]
    assert kept.served == served + 3  # the last three answered kept
    assert {r.status_code for r in replies} == {200}
    ids = []
    for reply in replies:
        events = chunks(reply.get_data())
        assert len(events) > 2
        assert "".join(p["text"] for e in events for p in e["candidates"][0]["content"]["parts"]) == TEXT
        assert len({e["responseId"] for e in events}) == 1  # every chunk of one stream shares it
        ids.append(events[0]["responseId"])
    assert len(set(ids)) == 5  # fresh on every reply
    # Byte for byte a render's, but for the id.
    first, last = replies[0].get_data(), replies[-1].get_data()
    assert re.sub(rb'"responseId":"[^"]+"', b"", first) == re.sub(rb'"responseId":"[^"]+"', b"", last)
    # Asked for as one JSON array (no alt=sse): the kept stream's chunks, in an array.
    array = client.post(ARRAY, json=BODY, headers=headers)
    assert array.status_code == 200
    assert [e["candidates"] for e in array.get_json()] == [e["candidates"] for e in chunks(last)]
    assert kept.served == served + 4


def test_a_repeated_messages_stream_is_kept_with_a_fresh_message_id_on_each_reply(
    shop, app, client, make_token
):
    headers = {**make_token("viewer", scope="replay"), "anthropic-version": "2023-06-01"}
    kept = app.wsgi_app.hits
    replies = [client.post(MESSAGES, json=MESSAGES_BODY, headers=headers) for _ in range(2)]
    served = kept.served
    replies += [client.post(MESSAGES, json=MESSAGES_BODY, headers=headers) for _ in range(3)]
    assert kept.served == served + 3
    ids = []
    for reply in replies:
        assert reply.status_code == 200, reply.get_data(as_text=True)
        lines = reply.get_data(as_text=True).splitlines()
        events = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
        assert events[0]["type"] == "message_start"
        ids.append(events[0]["message"]["id"])
        deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
        assert "".join(d.get("text", "") for d in deltas) == TEXT
    assert len(set(ids)) == 5 and all(i.startswith("msg_01") for i in ids)
    first, last = replies[0].get_data(), replies[-1].get_data()
    assert first.replace(ids[0].encode(), b"") == last.replace(ids[-1].encode(), b"")


def test_a_messages_stream_not_starting_with_its_id_is_not_kept():
    dialect = dialects.get(dialects.ANTHROPIC)
    assert dialect.stream_stamps({"type": "ping"}, b"event: ping\ndata: {}\n\n") is None
    start = {"type": "message_start", "message": {"id": "msg_1"}}
    late = b'event: ping\ndata: {"type":"ping"}\n\nevent: message_start\ndata: {"id":"msg_1"}\n\n'
    assert dialect.stream_stamps(start, late) is None


def test_gemini_stream_stamps_are_not_kept_without_an_id_in_the_first_chunk():
    dialect = dialects.get(dialects.GEMINI)
    data = b'data: {"candidates":[]}\r\n\r\ndata: {"candidates":[],"responseId":"abc"}\r\n\r\n'
    assert dialect.stream_stamps({"candidates": []}, data) is None
    plain = b'data: {"candidates":[]}\r\n\r\n'
    request = dialect.check(dialect.with_route(BODY, MODEL, "streamGenerateContent"))
    stamps = dialect.stream_stamps({"candidates": []}, plain)
    assert dialect.restamp_sse(plain, stamps, request, 5.0) == plain


@pytest.mark.parametrize(
    "second",
    [
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"choices":[{"delta":{}}]}',
        # another chunk shape (a key between the two): searched for again, the same bytes
        b'{"id":"chatcmpl-1","object":"x","created":7,"choices":[]}',
        # the stamps' keys inside a string, escaped: never replaced
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":7,"c":"\\"id\\":\\"chatcmpl-1\\","}',
    ],
)
def test_a_kept_chat_stream_spliced_where_its_stamps_are_is_a_searched_ones_bytes(second):
    dialect = dialects.get(dialects.CHAT)
    request = dialect.check({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    first = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "choices": []}
    data = b"data: " + json.dumps(first, separators=(",", ":")).encode() + b"\n\ndata: " + second
    data += b"\n\ndata: [DONE]\n\n"
    kept = dialect.stream_stamps(first, data)
    for now in (9.5, 1_900_000_000.0):
        random.seed(1)
        spliced = dialect.restamp_sse(data, kept, request, now)
        random.seed(1)
        assert spliced == dialect.restamp_sse(data, dialect.stamps(first), request, now)
        assert b'"id":"chatcmpl-1"' not in spliced and spliced.count(b'"created":%d,' % now) == 2
    assert (dialects.SPANS in kept) is (b'"object":"chat.completion.chunk","created"' in second)

"""A repeated Responses stream is a kept hit (semula.service.hits): its bytes are sent again with the
reply's `created_at` in every event's response (OpenAIResponses.restamp_sse), as a render at that
time would give them. Over HTTP here; a WebSocket turn keeps and replies the same bytes as messages."""

from __future__ import annotations

import time

import pytest

from semula import dialects
from semula.service import pending, projects
from tests.helpers import typed_events

URL = "/p/shop/v1/responses"
BODY = {"model": "gpt-4.1-mini", "input": "Say hello", "stream": True}


@pytest.fixture
def shop(ctx):
    """Project shop, replaying one Responses answer recorded for BODY."""
    row = projects.create(ctx, {"name": "shop", "mode": "record"})
    dialect = dialects.get(dialects.RESPONSES)
    fingerprint = dialect.fingerprint(BODY, [], [])
    pending_id = pending.park(ctx, row, fingerprint, BODY, True, api=dialect.name)
    pending.answer(ctx, pending_id, {"content": "Hello there, friend"})
    return projects.update(ctx, "shop", {"mode": "replay"})


def stream(client, headers) -> bytes:
    reply = client.post(URL, json=BODY, headers=headers)
    assert reply.status_code == 200, reply.get_data(as_text=True)
    return reply.get_data()


def test_a_repeated_responses_stream_is_kept_and_stamped_afresh(shop, app, client, make_token, monkeypatch):
    headers = make_token("viewer", scope="replay")
    kept = app.wsgi_app.hits
    monkeypatch.setattr(time, "time", lambda: 1_900_000_000.25)
    rendered = stream(client, headers)  # a first sight: rendered, noted
    assert stream(client, headers) == rendered  # the second: rendered, kept
    served = kept.served
    assert [stream(client, headers) for _ in range(3)] == [rendered] * 3
    assert kept.served == served + 3  # answered kept, byte for byte what a render gives

    monkeypatch.setattr(time, "time", lambda: 2_000_000_000.5)
    later = stream(client, headers)
    assert kept.served == served + 4
    events = typed_events(later.decode())
    stamped = [e["response"]["created_at"] for e in events if "response" in e]
    assert stamped and set(stamped) == {2_000_000_000}  # response.created ... response.completed
    assert later == rendered.replace(b'"created_at":1900000000', b'"created_at":2000000000')
    assert "".join(e.get("delta", "") for e in events) == "Hello there, friend"


def test_restamp_sse_leaves_a_stream_without_a_stamp_as_it_is():
    dialect = dialects.get(dialects.RESPONSES)
    data = b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"}\n\n'
    request = dialect.check(BODY)
    assert (
        dialect.restamp_sse(data, dialect.stamps({"type": "response.output_text.delta"}), request, 5.0)
        == data
    )
    # A text that names the key is inside a JSON string, where its quotes are escaped: never replaced.
    quoted = b'data: {"type":"response.created","response":{"created_at":7,"note":"\\"created_at\\":7,"}}\n\n'
    first = {"type": "response.created", "response": {"created_at": 7}}
    assert dialect.restamp_sse(quoted, dialect.stamps(first), request, 9.5) == quoted.replace(
        b'{"created_at":7,', b'{"created_at":9,'
    )


def test_a_kept_stream_noted_where_its_stamps_are_replies_as_one_searched_again():
    """stream_stamps() notes where the stamp's values are; a reply spliced there is the same bytes as
    one that searched for them (the key inside a string, and a longer number, left alone)."""
    dialect = dialects.get(dialects.RESPONSES)
    request = dialect.check(BODY)
    data = (
        b'data: {"type":"response.created","response":{"created_at":7,"x":1}}\n\n'
        b'data: {"type":"response.output_text.delta","delta":"\\"created_at\\":7,","n":{"created_at":77}}\n\n'
        b'data: {"type":"response.completed","response":{"id":"r","created_at":7}}\n\n'
    )
    first = {"type": "response.created", "response": {"created_at": 7, "x": 1}}
    kept = dialect.stream_stamps(first, data)
    assert kept["created_at"] == 7 and len(kept[next(k for k in kept if k != "created_at")]) == 2
    for now in (9.5, 1_900_000_000.0):
        assert dialect.restamp_sse(data, kept, request, now) == dialect.restamp_sse(
            data, dialect.stamps(first), request, now
        )
    assert dialect.restamp_sse(data, kept, request, 9.5).count(b'"created_at":9') == 2

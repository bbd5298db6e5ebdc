"""The Responses API over a WebSocket against real gunicorn + gevent, driven by the official openai
SDK's `client.responses.connect()` (decision 0056)."""

from __future__ import annotations

import functools
import json
import threading
from dataclasses import replace
from typing import Any

import pytest
import requests
import websockets.exceptions
from websockets.sync.client import connect as ws_connect

from semula.service import Context, projects, tokens
from tests.acceptance import shared
from tests.fake_upstream import FakeUpstream
from tests.helpers import answered_post, metric_samples, metric_value, parked, typed_events, wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"


def turn(connection, **body) -> list:
    """Send one response.create and read its events up to the last (completed, or an error)."""
    connection.response.create(**body)
    events = []
    for event in connection:
        events.append(event)
        if event.type in ("response.completed", "response.failed", "error"):
            return events
    raise AssertionError(f"the socket closed after {[e.type for e in events]}")


def text_of(events) -> str:
    return "".join(e.delta for e in events if e.type == "response.output_text.delta")


def kept_hits(server) -> float:
    """The replay hits the server answered from its kept hits (its worker writes its counts every
    0.1 s: wait_for what is to be seen)."""
    page = requests.get(f"{server.url}/metrics", timeout=10).text
    return metric_value(metric_samples(page), "semula_kept_hits_total")


def answer_over_rest(server, token, ctx, shop, text: str, seen: set[str]) -> threading.Thread:
    """Answer the next call parked in shop (one not in `seen`) through the REST API, from a thread."""

    def run():
        def fresh():
            return [row["id"] for row in parked(ctx, shop) if row["id"] not in seen]

        [pending_id] = wait_for(fresh, timeout=60, what="a parked turn")
        seen.add(pending_id)
        answered = requests.post(
            f"{server.url}/api/v1/pending/{pending_id}/answer",
            json={"content": text},
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
        assert answered.status_code == 200, answered.text

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_two_turns_on_one_socket_record_then_replay(server, ctx, shop, openai_client, token):
    client = openai_client(server)
    seen: set[str] = set()
    with client.responses.connect() as connection:
        # The first turn parks (record mode); the socket waits while it is answered over REST.
        answering = answer_over_rest(server, token, ctx, shop, "Hello there!", seen)
        first = turn(connection, model="gpt-4.1-mini", input="Say hello")
        answering.join(30)
        assert [e.type for e in first][0] == "response.created"
        assert first[-1].type == "response.completed" and text_of(first) == "Hello there!"
        first_id = first[-1].response.id
        # The second turn continues the first on the same socket.
        answering = answer_over_rest(server, token, ctx, shop, "Goodbye!", seen)
        second = turn(connection, model="gpt-4.1-mini", previous_response_id=first_id, input="Now bye")
        answering.join(30)
        assert text_of(second) == "Goodbye!"
        assert second[-1].response.previous_response_id == first_id

    # Replay: a new socket gets both turns from the recordings, with the same response ids.
    projects.update(ctx, "shop", {"mode": "replay"})
    with client.responses.connect() as connection:
        again = turn(connection, model="gpt-4.1-mini", input="Say hello")
        assert text_of(again) == "Hello there!" and again[-1].response.id == first_id
        follow = turn(connection, model="gpt-4.1-mini", previous_response_id=first_id, input="Now bye")
        assert text_of(follow) == "Goodbye!"
        # A replay miss is an error event in the API's error object; the socket stays open.
        [miss] = turn(connection, model="gpt-4.1-mini", input="Something never recorded")
        assert miss.type == "error" and miss.status == 424
        assert miss.error.code == "semula_replay_miss" and "first difference" in miss.error.message
        # And the socket still answers after it; a repeated turn is answered from the kept hits.
        before = kept_hits(server)
        for _ in range(4):
            repeated = turn(connection, model="gpt-4.1-mini", input="Say hello")
            assert text_of(repeated) == "Hello there!" and repeated[-1].response.id == first_id
        # The first and second sights were rendered, the others answered kept.
        wait_for(lambda: kept_hits(server) - before >= 2, timeout=10, what="two kept hits counted")
    # HTTP replays the socket's recording (stream is not fingerprinted).
    http = client.responses.create(model="gpt-4.1-mini", input="Say hello")
    assert http.output_text == "Hello there!" and http.id == first_id


def test_the_handshake_needs_a_token(server, ctx, shop, openai_client):
    client = openai_client(server, api_key="sk-not-a-semula-token")
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        client.responses.connect().enter()
    assert refused.value.response.status_code == 401
    assert b"invalid_api_key" in refused.value.response.body


def _events(ws) -> list[dict]:
    """The events of one turn, up to its last (completed, or an error)."""
    events = []
    while True:
        events.append(json.loads(ws.recv(timeout=30)))
        if events[-1]["type"] in ("response.completed", "response.failed", "error"):
            return events


def _unstamped(value: Any) -> Any:
    """Events without the time a reply is stamped with (the second may differ between two replies:
    renaming the keys kept their values, and two replies a second apart failed on a loaded machine)."""
    if isinstance(value, dict):
        return {k: _unstamped(v) for k, v in value.items() if k not in ("created_at", "completed_at")}
    if isinstance(value, list):
        return [_unstamped(v) for v in value]
    return value


def test_a_turn_streams_what_the_sse_stream_does_and_errors_are_events(server, ctx, shop, token):
    auth = {"Authorization": f"Bearer {token}"}
    body = {"model": "gpt-4.1-mini", "input": "Say hi", "stream": True}
    post = functools.partial(
        requests.post, f"{server.url}/p/shop/s/run-1/v1/responses", json=body, headers=auth, timeout=60
    )
    recorded = answered_post(ctx, shop, post, "Hi, how are you?")
    assert recorded.status_code == 200, recorded.text
    projects.update(ctx, "shop", {"mode": "replay"})
    sse = typed_events(post().text)

    # The same call over a socket in the same session: the same events, one message each.
    with ws_connect(
        f"ws://127.0.0.1:{server.port}/p/shop/s/run-1/v1/responses", additional_headers=auth
    ) as ws:
        ws.send(json.dumps({"type": "response.create", **body}))
        events = _events(ws)
        assert _unstamped(events) == _unstamped(sse)
        assert [e["type"] for e in events][:2] == ["response.created", "response.in_progress"]

        # Bad messages are error events in the API's error object; the socket goes on.
        ws.send("not json")
        [bad] = _events(ws)
        assert bad["type"] == "error" and bad["status"] == 400
        assert bad["error"]["type"] == "invalid_request_error"
        ws.send(json.dumps({"type": "response.cancel"}))
        [unknown] = _events(ws)
        assert unknown["error"]["param"] == "type" and unknown["error"]["code"] == "invalid_event"
        ws.send(json.dumps({"type": "response.create", "background": True, **body}))
        [background] = _events(ws)
        assert background["error"]["param"] == "background"
        # Codex acknowledges each response it handled: nothing is answered, the next turn's events come.
        ws.send(json.dumps({"type": "response.processed", "response_id": events[-1]["response"]["id"]}))
        ws.send(json.dumps({"type": "response.create", **body}))
        assert _events(ws)[0]["type"] == "response.created"

    # At the root with X-Semula-Project: a miss names its lane (stream_id) as its events would.
    headers = {**auth, "X-Semula-Project": "shop"}
    with ws_connect(f"ws://127.0.0.1:{server.port}/v1/responses", additional_headers=headers) as ws:
        ws.send(json.dumps({"type": "response.create", "stream_id": "lane-1", "model": "m", "input": "?"}))
        [miss] = _events(ws)
        assert miss["stream_id"] == "lane-1" and miss["status"] == 424
        assert miss["error"]["code"] == "semula_replay_miss"
        # Its first, second and kept sights (the kept one sent as the frames kept) carry the lane.
        for _ in range(3):
            ws.send(json.dumps({"type": "response.create", "stream_id": "lane-2", **body}))
            replayed = _events(ws)
            assert {e["stream_id"] for e in replayed} == {"lane-2"}
            assert "".join(e.get("delta", "") for e in replayed) == "Hi, how are you?"
            assert replayed[-1]["type"] == "response.completed"


def test_a_record_through_turn_is_relayed_live_then_replays(start_server, ctx, token, openai_client):
    fake = FakeUpstream()
    try:
        server = start_server(SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
        operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
        projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
        client = openai_client(server)
        with client.responses.connect() as connection:
            forwarded = turn(connection, model="gpt-4.1", input="Hello upstream", stream_id="lane-9")
        assert text_of(forwarded) == "upstream says: Hello upstream"
        assert forwarded[-1].type == "response.completed" and forwarded[-1].stream_id == "lane-9"
        [call] = fake.calls
        # The provider got the HTTP call's body: streamed, without the socket's envelope.
        assert (
            call["body"]["stream"] is True and "type" not in call["body"] and "stream_id" not in call["body"]
        )

        # Replayed with the provider's recorded pauses (stream_pacing): each event after its pause.
        projects.update(ctx, "shop", {"mode": "replay", "record_through": False, "stream_pacing": "recorded"})
        with client.responses.connect() as connection:
            replayed = turn(connection, model="gpt-4.1", input="Hello upstream", stream_id="lane-3")
        assert text_of(replayed) == "upstream says: Hello upstream" and len(fake.calls) == 1
        assert [e.type for e in replayed] == [e.type for e in forwarded]
        assert {e.stream_id for e in replayed} == {"lane-3"}
        server.stop()
        assert CANARY not in server.log()
    finally:
        fake.close()


def test_a_token_revoked_while_its_socket_is_open_is_refused(server, ctx, shop):
    projects.update(ctx, "shop", {"mode": "replay"})  # a turn is a miss (424) until it is refused
    made = tokens.create(ctx, {"role": "admin", "scope": "full"})
    auth = {"Authorization": f"Bearer {made['token']}"}
    with ws_connect(f"ws://127.0.0.1:{server.port}/p/shop/v1/responses", additional_headers=auth) as ws:
        tokens.revoke(ctx, made["id"])

        def refused():
            ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
            [event] = _events(ws)
            return event if event["status"] == 401 else None

        # Each turn authenticates again; the proxy's principal cache keeps a token for a second.
        refused_event = wait_for(refused, timeout=30, what="the revoked token refused")
        assert refused_event["error"]["code"] == "invalid_api_key"

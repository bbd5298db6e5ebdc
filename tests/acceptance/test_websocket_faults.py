"""Faults on the Responses API over a WebSocket, through real gunicorn with the openai SDK's
`client.responses.connect()`: a project's rules apply to each turn as to an HTTP call, the handshake's
X-Semula-Fault to every turn of its socket; an error is an error event and the socket stays open, a
cut or a timeout closes the connection without a close frame (issue #50, decisions 0056 and 0061)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import requests
import websockets.exceptions
from websockets.sync.client import connect as ws_connect

from semula import dialects
from semula.service import Context, calllog, faults, pending, projects
from tests.acceptance import shared
from tests.acceptance.test_responses_websocket import text_of, turn
from tests.fake_upstream import FakeUpstream
from tests.helpers import metric_samples, metric_value, wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

BODY = {"model": "gpt-4.1-mini", "input": "Say hello"}
RECORDED = "Hello there, friend"
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"


@pytest.fixture
def replaying(ctx, shop):
    """Project shop replaying one Responses answer to BODY."""
    dialect = dialects.get(dialects.RESPONSES)
    body = {**BODY, "stream": True}
    pending_id = pending.park(ctx, shop, dialect.fingerprint(body, [], []), body, True, api=dialect.name)
    pending.answer(ctx, pending_id, {"content": RECORDED})
    projects.update(ctx, "shop", {"mode": "replay"})


def logged(ctx, count: int) -> list[dict]:
    """The project's call-log rows, oldest first, once there are `count` of them."""

    def rows():
        found = list(reversed(calllog.list_calls(ctx, "shop", limit=50)["data"]))
        return found if len(found) == count else None

    return wait_for(rows, what=f"{count} calls in the call log")


def faults_counted(server, kind: str) -> float:
    page = requests.get(f"{server.url}/metrics", timeout=10).text
    return metric_value(metric_samples(page), "semula_faults_total", kind=kind)


def cut(connection) -> list:
    """The events a turn gets before its connection is cut (no close frame: the SDK raises)."""
    received = []
    with pytest.raises(websockets.exceptions.ConnectionClosedError) as closed:
        for event in connection:
            received.append(event)
    assert closed.value.rcvd is None  # no close frame: a broken connection (1006)
    return received


def test_a_rate_limit_rule_is_an_error_event_and_the_next_turn_the_recording(
    ctx, replaying, server, openai_client
):
    faults.add(ctx, "shop", {"kind": "rate_limit", "times": 1, "retry_after": 2})
    counted = faults_counted(server, "rate_limit")  # the module's earlier tests' (its server's)
    with openai_client(server).responses.connect() as connection:
        [limited] = turn(connection, **BODY, stream_id="lane-1")
        assert limited.type == "error" and limited.status == 429 and limited.stream_id == "lane-1"
        assert limited.error.code == "rate_limit_exceeded" and "injected by semula" in limited.error.message
        # The headers the HTTP 429 carries, in the event (the SDK's ResponseWsError.error.headers).
        assert limited.error.headers["retry-after"] == "2"
        assert limited.error.headers["x-ratelimit-remaining-requests"] == "0"
        # The socket stays open; the next turn on it is served from the recording.
        served = turn(connection, **BODY)
        assert text_of(served) == RECORDED and served[-1].type == "response.completed"
    rows = logged(ctx, 2)
    assert [row["outcome"] for row in rows] == ["fault", "hit"]
    assert rows[0]["status"] == 429 and rows[0]["api"] == "openai.responses"
    assert rows[0]["fault"] == {"kind": "rate_limit", "retry_after": 2.0, "times": 1}
    [rule] = faults.list_rules(ctx, "shop")["data"]
    assert rule["counts"] == [{"session": None, "calls": 2, "faults": 1}]
    assert faults_counted(server, "rate_limit") - counted == 1


def test_the_handshakes_header_faults_every_turn_of_its_socket(ctx, replaying, server, openai_client):
    counted = faults_counted(server, "unavailable")
    client = openai_client(server)
    with client.responses.connect(extra_headers={"X-Semula-Fault": "unavailable"}) as connection:
        for _ in range(2):
            [unavailable] = turn(connection, **BODY)
            assert unavailable.status == 503 and unavailable.error.code == "service_unavailable"
    # A socket without the header is served; a bad header is a 400 before any upgrade.
    with client.responses.connect() as connection:
        assert text_of(turn(connection, **BODY)) == RECORDED
    with pytest.raises(websockets.exceptions.InvalidStatus) as refused:
        client.responses.connect(extra_headers={"X-Semula-Fault": "flood"}).enter()
    assert refused.value.response.status_code == 400
    assert b"unknown fault kind 'flood'" in refused.value.response.body
    rows = logged(ctx, 3)
    assert [row["outcome"] for row in rows] == ["fault", "fault", "hit"]
    assert rows[0]["fault"] == {"kind": "unavailable", "via": "header"}
    assert faults_counted(server, "unavailable") - counted == 2


def test_a_disconnect_leaves_the_client_two_events_and_a_closed_connection(
    ctx, replaying, server, openai_client
):
    client = openai_client(server)
    header = {"X-Semula-Fault": "disconnect; after_events=2"}
    with client.responses.connect(extra_headers=header) as connection:
        connection.response.create(**BODY)
        received = cut(connection)
    assert [event.type for event in received] == ["response.created", "response.in_progress"]
    # A rule's disconnect, and a timeout: nothing, then the connection cut.
    faults.add(ctx, "shop", {"kind": "timeout", "after": 0.2, "times": 1})
    with client.responses.connect() as connection:
        connection.response.create(**BODY)
        assert cut(connection) == []
    rows = logged(ctx, 2)
    assert [row["outcome"] for row in rows] == ["hit", "fault"]  # a cut reply is logged as what it was
    assert rows[0]["fault"] == {"kind": "disconnect", "after_events": 2, "at": "body", "via": "header"}
    assert rows[1]["fault"] == {"kind": "timeout", "after": 0.2, "times": 1} and rows[1]["status"] == 0


def test_a_slow_turn_arrives_whole_and_paced(ctx, replaying, server, token):
    faults.add(ctx, "shop", {"kind": "slow", "ttfb": 0.05, "pace": 0.01})
    auth = {"Authorization": f"Bearer {token}"}
    with ws_connect(f"ws://127.0.0.1:{server.port}/p/shop/v1/responses", additional_headers=auth) as ws:
        ws.send(json.dumps({"type": "response.create", **BODY}))
        events = []
        while not events or events[-1]["type"] != "response.completed":
            events.append(json.loads(ws.recv(timeout=30)))
    assert "".join(e.get("delta", "") for e in events) == RECORDED
    [row] = logged(ctx, 1)
    assert row["outcome"] == "hit" and row["fault"]["kind"] == "slow"


def test_record_through_faults_spare_the_provider_and_the_retry_is_recorded_once(
    start_server, ctx, token, openai_client
):
    fake = FakeUpstream()
    try:
        server = start_server(SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
        operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
        projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
        faults.add(ctx, "shop", {"kind": "server_error", "times": 1})
        faults.add(ctx, "shop", {"kind": "disconnect", "after_events": 2, "times": 1})
        client = openai_client(server)
        with client.responses.connect() as connection:
            [failed] = turn(connection, model="gpt-4.1", input="Hello upstream")
            assert failed.status == 500 and fake.calls == []  # an error fault calls no provider
            connection.response.create(model="gpt-4.1", input="Hello upstream")
            # A disconnect neither: the turn has no reply to cut, so no event, then the cut.
            assert cut(connection) == [] and fake.calls == []
        with client.responses.connect() as connection:
            # The rules used up, the retry is forwarded once (and recorded), the next turn replays it.
            forwarded = turn(connection, model="gpt-4.1", input="Hello upstream")
            replayed = turn(connection, model="gpt-4.1", input="Hello upstream")
        assert text_of(forwarded) == text_of(replayed) == "upstream says: Hello upstream"
        assert len(fake.calls) == 1
        rows = logged(ctx, 4)
        assert [row["outcome"] for row in rows] == ["fault", "fault", "forwarded", "hit"]
        assert rows[1]["fault"]["kind"] == "disconnect"
        server.stop()
        assert CANARY not in server.log()
    finally:
        fake.close()

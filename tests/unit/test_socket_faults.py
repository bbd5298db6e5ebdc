"""What each fault kind does to a turn of the Responses API over a WebSocket (semula.web.socket_mode,
decisions 0056 and 0061): an error event and the socket open, silence then a cut, N events then a cut,
or the events late and paced. The socket and the proxy are stand-ins that note what was done."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from semula import dialects
from semula.core import errors, faults
from semula.dialects.openai_responses import SOCKET
from semula.service import replay as replay_service
from semula.web import socket_mode
from semula.web.socket_mode import Turns

PROJECT = {"id": "prj_1", "name": "shop", "record_timeout": 30}


class Socket:
    """What a turn did to its socket, in order."""

    def __init__(self):
        self.did: list = []

    def send(self, *texts: bytes) -> None:
        self.did.extend(json.loads(text) for text in texts)

    def wait_closed(self, seconds: float) -> None:
        self.did.append(("wait", seconds))

    def abort(self) -> None:
        self.did.append("abort")


@pytest.fixture
def turns(monkeypatch):
    """A socket's turns with a stand-in socket and proxy (the call log's rows in `turns.logged`)."""
    made = Turns.__new__(Turns)
    made.ws, made.ctx, made.speaks = Socket(), None, dialects.get(dialects.RESPONSES)
    made.protocol = SOCKET
    made.logged = []
    made.app = SimpleNamespace(
        _log=lambda ctx, call, outcome, status, *rest: made.logged.append((outcome, status))
    )
    monkeypatch.setattr(socket_mode.time, "sleep", lambda seconds: made.ws.did.append(("sleep", seconds)))
    return made


def test_an_error_kind_is_an_error_event_with_its_headers_and_the_socket_stays_open(turns):
    fault = faults.parse("rate_limit; retry_after=2")
    assert turns._inject(fault, faults.logged(fault), None, PROJECT, b',"stream_id":"a"', 0.0) is True
    [event] = turns.ws.did
    assert event["type"] == "error" and event["status"] == 429 and event["stream_id"] == "a"
    assert event["error"]["code"] == "rate_limit_exceeded" and event["error"]["type"] == "requests"
    headers = event["error"]["headers"]
    assert headers["retry-after"] == "2" and headers["retry-after-ms"] == "2000"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert turns.logged == [("fault", 429)]
    overloaded = faults.parse("overloaded")
    turns._inject(overloaded, faults.logged(overloaded), None, PROJECT, b"", 0.0)
    assert turns.ws.did[-1]["status"] == 503 and "headers" not in turns.ws.did[-1]["error"]


def test_a_timeout_is_silence_then_a_cut_bounded_by_record_timeout(turns):
    for asked, waited in [("timeout; after=1.5", 1.5), ("timeout", 30), ("timeout; after=90", 30)]:
        fault = faults.parse(asked)
        assert turns._inject(fault, faults.logged(fault), None, PROJECT, b"", 0.0) is False
        assert turns.ws.did[-2:] == [("wait", waited), "abort"]
    assert turns.logged == [("fault", 0)] * 3


def replayed_call():
    """A call replaying three events (render() is stood in for)."""
    return SimpleNamespace(live=None, entry={"id": "ent_1"})


def test_a_disconnect_sends_its_events_then_cuts(turns, monkeypatch):
    events = [{"type": "response.created"}, {"type": "response.in_progress"}, {"type": "response.completed"}]
    monkeypatch.setattr(replay_service, "render", lambda call, entry: (None, events))
    assert turns._shaped(faults.parse("disconnect; after_events=2"), replayed_call(), b"") is False
    assert turns.ws.did == [*events[:2], "abort"]
    turns.ws.did.clear()
    assert turns._shaped(faults.parse("disconnect"), replayed_call(), b"") is False
    assert turns.ws.did == ["abort"]


def test_a_slow_turn_waits_before_its_first_event_and_between_the_others(turns, monkeypatch):
    events = [{"type": "response.created"}, {"type": "response.completed"}]
    monkeypatch.setattr(replay_service, "render", lambda call, entry: (None, events))
    assert turns._shaped(faults.parse("slow; ttfb=0.5; pace=0.1"), replayed_call(), b"") is True
    assert turns.ws.did == [("sleep", 0.5), events[0], ("sleep", 0.1), events[1]]


def test_a_relayed_turn_is_read_whole_before_it_is_cut(turns):
    closed = []

    class Live:
        def __iter__(self):
            yield b'data: {"type":"response.created"}\n\ndata: {"type":"response.in_progress"}\n\n'
            yield b'data: {"type":"response.completed"}\n\n'

        def close(self):
            closed.append(True)  # the relay learns it was read whole, and records it

    call = SimpleNamespace(live=Live(), entry=None)
    assert turns._shaped(faults.parse("disconnect; after_events=1"), call, b',"stream_id":"b"') is False
    assert turns.ws.did == [{"type": "response.created", "stream_id": "b"}, "abort"] and closed == [True]


def test_an_error_event_carries_no_connection_header():
    event = SOCKET.error_event(errors.ClientGone("gone"), dialects.get(dialects.RESPONSES))
    assert event["status"] == 499 and "headers" not in event["error"]

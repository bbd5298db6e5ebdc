"""A route's WebSocket mode: a GET upgraded on a route that declares one (`Route.websocket`, a `Socket`
of its API, semula/dialects/routes.py), at the root, under /p/NAME and in sessions. The Responses API
declares one (`response.create` turns, as the openai SDKs' `client.responses.connect()` and Codex use
it); any API may.

Each client message of the protocol's `turn` type is one call of the route's API, with the body of
its POST (the socket always streams: a `stream` the client sent is not fingerprinted), answered by the
events the call's stream carries, one text message each. Turns run one after another, in the order
they came, each through the same service calls as an HTTP call (replay_service.start, the proxy's
_miss: parking, record-through, synthetic answers), so an answer recorded over HTTP replays over a
socket and back. A parked turn waits as an HTTP call does while the socket keeps answering pings. A
turn that fails gets one error event (`Socket.error_event`: the Responses API's is `{"type":
"error", "status", "error": {...}}`) and the socket stays open. Every turn is logged as an HTTP call
is: a call-log row, an access line and the request metrics (decisions 0056, 0064).

Faults (decisions 0060, 0061): the handshake's X-Semula-Fault applies to every turn of its socket, and
a project's rules to each turn as to an HTTP call. An error kind is an error event with its status
(a 429's headers in the event's error) and the socket stays open; `timeout` sends nothing, then cuts
the connection; `disconnect` sends the turn's first N events, then cuts it (a record-through miss has
none: the provider is not called); `slow` delays the first event and paces the others.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from semula import logs, metrics
from semula.core import errors, faults, jsonio
from semula.db import DatabaseError
from semula.service import Context, hits, provider
from semula.service import faults as fault_rules
from semula.service import replay as replay_service
from semula.web import access, policy, websocket
from semula.web.websocket import Gone, WebSocket

if TYPE_CHECKING:
    from semula.dialects.routes import Bound, Socket
    from semula.web.fastpath import ProxyApp

OVER_A_SOCKET = " over a WebSocket"  # after the API's name, what keys a turn's kept hit (service.hits.key)
SHAPING = ("slow", "disconnect")  # the fault kinds that deliver the turn's own reply, shaped


def serve(
    app: ProxyApp,
    ctx: Context,
    call: tuple[Bound, tuple[str | None, str | None], str | None],
    environ: dict[str, Any],
    start_response: Callable[..., Any],
) -> list[bytes]:
    """Take the upgrade of an authenticated request and answer its turns until the client closes.
    `call`: the route that declared the socket (Route.websocket) with its API, the project selectors
    and the session."""
    # The handshake's fault applies to every turn; a bad one is a 400 before any upgrade, as on HTTP.
    asked = environ.get("HTTP_X_SEMULA_FAULT")
    fault = faults.parse(asked) if asked is not None else None
    req = logs.CURRENT.get()
    if req is not None:
        req.outcome = "websocket"
    ws = WebSocket.accept(
        environ, start_response, max_size=app.settings.max_body_bytes, headers=access.finish(101)
    )
    turns = Turns(app, ctx, ws, call, environ, req.route if req is not None else None)
    turns.fault = fault
    try:
        while (message := ws.receive()) is not None:
            if not turns.answer(message):
                break
    finally:
        ws.close()
    return []


class Turns:
    """What every turn of one socket shares: its protocol and API, the caller, the project selectors,
    the session, the handshake's headers, the fault the handshake asks every turn to get."""

    fault: faults.Fault | None = None

    def __init__(
        self,
        app: ProxyApp,
        ctx: Context,
        ws: WebSocket,
        call: tuple[Bound, tuple[str | None, str | None], str | None],
        environ: dict[str, Any],
        route: str | None,
    ):
        from semula.web.fastpath import _header  # fastpath imports this module

        self.app, self.ctx, self.ws = app, ctx, ws
        bound, self.selectors, self.session = call
        self.speaks, self.protocol = bound.dialect, bound.route.websocket
        assert self.protocol is not None  # the proxy upgrades only where a route declares a socket
        self.post = bound.route.label  # the HTTP route whose body a turn is
        # The client messages answered with nothing, as their type is written in them (a cheap look).
        self.quiet = tuple(jsonio.compact(kind) for kind in self.protocol.quiet)
        self.route, self.api = route, self.speaks.name + OVER_A_SOCKET  # what keys its kept hits
        self.header = _header(environ)
        self.answer_headers = tuple(environ.get(name) for name in self.speaks.answer_headers)
        self.authorization = environ.get("HTTP_AUTHORIZATION")

    def _caller(self) -> Context:
        """The caller, authenticated again for each turn as for each HTTP call (the proxy's principal
        cache): a token revoked while its socket is open is refused within the cache's TTL."""
        app = self.app
        return app.base.as_(app.principals.authenticate(app.base, self.authorization))

    def answer(self, message: bytes) -> bool:
        """Answer one message; False when the client is gone (or a fault cut the connection)."""
        for quiet in self.quiet:
            if quiet in message and _quiet(message, self.protocol):
                return True  # a client's acknowledgement (Codex's of a response it has handled)
        req = logs.begin_request(None, "GET", self.app.hit_sample)
        req.route = self.route
        started = time.monotonic()
        app, ctx, ws, speaks = self.app, self.ctx, self.ws, self.speaks
        call: replay_service.Call | None = None
        lane = b""
        try:
            try:
                ctx = self.ctx = self._caller()
                # A turn seen before is answered from the proxy's kept hits (service.hits) as an
                # HTTP call is, under a key of its own: the message is not an HTTP body. A socket that
                # asks for a fault has each of its turns looked at, as an HTTP call with the header.
                key = hits.key(ctx, self.api, *self.selectors, message, self.session, self.answer_headers)
                kept = app.hits.find(ctx, key, message) if self.fault is None else None
                if kept is not None and _same_width(kept.stamps):
                    # The turn's frames as kept (its lane in them), restamped in place: a stamp of
                    # the same width leaves every frame's length as it was.
                    data = app.hits.reply(kept)  # before the log: a failure is logged once, as an error
                    app._log(ctx, kept, "hit", 200, started)
                    ws.send_frames(data)
                    access.finish(200)
                    return True
                body, plain, lane = _call_body(message, self.protocol, self.post)
                body = speaks.with_headers(body, self.header)
                if self.fault is not None and self.fault.kind not in SHAPING:
                    # The handshake's error or timeout, as the header's on HTTP: nothing looked up,
                    # parked or forwarded.
                    project, _ = app.projects.get(ctx, *self.selectors)
                    return self._inject(self.fault, faults.logged(self.fault), None, project, lane, started)
                call = app.start(ctx, self.selectors, body, speaks, self.session, plain)
                # A rule that fires decides the turn; the handshake's slow or disconnect shapes the others.
                picked = fault_rules.pick(ctx, call) if call.project["faults"] != "[]" else None
                if picked is None and self.fault is not None:
                    picked = self.fault, faults.logged(self.fault)
                if picked is not None and picked[0].kind not in SHAPING:
                    return self._inject(*picked, call, call.project, lane, started)
                # A disconnect cuts a record-through miss without calling the provider (outcome fault).
                call.cut = picked is not None and picked[0].kind == "disconnect"
                outcome = "hit" if call.entry else app._miss(ctx, call)
                if picked is not None:
                    call.fault = picked[1]
                app._log(ctx, call, outcome, 200, started)
                if picked is not None:
                    return self._shaped(picked[0], call, lane)
                if call.live is not None:
                    _relay(ws, call.live, lane)
                else:
                    self._replay(call, outcome, key, message, lane)
                access.finish(200)
            except errors.SemulaError as exc:
                self._fail(call, exc, started, lane)
            except DatabaseError as exc:
                self._fail(call, policy.from_database(exc, self.post), started, lane)
            except Gone:
                raise
            except Exception as exc:  # a bug: an error event, logged without its text
                self._fail(call, policy.unexpected(exc, self.post), started, lane)
        except Gone:
            return False
        return True

    def _inject(
        self,
        fault: faults.Fault,
        logged: str,
        call: replay_service.Call | None,
        project: dict[str, Any],
        lane: bytes,
        started: float,
    ) -> bool:
        """An error fault (an error event; the socket stays open, as the API's own errors leave it) or a
        timeout (nothing, then the connection cut); logged as on HTTP. False when the socket is gone."""
        from semula.web.fastpath import injected_error  # fastpath imports this module

        metrics.FAULTS.labels(fault.kind).inc()
        if fault.is_error:
            exc = injected_error(fault, self.speaks)
            self.app._log(self.ctx, call, "fault", exc.status, started, project, logged)
            access.finish(exc.status, exc.code)
            self.ws.send(_laned(jsonio.compact(self.protocol.error_event(exc, self.speaks)), lane))
            return True
        self.app._log(self.ctx, call, "fault", 0, started, project, logged)
        after = fault["after"] if fault["after"] is not None else project["record_timeout"]
        self.ws.wait_closed(min(after, project["record_timeout"]))
        self.ws.abort()  # a dead provider's end: no close frame (the client's 1006)
        return False

    def _shaped(self, fault: faults.Fault, call: replay_service.Call, lane: bytes) -> bool:
        """The turn's own events, made whole first (a relayed reply is recorded, a miss is the miss),
        then sent late and paced (`slow`) or cut after `after_events` (`disconnect`: the connection is
        cut without a close frame; a record-through miss it cut has no events: the provider was not
        called). False when the socket is gone."""
        metrics.FAULTS.labels(fault.kind).inc()
        if call.live is not None:
            with contextlib.closing(_relayed(call.live, lane)) as relayed:
                payloads = list(relayed)
        elif call.entry is None:
            payloads = []  # cut before the provider was called (_miss: call.cut)
        else:
            _, events = replay_service.render(call, call.entry)
            payloads = [_laned(jsonio.compact(event), lane) for event in events or []]
        if fault.kind == "slow":
            for number, payload in enumerate(payloads):
                time.sleep(fault["pace"] if number else fault["ttfb"])  # gevent's: the socket is served
                self.ws.send(payload)
            access.finish(200)
            return True
        self.ws.send(*payloads[: fault["after_events"]])
        access.finish(200)
        self.ws.abort()
        return False

    def _replay(
        self, call: replay_service.Call, outcome: str, key: hits.Key, raw: bytes, lane: bytes
    ) -> None:
        """A recorded answer's events, one message each: in one write (and the hit kept, as an
        unpaced HTTP stream is), or with the recorded pauses between them when the project paces."""
        assert call.entry is not None
        _, events = replay_service.render(call, call.entry)
        events = events or []
        gaps = replay_service.pacing(call, call.entry)
        if gaps:
            for number, event in enumerate(events):
                if 0 < number <= len(gaps):
                    time.sleep(gaps[number - 1])  # gevent's: other greenlets run meanwhile
                self.ws.send(_laned(jsonio.compact(event), lane))
            return
        data = websocket.frames(_payloads(b"".join(call.dialect.sse(events)), lane))
        if outcome == "hit" and events:
            # Kept as the frames sent, under the counter value its rows were read at (as fastpath's
            # _replay keeps a hit): the next sight of this turn sends them again, restamped.
            version = call.version if call.version is not replay_service.UNREAD else None
            self.app._keep(key, call, events[0], version, raw, data)
        self.ws.send_frames(data)

    def _fail(
        self, call: replay_service.Call | None, exc: errors.SemulaError, started: float, lane: bytes
    ) -> None:
        """A failed turn: logged as the HTTP call's error would be, answered by one error event."""
        from semula.web.fastpath import ERROR_OUTCOMES

        if call is not None or exc.status != 401:  # as fastpath logs: a refused caller is no call
            self.app._log(self.ctx, call, ERROR_OUTCOMES.get(exc.code, "error"), exc.status, started)
        access.finish(exc.status, exc.code)
        self.ws.send(_laned(jsonio.compact(self.protocol.error_event(exc, self.speaks)), lane))


def _same_width(stamps: dict[str, Any]) -> bool:
    """Whether a kept turn's stamps that are times in seconds (the Responses API's created_at) have the
    width this reply's will have, so that its frames' lengths hold when they are replaced (until the
    year 2286; a turn is otherwise answered as a first sight)."""
    for value in stamps.values():
        if type(value) is int and len(str(value)) != len(str(int(time.time()))):
            return False
    return True


def _call_body(message: bytes, protocol: Socket, post: str) -> tuple[dict[str, Any], bool, bytes]:
    """The call's body of a turn, whether it is plain JSON, and its lane (_lane_of)."""
    event, plain = policy.read_json(message)
    if not isinstance(event, dict) or event.get("type") != protocol.turn:
        raise errors.BadRequest(
            f'Each message on this socket is a client event {{"type": "{protocol.turn}", ...}} with the '
            f"body of POST {post}.",
            param="type",
            code="invalid_event",
        )
    lane = _lane_of(protocol.lane, event.get(protocol.lane)) if protocol.lane else b""
    for refused in protocol.refused:
        if event.get(refused):
            raise errors.BadRequest(f"{refused} is not supported over a WebSocket.", param=refused)
    body = {name: value for name, value in event.items() if name != "type" and name != protocol.lane}
    body["stream"] = True  # the socket always streams; a `stream` the client sent is not fingerprinted
    return body, plain, lane


def _quiet(message: bytes, protocol: Socket) -> bool:
    """Whether a message is one the protocol answers with nothing."""
    try:
        event = jsonio.loads(message)
    except errors.SemulaError:
        return False
    return isinstance(event, dict) and event.get("type") in protocol.quiet


def _lane_of(member: str, value: Any) -> bytes:
    """What a turn's events carry of its lane: `,"stream_id":...` to put before their closing brace."""
    return b"," + jsonio.compact(member) + b":" + jsonio.compact(value) if value is not None else b""


def _laned(payload: bytes, lane: bytes) -> bytes:
    """An event's JSON object with its turn's lane."""
    return payload[:-1] + lane + b"}" if lane else payload


def _payloads(data: bytes, lane: bytes) -> list[bytes]:
    """The JSON of each event of a stream as server-sent events frame it (`event: TYPE` then `data:
    JSON`, or `data: JSON` alone; JSON has no raw line breaks), each with the turn's lane."""
    payloads = []
    for block in data.split(b"\n\n"):
        if block:
            start = 6 if block.startswith(b"data: ") else block.index(b"\ndata: ") + 7
            payloads.append(_laned(block[start:], lane))
    return payloads


def _relay(ws: WebSocket, live: Iterable[bytes], lane: bytes) -> None:
    """A record-through stream as the provider sends it: each server-sent event's data, one message."""
    with contextlib.closing(_relayed(live, lane)) as relayed:
        for payload in relayed:
            ws.send(payload)


def _relayed(live: Iterable[bytes], lane: bytes) -> Iterator[bytes]:
    """A record-through stream's messages as the provider sends them: each server-sent event's data."""
    try:
        for piece in live:
            for block in piece.split(b"\n\n"):
                data = provider.event_data(block) if block.strip() else None
                if data is not None:
                    payload = jsonio.compact(data)
                    yield _laned(payload, lane) if isinstance(data, dict) else payload
    finally:
        close = getattr(live, "close", None)
        if close is not None:
            close()  # the relay learns whether its stream was read whole (it records it then)

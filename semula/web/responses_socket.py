"""The Responses API over a WebSocket: `GET /v1/responses` upgraded (at the root, under /p/NAME and in
sessions), as the openai SDKs' `client.responses.connect()` and Codex use it.

Each client message `{"type": "response.create", ...}` is one call, with the body of a `POST
/v1/responses` (without `stream`: the socket always streams), answered by the events the SSE stream
of that call carries (response.created ... response.completed), one text message each. Turns run one
after another, in the order they came, each through the same service calls as an HTTP call
(replay_service.start, the proxy's _miss: parking, record-through, synthetic answers), so an answer
recorded over HTTP replays over a socket and back (`stream` is not fingerprinted). A parked turn
waits as an HTTP call does while the socket keeps answering pings. A turn that fails gets one
`{"type": "error", "status", "error": {...}}` event (the API's error object, as the HTTP error's
body has it) and the socket stays open. Every turn is logged as an HTTP call is: a call-log row, an
access line and the request metrics (decision 0056).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from semula import dialects, logs
from semula.core import errors, jsonio
from semula.db import DatabaseError
from semula.service import Context, provider
from semula.service import replay as replay_service
from semula.web import access, policy
from semula.web.websocket import Gone, WebSocket

if TYPE_CHECKING:
    from semula.web.fastpath import ProxyApp

CREATE = "response.create"
# Members of a response.create event that are the socket's, not the call's: its type, and the lane
# the SDKs may name (echoed on the turn's events; turns run in order, whatever their lane).
ENVELOPE = ("type", "stream_id")


def serve(
    app: ProxyApp,
    ctx: Context,
    selectors: tuple[str | None, str | None],
    session: str | None,
    environ: dict[str, Any],
    start_response: Callable[..., Any],
) -> list[bytes]:
    """Take the upgrade of an authenticated request and answer its turns until the client closes."""
    req = logs.CURRENT.get()
    route = req.route if req is not None else None
    if req is not None:
        req.outcome = "websocket"
    ws = WebSocket.accept(
        environ, start_response, max_size=app.settings.max_body_bytes, headers=access.finish(101)
    )
    from semula.web.fastpath import _header  # fastpath imports this module

    header = _header(environ)
    try:
        while (message := ws.receive()) is not None:
            if not _turn(app, ctx, ws, message, selectors, session, header, route):
                break
    finally:
        ws.close()
    return []


def _turn(
    app: ProxyApp,
    ctx: Context,
    ws: WebSocket,
    message: bytes,
    selectors: tuple[str | None, str | None],
    session: str | None,
    header: Callable[[str], str | None],
    route: str | None,
) -> bool:
    """Answer one message; False when the client is gone."""
    req = logs.begin_request(None, "GET")
    req.route = route
    started = time.monotonic()
    speaks = dialects.get(dialects.RESPONSES)
    call: replay_service.Call | None = None
    lane: dict[str, Any] = {}
    try:
        try:
            body, plain, lane = _call_body(message)
            body = speaks.with_headers(body, header)
            call = app.start(ctx, selectors, body, speaks, session, plain)
            outcome = "hit" if call.entry else app._miss(ctx, call)
            app._log(ctx, call, outcome, 200, started)
            if call.live is not None:
                _relay(ws, call.live, lane)
            else:
                _, events = replay_service.render(call, call.entry)
                _send_events(ws, events or [], replay_service.pacing(call, call.entry), lane)
            access.finish(200)
        except errors.SemulaError as exc:
            _fail(app, ctx, ws, call, exc, started, speaks, lane)
        except DatabaseError as exc:
            _fail(app, ctx, ws, call, policy.from_database(exc, "/v1/responses"), started, speaks, lane)
        except Gone:
            raise
        except Exception as exc:  # a bug: an error event, logged without its text
            _fail(app, ctx, ws, call, policy.unexpected(exc, "/v1/responses"), started, speaks, lane)
    except Gone:
        return False
    return True


def _call_body(message: bytes) -> tuple[dict[str, Any], bool, dict[str, Any]]:
    """The call's body of a response.create event, whether it is plain JSON, and its lane."""
    event, plain = policy.read_json(message)
    if not isinstance(event, dict) or event.get("type") != CREATE:
        raise errors.BadRequest(
            'Each message on this socket is a client event {"type": "response.create", ...} with the '
            "body of POST /v1/responses.",
            param="type",
            code="invalid_event",
        )
    lane = {"stream_id": event["stream_id"]} if event.get("stream_id") is not None else {}
    if event.get("background"):
        raise errors.BadRequest("background is not supported over a WebSocket.", param="background")
    body = {name: value for name, value in event.items() if name not in ENVELOPE}
    body["stream"] = True  # the socket always streams; a `stream` the client sent is not fingerprinted
    return body, plain, lane


def _send_events(
    ws: WebSocket, events: list[dict[str, Any]], gaps: list[float] | None, lane: dict[str, Any]
) -> None:
    """A rendered stream's events, one message each: in one write, or with the recorded pauses
    between them when the project paces replays."""
    messages = [jsonio.compact({**event, **lane} if lane else event) for event in events]
    if not gaps:
        ws.send(*messages)
        return
    for number, message in enumerate(messages):
        if 0 < number <= len(gaps):
            time.sleep(gaps[number - 1])  # gevent's: other greenlets run meanwhile
        ws.send(message)


def _relay(ws: WebSocket, live: Iterable[bytes], lane: dict[str, Any]) -> None:
    """A record-through stream as the provider sends it: each server-sent event's data, one message."""
    try:
        for piece in live:
            for block in piece.split(b"\n\n"):
                data = provider.event_data(block) if block.strip() else None
                if data is not None:
                    ws.send(jsonio.compact({**data, **lane} if lane and isinstance(data, dict) else data))
    finally:
        close = getattr(live, "close", None)
        if close is not None:
            close()  # the relay learns whether its stream was read whole (it records it then)


def _fail(
    app: ProxyApp,
    ctx: Context,
    ws: WebSocket,
    call: replay_service.Call | None,
    exc: errors.SemulaError,
    started: float,
    speaks: dialects.Dialect,
    lane: dict[str, Any],
) -> None:
    """A failed turn: logged as the HTTP call's error would be, answered by one error event."""
    from semula.web.fastpath import ERROR_OUTCOMES

    app._log(ctx, call, ERROR_OUTCOMES.get(exc.code, "error"), exc.status, started)
    access.finish(exc.status, exc.code)
    ws.send(jsonio.compact(error_event(exc, speaks, lane)))


def error_event(exc: errors.SemulaError, speaks: dialects.Dialect, lane: dict[str, Any]) -> dict[str, Any]:
    """The Responses WebSocket's error event: the HTTP status and the API's error object (with the
    headers the HTTP error would carry, such as Retry-After)."""
    error = dict(speaks.error_body(exc)["error"])
    if exc.headers:
        error["headers"] = dict(exc.headers)
    return {"type": "error", "status": exc.status, "error": error, **lane}

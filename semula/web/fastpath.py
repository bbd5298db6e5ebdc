"""The OpenAI-compatible proxy as a plain WSGI layer in front of Flask.

Flask's request machinery costs about 40% of a replay hit (see bench/RESULTS.md), so the
proxy routes are served here and everything else falls through to the Flask app.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import re
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from semula import dialects, heavy, logs, metrics
from semula.config import Settings
from semula.core import errors, faults, jsonio
from semula.db import DatabaseError, Store
from semula.dialects.routes import CALL, Bound
from semula.parking import GONE, Parking, client_gone
from semula.service import Context, hits, record_through, sequences, synthetic
from semula.service import faults as fault_rules
from semula.service import replay as replay_service
from semula.service.calllog import CallLog
from semula.service.served import Served
from semula.service.versions import Versions
from semula.web import access, policy

logger = logging.getLogger("semula.web")
JSON_HEADERS = [("Content-Type", "application/json")]
SSE_HEADERS = [
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "no-cache"),
    ("X-Accel-Buffering", "no"),
]
ERROR_OUTCOMES = {
    "semula_replay_miss": "replay_miss",
    "semula_record_timeout": "timeout",
    "semula_max_misses": "max_misses",
    "semula_upstream_budget": "budget",
    "semula_upstream_dry_run": "dry_run",
    "semula_sequence_exhausted": "sequence_exhausted",
    "semula_client_gone": "abandoned",
}
_UNPRINTABLE = re.compile(r"[\x00-\x1f\x7f]")
WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
Environ, Answer, InPath = dict[str, Any], dict[str, Any], tuple[str, ...]
OK = policy.status_line(200)
# A body past this size is parsed, checked, fingerprinted and compared with entries by ProxyApp.offload
# when the server gave one (a native thread: semula/web/wsgi.py; decision 0074).
HEAVY_BODY = 256 * 1024


def unknown_path(environ: dict[str, Any], speaks: str) -> errors.NotFound:
    """A 404 that names the path and the APIs this server speaks (clients otherwise blame the model)."""
    method, path = environ.get("REQUEST_METHOD", "GET"), environ.get("PATH_INFO", "")
    return errors.NotFound(
        f"semula does not serve {method} {path[:200]}. It speaks: {speaks}; each also under /p/<project>/.",
        code="unknown_path",
    )


def _paced(events: Iterable[bytes], gaps: list[float]) -> Iterator[bytes]:
    """The events with the recorded pauses between them (time.sleep yields to other greenlets)."""
    for number, event in enumerate(events):
        if 0 < number <= len(gaps):
            time.sleep(gaps[number - 1])
        yield event


def _warned(warning: str | None) -> list[tuple[str, str]]:
    """The X-Semula-Warning header of a forwarded answer semula could not record (none otherwise)."""
    if not warning:
        return []
    # It may quote the provider's answer: one line of printable ASCII, whatever that answer held.
    return [("X-Semula-Warning", _UNPRINTABLE.sub(" ", warning.encode("ascii", "replace").decode("ascii")))]


class ProxyApp:
    def __init__(
        self,
        fallback: WSGIApp,
        settings: Settings,
        store: Store,
        parking: Parking,
        calllog: CallLog,
        counts: sequences.Counts | None = None,
        versions: Versions | None = None,
    ):
        self.fallback = fallback
        self.settings = settings
        self.store = store
        self.parking = parking
        self.calllog = calllog
        self.base = Context(store, settings, None, parking.release, counts, versions or Versions())  # type: ignore[arg-type]
        self.hit_sample = settings.access_log_hits  # the share of replay hits with an access line
        self.principals = policy.PrincipalCache()
        self.hits = hits.HitCache(settings.hit_cache_mb << 20)
        metrics.watch_kept(self.hits)
        self.projects = replay_service.ProjectRows()
        # Runs the pure work of a call with a large body away from the event loop (semula/web/wsgi.py).
        self.offload: replay_service.Run | None = None
        # Does that pure work in another process instead, through offload (semula.heavy; the server's).
        self.helper: heavy.Helper | None = None

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        req = logs.begin_request(
            environ.get("HTTP_X_REQUEST_ID"), environ.get("REQUEST_METHOD", ""), self.hit_sample
        )
        table = dialects.table()
        found = table.find(path)
        if found is None:
            unknown_in = table.unknown_in(path)  # a path under /v1: an API this server does not speak
            if unknown_in is not None:
                return self._json(
                    start_response, 404, unknown_in.error_body(unknown_path(environ, table.speaks))
                )
            return self.fallback(environ, start_response)
        route, match, in_path = found
        if route.keyed is not None and route.keyed.dialect.api_key(environ) is not None:
            route = route.keyed
        req.route = route.labels[bool(match["project"])]
        started = time.monotonic()
        ctx: Context | None = None
        made: list[replay_service.Call] = []  # the call _post() started, for the error's log row
        speaks = route.dialect  # every route's errors are in its API's envelope, from the first (a 401) on
        try:
            authorization = policy.authorization(environ.get("HTTP_AUTHORIZATION"), speaks.api_key(environ))
            ctx = self.base.as_(self.principals.authenticate(self.base, authorization))
            header_project = environ.get("HTTP_X_SEMULA_PROJECT")
            path_session = match["session"]
            session = sequences.check_session(path_session) if path_session else self._session(environ)
            if route.route.websocket is not None and environ.get("HTTP_UPGRADE", "").lower() == "websocket":
                # A WebSocket (decision 0056); its modules come with the first, not with the app (0062).
                from semula.web import socket_mode

                self._method(environ, "GET")
                call = (route, (match["project"], header_project), session)
                return socket_mode.serve(self, ctx, call, environ, start_response)
            handler, method = route.route.serves, environ.get("REQUEST_METHOD", "")
            if handler is CALL and method == "POST":
                raw = self._read(environ)
                arrayed = route.dialect.streams_array(in_path, environ.get("QUERY_STRING", ""))
                if environ.get("HTTP_X_SEMULA_FAULT") is None and not arrayed:
                    return self._post(
                        ctx, environ, match, (route, in_path), raw, session, started, start_response, made
                    )
                post = (ctx, environ, match, (route, in_path), raw, session, started)
                if arrayed:  # a stream asked for as one JSON array (Gemini without alt=sse)

                    def reply(respond: Callable[..., Any]) -> Iterable[bytes]:
                        return self._faulted(post, header_project, respond, made)

                    return _json_array(start_response, reply, route.dialect)
                return self._faulted(post, header_project, start_response, made)
            project = replay_service.resolve_project(ctx, match["project"], header_project)
            if handler is CALL or method not in handler.methods:
                raise errors.MethodNotAllowed()  # a call route takes a POST only; a handler, its methods
            body = functools.partial(self._handler_body, environ, speaks)
            answer = handler.answer(Served(ctx, project, method, in_path, speaks, body))
            return self._json(start_response, 200, answer)
        except Exception as exc:
            if isinstance(exc, errors.SemulaError):
                error = exc
            elif isinstance(exc, DatabaseError):
                error = policy.from_database(exc, path)
            else:  # a bug: a 500 in the API's error shape, logged without its text
                error = policy.unexpected(exc, path)
            return self._error(start_response, error, ctx, made[0] if made else None, started, speaks)

    def _faulted(
        self,
        post: tuple[Any, ...],
        header_project: str | None,
        start_response: Callable[..., Any],
        made: list[replay_service.Call],
    ) -> Iterable[bytes]:
        """A call with X-Semula-Fault (decision 0060): its error, silence, or its own reply shaped;
        without one, the call itself. `post` is what _post() takes for the call itself."""
        ctx, environ, match, (route, _), _, _, started = post
        if environ.get("HTTP_X_SEMULA_FAULT") is None:
            return self._post(*post, start_response, made)
        speaks = route.dialect
        fault = faults.parse(environ["HTTP_X_SEMULA_FAULT"])
        project, _ = self.projects.get(ctx, match["project"], header_project)

        logged = faults.logged(fault)

        def inner(respond: Callable[..., Any]) -> Iterable[bytes]:
            # Its log row names the fault that shaped it; a disconnect cuts a record-through miss unasked.
            return self._post(*post, respond, made, logged, fault.kind == "disconnect")

        where = (ctx, None, project, speaks, environ, started)
        return self._inject(fault, logged, where, start_response, inner)

    def _inject(
        self,
        fault: faults.Fault,
        logged: str,
        where: tuple[Any, ...],
        start_response: Callable[..., Any],
        inner: Callable[[Callable[..., Any]], Iterable[bytes]],
    ) -> Iterable[bytes]:
        """Answer with a fault: its error, silence, or the call's own reply (`inner`) shaped. `logged` is
        the fault as the call log keeps it; `where` the call (ctx, Call or None, project, dialect,
        environ, start)."""
        ctx, call, project, speaks, environ, started = where
        metrics.FAULTS.labels(fault.kind).inc()
        if fault.is_error:
            exc = injected_error(fault, speaks)
            self._log(ctx, call, "fault", exc.status, started, project, logged)
            return self._json(start_response, exc.status, speaks.error_body(exc), list(exc.headers))
        if fault.kind == "timeout":
            self._log(ctx, call, "fault", 0, started, project, logged)
            after = fault["after"] if fault["after"] is not None else project["record_timeout"]
            return _silent(environ, min(after, project["record_timeout"]))
        if call is not None:
            call.fault, call.cut = logged, fault.kind == "disconnect"
        return _delivered(fault, environ, start_response, inner)

    def _post(
        self,
        ctx: Context,
        environ: dict[str, Any],
        match: re.Match[str],
        route: tuple[Bound, InPath],
        raw: bytes,
        session: str | None,
        started: float,
        start_response: Callable[..., Any],
        made: list[replay_service.Call],
        fault: str | None = None,
        cut: bool = False,
    ) -> Iterable[bytes]:
        """A call of an API: a kept hit, else looked up and replayed or recorded (the call it starts
        goes into `made`, for the log row of an error it raises). `route` is its route and what the
        path says of the call (the Gemini API's model and method); `fault` the header's fault that
        shapes its reply (slow, disconnect), as the call log keeps it; `cut`: it is a disconnect."""
        header_project = environ.get("HTTP_X_SEMULA_PROJECT")
        speaks, in_path = route[0].dialect, route[1]
        headers = tuple(environ.get(name) for name in speaks.answer_headers) + in_path
        key = hits.key(ctx, speaks.name, match["project"], header_project, raw, session, headers)
        kept = self.hits.find(ctx, key, raw, sequences=True)
        number = None  # its number in its session, once counted
        if kept is not None and kept.sequence is not None:
            assert session is not None  # a kept sequence's key says it is in a session
            number, seq, version = sequences.kept_number(ctx, kept, session)
            kept = self.hits.find_answer(key, kept, seq, version)
        if kept is not None:
            data = self.hits.reply(kept)  # before the log: a failure is logged once, as an error
            self._log(ctx, kept, "hit", 200, started, None, fault)
            if kept.stream:
                return self._sse(start_response, data, kept.headers)
            return self._bytes(start_response, 200, data, kept.headers)
        # A large body's parse, check and fingerprint run where the event loop is not held (decision 0074).
        run = self.offload if self.offload is not None and len(raw) > HEAVY_BODY else None

        def read() -> tuple[Any, bool]:
            parsed, plain = policy.read_json(raw)
            body = speaks.with_headers(parsed, _header(environ))
            return (speaks.with_route(body, *in_path) if in_path else body), plain

        selectors = (match["project"], header_project)
        helped = (
            self._helped(ctx, selectors, raw, speaks, in_path, environ, read) if run is not None else None
        )
        if helped is not None:
            body, plain = replay_service.UNREAD, False  # held by the helper, which fingerprinted it
        else:
            body, plain = run(read) if run is not None else read()
        call = self.start(ctx, selectors, body, speaks, session, plain, number, run, helped)
        made.append(call)
        call.fault, call.cut = fault, cut
        if call.project["faults"] != "[]":  # its rules (decision 0061); no hit of such a project is kept
            picked = fault_rules.pick(ctx, call)
            if picked is not None:
                where = (ctx, call, call.project, speaks, environ, started)
                return self._inject(
                    *picked,
                    where,
                    start_response,
                    lambda respond: self._replay(
                        ctx, call, key, raw, started, respond, environ.get("gunicorn.sock")
                    ),
                )
        return self._replay(ctx, call, key, raw, started, start_response, environ.get("gunicorn.sock"))

    def _helped(
        self,
        ctx: Context,
        selectors: tuple[str | None, str | None],
        raw: bytes,
        speaks: dialects.Dialect,
        in_path: InPath,
        environ: dict[str, Any],
        read: Callable[[], tuple[Any, bool]],
    ) -> Any:
        """A large body checked and fingerprinted by the helper process (semula.heavy), for
        replay_service.start's `helped`; None without a helper, or when it could not answer (the body
        is then read here, as without one). What the check refuses is raised."""
        helper, run = self.helper, self.offload
        if helper is None or run is None:
            return None
        project, _ = self.projects.get(ctx, *selectors)  # its fingerprint rules
        helper.start()
        token = helper.token()
        rules = (project["ignore_fields"], project["normalize"])
        args = (token, raw, speaks.name, in_path, heavy.headers(environ), rules)
        got = run(lambda: helper.call("begin", *args))
        if got is None:
            return None
        request, fingerprint, _, previous = got

        return request, fingerprint, previous, (helper, token), functools.partial(run, read)

    def start(
        self,
        ctx: Context,
        selectors: tuple[str | None, str | None],
        body: dict[str, Any],
        speaks: dialects.Dialect,
        session: str | None,
        plain: bool,
        number: int | None = None,
        run: replay_service.Run | None = None,
        helped: Any = None,
    ) -> replay_service.Call:
        """Look a call up (replay_service.start) in the project its path or header names (kept rows);
        `number`: its number in its session, when it was counted already; `run`: how its pure work is
        run (replay_service.start)."""
        project, version = self.projects.get(ctx, *selectors)
        return replay_service.start(
            ctx,
            project,
            body,
            speaks,
            session,
            version=version,
            read_again=lambda: self.projects.read(ctx, *selectors),
            plain=plain,
            number=number,
            run=run,
            helped=helped,
        )

    def _replay(
        self,
        ctx: Context,
        call: replay_service.Call,
        key: hits.Key,
        raw: bytes,
        started: float,
        start_response: Callable[..., Any],
        client: Any = None,
    ) -> Iterable[bytes]:
        """Replay or record a call start() looked up (`client`: the connection's socket, watched
        while a miss is held); what it raises, __call__ answers."""
        outcome = "hit" if call.entry else self._miss(ctx, call, client)
        if outcome == "fault":  # a disconnect took the place of the provider's reply: its head, no body
            self._log(ctx, call, outcome, 200, started)
            start_response(OK, [*(SSE_HEADERS if call.stream else JSON_HEADERS), *access.finish(200)])
            return []
        if call.live is not None:
            self._log(ctx, call, outcome, 200, started)
            start_response(OK, [*SSE_HEADERS, *call.live.headers, *access.finish(200)])
            return call.live
        body, events = replay_service.render(call, call.entry)
        extra = replay_service.replay_headers(call.entry) + _warned(call.entry.get("warning"))
        # A hit is kept under the counter value its rows were read at; a call that waited for its
        # answer read it later, so is not (its next request keeps it).
        version = call.version if outcome == "hit" and call.version is not replay_service.UNREAD else None
        if events is not None:
            gaps = replay_service.pacing(call, call.entry)
            if gaps:
                self._log(ctx, call, outcome, 200, started)
                start_response(OK, [*SSE_HEADERS, *extra, *access.finish(200)])
                return _paced(call.dialect.sse(events), gaps)
            # Unpaced, a replayed stream is one write: an event per write cost a system call and a
            # chunk frame per word, 7x the CPU of the same answer without stream.
            data = b"".join(call.dialect.sse(events))
            if outcome == "hit" and events:
                self._keep(key, call, events[0], version, raw, data, sequences=True)
            self._log(ctx, call, outcome, 200, started)  # after what may fail: a call is logged once
            return self._sse(start_response, data, extra)
        assert body is not None
        data = jsonio.compact(body)
        if outcome == "hit":
            self._keep(key, call, body, version, raw, data, sequences=True)
        self._log(ctx, call, outcome, 200, started)
        return self._bytes(start_response, 200, data, extra)

    def _keep(
        self,
        key: hits.Key,
        call: replay_service.Call,
        body: dict[str, Any],
        *rest: Any,
        sequences: bool = False,
    ) -> None:
        """Keep a hit for its next sight (service.hits): a cache, so a failure there (a bug, memory)
        costs this call nothing: it is answered as found, and its next sight is a first sight.
        `sequences`: a counted session call too (its caller finds kept sequences)."""
        try:
            self.hits.keep(key, call, body, *rest, sequences=sequences)
        except Exception as exc:
            logger.error("a replay hit was not kept", exc_info=exc)

    def _handler_body(self, environ: Environ, speaks: dialects.Dialect) -> Any:
        """The JSON body of a request a route's own handler reads (Served.body)."""
        return speaks.with_headers(policy.parse_json(self._read(environ)), _header(environ))

    def _miss(self, ctx: Context, call: replay_service.Call, client: Any = None) -> str:
        """Park and hold a miss in record mode; returns the outcome, or raises the right error."""
        if call.exhausted is not None:
            raise call.exhausted
        metrics.MISSES.inc()
        replay_service.check_previous(ctx, call)
        if not replay_service.may_park(ctx, call):
            raise replay_service.replay_miss(ctx, call)
        if synthetic.applies(call):  # before record-through: the project asked for vectors made here
            call.entry = synthetic.answer(ctx, call)
            return "synthetic"
        if call.project["record_through"]:
            if not call.dialect.upstream(self.settings)[1]:
                raise errors.UpstreamError(
                    f"record_through is on but this server has no upstream key for {call.dialect.name}.",
                    code="upstream_not_configured",
                )
            if call.cut:  # a disconnect fault: the provider is not called, nothing is recorded (0061)
                return "fault"
            if call.stream:
                forwarded = record_through.forward_live(
                    ctx, call.project, call.fingerprint, call.body, call.dialect, call.request, call.recording
                )
                if not isinstance(forwarded, dict):
                    call.live = forwarded
                    return "forwarded"
                call.entry = forwarded
            else:
                call.entry = record_through.forward(
                    ctx, call.project, call.fingerprint, call.body, call.dialect, call.recording
                )
            return "forwarded"
        replay_service.park(ctx, call)
        if call.entry is not None:  # answered while we parked
            return "hit"
        gone = client_gone(client)
        result = self.parking.hold(call.pending_id, call.project["record_timeout"], gone, call.hold_epoch)
        if result is None:
            raise errors.RecordTimeout(
                f"Nobody answered pending call {call.pending_id} within {call.project['record_timeout']} s; "
                "it stays pending, and a late answer is still saved."
            )
        status, entry_id = result
        if status == GONE:
            raise errors.ClientGone(f"The client of pending call {call.pending_id} went away.")
        if status != "answered":
            raise errors.Conflict(
                f"Pending call {call.pending_id} was {status}.", code="semula_pending_cancelled"
            )
        call.entry = replay_service.answered_entry(ctx, entry_id, call.seq)
        return "answered"

    @staticmethod
    def _session(environ: dict[str, Any]) -> str | None:
        """The replay session named by X-Semula-Session (the path's /s/<session> wins)."""
        header = environ.get("HTTP_X_SEMULA_SESSION")
        return sequences.check_session(header, param="X-Semula-Session") if header is not None else None

    def _read(self, environ: dict[str, Any]) -> bytes:
        limit = self.settings.max_body_bytes
        return policy.read_body(environ["wsgi.input"], environ.get("CONTENT_LENGTH"), limit)

    @staticmethod
    def _method(environ: dict[str, Any], allowed: str) -> None:
        if environ.get("REQUEST_METHOD") != allowed:
            raise errors.MethodNotAllowed()

    @staticmethod
    def _sse(
        start_response: Callable[..., Any], data: bytes, extra: Sequence[tuple[str, str]]
    ) -> list[bytes]:
        length = ("Content-Length", str(len(data)))
        start_response(OK, [*SSE_HEADERS, length, *extra, *access.finish(200)])
        return [data]

    @classmethod
    def _json(
        cls,
        start_response: Callable[..., Any],
        status: int,
        body: dict[str, Any],
        extra: Sequence[tuple[str, str]] = (),
    ) -> list[bytes]:
        code = body.get("error", {}).get("code") if status >= 400 else None
        if not isinstance(code, str):  # Google's envelope has the HTTP status there
            code = None
        return cls._bytes(start_response, status, jsonio.compact(body), extra, code)

    @staticmethod
    def _bytes(
        start_response: Callable[..., Any],
        status: int,
        data: bytes,
        extra: Sequence[tuple[str, str]] = (),
        code: str | None = None,
    ) -> list[bytes]:
        start_response(
            policy.status_line(status),
            [*JSON_HEADERS, ("Content-Length", str(len(data))), *extra, *access.finish(status, code)],
        )
        return [data]

    def _error(
        self,
        start_response: Callable[..., Any],
        exc: errors.SemulaError,
        ctx: Context | None,
        call: replay_service.Call | None,
        started: float,
        speaks: dialects.Dialect,
    ) -> list[bytes]:
        if ctx is not None and (call is not None or exc.status != 401):
            outcome = ERROR_OUTCOMES.get(exc.code, "error")
            self._log(ctx, call, outcome, exc.status, started)
        return self._json(start_response, exc.status, speaks.error_body(exc), list(exc.headers))

    def _log(
        self,
        ctx: Context,
        call: replay_service.Logged | None,
        outcome: str,
        status: int,
        started: float,
        project: dict[str, Any] | None = None,
        fault: str | None = None,
    ) -> None:
        metrics.count_call(outcome)
        project_id = project["id"] if project is not None else None
        row = replay_service.log_row(
            ctx, call, outcome=outcome, status=status, started=started, project_id=project_id, fault=fault
        )
        self.calllog.record(row)
        req = logs.CURRENT.get()  # what the access line (written with the response's headers) says
        if req is not None:
            req.outcome, req.token_id, req.pending_id = outcome, row["token_id"], row["pending_id"]
            req.project = call.project["name"] if call is not None else project and project["name"]


def injected_error(fault: faults.Fault, speaks: dialects.Dialect) -> faults.InjectedFault:
    """An error fault as this API has it: its overload's status, a 429's rate-limit headers."""
    status = speaks.overloaded_status if fault.kind == "overloaded" else None
    rate_limit = fault.kind == "rate_limit"
    limits = speaks.rate_limit_headers(fault["retry_after"], time.time()) if rate_limit else ()
    return faults.error(fault, status, limits)


def _abort(environ: dict[str, Any]) -> None:
    """Cut the client's connection where it stands: no more bytes, no end of the response."""
    sock = environ.get("gunicorn.sock")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


def _silent(environ: dict[str, Any], seconds: float) -> Iterator[bytes]:
    """An injected timeout: nothing for `seconds` (or until the client leaves), then the connection cut."""
    time.sleep(seconds)
    _abort(environ)
    return iter(())


def _delivered(
    fault: faults.Fault,
    environ: dict[str, Any],
    start_response: Callable[..., Any],
    inner: Callable[[Callable[..., Any]], Iterable[bytes]],
) -> Iterator[bytes]:
    """A call's own reply, delivered slowly (`slow`) or cut short (`disconnect`: its head goes out, then
    what `after_events` or `at` says of its body, then the cut)."""
    head: list[Any] = []
    body = b"".join(inner(lambda status, headers, exc_info=None: head.extend((status, headers))))
    status, headers = head
    stream = any(name == "Content-Type" and value == "text/event-stream" for name, value in headers)
    parts = faults.events(body) if stream else [body]
    write = start_response(status, headers)
    if fault.kind == "slow":
        time.sleep(fault["ttfb"])
        for number, part in enumerate(parts):
            if number:
                time.sleep(fault["pace"])
            yield part
        return
    write(b"")  # the head now: a server sends it with the body's first bytes, and there may be none
    if stream:
        yield from parts[: fault["after_events"]]
    elif fault["at"] == "body":
        yield body[: len(body) // 2]
    _abort(environ)


def _json_array(
    start_response: Callable[..., Any],
    reply: Callable[[Callable[..., Any]], Iterable[bytes]],
    dialect: dialects.Dialect,
) -> Iterable[bytes]:
    """A stream asked for without `alt=sse`: its events as one JSON array, element by element
    as they come (Dialect.json_array); an error reply is sent as it is."""
    array: list[bool] = []
    responded: list[bool] = []

    def respond(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        responded.append(True)
        if any(name == "Content-Type" and value == "text/event-stream" for name, value in headers):
            array.append(True)
            kept = [(n, v) for n, v in headers if n not in ("Content-Type", "Content-Length")]
            headers = [("Content-Type", "application/json; charset=UTF-8"), *kept]
        return start_response(status, headers, exc_info)

    body = reply(respond)
    if responded and not array:
        return body

    def elements() -> Iterator[bytes]:
        # A reply a header fault shapes (slow, disconnect) starts when it is first read: whether it
        # is a stream is known only then.
        pieces = iter(body)
        try:
            first = () if responded else tuple(itertools.islice(pieces, 1))
            if array:
                yield from dialect.json_array(itertools.chain(first, pieces))
            else:
                yield from first
                yield from pieces
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()  # a relayed stream learns whether it was read whole (it is recorded then)

    return elements()


def _header(environ: dict[str, Any]) -> Callable[[str], str | None]:
    return lambda name: environ.get("HTTP_" + name.upper().replace("-", "_"))

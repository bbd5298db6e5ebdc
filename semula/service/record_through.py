"""Record-through: forward a miss to the operator's provider, behind a hard budget.

The design is docs/design/record-through.md.

The key is server configuration only; it goes into the Authorization header (x-api-key for
Anthropic) of the upstream request and nowhere else. The app's headers are never copied. A
provider's error text is shown only after redaction, and an unreachable upstream is named by
exception type only.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from semula import dialects, metrics
from semula.core import recorded_meta, redact
from semula.core.errors import InvalidAnswer, UpstreamBudget, UpstreamDryRun, UpstreamError
from semula.dialects import Dialect, Request
from semula.service import Context, audit, dumps, flights, now, provider, sequences
from semula.service import entries as entries_service
from semula.service import projects as projects_service
from semula.service.auth import require

logger = logging.getLogger("semula.upstream")

SUMMARY = "recorded from upstream"
# The member of an entry _record() returns that says "the provider's answer to this very call": the
# call that forwarded it replies with it as received (replay.render()); calls that waited for it, and
# every later one, replay it as any entry (a fresh id and time unless the project's restamp is `recorded`).
RECEIVED = "received"


@dataclass
class _Flight:
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class SingleFlight:
    """Identical concurrent calls share one execution: the first runs it, the others wait for its result."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._flights: dict[tuple[str, ...], _Flight] = {}

    def run(self, key: tuple[str, ...], fn: Callable[[], Any]) -> Any:
        flight, leader = self.join(key)
        if not leader:
            return self.wait(flight)
        try:
            result = fn()
        except BaseException as exc:
            self.finish(key, flight, error=exc)
            raise
        self.finish(key, flight, result=result)
        return result

    def join(self, key: tuple[str, ...]) -> tuple[_Flight, bool]:
        """The flight for `key` and whether this caller leads it (and must finish() it)."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None:
                return flight, False
            flight = self._flights[key] = _Flight()
            return flight, True

    @staticmethod
    def wait(flight: _Flight) -> Any:
        flight.done.wait()
        if flight.error is not None:
            raise flight.error
        return flight.result

    def finish(
        self, key: tuple[str, ...], flight: _Flight, *, result: Any = None, error: BaseException | None = None
    ) -> None:
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        flight.result, flight.error = result, error
        flight.done.set()


FLIGHTS = SingleFlight()


def _flight_key(ctx: Context, project: dict[str, Any], fingerprint: str, seq: int | None) -> tuple[str, ...]:
    """One flight per answer: identical calls for one place in a sequence share it, two places never do."""
    return (ctx.principal.workspace_id, project["id"], fingerprint, str(seq or 1))


def _stored_or_dry_run(
    ctx: Context, project: dict[str, Any], fingerprint: str, body: dict[str, Any]
) -> dict[str, Any]:
    """The request as it is stored (redacted); a dry run is noted and refused here."""
    stored = redact.redact_obj(body, ctx.settings.secrets())
    if project["upstream_dry_run"]:
        ctx.store.run(
            "record_dry_run",
            project_id=project["id"],
            fingerprint=fingerprint,
            workspace_id=ctx.principal.workspace_id,
            model=body.get("model"),
            request=dumps(stored),
            now=now(),
        )
        _refused(ctx, project, "dry_run")
        raise UpstreamDryRun()
    return stored


def forward(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    body: dict[str, Any],
    dialect: Dialect | None = None,
    seq: int | None = None,
) -> dict[str, Any]:
    """The entry row for a miss, recorded from the upstream provider (one call per prompt per process).

    `seq`: the call is the seq-th of its request in a replay session that records sequences, and the
    request has fewer answers; its answer is recorded as the next of the sequence (decision 0041). A
    provider's answer
    semula cannot store is still the app's: the row then has no id and carries a `warning` (and
    the call counts as spent, as every call that reached the provider does).
    """
    dialect = dialect or dialects.get(dialects.CHAT)
    stored = _stored_or_dry_run(ctx, project, fingerprint, body)
    key = _flight_key(ctx, project, fingerprint, seq)
    led: list[bool] = []

    def once() -> dict[str, Any]:
        led.append(True)
        return _forward_once(ctx, project, fingerprint, body, stored, dialect, seq)

    # This process's flight, led once the deployment's is (service.flights): any other process's
    # identical call in flight has ended by then, and its entry is found by the budget's re-check.
    entry = FLIGHTS.run(key, lambda: flights.run(ctx, project["id"], fingerprint, seq or 1, once))
    return entry if led else _waited(entry)


def _waited(entry: Any) -> Any:
    """The entry a call that waited for another's forward replays: not the provider's answer to it."""
    if isinstance(entry, dict) and entry.get(RECEIVED):
        return {name: value for name, value in entry.items() if name != RECEIVED}
    return entry


def _budget_or_entry(
    ctx: Context, project: dict[str, Any], fingerprint: str, seq: int | None = None
) -> dict[str, Any] | None:
    """Take one call from the budget (None), or the answer recorded meanwhile; 429 when it is spent."""
    entries_service.check_quota(ctx, project["id"], fingerprint)
    # An earlier flight (or another process) may have recorded it since this request looked: the
    # budget is taken only while fewer than `seq` answers replay for the fingerprint, in one statement.
    if _take_budget(ctx, project, fingerprint, seq or 1):
        return None
    entry = sequences.recorded_answer(ctx, project["id"], fingerprint, seq or 1)
    if entry is not None:
        return entry
    _refused(ctx, project, "budget")
    tokens = project["upstream_max_tokens"]
    raise UpstreamBudget(
        f"Project {project['name']!r} has spent its record-through budget "
        f"(upstream_max_calls {project['upstream_max_calls']}, upstream_max_tokens "
        f"{'no cap' if tokens is None else tokens}); an admin can raise it, or reset the usage with "
        f"`semula project upstream {project['name']} --reset` (POST /api/v1/projects/"
        f"{project['name']}/upstream/reset)."
    )


def _give_back_if_unsent(ctx: Context, project: dict[str, Any], exc: BaseException) -> None:
    # Only a call that never left is given back: one the provider saw may have been billed.
    if getattr(exc, "sent", True) is False:
        ctx.store.run("give_back_upstream_call", project_id=project["id"])


def _forward_once(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    body: dict[str, Any],
    stored: dict[str, Any],
    dialect: Dialect,
    seq: int | None,
) -> dict[str, Any]:
    entry = _budget_or_entry(ctx, project, fingerprint, seq)
    if entry is not None:
        return entry
    try:
        response, chunks, headers = provider.call_provider(
            ctx.settings, body, project["upstream_model"], dialect
        )
    except BaseException as exc:
        _give_back_if_unsent(ctx, project, exc)
        _count(ctx, project, "error")
        logger.warning(
            "record-through failed",
            extra={"project": project["name"], "error": getattr(exc, "code", None) or type(exc).__name__},
        )
        raise
    meta = {"headers": dialect.kept_headers(headers)}
    return _record(ctx, project, fingerprint, stored, dialect, response, chunks, meta, seq)


def _record(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    stored: dict[str, Any],
    dialect: Dialect,
    response: Any,
    chunks: list[dict[str, Any]] | None,
    meta: dict[str, Any],
    seq: int | None = None,
) -> dict[str, Any]:
    """Save what the provider answered as an entry (given `seq`, as the next answer of its sequence);
    what cannot be stored is returned all the same."""
    meta = recorded_meta.recordable(meta)
    secrets = ctx.settings.secrets()
    # A provider may echo the key back in a successful answer too: nothing from upstream is kept with it.
    response = dialect.redact_response(response, lambda value: redact.redact_obj(value, secrets))
    chunks = redact.redact_obj(chunks, secrets)
    try:
        response, chunks = dialect.accept_recorded(response, chunks, stored, dialect.conversation(stored))
    except InvalidAnswer as exc:
        where = exc.param or "the answer"
        warning = f"not recorded: the provider's answer failed validation at {where}: {exc.message}"
        logger.warning("forward not recorded", extra={"project_id": project["id"], "param": exc.param})
        return {
            "id": None,
            "response": dumps(response),
            "chunks": dumps(chunks) if chunks is not None else None,
            "review_status": "unreviewed",
            "model": stored.get("model"),
            "warning": warning[:300],
            "meta": dumps(meta) if meta else None,
            RECEIVED: True,
        }
    # Not in a transaction of its own: one statement on PostgreSQL, a round trip for all of it.
    saved = (entries_service.save if seq is None else entries_service.append)(
        ctx.store,
        ctx,
        project_id=project["id"],
        fingerprint=fingerprint,
        request=stored,
        response=response,
        chunks=chunks,
        actor="agent",
        summary=SUMMARY,
        tokens=dialect.usage(response),
        api=dialect.name,
        meta=meta,
    )
    _count(ctx, project, "forwarded")
    prompt_tokens, completion_tokens = dialect.usage(response)
    logger.info(
        "forwarded",
        extra={
            "project": project["name"],
            "entry_id": saved["id"],
            "seq": saved.get("seq", 1),
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
        },
    )
    # What was just written, without reading it back: a forward is a round trip shorter.
    return {
        "id": saved["id"],
        "response": saved["response"],
        "chunks": saved["chunks"],
        "review_status": "unreviewed",
        "model": stored.get("model"),
        "meta": dumps(meta) if meta else None,
        RECEIVED: True,
    }


def forward_live(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    body: dict[str, Any],
    dialect: Dialect,
    req: Request,
    seq: int | None = None,
) -> dict[str, Any] | Relay:
    """A stream request forwarded live: the server-sent events to send the app as the provider sends
    them, its entry saved when the stream completes. Identical calls meanwhile wait for that entry
    (a dict, as forward() returns); so does a call that finds the entry recorded already."""
    stored = _stored_or_dry_run(ctx, project, fingerprint, body)
    key = _flight_key(ctx, project, fingerprint, seq)
    flight, leader = FLIGHTS.join(key)
    if not leader:
        return _waited(FLIGHTS.wait(flight))
    held: flights.Flight | None = None  # the deployment's flight, once this process leads it
    finished: list[bool] = []

    def finish(result: Any = None, error: BaseException | None = None) -> None:
        """Once: an app that goes away after the entry is saved must not turn it into an error."""
        if finished:
            return
        finished.append(True)
        if held is not None:
            held.end(error)
        FLIGHTS.finish(key, flight, result=result, error=error)

    try:
        held = flights.lead(ctx, project["id"], fingerprint, seq or 1)
        entry = _budget_or_entry(ctx, project, fingerprint, seq)
        if entry is not None:
            finish(result=entry)
            return entry
        try:
            stream = provider.open_stream(ctx.settings, body, project["upstream_model"], dialect)
        except BaseException as exc:
            _give_back_if_unsent(ctx, project, exc)
            _count(ctx, project, "error")
            raise
    except BaseException as exc:
        finish(error=exc)
        raise
    relay = _relay(ctx, project, fingerprint, stored, dialect, req, stream, finish, seq)
    return Relay(relay, list(dialect.kept_headers(stream.headers).items()))


def _redacted(event: bytes, secrets: tuple[str, ...]) -> bytes:
    """A relayed event with the credentials it holds redacted, as a stored answer is. Event by event:
    a key the provider splits across two events passes (the entry saved from them is redacted)."""
    text = event.decode("utf-8", "surrogateescape")
    cleaned = redact.redact_text(text, secrets)
    return event if cleaned == text else cleaned.encode("utf-8", "surrogateescape")


class Relay:
    """A stream on its way from the provider to the app: the events, and the headers to pass on."""

    def __init__(self, events: Iterator[bytes], headers: list[tuple[str, str]]):
        self._events = events
        self.headers = headers

    def __iter__(self) -> Iterator[bytes]:
        return self._events

    def close(self) -> None:  # the WSGI server calls it when the app is done or gone
        self._events.close()


def _relay(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    stored: dict[str, Any],
    dialect: Dialect,
    req: Request,
    stream: provider.Stream,
    finish: Callable[..., None],
    seq: int | None,
) -> Iterator[bytes]:
    events: list[dict[str, Any]] = []
    read_whole = False
    secrets = ctx.settings.secrets()
    try:
        for block in stream.blocks():
            data = provider.event_data(block)
            if data is None:
                continue
            events.append(data)
            out = dialect.relay(block, data, req)
            if out:
                yield _redacted(out, secrets)
        read_whole = True
        response, chunks = dialect.from_stream(events)
        meta = {"headers": dialect.kept_headers(stream.headers), "gaps": stream.gaps}
        entry = _record(ctx, project, fingerprint, stored, dialect, response, chunks, meta, seq)
        finish(result=entry if entry["id"] else None)
        yield dialect.stream_end(req)
    except GeneratorExit:
        # The app went away: the stream is cut short, so it is not saved (and stays spent).
        finish(error=UpstreamError("The call that was recording this stream went away."))
        raise
    except Exception as exc:  # a broken stream: the app gets an error event, nothing is saved
        logger.warning(
            "forwarded stream broke", extra={"project_id": project["id"], "error": type(exc).__name__}
        )
        error = (
            exc
            if isinstance(exc, UpstreamError)
            else UpstreamError(
                f"The upstream provider's stream broke ({type(exc).__name__}); nothing was recorded."
            )
        )
        finish(error=error)
        yield dialect.stream_error(error, req)
    finally:
        stream.close(read_whole)


def _refused(ctx: Context, project: dict[str, Any], reason: str) -> None:
    _count(ctx, project, reason)
    logger.warning("record-through refused", extra={"project": project["name"], "reason": reason})


def _count(ctx: Context, project: dict[str, Any], result: str) -> None:
    # In hosted mode project names are tenants' data, and two tenants' "shop" would share a series:
    # the series carries no project there (docs/operations.md, Metrics).
    metrics.RECORD_THROUGH.labels("" if ctx.settings.hosted else project["name"], result).inc()


def _take_budget(ctx: Context, project: dict[str, Any], fingerprint: str, seq: int) -> bool:
    """Count one upstream call against the caps, unless they are spent or answer `seq` exists now."""
    params = dict(
        project_id=project["id"],
        fingerprint=fingerprint,
        seq=seq,
        max_calls=project["upstream_max_calls"],
        max_tokens=project["upstream_max_tokens"],
    )
    if ctx.store.run("take_upstream_call", **params):
        return True
    # No usage row yet (the project's first forward), the caps are spent, or the entry exists.
    ctx.store.run("ensure_upstream_usage", project_id=project["id"], workspace_id=ctx.principal.workspace_id)
    return bool(ctx.store.run("take_upstream_call", **params))


def usage(ctx: Context, name: str, *, limit: int = 100) -> dict[str, Any]:
    """The project's record-through settings, spend and dry-run prompts (distinct, with counts)."""
    require(ctx, role="viewer")
    project = projects_service.get_row(ctx, name)
    spent = ctx.store.one("get_upstream_usage", project_id=project["id"]) or {}
    prompts = [
        {
            "fingerprint": r["fingerprint"],
            "model": r["model"],
            "count": r["count"],
            "first_seen": int(r["first_seen"]),
            "last_seen": int(r["last_seen"]),
            "request": json.loads(r["request"]),
        }
        for r in ctx.store.all("list_dry_runs", project_id=project["id"], limit=limit)
    ]
    return {
        "object": "upstream_usage",
        "project": name,
        "record_through": bool(project["record_through"]),
        "dry_run": bool(project["upstream_dry_run"]),
        "calls": spent.get("calls", 0),
        "max_calls": project["upstream_max_calls"],
        "prompt_tokens": spent.get("prompt_tokens", 0),
        "completion_tokens": spent.get("completion_tokens", 0),
        "max_tokens": project["upstream_max_tokens"],
        "dry_run_prompts": prompts,
    }


def reset(ctx: Context, name: str) -> dict[str, Any]:
    """Zero the project's spend and forget its dry-run prompts; admin only, audited."""
    require(ctx, role="admin")
    project = projects_service.get_row(ctx, name)
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run("reset_upstream_usage", project_id=project["id"])
        tx.run("clear_dry_runs", project_id=project["id"])
        audit.record(tx, ctx, "project.upstream_reset", name, ["calls", "tokens", "dry_run_prompts"])
    return usage(ctx, name)

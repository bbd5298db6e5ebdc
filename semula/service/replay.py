"""The proxy (docs/design/product.md §3): check and fingerprint a request in its API's dialect, replay a
hit, park a miss, render the answer."""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from semula import dialects
from semula.core import fingerprint as fp
from semula.core import recorded_meta, redact
from semula.core.errors import BadRequest, NotFound, ReplayMiss, SequenceExhausted, TooManyMisses
from semula.dialects import CHAT, Dialect, Request
from semula.service import Context, quotas, record_through, sequences
from semula.service import entries as entries_service
from semula.service import pending as pending_service
from semula.service import projects as projects_service
from semula.service.auth import require

CANDIDATES = 200
# How many project rows ProjectRows keeps per process (selectors that found a project; more are read).
PROJECT_ROWS = 1024
# A change counter value no store returns: "not read".
UNREAD = object()
# How much of a fingerprint and of each differing value a replay miss message shows.
MISS_FINGERPRINT, MISS_VALUE = 19, 80


# Runs a function, pure work on a call's request, and returns what it returns (start()'s `run`).
Run = Callable[[Callable[[], Any]], Any]


@dataclass(slots=True)
class Call:
    """One proxied call as it moves from request to response (slots: kept hits hold thousands)."""

    project: dict[str, Any]
    parsed: Any  # the request's body (`body`), or UNREAD while only its helper holds it (semula.heavy)
    fingerprint: str
    request: Request
    started: float
    dialect: Dialect
    entry: dict[str, Any] | None = None
    pending_id: str | None = None
    hold_epoch: int = 0  # the epoch of the holders' count this request is in (pending_service.park_held)
    live: Any = None  # a record-through stream (upstream.Relay), passed on as the provider sends it
    session: str | None = None  # the replay session the call belongs to (docs/decisions/0036-…)
    seq: int = 1  # the answer of the fingerprint's sequence this call replays or records
    call_number: int | None = None  # this call's number in its session, when its answer depended on it
    exhausted: SequenceExhausted | None = None  # past the last answer, with after_last: fail
    # The change counter value its project and entry rows are current as of (read before both), when
    # the caller read the project after it (ProjectRows); a kept hit is kept under it (service.hits).
    version: object = UNREAD
    fault: str | None = None  # the rule that shaped its reply (slow, disconnect), as the call log keeps it
    # A disconnect shapes it: a record-through miss is cut without calling the provider (decision 0061).
    cut: bool = False
    offload: Run | None = None  # runs its pure work (start(): a large body's, in a native thread)
    helper: Any = None  # a large body's: (semula.heavy.Helper, its token), when the helper holds it
    load: Callable[[], Any] | None = None  # reads the body when `parsed` is UNREAD
    previous: Any = UNREAD  # the response id it continues (Dialect.previous), when its helper said

    @property
    def body(self) -> Any:
        """The request's body; one its helper checked is read here only when it is needed (a miss to
        park or forward, a fault rule's text)."""
        if self.parsed is UNREAD:
            assert self.load is not None
            self.parsed = self.load()
        return self.parsed

    @property
    def recording(self) -> int | None:
        """The call's number when it records the next answer of its request's sequence, else None."""
        return self.call_number if self.call_number is not None and self.entry is None else None

    @property
    def model(self) -> str:
        return self.request.model

    @property
    def stream(self) -> bool:
        return self.request.stream


def resolve_project(ctx: Context, path_project: str | None, header_project: str | None) -> dict[str, Any]:
    """Project from the path, else the token's binding, else X-Semula-Project, else 400."""
    if path_project:
        return projects_service.get_row(ctx, path_project)
    if ctx.principal.project_id:
        row = ctx.store.one(
            "get_project", id=ctx.principal.project_id, workspace_id=ctx.principal.workspace_id
        )
        if row is None:
            raise NotFound("No such project.", code="project_not_found")
        return row
    if header_project:
        return projects_service.get_row(ctx, header_project)
    raise BadRequest(
        "No project: call /p/<project>/v1/..., use a project-bound token, or send X-Semula-Project.",
        code="project_required",
    )


class ProjectRows:
    """The project rows the replay path resolves, kept per process with the change counter value read
    before each (store.version): a request's project costs no query while the counter is unchanged.

    start() checks the value against the one read with the request's entry, so an entry and a project
    row are never served from different versions: a change of any project of the workspace, through
    any process, is seen by the very next request (docs/decisions/0045-first-sight-path.md).
    """

    def __init__(self, limit: int = PROJECT_ROWS):
        self.limit = limit
        self._rows: dict[tuple[Any, ...], tuple[dict[str, Any], object]] = {}

    def get(
        self, ctx: Context, path_project: str | None, header_project: str | None
    ) -> tuple[dict[str, Any], object]:
        """The project this request names and the counter value it was read at (maybe stale: start()
        compares it with the value read with the entry, and calls read() again on a change)."""
        found = self._rows.get(self._key(ctx, path_project, header_project))
        return found if found is not None else self.read(ctx, path_project, header_project)

    def read(
        self, ctx: Context, path_project: str | None, header_project: str | None
    ) -> tuple[dict[str, Any], object]:
        """Read the project again, after the counter (so it is current as of the value kept with it)."""
        version = ctx.versions.version(ctx.store, ctx.principal.workspace_id)
        project = resolve_project(ctx, path_project, header_project)
        if len(self._rows) >= self.limit:
            self._rows.clear()
        self._rows[self._key(ctx, path_project, header_project)] = (project, version)
        return project, version

    @staticmethod
    def _key(ctx: Context, path_project: str | None, header_project: str | None) -> tuple[Any, ...]:
        # What resolve_project() reads besides the rows: the caller's workspace and binding.
        return (ctx.principal.workspace_id, ctx.principal.project_id, path_project, header_project)


@functools.lru_cache(maxsize=256)
def rules(ignore_fields: str, normalize: str) -> tuple[list[str], list[dict[str, str]]]:
    """A project's stored fingerprint settings, parsed once per process for each value."""
    return json.loads(ignore_fields), json.loads(normalize)


def start(
    ctx: Context,
    project: dict[str, Any],
    body: Any,
    dialect: Dialect | None = None,
    session: str | None = None,
    *,
    version: object = UNREAD,
    read_again: Callable[[], tuple[dict[str, Any], object]] | None = None,
    plain: bool = False,
    number: int | None = None,
    run: Run | None = None,
    helped: tuple[Request, str, Any, Any, Callable[[], tuple[Any, bool]]] | None = None,
) -> Call:
    """Check the request as its API does, fingerprint it and look for its entry (in a session: the
    answer of its sequence this call gets).

    `plain`: the body is as semula.core.jsonio.read() found it plain (Dialect.fingerprint). `number`:
    its number in its session, when it was counted already (sequences.pick).

    `version` is the change counter value `project` was read after (ProjectRows), and `read_again`
    reads the project anew: when the counter read with the entry differs, the project may have
    changed since, and is read again before the request is fingerprinted once more.

    `run` runs the check and the fingerprint, pure work, and later the replay miss's comparisons
    (replay_miss), for a large body: in a native thread, so the event loop serves other requests
    meanwhile (decision 0074). Every read of the store stays with the caller.

    `helped`: a large body checked and fingerprinted by the worker's helper process (semula.heavy), as
    (Request, fingerprint, the response id it continues, (helper, token), load): `body` is UNREAD
    then, and `load` reads it (body, plain), in a native thread, once something needs it.
    """
    require(ctx, role="viewer", scope="replay")
    speaks = dialect or dialects.get(CHAT)
    started = time.monotonic()

    def fingerprinted(project: dict[str, Any]) -> str:
        return speaks.fingerprint(body, *rules(project["ignore_fields"], project["normalize"]), plain=plain)

    def checked() -> tuple[Request, str]:
        return speaks.check(body), fingerprinted(project)

    if helped is not None:
        req, fingerprint, previous, helper, load = helped
    else:
        req, fingerprint = run(checked) if run is not None else checked()
    while True:
        entry, read_at = entries_service.lookup_at(ctx, project, fingerprint)
        if version is UNREAD or read_at == version or read_again is None:
            break
        project, version = read_again()
        read_again = None  # read after the entry's counter: current as of a value no older than it
        if body is UNREAD:  # checked by its helper: read it here now (its fingerprint under new rules)
            body, plain = load()
            helped = None
        again = functools.partial(fingerprinted, project)
        fingerprint = run(again) if run is not None else again()
    if project.get("restamp") == "recorded":
        req = replace(req, fresh=False)
    call = Call(project, body, fingerprint, req, started, speaks, session=session, version=version)
    call.offload = run
    if helped is not None:
        call.helper, call.load, call.previous = helper, lambda: load()[0], previous
    call.entry = entry
    if session is not None:
        sequences.pick(ctx, call, project["sequences"] == "record" and may_park(ctx, call), number)
    return call


def check_previous(ctx: Context, call: Call) -> None:
    """A miss that continues a response this project never recorded: 400 naming the id."""
    previous = call.dialect.previous(call.body) if call.previous is UNREAD else call.previous
    if previous is not None and entries_service.by_response_id(ctx, call.project["id"], previous) is None:
        raise BadRequest(
            f"Previous response with id {previous!r} not found: it is not a recorded response of project "
            f"{call.project['name']!r}.",
            param="previous_response_id",
            code="previous_response_not_found",
        )


def may_park(ctx: Context, call: Call) -> bool:
    return call.project["mode"] == "record" and ctx.principal.scope != "replay"


def park(ctx: Context, call: Call) -> None:
    """Park a miss (or join the identical one parked already); 429 past max_misses."""
    stored = redact.redact_obj(call.body, ctx.settings.secrets())
    if quotas.limit(ctx, "quota_parked") is not None and not ctx.store.one(
        "pending_by_fingerprint", project_id=call.project["id"], fingerprint=call.fingerprint, seq=call.seq
    ):
        quotas.check(ctx, "quota_parked")  # joining a row parked already adds nothing
    call.pending_id, call.hold_epoch = pending_service.park_held(
        ctx, call.project, call.fingerprint, stored, call.stream, api=call.dialect.name, seq=call.seq
    )
    if call.pending_id is None:
        call.entry = sequences.recorded_answer(ctx, call.project["id"], call.fingerprint, call.seq)
        if call.entry is None:
            raise TooManyMisses(
                f"Project {call.project['name']!r} has {call.project['max_misses']} calls parked "
                "(max_misses); answer or cancel some first."
            )


def answered_entry(ctx: Context, entry_id: str, seq: int = 1) -> dict[str, Any]:
    """The entry that answered a held call, read as the caller (row-level security sees it in hosted mode),
    as answer `seq` of its sequence."""
    entry = entries_service.get_row(ctx, entry_id)
    return sequences.with_answer(ctx, entry, seq) or entry


def replay_miss(ctx: Context, call: Call) -> ReplayMiss:
    """A 424 whose message names the closest entry and the first path where the request differs."""
    rows = _candidates(ctx, call)
    best, found = _closest_of(call, rows)
    name = call.project["name"]
    session = ""
    if call.session:
        session = sequences.describe(call, call.call_number or sequences.calls_so_far(ctx, call) + 1)
    if best is None:
        return ReplayMiss(
            f"No recorded entry matches this request: project {name!r} has no entries "
            f"{_of_this_api(ctx, call)}to replay.{session}" + _scope_note(ctx, call)
        )
    if found is None and redact.REDACTED in best["request"]:
        where = "it differs only in what was redacted when it was stored"
    elif found is None:
        # The same request under today's rules: the entry was fingerprinted under others.
        where = (
            "it is this request under the project's rules today, but was recorded under other ones "
            f"(ignore_fields, normalize, or an older semula): run `semula project refingerprint {name}`"
        )
    else:
        path, recorded, sent = found
        where = f"first difference at {path}: {_parted(recorded, sent)}"
    answers = best["answers"]
    count = f" ({answers} answers)" if answers > 1 else ""
    return ReplayMiss(
        f"No recorded entry matches this request in project {name!r}. "
        f"Closest entry: {_entry_name(ctx, best['id'])}{count}; {where}.{session}" + _scope_note(ctx, call)
    )


def _closest_of(call: Call, rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, Any]:
    """_closest(), by the call's helper when it holds the body, else where the call's pure work runs."""
    if not rows:
        return None, None
    if call.helper is not None and call.parsed is UNREAD and call.offload is not None:
        helper, token = call.helper
        got = call.offload(lambda: helper.call("closest", token, call.project, rows))
        if got is not None:
            return (None if got[0] is None else rows[got[0]]), got[1]
    call.body  # read here if only the helper had it: never from the native thread  # noqa: B018
    closest = functools.partial(_closest, call, rows)
    return call.offload(closest) if call.offload is not None else closest()


def _closest(call: Any, rows: list[dict[str, Any]]) -> tuple[dict[str, Any] | None, Any]:
    """The entry of `rows` closest to the call's request, and the first difference between them
    (fp.difference), pure work. Requests are compared cut to their first CLOSENESS_FIELDS items
    (fp.cut), and the request's copy is made only once there is an entry to compare it with (issue
    #49: a request of 100,000 items was copied whole for nothing)."""
    rules = (json.loads(call.project["ignore_fields"]), json.loads(call.project["normalize"]))
    mine: Any = None
    best, best_score = None, -1.0
    for row in rows:
        if mine is None:
            mine_cut, cut = fp.cut(call.body)
            mine = call.dialect.canonical(mine_cut, *rules)
            my_fields = fp.fields(mine)
        recorded, theirs_cut = fp.cut(json.loads(row["request"]))
        theirs = call.dialect.canonical(recorded, *rules)
        score = fp.fields_closeness(my_fields, fp.fields(theirs))
        if score > best_score:
            best, best_score = (row, theirs, theirs_cut), score
    if best is None:
        return None, None
    found = fp.difference(best[1], mine)
    if not fp.within(found, cut | best[2]):  # the cut parts are alike: the whole requests, then
        whole = call.dialect.canonical(json.loads(best[0]["request"]), *rules)
        found = fp.difference(whole, call.dialect.canonical(call.body, *rules))
    return best[0], found


def _of_this_api(ctx: Context, call: Call) -> str:
    """When the project holds entries of other APIs only: which, since an app that moved from one
    API to another (chat.completions to responses) would otherwise read that nothing was recorded."""
    counts = ctx.store.all("entry_apis_in_project", project_id=call.project["id"])
    others = [(row["api"], row["n"]) for row in counts if row["api"] != call.dialect.name]
    if not others:
        return ""
    held = ", ".join(f"{n} of {_title(api)}" for api, n in others)
    return (
        f"of the {call.dialect.title} API (it has {held}; an entry answers only the API it was "
        "recorded through) "
    )


def _title(api: str) -> str:
    try:
        return dialects.get(api).title
    except BadRequest:  # an API this version does not speak
        return api


def _candidates(ctx: Context, call: Call) -> list[dict[str, Any]]:
    """The CANDIDATES newest entries of the call's API a miss is compared with, its model's first:
    two indexed reads of at most CANDIDATES rows each, not a sort of every entry of the project."""
    where = dict(project_id=call.project["id"], api=call.dialect.name, model=call.model)
    rows = ctx.store.all("entry_candidates", **where, limit=CANDIDATES)
    if len(rows) < CANDIDATES:
        rows += ctx.store.all("entry_candidates_other_models", **where, limit=CANDIDATES - len(rows))
    return rows


def _entry_name(ctx: Context, entry_id: str) -> str:
    """The closest entry as the reader can find it: an entry that came from a bundle by the fingerprint
    the bundle holds (its id exists only in this database); any other by its id and fingerprint."""
    row = entries_service.get_row(ctx, entry_id)
    fingerprint = row["fingerprint"][:MISS_FINGERPRINT] + "…"
    revisions = ctx.store.all("list_revisions", entry_id=entry_id, workspace_id=ctx.principal.workspace_id)
    if revisions and revisions[0]["actor"] == "import":
        return f"the bundle's entry with fingerprint {fingerprint}"
    return f"{entry_id} (fingerprint {fingerprint})"


def _short(value: Any) -> str:
    """A value for a one-line message: JSON, cut to MISS_VALUE characters."""
    if value is fp.ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MISS_VALUE else text[: MISS_VALUE - 1] + "…"


def _parted(recorded: Any, sent: Any) -> str:
    """The two values that differ, for a one-line message. Two long texts alike at their start (an
    agent's system prompt) are shown around the first character where they part, not from the start
    both share."""
    alike = 0
    if isinstance(recorded, str) and isinstance(sent, str):
        alike = len(os.path.commonprefix([recorded, sent]))
    whole = f"recorded {_short(recorded)}, sent {_short(sent)}"
    if alike < MISS_VALUE // 2 or "…" not in whole:  # they part early, or both are short
        return whole
    start = alike - MISS_VALUE // 4
    return (
        f"recorded {_window(recorded, start)}, sent {_window(sent, start)} "
        f"(alike for their first {alike} characters)"
    )


def _window(text: str, start: int) -> str:
    """`text` from `start`, cut to about MISS_VALUE characters of JSON, with … where it was cut."""
    piece = text[start : start + MISS_VALUE // 2]
    inner = json.dumps(piece, ensure_ascii=False)[1:-1]
    return f'"…{inner}{"…" if start + len(piece) < len(text) else ""}"'


def _scope_note(ctx: Context, call: Call) -> str:
    """Why a miss in a record-mode project was not parked: the token's scope (else nothing)."""
    if call.project["mode"] != "record" or ctx.principal.scope != "replay":
        return ""
    return (
        f" Project {call.project['name']!r} records, but this token's scope is replay, which never parks "
        "a call; a token with scope record (or full) parks it for an answer."
    )


def templated(entry: dict[str, Any]) -> bool:
    """Whether an entry's answer has templates to expand per response."""
    # Stored JSON never escapes braces, so an answer without "{{" in its text has nothing to expand.
    return "{{" in entry["response"] or "{{" in (entry.get("chunks") or "")


def replay_headers(entry: dict[str, Any]) -> list[tuple[str, str]]:
    """The provider's response headers recorded with an entry (an allowlist: timing, rate limits)."""
    return recorded_meta.replayable(entries_service.meta(entry))


MAX_PACED_GAP = 60.0  # seconds: the longest pause before one streamed event
MAX_PACED_TOTAL = 600.0  # seconds: all the pauses of one paced reply together


def pacing(call: Call, entry: dict[str, Any]) -> list[float] | None:
    """The pauses before each streamed event after the first, when the project replays recorded
    timing (stream_pacing `recorded` or a factor) and the entry has some; None otherwise."""
    setting = call.project.get("stream_pacing") or "none"
    if setting == "none":
        return None
    gaps = entries_service.meta(entry).get("gaps")
    if not gaps:
        return None
    factor = 1.0 if setting == "recorded" else float(setting)
    # Bounded, whatever a recording holds and the factor asks: a client that left is only noticed at
    # the next write, and each paced reply holds a connection of its worker while it sleeps.
    paced, total = [], 0.0
    for gap in gaps:
        pause = min(max(0.0, float(gap)) * factor, MAX_PACED_GAP, max(0.0, MAX_PACED_TOTAL - total))
        paced.append(pause)
        total += pause
    return paced


def render(call: Call, entry: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """The response for an entry: a body, or (for stream requests) the events to send. The call that
    forwarded it to the provider (record_through.RECEIVED) gets it as the provider sent it: its ids and
    times, no templates expanded, as a forwarded stream does (and as restamp `recorded` replays it)."""
    response, chunks = entries_service.decode(entry)
    if entry.get(record_through.RECEIVED):
        return call.dialect.render(replace(call.request, fresh=False), response, chunks, False, time.time())
    return call.dialect.render(call.request, response, chunks, templated(entry), time.time())


class Logged(Protocol):
    """What the call log reads of a call: a Call, or a kept hit standing for one (service.hits.Kept)."""

    @property
    def project(self) -> dict[str, Any]: ...
    @property
    def fingerprint(self) -> str: ...
    @property
    def model(self) -> str: ...
    @property
    def stream(self) -> bool: ...
    @property
    def entry(self) -> dict[str, Any] | None: ...
    @property
    def pending_id(self) -> str | None: ...
    @property
    def dialect(self) -> Dialect: ...


def log_row(
    ctx: Context,
    call: Logged | None,
    *,
    outcome: str,
    status: int,
    started: float,
    project_id: str | None = None,
    fault: str | None = None,
) -> dict[str, Any]:
    """The call-log row for one proxied call (`fault`: the fault injected, as JSON)."""
    return {
        "workspace_id": ctx.principal.workspace_id if ctx.principal else "wsp_default",
        "project_id": call.project["id"] if call else project_id,
        "created_at": time.time(),
        "fingerprint": call.fingerprint if call else None,
        "model": call.model if call else None,
        "stream": int(call.stream) if call else 0,
        "outcome": outcome,
        "status": status,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        "entry_id": call.entry["id"] if call and call.entry else None,
        "pending_id": call.pending_id if call else None,
        "token_id": ctx.principal.token_id if ctx.principal else None,
        "api": call.dialect.name if call else None,
        "fault": fault if fault is not None or call is None else call.fault,
    }

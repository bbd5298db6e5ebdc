"""Replay sessions and sequences: the k-th identical request of a session gets answer k.

One fingerprint holds answers 1..n: answer 1 in its entry row, answers 2..n in `entry_answers`, and
the entry's `answers` column counts them. A session counts the calls of each request in
`session_calls`, one atomic upsert per call on both databases. A request whose answer does not
depend on that count (one answer, no recording of sequences, not `after_last: fail`) is never
counted, so it costs what it costs outside a session (docs/decisions/0036-sequences-and-sessions.md).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from semula.core.errors import BadRequest, SequenceExhausted
from semula.service import Context, entries, now, projects
from semula.service.auth import require

if TYPE_CHECKING:
    from semula.service.replay import Call

# Not "." or "..": a URL path holds them as dot segments, which clients and servers remove.
SESSION_PATTERN = re.compile(r"^(?!\.\.?$)[A-Za-z0-9_.-]{1,64}$")
AFTER_LAST = ("repeat_last", "cycle", "fail")


def check_session(name: Any, *, param: str = "session") -> str:
    """A session name as given, or 400 naming the pattern."""
    if not isinstance(name, str) or not SESSION_PATTERN.match(name):
        raise BadRequest(
            "A session name is 1 to 64 letters, digits, '.', '_' or '-', and not '.' or '..'.",
            param=param,
            code="invalid_session",
        )
    return name


def counted(project: dict[str, Any], answers: int, recording: bool) -> bool:
    """Whether a session call's answer depends on its call number (and so the call is counted)."""
    return recording or answers > 1 or project["after_last"] == "fail"


def pick(ctx: Context, call: Call, recording: bool) -> None:
    """Count a session call if its answer depends on it and point `call` at the answer it gets.

    `recording`: the call may record answer k (sequences: record, and it may park). Then a call past
    the last answer is a miss for answer k (call.entry None, call.seq k); otherwise `after_last` decides
    (`fail`: call.entry None and call.exhausted the error to answer with).
    """
    entry = call.entry
    if entry is None and not recording:
        return  # a plain miss, as outside a session
    answers = entry["answers"] if entry is not None else 0
    if not counted(call.project, answers, recording):
        return
    number = _count(ctx, call)
    call.call_number = number
    if number <= answers:
        seq = number
    elif recording:
        call.seq, call.entry = number, None
        return
    elif call.project["after_last"] == "cycle":
        seq = (number - 1) % answers + 1
    elif call.project["after_last"] == "fail":
        call.entry, call.exhausted = None, exhausted(call, number, answers)
        return
    else:
        seq = answers
    call.seq = seq
    if seq > 1:
        assert entry is not None
        call.entry = with_answer(ctx, entry, seq)


def _count(ctx: Context, call: Call) -> int:
    row = ctx.store.one(
        "count_session_call",
        workspace_id=ctx.principal.workspace_id,
        project_id=call.project["id"],
        session=call.session,
        fingerprint=call.fingerprint,
        now=now(),
    )
    assert row is not None
    return int(row["calls"])


def calls_so_far(ctx: Context, call: Call) -> int:
    """How many calls of this request its session has counted (none are counted by reading)."""
    keys = {"project_id": call.project["id"], "session": call.session, "fingerprint": call.fingerprint}
    row = ctx.store.one("session_call_count", **keys)
    return int(row["calls"]) if row else 0


def with_answer(ctx: Context, entry: dict[str, Any], seq: int) -> dict[str, Any] | None:
    """The entry row as answer `seq` of its sequence replays it (None when there is no such answer)."""
    if seq == 1:
        return entry
    row = ctx.store.one(
        "entry_answer", entry_id=entry["id"], workspace_id=ctx.principal.workspace_id, seq=seq
    )
    if row is None:
        return None
    # Its own provider headers and stream gaps (none when it did not come from a provider).
    return {**entry, "response": row["response"], "chunks": row["chunks"], "meta": row["meta"], "seq": seq}


def recorded_answer(ctx: Context, project_id: str, fingerprint: str, seq: int) -> dict[str, Any] | None:
    """Answer `seq` of the request's sequence as it replays, if it is recorded (by now), else None."""
    entry = entries.lookup(ctx, project_id, fingerprint)
    if entry is None or entry["answers"] < seq:
        return None
    return with_answer(ctx, entry, seq)


def exhausted(call: Call, number: int, answers: int) -> SequenceExhausted:
    return SequenceExhausted(
        f"This is call {number} of this request in session {call.session!r}; "
        f"{answers} answer{'s are' if answers != 1 else ' is'} recorded, and project "
        f"{call.project['name']!r} has after_last: fail. Reset the session to start over."
    )


def describe(call: Call, number: int) -> str:
    """The session part of a miss's explanation."""
    return f" This is call {number} of this request in session {call.session!r}."


def reset(ctx: Context, project: str, session: str) -> dict[str, Any]:
    """Start a session over: its next call of every request is call 1 again.

    Whoever may replay may reset a session: it changes only what that session's calls get.
    """
    require(ctx, role="viewer", scope="replay")
    check_session(session)
    row = projects.get_row(ctx, project)
    ctx.store.run("reset_session", project_id=row["id"], session=session)
    return {"object": "session", "project": row["name"], "session": session, "reset": True}

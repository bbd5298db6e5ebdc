"""Replay sessions and sequences: the k-th identical request of a session gets answer k.

One fingerprint holds answers 1..n: answer 1 in its entry row, answers 2..n in `entry_answers`, and
the entry's `answers` column counts them. A session counts the calls of each request in
`session_calls`, one atomic upsert per call on both databases; the server counts the calls of a
process asked for while such a write is in flight together, in the next one (Counts, decision 0068).
A request whose answer does not depend on that count (one answer, no recording of sequences, not
`after_last: fail`) is never counted, so it costs what it costs outside a session
(docs/decisions/0036-sequences-and-sessions.md).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from semula.core.errors import BadRequest, SequenceExhausted
from semula.rounds import Round, Rounds
from semula.service import Context, entries, now, projects
from semula.service.auth import require

if TYPE_CHECKING:
    from semula.service.hits import Kept
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


def pick(ctx: Context, call: Call, recording: bool, number: int | None = None) -> None:
    """Count a session call if its answer depends on it and point `call` at the answer it gets.

    `recording`: the call may record answer k (sequences: record, and it may park). Then a call past
    the last answer is a miss for answer k (call.entry None, call.seq k); otherwise `after_last` decides
    (`fail`: call.entry None and call.exhausted the error to answer with). `number`: the call was
    counted already (a kept sequence whose answer is not kept, service.hits), as this call number.
    """
    entry = call.entry
    if entry is None and not recording:
        return  # a plain miss, as outside a session
    answers = entry["answers"] if entry is not None else 0
    if not counted(call.project, answers, recording):
        return
    number = _count(ctx, call) if number is None else number
    call.call_number = number
    if number > answers and recording:
        call.seq, call.entry = number, None
        return
    seq = answer_number(number, answers, call.project["after_last"])
    if seq is None:
        call.entry, call.exhausted = None, exhausted(call, number, answers)
        return
    call.seq = seq
    if seq > 1:
        assert entry is not None
        call.entry = with_answer(ctx, entry, seq)


def answer_number(number: int, answers: int, after_last: str) -> int | None:
    """The answer call `number` of a request with `answers` answers gets (None: after_last `fail`, and
    past the last)."""
    if number <= answers:
        return number
    if after_last == "cycle":
        return (number - 1) % answers + 1
    if after_last == "fail":
        return None
    return answers


def _count(ctx: Context, call: Call) -> int:
    assert call.session is not None
    return count(ctx, call.project["id"], call.session, call.fingerprint)


def count(ctx: Context, project_id: str, session: str, fingerprint: str) -> int:
    """The number of this call of a request in its session: its counter, raised by one."""
    return counted_at(ctx, project_id, session, fingerprint)[0]


def counted_at(ctx: Context, project_id: str, session: str, fingerprint: str) -> tuple[int, object]:
    """count(), and the caller's replay change counter (store.version()) as the write read it: one
    round trip checks a kept sequence and counts its call (service.hits)."""
    if ctx.counts is not None:
        return ctx.counts.count(ctx, (project_id, session, fingerprint))
    row = ctx.store.one(
        "count_session_call",
        workspace_id=ctx.principal.workspace_id,
        project_id=project_id,
        session=session,
        fingerprint=fingerprint,
        n=1,
        now=now(),
    )
    assert row is not None
    return int(row["calls"]), row["version"]


def kept_number(ctx: Context, kept: Kept, session: str) -> tuple[int, int | None, object]:
    """Count a call of a kept sequence (service.hits): its number, the answer that number gets (None:
    after_last `fail`, past the last; the call goes the whole way with its number, and fails), and
    the change counter the count read, which says whether the kept sequence still holds."""
    answers, after_last = kept.sequence or (1, "repeat_last")
    number, version = counted_at(ctx, kept.project["id"], session, kept.fingerprint)
    return number, answer_number(number, answers, after_last), version


CountKey = tuple[str, str, str]  # a counter: project id, session, fingerprint
Offload = Callable[[Callable[[], Any]], Any]  # runs a function elsewhere and returns its result when done


class _Counted(Round):
    """The calls one write counts: how many of each counter, and (once written) each one's first number
    and the workspace's change counter as the write read it."""

    __slots__ = ("asked", "first", "version")

    def __init__(self) -> None:
        super().__init__()
        self.asked: dict[CountKey, int] = {}
        self.first: dict[CountKey, int] = {}
        self.version: object = None


class Counts:
    """The session calls of this process, counted in as few writes as they can be: the calls asked for
    while a write of their workspace is in flight are counted together by the next one
    (semula.rounds; `count_session_calls`: one statement, one commit), each counter raised by its
    number of calls.

    A caller's number comes from a write that began after it asked, as a write of its own would: it is
    above every number given out (in any process) before it asked, and the numbers of one counter are
    distinct and without gaps, so the k-th call gets answer k across workers and hosts. Calls of one
    counter in one write are numbered in the order they asked. What a round saves is the commit of its
    own each call waited for: under 50 concurrent calls of one counter, each queued on the one before
    it for its row lock and its commit (decision 0068).

    `offload` runs each write elsewhere (the server: SQLite's writes in a native thread, so the event
    loop goes on taking calls, which join the next round, while the write waits for the lock).
    """

    def __init__(self, offload: Offload | None = None):
        self.offload = offload
        self.rounds: Rounds[_Counted] = Rounds(_Counted)

    def count(self, ctx: Context, key: CountKey) -> tuple[int, object]:
        """This call's number in its session (the counter of `key` raised by one), and the caller's
        change counter as the write that counted it read it (counted_at)."""

        def ask(round_: _Counted) -> int:
            place = round_.asked.get(key, 0)
            round_.asked[key] = place + 1
            return place

        # Under row-level security a statement writes as one tenant: a round per workspace.
        round_, place = self.rounds.join(ctx.principal.workspace_id, ask, lambda r: self._send(ctx, r))
        return round_.first[key] + place, round_.version

    def _send(self, ctx: Context, round_: _Counted) -> None:
        group = ctx.principal.workspace_id
        asked = sorted(round_.asked.items())  # one lock order for every process's writes
        rows = [
            {"workspace_id": group, "project_id": p, "session": s, "fingerprint": f, "n": n}
            for (p, s, f), n in asked
        ]

        def write() -> list[dict[str, Any]]:
            if len(rows) == 1:  # one request's calls: the plain statement, cheaper than a JSON array
                [row] = rows
                written = ctx.store.one("count_session_call", **row, now=now())
                assert written is not None
                return [{**row, **written}]
            rows_json = orjson.dumps(rows).decode()
            return ctx.store.all("count_session_calls", rows=rows_json, workspace_id=group, now=now())

        for row in self.offload(write) if self.offload is not None else write():
            key = (row["project_id"], row["session"], row["fingerprint"])
            round_.first[key] = int(row["calls"]) - round_.asked[key] + 1
            round_.version = row["version"]  # one statement: the same in every row


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
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run("reset_session", project_id=row["id"], session=session)
        tx.run("reset_session_fault_counts", project_id=row["id"], session=session)  # decision 0061
    return {"object": "session", "project": row["name"], "session": session, "reset": True}

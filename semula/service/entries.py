"""Entries: recorded answers, unique per project and fingerprint, with revisions.

The contract is docs/design/product.md §6.
"""

from __future__ import annotations

import json
from typing import Any

from semula import dialects
from semula.core import jsonio, redact
from semula.core.errors import BadRequest, Conflict, NotFound
from semula.core.ids import new_id
from semula.db import Store, Tx
from semula.service import Context, audit, dumps, now, page, projects, quotas
from semula.service.auth import require, visible

ACTORS = ("agent", "human", "import", "synthetic")


def lookup(ctx: Context, project_id: str, fingerprint: str) -> dict[str, Any] | None:
    """The entry that replays for this fingerprint, or None (rejected entries do not replay)."""
    row = ctx.store.one("entry_by_fingerprint", project_id=project_id, fingerprint=fingerprint)
    if row is None or row["review_status"] == "rejected":
        return None
    return row


def lookup_at(
    ctx: Context, project: dict[str, Any], fingerprint: str
) -> tuple[dict[str, Any] | None, object]:
    """lookup(), with the project's workspace's change counter read no later than the entry
    (Versions.entry_at_version): the entry is current as of that value."""
    row, version = ctx.versions.entry_at_version(
        ctx.store, project["workspace_id"], project["id"], fingerprint
    )
    if row is None or row["review_status"] == "rejected":
        return None, version
    return row, version


def by_response_id(ctx: Context, project_id: str, response_id: str) -> dict[str, Any] | None:
    """The entry whose recorded response has this id (Responses API), or None; rejected ones too."""
    return ctx.store.one("entry_by_response_id", project_id=project_id, response_id=response_id)


def stored_answer(
    secrets: tuple[str, ...], api: str | None, response: Any, chunks: list[dict[str, Any]] | None
) -> tuple[Any, list[dict[str, Any]] | None]:
    """An answer as it may be stored: the server's own `secrets` (Settings.secrets()) redacted, whoever
    wrote it (a person, an agent, the answerer, a provider, a bundle). Every answer is stored through
    here: save(), append(), an edit or revert, and a bundle import."""
    return redact.redact_answer(response, chunks, secrets, dialects.get(api).redact_response)


def save(
    tx: Tx | Store,
    ctx: Context,
    *,
    project_id: str,
    fingerprint: str,
    request: dict[str, Any],
    response: dict[str, Any],
    chunks: list[dict[str, Any]] | None,
    actor: str,
    summary: str,
    tokens: tuple[int, int] = (0, 0),
    api: str = dialects.CHAT,
    meta: dict[str, Any] | None = None,
    seq: int = 1,
) -> dict[str, Any]:
    """Insert the entry or add a revision to it; a pinned entry refuses re-recording (409).

    `seq` above 1 saves that answer of the entry's sequence instead (its predecessor must exist: 409
    otherwise).

    `tokens` (prompt, completion) are what a provider spent on the answer, counted against the
    project's record-through budget in the same statement. On a Store rather than a transaction it
    is atomic all the same (one statement on PostgreSQL). Returns the entry's id and revision, and
    the response and chunks as stored.
    """
    response, chunks = stored_answer(ctx.settings.secrets(), api, response, chunks)
    response_json = dumps(response)
    chunks_json = dumps(chunks) if chunks is not None else None
    params = dict(
        revision_id=new_id("revision"),
        workspace_id=ctx.principal.workspace_id,
        project_id=project_id,
        fingerprint=fingerprint,
        response=response_json,
        chunks=chunks_json,
        actor=actor,
        summary=summary[:500],
        now=now(),
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
    )
    if seq > 1:
        row = tx.one("save_answer", seq=seq, **params)
        if row is None:
            raise _answer_refused(tx, project_id, fingerprint, seq)
        return {**row, "response": response_json, "chunks": chunks_json, "seq": seq}
    row = tx.one(
        "save_entry",
        id=new_id("entry"),
        model=request.get("model"),
        request=dumps(request),
        api=api,
        response_id=dialects.get(api).response_id(response),
        meta=dumps(meta) if meta else None,
        **params,
    )
    if row is None:
        raise Conflict("The entry for this request is pinned; unpin it to re-record.", code="entry_pinned")
    return {**row, "response": response_json, "chunks": chunks_json}


# How often an append tries again after a concurrent one took the next number (PostgreSQL).
APPEND_TRIES = 20


def append(
    tx: Tx | Store,
    ctx: Context,
    *,
    project_id: str,
    fingerprint: str,
    request: dict[str, Any],
    response: dict[str, Any],
    chunks: list[dict[str, Any]] | None,
    actor: str,
    summary: str,
    tokens: tuple[int, int] = (0, 0),
    api: str = dialects.CHAT,
    meta: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Save an answer as the next of its request's sequence (answer 1, a new entry, when it has none):
    record-through in a session that records sequences (decision 0041). Concurrent appends, in any
    process, get distinct numbers and lose nothing.
    Returns the entry's id, the answer's number (`seq`) and revision, and the response and chunks."""
    response, chunks = stored_answer(ctx.settings.secrets(), api, response, chunks)
    response_json = dumps(response)
    chunks_json = dumps(chunks) if chunks is not None else None
    params = dict(
        workspace_id=ctx.principal.workspace_id,
        project_id=project_id,
        fingerprint=fingerprint,
        model=request.get("model"),
        request=dumps(request),
        response=response_json,
        chunks=chunks_json,
        api=api,
        response_id=dialects.get(api).response_id(response),
        meta=dumps(meta) if meta else None,
        actor=actor,
        summary=summary[:500],
        prompt_tokens=tokens[0],
        completion_tokens=tokens[1],
    )
    for _ in range(APPEND_TRIES):
        row = tx.one("append_answer", id=new_id("entry"), revision_id=new_id("revision"), now=now(), **params)
        if row is not None:
            return {**row, "response": response_json, "chunks": chunks_json}
    raise Conflict(
        "Too many answers of this request were being recorded at once; try again.", code="sequence_busy"
    )


def _answer_refused(tx: Tx | Store, project_id: str, fingerprint: str, seq: int) -> Conflict:
    """Why answer `seq` of a sequence was not saved: it is pinned, or its predecessor is missing."""
    entry = tx.one("entry_by_fingerprint", project_id=project_id, fingerprint=fingerprint)
    if entry is not None and entry["answers"] >= seq:
        return Conflict(
            f"Answer {seq} of this request's sequence is pinned; unpin it to re-record.", code="entry_pinned"
        )
    have = entry["answers"] if entry is not None else 0
    return Conflict(
        f"This call records answer {seq} of its request's sequence, which has {have} answer"
        f"{'s' if have != 1 else ''}: answer {have + 1} first.",
        code="sequence_out_of_order",
    )


def _add_revision(
    tx: Tx,
    ctx: Context,
    entry_id: str,
    number: int,
    response_json: str,
    chunks_json: str | None,
    actor: str,
    summary: str,
    seq: int = 1,
) -> None:
    """Record the answer `seq` of an entry now has as its revision `number`."""
    tx.run(
        "insert_answer_revision",
        id=new_id("revision"),
        workspace_id=ctx.principal.workspace_id,
        entry_id=entry_id,
        seq=seq,
        number=number,
        response=response_json,
        chunks=chunks_json,
        actor=actor,
        summary=summary,
        now=now(),
    )


def check_quota(ctx: Context, project_id: str, fingerprint: str) -> None:
    """A new entry must fit the workspace's entries quota; a new revision of one always does."""
    if quotas.limit(ctx, "quota_entries") is None:
        return
    if ctx.store.one("entry_by_fingerprint", project_id=project_id, fingerprint=fingerprint) is None:
        quotas.check(ctx, "quota_entries")


def decode(row: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The stored completion and chunks of an entry row."""
    chunks = row.get("chunks")
    return jsonio.stored(row["response"]), jsonio.stored(chunks) if chunks else None


def meta(row: dict[str, Any]) -> dict[str, Any]:
    """What was recorded besides the body: provider headers and stream timing (empty when none)."""
    return parsed_meta(row.get("meta"))


def parsed_meta(text: str | None) -> dict[str, Any]:
    """A stored meta column's value: empty when there is none."""
    return json.loads(text) if text else {}


# The lifecycle of an entry (docs/design/product.md §6): list, show, edit, revert, pin, review, delete.

REVIEW_STATUSES = ("unreviewed", "approved", "rejected")
MAX_SUMMARY_LENGTH = 500
PREVIEW_CHARS = 120


def get_row(ctx: Context, entry_id: str) -> dict[str, Any]:
    """The entry row in the caller's workspace; 404 if absent or outside a token's project binding."""
    row = ctx.store.one("get_entry_in_workspace", id=entry_id, workspace_id=ctx.principal.workspace_id)
    if row is None or not visible(ctx, row["project_id"]):
        raise NotFound(f"No entry {entry_id}.", code="entry_not_found")
    return row


def present(row: dict[str, Any], *, full: bool = False) -> dict[str, Any]:
    """The public view of an entry; `full` adds the request, response and chunks."""
    dialect = dialects.get(row.get("api"))
    out: dict[str, Any] = {
        "object": "entry",
        "id": row["id"],
        "api": dialect.name,
        "project": row.get("project_name"),
        "fingerprint": row["fingerprint"],
        "model": row["model"],
        "revision": row["revision"],
        "answers": row.get("answers") or 1,
        "pinned": bool(row["pinned"]),
        "review_status": row["review_status"],
        "created": int(row["created_at"]),
        "updated": int(row["updated_at"]),
    }
    request = json.loads(row["request"])
    response, chunks = decode(row)
    if full:
        out.update(request=request, response=response, chunks=chunks)
        # The same shapes for every API: the request's conversation view and the answer as a message.
        out["conversation"] = dialect.conversation(request)
        common = dialect.common(response, chunks)
        out["answer"] = (common.get("choices") or [{}])[0].get("message")
    else:
        out["preview"] = {
            "prompt": _prompt_preview(dialect.conversation(request)),
            "answer": _answer_preview(dialect.common(response, chunks)),
        }
    return out


def _present_revision(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "entry.revision",
        "seq": row.get("seq") or 1,
        "number": row["number"],
        "actor": row["actor"],
        "summary": row["summary"],
        "created": int(row["created_at"]),
        "response": json.loads(row["response"]),
        "chunks": json.loads(row["chunks"]) if row["chunks"] else None,
    }


def _clip(text: Any) -> str:
    text = " ".join(str(text).split()) if text is not None else ""
    return text if len(text) <= PREVIEW_CHARS else text[: PREVIEW_CHARS - 1] + "…"


def _prompt_preview(request: dict[str, Any]) -> str:
    for message in reversed(request.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return _clip(content)
    return ""


def _answer_preview(response: dict[str, Any]) -> str:
    try:
        message = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return ""
    if message.get("content"):
        return _clip(message["content"])
    names = [c.get("function", {}).get("name", "?") for c in message.get("tool_calls") or []]
    return _clip("tool calls: " + ", ".join(names)) if names else ""


def list_entries(
    ctx: Context,
    project: str,
    *,
    model: str | None = None,
    text: str | None = None,
    review_status: str | None = None,
    pinned: bool | None = None,
    after: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """A project's entries, newest first, as an OpenAI list; `text` is a case-insensitive substring
    of the request or response."""
    require(ctx, role="viewer")
    if review_status is not None and review_status not in REVIEW_STATUSES:
        raise BadRequest(f"review_status must be one of {', '.join(REVIEW_STATUSES)}.", param="review_status")
    project_id = projects.get_row(ctx, project)["id"]
    rows = ctx.store.all(
        "list_entries",
        project_id=project_id,
        model=model or None,
        review_status=review_status,
        pinned=None if pinned is None else int(pinned),
        text=_like_pattern(text) if text else None,
        after=after,
        limit=limit + 1,
    )
    return page([present(r) for r in rows], limit)


def _like_pattern(text: str) -> str:
    # Entries are stored as JSON text, so the term is searched as JSON spells it ("a \"b\"").
    encoded = json.dumps(text.lower(), ensure_ascii=False)[1:-1]
    escaped = encoded.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def get(ctx: Context, entry_id: str) -> dict[str, Any]:
    """An entry in full with its revisions, oldest first."""
    require(ctx, role="viewer")
    row = get_row(ctx, entry_id)
    out = present(row, full=True)
    out["sequence"] = [_present_answer(row, a) for a in _answers(ctx.store, ctx.principal.workspace_id, row)]
    out["revisions"] = [
        _present_revision(r)
        for r in ctx.store.all("list_revisions", entry_id=row["id"], workspace_id=ctx.principal.workspace_id)
    ]
    return out


def edit(ctx: Context, entry_id: str, payload: Any, *, summary: str = "") -> dict[str, Any]:
    """Replace the response with an answer, validated against the entry's request.

    The answer takes any form of docs/design/product.md §4. A new revision by a human; the entry
    goes back to unreviewed. Pinned entries may be edited: a pin guards against imports and
    re-recording, not against people.
    """
    require(ctx, role="editor")
    _edit(ctx, get_row(ctx, entry_id), 1, payload, summary)
    return get(ctx, entry_id)


def revert(ctx: Context, entry_id: str, number: int, *, summary: str = "") -> dict[str, Any]:
    """A new revision that copies revision `number`'s response and chunks."""
    require(ctx, role="editor")
    _revert(ctx, get_row(ctx, entry_id), 1, number, summary)
    return get(ctx, entry_id)


def _edit(ctx: Context, row: dict[str, Any], seq: int, payload: Any, summary: str) -> None:
    """Answer `seq` replaced by `payload`, validated as any answer to the entry's request is."""
    dialect = dialects.get(row.get("api"))
    request = json.loads(row["request"])
    old, _ = decode(_answer(ctx.store, ctx.principal.workspace_id, row, seq))
    response, chunks = dialect.accept(payload, request, dialect.conversation(request))
    # A follow-up request names the recorded response's id: an edit keeps it.
    recorded_id = dialect.response_id(old)
    if recorded_id is not None and dialect.response_id(response) != recorded_id:
        response = {**response, "id": recorded_id}
    summary = summary or f"edited by {ctx.principal.actor}"
    _replace(ctx, row, seq, response, chunks, "entry.edit", summary)


def _revert(ctx: Context, row: dict[str, Any], seq: int, number: Any, summary: str) -> None:
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise BadRequest("revision must be a whole number from 1.", param="revision")
    _answer(ctx.store, ctx.principal.workspace_id, row, seq)
    old = ctx.store.one(
        "get_revision", entry_id=row["id"], seq=seq, number=number, workspace_id=ctx.principal.workspace_id
    )
    if old is None:
        of = f"answer {seq} of entry {row['id']}" if seq > 1 else f"Entry {row['id']}"
        raise NotFound(f"{of[0].upper()}{of[1:]} has no revision {number}.", code="revision_not_found")
    response, chunks = decode(old)
    _replace(ctx, row, seq, response, chunks, "entry.revert", summary or f"reverted to revision {number}")


def _replace(
    ctx: Context,
    row: dict[str, Any],
    seq: int,
    response: dict[str, Any],
    chunks: list[dict[str, Any]] | None,
    action: str,
    summary: str,
) -> None:
    response, chunks = stored_answer(ctx.settings.secrets(), row.get("api"), response, chunks)
    response_json = dumps(response)
    chunks_json = dumps(chunks) if chunks is not None else None
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        if seq == 1:
            updated = tx.one(
                "replace_entry_response",
                id=row["id"],
                workspace_id=ctx.principal.workspace_id,
                response=response_json,
                chunks=chunks_json,
                now=now(),
            )
        else:
            updated = tx.one(
                "replace_answer_response",
                entry_id=row["id"],
                workspace_id=ctx.principal.workspace_id,
                seq=seq,
                response=response_json,
                chunks=chunks_json,
                now=now(),
            )
            tx.run("entry_unreviewed", id=row["id"], workspace_id=ctx.principal.workspace_id, now=now())
        if updated is None:
            raise _no_answer(row, seq)
        _add_revision(
            tx,
            ctx,
            row["id"],
            updated["revision"],
            response_json,
            chunks_json,
            "human",
            _summary(summary),
            seq,
        )
        audit.record(tx, ctx, action, row["id"], [_field(seq, "response")])


def _summary(summary: Any) -> str:
    if not isinstance(summary, str):
        raise BadRequest("summary must be text.", param="summary")
    return summary.strip()[:MAX_SUMMARY_LENGTH]


def set_pinned(ctx: Context, entry_id: str, pinned: bool) -> dict[str, Any]:
    """Pin (lock against import and re-recording) or unpin; audited when it changes."""
    require(ctx, role="editor")
    _pin(ctx, get_row(ctx, entry_id), 1, pinned)
    return present(get_row(ctx, entry_id))


def _pin(ctx: Context, row: dict[str, Any], seq: int, pinned: bool) -> None:
    if bool(_answer(ctx.store, ctx.principal.workspace_id, row, seq)["pinned"]) == pinned:
        return
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        if seq == 1:
            tx.run(
                "set_entry_pinned",
                id=row["id"],
                workspace_id=ctx.principal.workspace_id,
                pinned=int(pinned),
                now=now(),
            )
        else:
            tx.run(
                "set_answer_pinned",
                entry_id=row["id"],
                workspace_id=ctx.principal.workspace_id,
                seq=seq,
                pinned=int(pinned),
                now=now(),
            )
        audit.record(tx, ctx, "entry.pin" if pinned else "entry.unpin", row["id"], [_field(seq, "pinned")])


def review(ctx: Context, entry_id: str, status: Any) -> dict[str, Any]:
    """Set the review status; a rejected entry does not replay (its request parks again in record mode)."""
    require(ctx, role="editor")
    if status not in REVIEW_STATUSES:
        raise BadRequest(f"status must be one of {', '.join(REVIEW_STATUSES)}.", param="status")
    row = get_row(ctx, entry_id)
    if row["review_status"] != status:
        with ctx.store.transaction(ctx.principal.workspace_id) as tx:
            tx.run(
                "set_review_status",
                id=row["id"],
                workspace_id=ctx.principal.workspace_id,
                review_status=status,
                now=now(),
            )
            audit.record(tx, ctx, "entry.review", row["id"], ["review_status"])
    return present(get_row(ctx, entry_id))


def delete(ctx: Context, entry_id: str) -> dict[str, Any]:
    """Delete an entry and its revisions; its request misses again."""
    require(ctx, role="editor")
    row = get_row(ctx, entry_id)
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run("delete_entry", id=row["id"], workspace_id=ctx.principal.workspace_id)
        audit.record(tx, ctx, "entry.delete", row["id"])
    return {"object": "entry.deleted", "id": row["id"], "deleted": True}


# One answer of a sequence (docs/decisions/0041-sequence-surfaces-and-record-through.md): answer 1 is the
# entry row (its response, revision and pin), answers 2..n are entry_answers rows. Each answer keeps
# its own revisions, numbered from 1, which move with it when the sequence is reordered.


def _first(row: dict[str, Any]) -> dict[str, Any]:
    """Answer 1, the entry row's own."""
    keys = ("response", "chunks", "revision", "pinned", "created_at", "updated_at")
    return {**{key: row[key] for key in keys}, "meta": row.get("meta"), "seq": 1}


def _answers(store: Store | Tx, workspace_id: str, row: dict[str, Any]) -> list[dict[str, Any]]:
    """Every answer of the entry's sequence, 1..n, as stored."""
    if (row.get("answers") or 1) == 1:
        return [_first(row)]
    return [_first(row), *store.all("list_entry_answers", entry_id=row["id"], workspace_id=workspace_id)]


def _answer(store: Store | Tx, workspace_id: str, row: dict[str, Any], seq: Any) -> dict[str, Any]:
    """Answer `seq` as stored; 404 when the sequence has no such answer."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= (row.get("answers") or 1):
        raise _no_answer(row, seq)
    if seq == 1:
        return _first(row)
    found = store.one("entry_answer", entry_id=row["id"], workspace_id=workspace_id, seq=seq)
    if found is None:
        raise _no_answer(row, seq)
    return {**found, "created_at": row["created_at"], "updated_at": row["updated_at"]}


def _no_answer(row: dict[str, Any], seq: Any) -> NotFound:
    have = row.get("answers") or 1
    return NotFound(
        f"Entry {row['id']} has {have} answer{'s' if have != 1 else ''}: no answer {seq}.",
        param="seq",
        code="answer_not_found",
    )


def _field(seq: int, name: str) -> str:
    """An audited field: the entry's own for answer 1 (as before sequences), else the answer's."""
    return name if seq == 1 else f"answers[{seq}].{name}"


def _present_answer(row: dict[str, Any], answer: dict[str, Any]) -> dict[str, Any]:
    dialect = dialects.get(row.get("api"))
    response, chunks = decode(answer)
    common = dialect.common(response, chunks)
    return {
        "object": "entry.answer",
        "entry": row["id"],
        "seq": answer["seq"],
        "revision": answer["revision"],
        "pinned": bool(answer["pinned"]),
        "updated": int(answer.get("updated_at") or row["updated_at"]),
        "response": response,
        "chunks": chunks,
        "answer": (common.get("choices") or [{}])[0].get("message"),
    }


def get_answer(ctx: Context, entry_id: str, seq: int) -> dict[str, Any]:
    """Answer `seq` of an entry's sequence in full, with its revisions, oldest first."""
    require(ctx, role="viewer")
    row = get_row(ctx, entry_id)
    out = _present_answer(row, _answer(ctx.store, ctx.principal.workspace_id, row, seq))
    revisions = ctx.store.all("list_revisions", entry_id=row["id"], workspace_id=ctx.principal.workspace_id)
    out["revisions"] = [_present_revision(r) for r in revisions if (r.get("seq") or 1) == seq]
    return out


def edit_answer(ctx: Context, entry_id: str, seq: int, payload: Any, *, summary: str = "") -> dict[str, Any]:
    """Replace answer `seq`, as edit() replaces an entry's (answer 1: the same thing)."""
    require(ctx, role="editor")
    row = get_row(ctx, entry_id)
    _answer(ctx.store, ctx.principal.workspace_id, row, seq)
    _edit(ctx, row, seq, payload, summary)
    return get_answer(ctx, entry_id, seq)


def revert_answer(ctx: Context, entry_id: str, seq: int, number: int, *, summary: str = "") -> dict[str, Any]:
    """A new revision of answer `seq` copying its revision `number`."""
    require(ctx, role="editor")
    _revert(ctx, get_row(ctx, entry_id), seq, number, summary)
    return get_answer(ctx, entry_id, seq)


def pin_answer(ctx: Context, entry_id: str, seq: int, pinned: bool) -> dict[str, Any]:
    """Pin one answer against re-recording and imports (answer 1: the entry's pin), or unpin it."""
    require(ctx, role="editor")
    _pin(ctx, get_row(ctx, entry_id), seq, pinned)
    return get_answer(ctx, entry_id, seq)


def delete_answer(ctx: Context, entry_id: str, seq: int) -> dict[str, Any]:
    """Delete answer `seq` and its revisions; the answers after it move up one. The last answer of an
    entry is refused (409): delete the entry instead."""
    require(ctx, role="editor")
    row = get_row(ctx, entry_id)
    _answer(ctx.store, ctx.principal.workspace_id, row, seq)
    have = row.get("answers") or 1
    if have == 1:
        raise Conflict(
            f"Answer 1 is entry {entry_id}'s only answer; delete the entry instead.", code="last_answer"
        )
    order = [n for n in range(1, have + 1) if n != seq]
    return _rearrange(ctx, row, order, "entry.answer.delete", [_field(seq, "response")])


def reorder_answers(ctx: Context, entry_id: str, order: Any) -> dict[str, Any]:
    """Put the answers in a new order: `order` lists every answer's number, once, as it is to replay."""
    require(ctx, role="editor")
    row = get_row(ctx, entry_id)
    have = row.get("answers") or 1
    if (
        not isinstance(order, list)
        or any(isinstance(n, bool) or not isinstance(n, int) for n in order)
        or sorted(order) != list(range(1, have + 1))
    ):
        raise BadRequest(
            f"order must list the numbers 1 to {have}, each once, in the order the answers are to replay.",
            param="order",
        )
    return _rearrange(ctx, row, order, "entry.answers.reorder", ["answers"])


def _rearrange(
    ctx: Context, row: dict[str, Any], order: list[int], action: str, fields: list[str]
) -> dict[str, Any]:
    """Make the entry's answers old[order[0]], old[order[1]], …: each with its revisions and pin."""
    entry_id = row["id"]
    stamp = now()
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        locked = tx.one("lock_entry_answers", id=entry_id, workspace_id=ctx.principal.workspace_id, now=stamp)
        if locked is None or locked["answers"] != (row.get("answers") or 1):
            raise Conflict("The entry's answers changed meanwhile; look again.", code="answers_changed")
        # Read again under the lock: an edit meanwhile is moved, not undone.
        workspace_id = ctx.principal.workspace_id
        old = _answers(
            tx, workspace_id, tx.one("get_entry_in_workspace", id=entry_id, workspace_id=workspace_id)
        )
        first = old[order[0] - 1]
        tx.run(
            "set_first_answer",
            id=entry_id,
            workspace_id=workspace_id,
            response=first["response"],
            chunks=first["chunks"],
            revision=first["revision"],
            pinned=first["pinned"],
            meta=first.get("meta"),
            response_id=dialects.get(row.get("api")).response_id(json.loads(first["response"])),
            answers=len(order),
            now=stamp,
        )
        tx.run("drop_answers_after", entry_id=entry_id, workspace_id=workspace_id, answers=1)
        for seq, was in enumerate(order[1:], start=2):
            answer = old[was - 1]
            tx.run(
                "restore_answer",
                workspace_id=workspace_id,
                entry_id=entry_id,
                seq=seq,
                response=answer["response"],
                chunks=answer["chunks"],
                revision=answer["revision"],
                pinned=answer["pinned"],
                created_at=answer["created_at"],
                meta=answer.get("meta"),
                now=stamp,
            )
        for gone in sorted(set(range(1, len(old) + 1)) - set(order)):
            tx.run("drop_answer_revisions", entry_id=entry_id, workspace_id=workspace_id, seq=gone)
        for seq, was in enumerate(order, start=1):
            if seq != was:
                tx.run("move_answer_revisions", entry_id=entry_id, workspace_id=workspace_id, seq=was, to=seq)
        tx.run("settle_answer_revisions", entry_id=entry_id, workspace_id=workspace_id)
        audit.record(tx, ctx, action, entry_id, fields)
    return get(ctx, entry_id)

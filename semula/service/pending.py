"""Parked calls (SPEC §3-§5): park a miss, answer it, and wake whoever holds it."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from semula import answers
from semula.errors import NotFound, PendingResolved
from semula.ids import new_id
from semula.service import Context, dumps, now
from semula.service import entries as entries_service
from semula.service.auth import check_project, require

logger = logging.getLogger("semula.pending")

# Called with (pending_id, status, entry_id, resolved_at) after an answer or cancel commits in
# this process, so a call held here is released at once instead of at the next poll.
RESOLVED_LISTENERS: list[Callable[[str, str, str | None, float], None]] = []


def park(
    ctx: Context, project: dict[str, Any], fingerprint: str, request: dict[str, Any], stream: bool
) -> str | None:
    """The id of the pending row for this miss (new or shared), or None when max_misses is reached."""
    params = dict(project_id=project["id"], fingerprint=fingerprint)
    inserted = ctx.store.run(
        "insert_pending",
        id=new_id("pending"),
        workspace_id=ctx.principal.workspace_id,
        model=request.get("model"),
        request=dumps(request),
        stream=int(stream),
        max_misses=project["max_misses"],
        now=now(),
        **params,
    )
    row = ctx.store.one("pending_by_fingerprint", **params)
    if row is None and inserted:
        # Answered between our insert and this read: the caller finds the entry on its next lookup.
        return None
    return row["id"] if row else None


def get_row(ctx: Context, pending_id: str) -> dict[str, Any]:
    row = ctx.store.one("get_pending", id=pending_id, workspace_id=ctx.principal.workspace_id)
    if row is None:
        raise NotFound(f"No pending call {pending_id}.", code="pending_not_found")
    try:
        check_project(ctx, row["project_id"])
    except NotFound:
        raise NotFound(f"No pending call {pending_id}.", code="pending_not_found") from None
    return row


def present(row: dict[str, Any], *, full: bool = False) -> dict[str, Any]:
    """The list view of a pending row; `full` adds the request and its shape."""
    claimed = (
        row["claim_expires_at"] is not None and row["claim_expires_at"] > now() and row["status"] == "pending"
    )
    out: dict[str, Any] = {
        "object": "pending",
        "id": row["id"],
        "project": row.get("project_name"),
        "status": row["status"],
        "model": row["model"],
        "stream": bool(row["stream"]),
        "created": int(row["created_at"]),
        "claimed_by": row["claimed_by"] if claimed else None,
        "claimed_until": int(row["claim_expires_at"]) if claimed else None,
        "entry_id": row["entry_id"],
    }
    if full:
        request = json.loads(row["request"])
        out["request"] = request
        out["shape"] = answers.shape(request)
    return out


def get(ctx: Context, pending_id: str) -> dict[str, Any]:
    """The call in full, with its shape; viewer role and record scope."""
    require(ctx, role="viewer", scope="record")
    return present(get_row(ctx, pending_id), full=True)


def answer(
    ctx: Context,
    pending_id: str,
    payload: Any,
    *,
    actor: str = "agent",
    summary: str = "",
    chunks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Validate an answer, save it as an entry revision and mark the call answered, in one transaction."""
    require(ctx, role="editor", scope="record")
    row = get_row(ctx, pending_id)
    if row["status"] != "pending":
        raise PendingResolved(f"Pending call {pending_id} is {row['status']} already.")
    request = json.loads(row["request"])
    completion = answers.parse_answer(payload, request)
    answers.validate_tool_calls(completion, request)
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        entry = entries_service.save(
            tx,
            ctx,
            project_id=row["project_id"],
            fingerprint=row["fingerprint"],
            request=request,
            response=completion,
            chunks=chunks,
            actor=actor,
            summary=summary or f"answered by {ctx.principal.actor}",
        )
        resolved_at = now()
        if not tx.run(
            "resolve_pending", id=pending_id, status="answered", entry_id=entry["id"], now=resolved_at
        ):
            raise PendingResolved(f"Pending call {pending_id} was resolved meanwhile.")
    notify(pending_id, "answered", entry["id"], resolved_at)
    logger.info("answered", extra={"pending_id": pending_id, "entry_id": entry["id"]})
    return present(get_row(ctx, pending_id))


def cancel(ctx: Context, pending_id: str) -> dict[str, Any]:
    """Give up on a parked call: held requests fail, nothing is saved."""
    require(ctx, role="editor", scope="record")
    row = get_row(ctx, pending_id)
    resolved_at = now()
    if row["status"] != "pending" or not ctx.store.run(
        "resolve_pending", id=pending_id, status="cancelled", entry_id=None, now=resolved_at
    ):
        raise PendingResolved(f"Pending call {pending_id} is {row['status']} already.")
    notify(pending_id, "cancelled", None, resolved_at)
    return present(get_row(ctx, pending_id))


def notify(pending_id: str, status: str, entry_id: str | None, resolved_at: float) -> None:
    for listener in RESOLVED_LISTENERS:
        listener(pending_id, status, entry_id, resolved_at)

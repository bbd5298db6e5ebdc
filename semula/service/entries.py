"""Entries: recorded answers, unique per project and fingerprint, with revisions (SPEC §6)."""

from __future__ import annotations

import json
from typing import Any

from semula.db import Tx
from semula.errors import Conflict
from semula.ids import new_id
from semula.service import Context, dumps, now

ACTORS = ("agent", "human", "import")


def lookup(ctx: Context, project_id: str, fingerprint: str) -> dict[str, Any] | None:
    """The entry that replays for this fingerprint, or None (rejected entries do not replay)."""
    row = ctx.store.one("entry_by_fingerprint", project_id=project_id, fingerprint=fingerprint)
    if row is None or row["review_status"] == "rejected":
        return None
    return row


def save(
    tx: Tx,
    ctx: Context,
    *,
    project_id: str,
    fingerprint: str,
    request: dict[str, Any],
    response: dict[str, Any],
    chunks: list[dict[str, Any]] | None,
    actor: str,
    summary: str,
) -> dict[str, Any]:
    """Insert the entry or add a revision to it; a pinned entry refuses re-recording (409)."""
    response_json = dumps(response)
    chunks_json = dumps(chunks) if chunks is not None else None
    row = tx.one(
        "upsert_entry",
        id=new_id("entry"),
        workspace_id=ctx.principal.workspace_id,
        project_id=project_id,
        fingerprint=fingerprint,
        model=request.get("model"),
        request=dumps(request),
        response=response_json,
        chunks=chunks_json,
        now=now(),
    )
    if row is None:
        raise Conflict("The entry for this request is pinned; unpin it to re-record.", code="entry_pinned")
    tx.run(
        "insert_revision",
        id=new_id("revision"),
        workspace_id=ctx.principal.workspace_id,
        entry_id=row["id"],
        number=row["revision"],
        response=response_json,
        chunks=chunks_json,
        actor=actor,
        summary=summary[:500],
        now=now(),
    )
    return row


def decode(row: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """The stored completion and chunks of an entry row."""
    return json.loads(row["response"]), json.loads(row["chunks"]) if row.get("chunks") else None

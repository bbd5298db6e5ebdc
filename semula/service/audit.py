"""The audit log: who did what to which object, and which fields changed; never a value."""

from __future__ import annotations

import json
from typing import Any

from semula.core.ids import new_id
from semula.db import Tx
from semula.service import Context, dumps, now, page
from semula.service.auth import require, require_unbound


def record(tx: Tx, ctx: Context, action: str, target: str | None, fields: list[str] = ()) -> None:
    tx.run(
        "insert_audit",
        id=new_id("audit"),
        workspace_id=ctx.principal.workspace_id,
        now=now(),
        actor=ctx.principal.actor,
        action=action,
        target=target,
        fields=dumps(sorted(fields)),
    )


def present(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "audit_event",
        "id": row["id"],
        "created": int(row["created_at"]),
        "actor": row["actor"],
        "action": row["action"],
        "target": row["target"],
        "fields": json.loads(row["fields"]),
    }


def list_events(
    ctx: Context,
    *,
    action: str | None = None,
    target: str | None = None,
    before: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """Newest first; admin only, and not for project-bound tokens (403 `project_bound`).

    Events are workspace-wide (token ids, every project's names and changed fields) and carry no
    project of their own, so a bound token could only learn about its neighbours here.
    """
    require(ctx, role="admin")
    require_unbound(ctx)
    rows = ctx.store.all(
        "list_audit",
        workspace_id=ctx.principal.workspace_id,
        action=action,
        target=target,
        before=before,
        limit=limit + 1,
    )
    return page([present(r) for r in rows], limit)

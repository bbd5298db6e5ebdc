"""Reading the call log: a project's proxied calls, newest first, filtered by outcome.

The call log is docs/design/product.md §3.
"""

from __future__ import annotations

from typing import Any

from semula.errors import BadRequest
from semula.service import Context, page
from semula.service import projects as projects_service
from semula.service.auth import require
from semula.service.calllog import OUTCOMES


def present(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "call",
        "id": row["id"],
        "api": row.get("api") or "openai.chat",
        "project": row.get("project_name"),
        "created": row["created_at"],
        "fingerprint": row["fingerprint"],
        "model": row["model"],
        "stream": bool(row["stream"]),
        "outcome": row["outcome"],
        "status": row["status"],
        "duration_ms": row["duration_ms"],
        "entry_id": row["entry_id"],
        "pending_id": row["pending_id"],
        "token_id": row["token_id"],
    }


def list_calls(
    ctx: Context, project: str, *, outcome: str | None = None, after: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """A project's call log as an OpenAI list, newest first; viewer role."""
    require(ctx, role="viewer")
    if outcome is not None and outcome not in OUTCOMES:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOMES)}.", param="outcome")
    project_id = projects_service.get_row(ctx, project)["id"]
    rows = ctx.store.all(
        "list_call_log", project_id=project_id, outcome=outcome, after=after, limit=limit + 1
    )
    return page([present(r) for r in rows], limit)

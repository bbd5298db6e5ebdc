"""Helpers for the entry and bundle tests: save entries through the service, snapshot a project."""

from __future__ import annotations

import json
from typing import Any

from semula.core import answers
from semula.core import fingerprint as fp
from semula.service import Context, audit, entries, projects


def request_for(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}], **extra}


def save_entry(
    ctx: Context,
    project: str,
    text: str,
    answer: Any = None,
    *,
    chunks: list[dict[str, Any]] | None = None,
    actor: str = "agent",
    **extra: Any,
) -> dict[str, Any]:
    """Record an entry as the proxy would (fingerprint from the project's rules) and return its full view."""
    row = projects.get_row(ctx, project)
    request = request_for(text, **extra)
    fingerprint = fp.fingerprint(request, json.loads(row["ignore_fields"]), json.loads(row["normalize"]))
    response = answers.parse_answer(
        answer if answer is not None else {"content": f"answer to {text}"}, request
    )
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        saved = entries.save(
            tx,
            ctx,
            project_id=row["id"],
            fingerprint=fingerprint,
            request=request,
            response=response,
            chunks=chunks,
            actor=actor,
            summary="recorded in a test",
        )
    return entries.get(ctx, saved["id"])


def snapshot(ctx: Context, project: str) -> dict[str, Any]:
    """Everything an import could change about a project: settings, entries with revisions, audit log."""
    listed = entries.list_entries(ctx, project, limit=1000)["data"]
    return {
        "project": projects.get(ctx, project),
        "entries": [entries.get(ctx, e["id"]) for e in listed],
        "audit": audit.list_events(ctx, limit=1000)["data"],
    }

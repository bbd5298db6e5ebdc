"""What the answerer daemon asks of the service layer beyond claiming and answering.

The design is docs/design/answerer.md.
"""

from __future__ import annotations

from typing import Any

from semula.service import Context, now
from semula.service.auth import require, require_unbound


def candidates(ctx: Context, *, after: str | None = None, limit: int = 50) -> list[dict[str, Any]]:
    """Parked calls nobody holds in projects with the answerer on, oldest first: id and project name.

    Workspace-wide, so not for project-bound principals; the daemon pages with `after` past calls
    it has tried already.
    """
    require(ctx, role="editor", scope="record")
    require_unbound(ctx)
    rows = ctx.store.all(
        "answerer_candidates", workspace_id=ctx.principal.workspace_id, now=now(), after=after, limit=limit
    )
    return [{"id": r["id"], "project": r["project_name"]} for r in rows]

"""The dashboard's overview: each project with its mode, parked calls, and today's hits and misses."""

from __future__ import annotations

import time
from typing import Any

from semula.service import Context
from semula.service import projects as projects_service
from semula.service.auth import require
from semula.service.calllog import OUTCOMES

# Every outcome but a hit, and an error (a bad request is no miss).
MISS_OUTCOMES = tuple(o for o in OUTCOMES if o not in ("hit", "fault", "error"))


def overview(ctx: Context) -> list[dict[str, Any]]:
    """Projects the caller may see, with `parked`, `hits_today` and `misses_today` (since 00:00 UTC)."""
    require(ctx, role="viewer")
    listed = projects_service.list_projects(ctx, limit=1000)["data"]
    workspace = ctx.principal.workspace_id
    parked = {r["project_id"]: r["parked"] for r in ctx.store.all("parked_counts", workspace_id=workspace)}
    midnight = time.time() // 86400 * 86400
    hits: dict[str, int] = {}
    misses: dict[str, int] = {}
    for row in ctx.store.all("outcome_counts_since", workspace_id=workspace, since=midnight):
        if row["outcome"] == "hit":
            hits[row["project_id"]] = hits.get(row["project_id"], 0) + row["calls"]
        elif row["outcome"] in MISS_OUTCOMES:
            misses[row["project_id"]] = misses.get(row["project_id"], 0) + row["calls"]
    return [
        {
            **p,
            "parked": parked.get(p["id"], 0),
            "hits_today": hits.get(p["id"], 0),
            "misses_today": misses.get(p["id"], 0),
        }
        for p in listed
    ]

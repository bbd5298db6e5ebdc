"""Per-workspace quotas (hosted mode): projects, entries, parked calls and answer size.

Limits come from the workspace's own override, else the operator's SEMULA_QUOTA_* default, else
the hosted default below. Outside hosted mode only an operator's explicit SEMULA_QUOTA_* applies.
A breach raises before anything is written (or inside the writing transaction, which it undoes).
"""

from __future__ import annotations

import json
from typing import Any

from semula.core.errors import AnswerTooLarge, QuotaExceeded
from semula.db import Tx
from semula.service import Context

HOSTED_DEFAULTS = {
    "quota_projects": 100,
    "quota_entries": 100_000,
    "quota_parked": 1_000,
    "quota_answer_bytes": 1 << 20,
}
FIELDS = tuple(HOSTED_DEFAULTS)
COUNTS = {
    "quota_projects": "count_projects",
    "quota_entries": "count_entries",
    "quota_parked": "count_parked",
}
WHAT = {"quota_projects": "projects", "quota_entries": "entries", "quota_parked": "parked calls"}


def limit(ctx: Context, field: str) -> int | None:
    """The limit in force for the caller's workspace, or None for none."""
    default = getattr(ctx.settings, field)
    if default is None and not ctx.settings.hosted:
        return None
    row = ctx.store.one("get_workspace", id=ctx.principal.workspace_id) or {}
    if row.get(field) is not None:
        return row[field]
    return default if default is not None else HOSTED_DEFAULTS[field]


def check(ctx: Context, field: str, *, adding: int = 1, tx: Tx | None = None) -> None:
    """429 semula_quota when `adding` more would pass the limit (counted inside tx, if given)."""
    cap = limit(ctx, field)
    if cap is None:
        return
    count = (tx or ctx.store).one(COUNTS[field], workspace_id=ctx.principal.workspace_id)["n"]
    if count + adding > cap:
        raise QuotaExceeded(f"This workspace may have at most {cap} {WHAT[field]} (quota); it has {count}.")


def check_answer(ctx: Context, payload: Any) -> None:
    """413 semula_quota when an answer's JSON is larger than the workspace allows."""
    cap = limit(ctx, "quota_answer_bytes")
    if cap is None:
        return
    size = len(json.dumps(payload, ensure_ascii=False).encode())
    if size > cap:
        raise AnswerTooLarge(f"The answer is {size} bytes; this workspace allows at most {cap} (quota).")

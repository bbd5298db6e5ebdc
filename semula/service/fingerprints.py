"""Re-fingerprinting a project's entries when what makes two requests the same changes.

An entry is found by its fingerprint, taken from the request under the project's `ignore_fields` and
`normalize` and the dialect's own rules. When those change (a project's settings, or a semula whose
dialect leaves out more, decision 0059), each entry's fingerprint is taken again from its stored
request, all in one transaction with the change, audited. An entry whose stored request was redacted
cannot give its fingerprint again and keeps the one it has; two entries that would become one
request refuse the change, naming them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from semula import dialects
from semula.core import redact
from semula.core.errors import Conflict
from semula.db import Store, Tx
from semula.service import Context, audit, now
from semula.service.auth import require

Rules = tuple[list[str], list[dict[str, str]]]


@dataclass
class Plan:
    """What re-fingerprinting a project's entries under some rules would do."""

    moves: list[tuple[str, str]] = field(default_factory=list)  # (entry id, new fingerprint)
    redacted: list[str] = field(default_factory=list)  # entries that keep theirs
    total: int = 0

    def report(self) -> dict[str, Any]:
        return {
            "object": "refingerprint",
            "entries": self.total,
            "changed": len(self.moves),
            "kept_redacted": len(self.redacted),
        }


def plan(store: Store | Tx, project: dict[str, Any], rules: Rules) -> Plan:
    """The new fingerprint of each entry of `project` under `rules`; Conflict when two would collide."""
    out = Plan()
    final: dict[str, str] = {}  # fingerprint -> entry id, after the moves
    for row in store.all("entry_fingerprints", project_id=project["id"]):
        out.total += 1
        fingerprint = row["fingerprint"]
        if redact.REDACTED in row["request"]:
            out.redacted.append(row["id"])
        else:
            dialect = dialects.get(row["api"])
            fresh = dialect.fingerprint(json.loads(row["request"]), *rules)
            if fresh != fingerprint:
                out.moves.append((row["id"], fresh))
                fingerprint = fresh
        other = final.setdefault(fingerprint, row["id"])
        if other != row["id"]:
            raise Conflict(
                f"Entries {other} and {row['id']} of project {project['name']!r} would be the same "
                f"request under these rules ({len(out.moves)} of {out.total} entries would change so "
                "far). Delete one of them (semula entry delete ID) or choose rules that keep them apart.",
                code="fingerprint_collision",
            )
    return out


def apply(tx: Tx, ctx: Context, project: dict[str, Any], moved: Plan) -> None:
    """Write a plan's moves inside `tx`, audited. Each moved entry passes through a fingerprint no
    request has, so two entries that swap fingerprints never meet the unique index halfway."""
    if not moved.moves:
        return
    at = now()
    for entry_id, _ in moved.moves:
        tx.run(
            "set_entry_fingerprint",
            id=entry_id,
            project_id=project["id"],
            fingerprint=f"moving:{entry_id}",
            now=at,
        )
    for entry_id, fingerprint in moved.moves:
        tx.run(
            "set_entry_fingerprint", id=entry_id, project_id=project["id"], fingerprint=fingerprint, now=at
        )
    audit.record(tx, ctx, "project.refingerprint", project["name"], [f"{len(moved.moves)} entries"])


def refingerprint(
    ctx: Context, project: dict[str, Any], rules: Rules, *, dry_run: bool = False
) -> dict[str, Any]:
    """Take every entry's fingerprint again under `rules` (the project's own, after an upgrade of semula
    changed a dialect's rules); admin role. `dry_run` says what would change and changes nothing."""
    require(ctx, role="admin")
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        moved = plan(tx, project, rules)
        if not dry_run:
            apply(tx, ctx, project, moved)
    return {**moved.report(), "project": project["name"], "dry_run": dry_run}

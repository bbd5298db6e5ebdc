"""Fault rules: a project's, a replay session's or an entry's `faults` setting injects the faults of
semula.core.faults into the calls it matches (docs/decisions/0061-fault-rules.md).

A rule applies to a call served from a recording and to a record-through call, never to a call that
parks or misses. Its `times` and `probability` are counted per replay session ('' outside one) in
`fault_counts`, one small transaction per matched call, so every process and host agrees on which
calls get a fault; a probability rule's draw comes from its seed and the call's number alone.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from semula import dialects
from semula.core import faults, jsonio
from semula.core.errors import BadRequest, NotFound
from semula.service import Context, audit, dumps, now, projects
from semula.service.auth import require
from semula.service.replay import Call, may_park
from semula.service.synthetic import applies as synthetic


@functools.lru_cache(maxsize=256)
def rules(stored: str) -> tuple[dict[str, Any], ...]:
    """A project's stored `faults`, parsed once per process for each value."""
    return tuple(json.loads(stored))


def pick(ctx: Context, call: Call) -> tuple[faults.Fault, str] | None:
    """The fault a rule gives this call, with the rule as the call log keeps it; None for none.

    A matched rule counts the call; the first rule that fires decides, and the rules after it do not
    see the call."""
    stored = rules(call.project["faults"])
    if not stored or not _eligible(ctx, call):
        return None
    entry_id = call.entry["id"] if call.entry is not None else None
    text = functools.cache(lambda: jsonio.compact(call.body).decode("utf-8", "surrogatepass"))
    for rule in stored:
        if not faults.matches(
            rule,
            api=call.dialect.name,
            model=call.model,
            fingerprint=call.fingerprint,
            text=text,
            session=call.session,
            entry_id=entry_id,
        ):
            continue
        if _fires(ctx, call, rule):
            return faults.rule_fault(rule), dumps(rule)
    return None


def _eligible(ctx: Context, call: Call) -> bool:
    """A call served from a recording, or one that would be forwarded to the provider (record-through)."""
    if call.entry is not None:
        return True
    project = call.project
    return bool(
        call.exhausted is None and project["record_through"] and may_park(ctx, call) and not synthetic(call)
    )


def _fires(ctx: Context, call: Call, rule: dict[str, Any]) -> bool:
    """Count the call for the rule, and whether it gets the fault: its number's draw is below the rule's
    probability, and fewer than `times` faults came before it in this session."""
    probability, times = rule.get("probability"), rule.get("times")
    keys = {"project_id": call.project["id"], "session": call.session or "", "rule": faults.rule_key(rule)}
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        row = tx.one("count_fault_call", workspace_id=ctx.principal.workspace_id, now=now(), **keys)
        assert row is not None
        drawn = probability is None or faults.draw(rule.get("seed", 0), int(row["calls"])) < probability
        fires = drawn and (times is None or int(row["fired"]) < times)
        if fires:
            tx.run("count_fault_fired", **keys)
    return fires


def present(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    """A project's rules, each with its counts per session."""
    counts: dict[str, list[dict[str, Any]]] = {}
    for count in ctx.store.all("fault_counts", project_id=row["id"]):
        counts.setdefault(count["rule"], []).append(
            {"session": count["session"] or None, "calls": count["calls"], "faults": count["fired"]}
        )
    data = [
        {"object": "fault_rule", "index": index, **rule, "counts": counts.get(faults.rule_key(rule), [])}
        for index, rule in enumerate(json.loads(row["faults"]))
    ]
    return {"object": "list", "project": row["name"], "data": data, "has_more": False}


def list_rules(ctx: Context, project: str) -> dict[str, Any]:
    """A project's rules; a replay-scope token (the proxy's alone) neither reads nor sets them."""
    require(ctx, role="viewer", scope="record")
    return present(ctx, projects.get_row(ctx, project))


def add(ctx: Context, project: str, rule: Any) -> dict[str, Any]:
    """Add a rule to a project (one naming a `session` or `entry` applies to that one only); editor."""
    require(ctx, role="editor", scope="record")
    row = projects.get_row(ctx, project)  # another workspace's project is a 404 whatever the rule
    checked = faults.check_rule(rule, apis=dialects.names())
    stored = json.loads(row["faults"])
    if len(stored) >= faults.MAX_RULES:
        raise BadRequest(
            f"Project {project!r} has {faults.MAX_RULES} fault rules; clear some first.",
            param="faults",
            code="invalid_fault",
        )
    _save(ctx, row, [*stored, checked], "fault.add")
    return present(ctx, projects.get_row(ctx, project))


def clear(
    ctx: Context,
    project: str,
    *,
    session: str | None = None,
    entry: str | None = None,
    index: int | None = None,
) -> dict[str, Any]:
    """Remove a project's rules (only a session's or an entry's, or the one at `index`) and their counts;
    editor."""
    require(ctx, role="editor", scope="record")
    row = projects.get_row(ctx, project)
    stored = json.loads(row["faults"])
    if index is not None and not 0 <= index < len(stored):
        raise NotFound(f"Project {project!r} has no fault rule {index}.", code="fault_not_found")
    kept = [
        rule
        for number, rule in enumerate(stored)
        if not (
            (index is None or number == index)
            and (session is None or rule.get("session") == session)
            and (entry is None or rule.get("entry") == entry)
        )
    ]
    removed = [rule for rule in stored if rule not in kept]
    _save(ctx, row, kept, "fault.clear", removed)
    return present(ctx, projects.get_row(ctx, project))


def _save(
    ctx: Context,
    row: dict[str, Any],
    rules_: list[dict[str, Any]],
    action: str,
    removed: list[dict[str, Any]] = (),  # type: ignore[assignment]
) -> None:
    """Store a project's rules, audited. A removed rule's counts go with it, so the same rule added
    again counts from one."""
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run(
            "set_project_faults",
            id=row["id"],
            workspace_id=row["workspace_id"],
            faults=dumps(rules_),
            now=now(),
        )
        for rule in removed:
            tx.run("drop_fault_counts", project_id=row["id"], rule=faults.rule_key(rule))
        audit.record(tx, ctx, action, row["name"], ["faults"])

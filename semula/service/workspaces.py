"""Workspaces, the tenants of hosted mode: the operator creates, lists, disables them and sets quotas."""

from __future__ import annotations

import re
from typing import Any

from semula.core.errors import BadRequest, Conflict, Forbidden, NotFound
from semula.core.ids import new_id
from semula.db import UniqueViolation
from semula.service import Context, Principal, now
from semula.service.quotas import FIELDS

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")


def _operator(ctx: Context) -> None:
    # Workspaces are the operator's business: the CLI on the server's database, never a token.
    if ctx.principal.token_id is not None:
        raise Forbidden("Workspaces are managed by the operator's CLI only.")


def present(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "workspace",
        "id": row["id"],
        "name": row["name"],
        "disabled": bool(row["disabled"]),
        **{field: row.get(field) for field in FIELDS},
    }


def get_row(ctx: Context, name: str) -> dict[str, Any]:
    _operator(ctx)
    row = ctx.store.one("get_workspace_by_name", name=name)
    if row is None:
        raise NotFound(f"No workspace named {name!r}.", code="workspace_not_found")
    return row


def create(ctx: Context, name: str) -> dict[str, Any]:
    _operator(ctx)
    if not NAME.match(name):
        raise BadRequest("A workspace name is a slug: lowercase letters, digits, - and _.", param="name")
    workspace_id = new_id("workspace")
    try:
        ctx.store.run("create_workspace", id=workspace_id, name=name, now=now())
    except UniqueViolation:
        raise Conflict(f"A workspace named {name!r} exists already.", code="workspace_exists") from None
    return present(ctx.store.one("get_workspace", id=workspace_id))


def list_workspaces(ctx: Context) -> list[dict[str, Any]]:
    _operator(ctx)
    return [present(r) for r in ctx.store.all("list_workspaces")]


def set_disabled(ctx: Context, name: str, disabled: bool) -> dict[str, Any]:
    """A disabled workspace's tokens are refused at once (401)."""
    _operator(ctx)
    row = get_row(ctx, name)
    ctx.store.run("set_workspace_disabled", id=row["id"], disabled=int(disabled))
    return present(get_row(ctx, name))


def set_quotas(ctx: Context, name: str, changes: dict[str, Any]) -> dict[str, Any]:
    """Override quotas for one workspace; null goes back to the operator's default."""
    _operator(ctx)
    row = get_row(ctx, name)
    for field, value in changes.items():
        if field not in FIELDS:
            raise BadRequest(f"Unknown quota {field!r}; quotas are {', '.join(FIELDS)}.", param=field)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise BadRequest(f"{field} must be a whole number or null.", param=field)
    ctx.store.run("set_workspace_quotas", id=row["id"], **({f: row[f] for f in FIELDS} | changes))
    return present(get_row(ctx, name))


def operator_in(ctx: Context, name: str) -> Context:
    """The operator's context inside one workspace (for `semula token create --workspace`)."""
    row = get_row(ctx, name)
    return ctx.as_(Principal(workspace_id=row["id"], role="admin", scope="full", actor="cli"))

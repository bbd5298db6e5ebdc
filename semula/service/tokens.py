"""Tokens: shown once at creation, stored hashed; admin only; creation and revocation audited.

Revoking a token ends its dashboard sessions (semula.service.sessions).
"""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, fields, validate

from semula.core.errors import BadRequest, NotFound
from semula.core.ids import new_id
from semula.service import ROLES, SCOPES, Context, audit, load, now, page
from semula.service import projects as projects_service
from semula.service.auth import new_secret, require, require_unbound, token_hash


class TokenSchema(Schema):
    class Meta:
        unknown = RAISE

    name = fields.String(load_default="", validate=validate.Length(0, 200))
    role = fields.String(required=True, validate=validate.OneOf(ROLES))
    scope = fields.String(load_default="full", validate=validate.OneOf(SCOPES))
    project = fields.String(
        load_default=None, allow_none=True, metadata={"description": "Bind the token to this project."}
    )
    # Unix seconds; past it the token is refused (401 "The token has expired.").
    expires_at = fields.Integer(
        load_default=None,
        allow_none=True,
        strict=True,
        metadata={"description": "When the token stops working (Unix seconds, in the future)."},
    )


def present(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "token",
        "id": row["id"],
        "name": row["name"],
        "role": row["role"],
        "scope": row["scope"],
        "project": row.get("project_name"),
        "created": int(row["created_at"]),
        "revoked": row["revoked_at"] is not None,
        "last_used": int(row["last_used_at"]) if row.get("last_used_at") is not None else None,
        "expires": int(row["expires_at"]) if row.get("expires_at") is not None else None,
    }


def create(ctx: Context, data: dict[str, Any]) -> dict[str, Any]:
    """A new token; the secret is in this response and nowhere else, ever."""
    require(ctx, role="admin")
    require_unbound(ctx)
    data = load(TokenSchema(), data)
    if data["expires_at"] is not None and data["expires_at"] <= now():
        raise BadRequest("expires_at must be in the future (Unix seconds).", param="expires_at")
    project_id = None
    if data["project"] is not None:
        project_id = projects_service.get_row(ctx, data["project"])["id"]
    secret = new_secret()
    token_id = new_id("token")
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        tx.run(
            "create_token",
            id=token_id,
            workspace_id=ctx.principal.workspace_id,
            name=data["name"],
            hash=token_hash(secret),
            role=data["role"],
            scope=data["scope"],
            project_id=project_id,
            now=now(),
            expires_at=data["expires_at"],
        )
        audit.record(tx, ctx, "token.create", token_id, ["role", "scope", "project", "expires_at"])
    out = present(ctx.store.one("get_token", id=token_id, workspace_id=ctx.principal.workspace_id))
    out["token"] = secret
    return out


def list_tokens(ctx: Context, *, after: str | None = None, limit: int = 50) -> dict[str, Any]:
    require(ctx, role="admin")
    require_unbound(ctx)
    rows = ctx.store.all("list_tokens", workspace_id=ctx.principal.workspace_id, after=after, limit=limit + 1)
    return page([present(r) for r in rows], limit)


def revoke(ctx: Context, token_id: str) -> dict[str, Any]:
    require(ctx, role="admin")
    require_unbound(ctx)
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        if not tx.run("revoke_token", id=token_id, workspace_id=ctx.principal.workspace_id, now=now()):
            raise NotFound("No such active token.", code="token_not_found")
        # The lookup refuses a revoked token's sessions anyway; ending them keeps their listing true.
        tx.run("end_token_ui_sessions", token_id=token_id, workspace_id=ctx.principal.workspace_id, now=now())
        audit.record(tx, ctx, "token.revoke", token_id)
    return present(ctx.store.one("get_token", id=token_id, workspace_id=ctx.principal.workspace_id))

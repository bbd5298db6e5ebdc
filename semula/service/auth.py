"""Tokens' principals and the role, scope and project-binding rules.

Reading the Authorization header is the web's request policy (semula/web/policy.py).

The rules are docs/design/product.md §8.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from typing import Any

from semula.core.errors import Forbidden, NotFound, Unauthorized
from semula.db import DatabaseError
from semula.service import ROLES, SCOPES, Context, Principal

logger = logging.getLogger("semula.auth")

TOKEN_PREFIX = "smt_"
# tokens.last_used_at is written at most this often per token (and per process): a token in constant
# use costs one small write a minute, not one per request.
TOUCH_EVERY = 60.0
_touched: dict[str, float] = {}


def new_secret() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(secret: str) -> str:
    # Tokens are 256 random bits, so a fast hash is enough: nothing to brute-force.
    return hashlib.sha256(secret.encode()).hexdigest()


def principal_for_hash(ctx: Context, hashed: str) -> Principal:
    """The principal of a token by its hash."""
    row = ctx.store.one("token_by_hash", hash=hashed)
    if row is None:
        raise Unauthorized("The token is unknown or revoked.")
    if row["workspace_disabled"]:
        raise Unauthorized("The token's workspace is disabled.")
    at = time.time()
    if row.get("expires_at") is not None and row["expires_at"] <= at:
        raise Unauthorized("The token has expired.")
    touch(ctx, row, at)
    return token_principal(row)


def token_principal(row: dict[str, Any]) -> Principal:
    """The caller a token row makes (a token's `id`, `workspace_id`, `role`, `scope`, `project_id`)."""
    return Principal(
        workspace_id=row["workspace_id"],
        role=row["role"],
        scope=row["scope"],
        actor=row["id"],
        token_id=row["id"],
        project_id=row["project_id"],
    )


def touch(ctx: Context, row: dict[str, Any], at: float) -> None:
    """Record that a token was used, once a minute at most; a failed write never refuses the request."""
    last = max(row.get("last_used_at") or 0.0, _touched.get(row["id"], 0.0))
    if at - last < TOUCH_EVERY:
        return
    if len(_touched) >= 10_000:
        _touched.clear()
    _touched[row["id"]] = at
    try:
        with ctx.store.transaction(row["workspace_id"]) as tx:
            tx.run(
                "touch_token", id=row["id"], workspace_id=row["workspace_id"], now=at, before=at - TOUCH_EVERY
            )
    except DatabaseError as exc:
        logger.warning("token touch failed", extra={"token_id": row["id"], "error": type(exc).__name__})


def require(ctx: Context, *, role: str = "viewer", scope: str = "full") -> None:
    """403 unless the caller has at least this role and this scope (replay < record < full)."""
    p = ctx.principal
    if SCOPES.index(p.scope) < SCOPES.index(scope):
        raise Forbidden(f"This token's scope is {p.scope}; this needs {scope}.", code="insufficient_scope")
    if ROLES.index(p.role) < ROLES.index(role):
        raise Forbidden(f"This token's role is {p.role}; this needs {role}.", code="insufficient_role")


def require_unbound(ctx: Context) -> None:
    """Workspace-wide actions (creating projects, managing tokens) are not for project-bound tokens."""
    if ctx.principal.project_id is not None:
        raise Forbidden("This token is bound to one project.", code="project_bound")


def visible(ctx: Context, project_id: str) -> bool:
    """Whether the caller may see this project's objects: a bound token sees its own project only."""
    return ctx.principal.project_id is None or ctx.principal.project_id == project_id


def check_project(ctx: Context, project_id: str) -> None:
    """Everything outside a bound token's project is a 404, as if absent."""
    if not visible(ctx, project_id):
        raise NotFound("No such project.", code="project_not_found")

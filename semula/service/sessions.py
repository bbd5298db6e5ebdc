"""Dashboard sessions: the cookie carries a random secret, ui_sessions its hash, so the server can end
a session wherever its cookie was copied (docs/decisions/0038-dashboard-sessions.md).

A session ends on sign-out, with its token's revocation, when an admin ends it, after
SEMULA_SESSION_IDLE_TIMEOUT unused and SEMULA_SESSION_LIFETIME after sign-in.
"""

from __future__ import annotations

import secrets
from typing import Any

from semula.config import Settings
from semula.core.errors import NotFound, Unauthorized
from semula.core.ids import new_id
from semula.service import Context, Principal, audit, now, page
from semula.service.auth import require, require_unbound, token_hash, token_principal

# last_seen is written at most once a minute, so a busy dashboard does not take SQLite's write
# lock on every page; the idle timeout is exact to within that minute.
TOUCH_EVERY = 60.0


def start(ctx: Context) -> str:
    """A new session for the caller's token; returns its secret, which belongs in the cookie only."""
    p = ctx.principal
    secret = secrets.token_urlsafe(32)
    with ctx.store.transaction(p.workspace_id) as tx:
        tx.run(
            "create_ui_session",
            id=new_id("session"),
            workspace_id=p.workspace_id,
            token_id=p.token_id,
            hash=token_hash(secret),
            now=now(),
        )
    return secret


def authenticate(ctx: Context, secret: str) -> Principal:
    """The principal of a live session by its secret; 401 once it has ended or expired."""
    row = ctx.store.one("ui_session_by_hash", hash=token_hash(secret))
    at = now()
    if row is None or row["ended_at"] is not None or row["revoked_at"] is not None:
        raise Unauthorized("The session has ended; sign in again.")
    if expires_at(ctx.settings, row) <= at:
        raise Unauthorized("The session has expired; sign in again.")
    if row["workspace_disabled"]:
        raise Unauthorized("The token's workspace is disabled.")
    principal = token_principal(row)
    if at - row["last_seen_at"] >= TOUCH_EVERY:
        ctx.as_(principal).store.run(
            "touch_ui_session", id=row["session_id"], workspace_id=row["workspace_id"], now=at
        )
    return principal


def sign_out(ctx: Context, secret: str) -> None:
    """End the session of this secret, if it is still open (the cookie may be the only thing left)."""
    row = ctx.store.one("ui_session_by_hash", hash=token_hash(secret))
    if row is None or row["ended_at"] is not None:
        return
    ctx.as_(token_principal(row)).store.run(
        "end_ui_session",
        id=row["session_id"],
        token_id=row["id"],
        workspace_id=row["workspace_id"],
        now=now(),
    )


def expires_at(settings: Settings, row: dict[str, Any]) -> float:
    """When a session ends unless used again: idle timeout after it was last seen, capped by its lifetime."""
    return min(
        row["last_seen_at"] + settings.session_idle_timeout, row["created_at"] + settings.session_lifetime
    )


def present(ctx: Context, row: dict[str, Any]) -> dict[str, Any]:
    ended = row["ended_at"]
    expires = expires_at(ctx.settings, row)
    if ended is not None:
        status = "ended"
    elif expires <= now():
        status = "expired"
    else:
        status = "active"
    return {
        "object": "session",
        "id": row["id"],
        "token": row["token_id"],
        "created": int(row["created_at"]),
        "last_seen": int(row["last_seen_at"]),
        "ended": None if ended is None else int(ended),
        "expires": None if ended is not None else int(expires),
        "status": status,
    }


def _check_token(ctx: Context, token_id: str) -> None:
    require(ctx, role="admin")
    require_unbound(ctx)
    if ctx.store.one("get_token", id=token_id, workspace_id=ctx.principal.workspace_id) is None:
        raise NotFound("No such token.", code="token_not_found")


def list_sessions(
    ctx: Context, token_id: str, *, after: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """A token's dashboard sessions, oldest first, live or not; admin, like the tokens themselves."""
    _check_token(ctx, token_id)
    rows = ctx.store.all(
        "list_ui_sessions",
        token_id=token_id,
        workspace_id=ctx.principal.workspace_id,
        after=after,
        limit=limit + 1,
    )
    return page([present(ctx, r) for r in rows], limit)


def end(ctx: Context, token_id: str, session_id: str) -> dict[str, Any]:
    """End one of a token's sessions at once (audited); 404 unless it is still open."""
    _check_token(ctx, token_id)
    workspace_id = ctx.principal.workspace_id
    with ctx.store.transaction(workspace_id) as tx:
        if not tx.run(
            "end_ui_session", id=session_id, token_id=token_id, workspace_id=workspace_id, now=now()
        ):
            raise NotFound("No such open session of this token.", code="session_not_found")
        audit.record(tx, ctx, "session.end", session_id)
    return present(
        ctx, ctx.store.one("get_ui_session", id=session_id, token_id=token_id, workspace_id=workspace_id)
    )


def end_all(ctx: Context, token_id: str) -> dict[str, Any]:
    """End every open session of a token (audited once, on the token), which itself keeps working."""
    _check_token(ctx, token_id)
    workspace_id = ctx.principal.workspace_id
    with ctx.store.transaction(workspace_id) as tx:
        tx.run("end_token_ui_sessions", token_id=token_id, workspace_id=workspace_id, now=now())
        audit.record(tx, ctx, "token.end_sessions", token_id)
    return list_sessions(ctx, token_id, limit=1000)

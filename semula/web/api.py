"""REST API under /api/v1: projects by name, prefixed ids, OpenAI list objects.

The conventions are docs/design/product.md §11.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, request

from semula.core.errors import BadRequest
from semula.service import audit, faults, projects, sequences, sessions, tokens
from semula.web import context, json_body

api = Blueprint("api", __name__, url_prefix="/api/v1")


def paging() -> dict[str, Any]:
    raw = request.args.get("limit", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= 1000:
        raise BadRequest("limit must be a whole number from 1 to 1000.", param="limit")
    return {"after": request.args.get("after") or None, "limit": int(raw)}


def flag(name: str) -> bool | None:
    """A query parameter that is true or false (None when absent)."""
    raw = request.args.get(name)
    if raw is None:
        return None
    if raw.lower() in ("true", "1"):
        return True
    if raw.lower() in ("false", "0"):
        return False
    raise BadRequest(f"{name} must be true or false.", param=name)


@api.get("/projects")
def list_projects() -> Any:
    return projects.list_projects(context(), **paging())


@api.post("/projects")
def create_project() -> Any:
    return projects.create(context(), json_body()), 201


@api.get("/projects/<name>")
def get_project(name: str) -> Any:
    return projects.get(context(), name)


@api.patch("/projects/<name>")
def update_project(name: str) -> Any:
    return projects.update(context(), name, json_body())


@api.post("/projects/<name>/refingerprint")
def refingerprint_project(name: str) -> Any:
    raw = request.args.getlist("dry_run")
    if len(raw) > 1 or (raw and raw[0] not in ("true", "false")):
        raise BadRequest("dry_run is true or false, given once.", param="dry_run")
    return projects.refingerprint(context(), name, dry_run=raw == ["true"])


@api.post("/projects/<name>/sessions/<session>/reset")
def reset_session(name: str, session: str) -> Any:
    return sequences.reset(context(), name, session)


@api.get("/projects/<name>/faults")
def list_faults(name: str) -> Any:
    return faults.list_rules(context(), name)


@api.post("/projects/<name>/faults")
def add_fault(name: str) -> Any:
    return faults.add(context(), name, json_body()), 201


@api.delete("/projects/<name>/faults")
def clear_faults(name: str) -> Any:
    index = request.args.get("index")
    if index is not None and not index.isdigit():
        raise BadRequest("index is a rule's number (0, 1, ...).", param="index")
    session, entry = request.args.get("session"), request.args.get("entry")
    return faults.clear(context(), name, session=session, entry=entry, index=int(index) if index else None)


@api.get("/tokens")
def list_tokens() -> Any:
    return tokens.list_tokens(context(), **paging())


@api.post("/tokens")
def create_token() -> Any:
    return tokens.create(context(), json_body()), 201


@api.delete("/tokens/<token_id>")
def revoke_token(token_id: str) -> Any:
    return tokens.revoke(context(), token_id)


@api.get("/tokens/<token_id>/sessions")
def list_sessions(token_id: str) -> Any:
    return sessions.list_sessions(context(), token_id, **paging())


@api.delete("/tokens/<token_id>/sessions")
def end_sessions(token_id: str) -> Any:
    return sessions.end_all(context(), token_id)


@api.delete("/tokens/<token_id>/sessions/<session_id>")
def end_session(token_id: str, session_id: str) -> Any:
    return sessions.end(context(), token_id, session_id)


@api.get("/audit")
def list_audit() -> Any:
    p = paging()
    return audit.list_events(
        context(),
        action=request.args.get("action"),
        target=request.args.get("target"),
        before=p["after"],
        limit=p["limit"],
    )

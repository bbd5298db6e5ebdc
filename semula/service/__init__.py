"""The service layer: every surface (proxy, REST, CLI, MCP, dashboard, answerer) calls these functions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from marshmallow import Schema, ValidationError

from semula.config import Settings
from semula.core.errors import BadRequest
from semula.db import Store
from semula.service.versions import Versions

if TYPE_CHECKING:
    from semula.service.sequences import Counts

ROLES = ("viewer", "editor", "admin")
SCOPES = ("replay", "record", "full")
DEFAULT_WORKSPACE = "wsp_default"


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token's workspace, role, scope and optional project binding."""

    workspace_id: str
    role: str
    scope: str
    actor: str
    token_id: str | None = None
    project_id: str | None = None


CLI = Principal(workspace_id=DEFAULT_WORKSPACE, role="admin", scope="full", actor="cli")
LOCAL = Principal(workspace_id=DEFAULT_WORKSPACE, role="admin", scope="full", actor="local")


@dataclass
class Context:
    """What a service call needs: storage, settings and the caller."""

    store: Store
    settings: Settings
    principal: Principal
    # Called with (pending_id, status, entry_id, resolved_at) after an answer or cancel commits, so
    # a call held by this process is released at once instead of at its next poll. The app that
    # holds calls passes its own Parking's release; the CLI holds none and passes nothing.
    on_resolved: Callable[[str, str, str | None, float], None] | None = None
    # The server's session-call counts, written together (service.sequences.Counts); without them
    # (the CLI, a test's context) each call is counted by a statement of its own.
    counts: Counts | None = None
    # The replay change counter's reads (service.versions): the app's, shared by every context it
    # makes, so concurrent reads are joined and a listening app's counters are remembered; a context
    # made on its own (the CLI, a test's) has one of its own.
    versions: Versions = field(default_factory=Versions)

    def __post_init__(self) -> None:
        # Hosted mode: every statement runs as the caller's workspace, so PostgreSQL's
        # row-level security holds even where the service layer would not.
        if self.principal is not None and self.settings.hosted:
            self.store = self.store.scoped(self.principal.workspace_id)

    def as_(self, principal: Principal) -> Context:
        return Context(self.store, self.settings, principal, self.on_resolved, self.counts, self.versions)


def now() -> float:
    return time.time()


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def page(rows: list[dict[str, Any]], limit: int) -> dict[str, Any]:
    """An OpenAI list object from up to limit+1 rows."""
    return {"object": "list", "data": rows[:limit], "has_more": len(rows) > limit}


def load(schema: Schema, data: Any) -> dict[str, Any]:
    """Validate a JSON object with a marshmallow schema; 400 naming the first bad field."""
    if not isinstance(data, dict):
        raise BadRequest("The body must be a JSON object.")
    try:
        return schema.load(data)
    except ValidationError as exc:
        field_name, messages = next(iter(exc.normalized_messages().items()))
        message = messages[0] if isinstance(messages, list) else str(messages)
        raise BadRequest(f"{field_name}: {message}", param=field_name) from None

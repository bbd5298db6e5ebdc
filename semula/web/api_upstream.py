"""REST for record-through: a project's spend and dry-run prompts, and the audited reset."""

from __future__ import annotations

from typing import Any

from flask import Blueprint

from semula.service import record_through
from semula.web import context

api_upstream = Blueprint("api_upstream", __name__, url_prefix="/api/v1")


@api_upstream.get("/projects/<name>/upstream")
def get_upstream(name: str) -> Any:
    return record_through.usage(context(), name)


@api_upstream.post("/projects/<name>/upstream/reset")
def reset_upstream(name: str) -> Any:
    return record_through.reset(context(), name)

"""The proxy (SPEC §3): fingerprint a chat completion, replay a hit, park a miss, render the answer."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

from semula import chat_requests, redact, stream, templates
from semula import fingerprint as fp
from semula.errors import BadRequest, NotFound, ReplayMiss, TooManyMisses
from semula.service import Context, quotas
from semula.service import entries as entries_service
from semula.service import pending as pending_service
from semula.service import projects as projects_service
from semula.service.auth import require

CANDIDATES = 200


@dataclass
class Call:
    """One proxied call as it moves from request to response."""

    project: dict[str, Any]
    body: dict[str, Any]
    fingerprint: str
    model: str
    stream: bool
    include_usage: bool
    started: float
    entry: dict[str, Any] | None = None
    pending_id: str | None = None


def resolve_project(ctx: Context, path_project: str | None, header_project: str | None) -> dict[str, Any]:
    """Project from the path, else the token's binding, else X-Semula-Project, else 400."""
    if path_project:
        return projects_service.get_row(ctx, path_project)
    if ctx.principal.project_id:
        row = ctx.store.one("get_project", id=ctx.principal.project_id)
        if row is None:
            raise NotFound("No such project.", code="project_not_found")
        return row
    if header_project:
        return projects_service.get_row(ctx, header_project)
    raise BadRequest(
        "No project: call /p/<project>/v1/..., use a project-bound token, or send X-Semula-Project.",
        code="project_required",
    )


def check_body(body: Any) -> tuple[str, bool, bool]:
    """The model, stream and include_usage of a chat completion request; 400 when it is not one."""
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(
            "you must provide a model parameter", param="model", code="missing_required_parameter"
        )
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty array", param="messages")
    chat_requests.check(body)
    stream_on = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = stream_on and isinstance(options, dict) and options.get("include_usage") is True
    return model, stream_on, include_usage


def start(ctx: Context, project: dict[str, Any], body: Any) -> Call:
    """Fingerprint the request and look for its entry."""
    require(ctx, role="viewer", scope="replay")
    model, stream_on, include_usage = check_body(body)
    fingerprint = fp.fingerprint(body, json.loads(project["ignore_fields"]), json.loads(project["normalize"]))
    call = Call(project, body, fingerprint, model, stream_on, include_usage, time.monotonic())
    call.entry = entries_service.lookup(ctx, project["id"], fingerprint)
    return call


def may_park(ctx: Context, call: Call) -> bool:
    return call.project["mode"] == "record" and ctx.principal.scope != "replay"


def park(ctx: Context, call: Call) -> None:
    """Park a miss (or join the identical one parked already); 429 past max_misses."""
    stored = redact.redact_obj(call.body, ctx.settings.secrets())
    if quotas.limit(ctx, "quota_parked") is not None and not ctx.store.one(
        "pending_by_fingerprint", project_id=call.project["id"], fingerprint=call.fingerprint
    ):
        quotas.check(ctx, "quota_parked")  # joining a row parked already adds nothing
    call.pending_id = pending_service.park(ctx, call.project, call.fingerprint, stored, call.stream)
    if call.pending_id is None:
        call.entry = entries_service.lookup(ctx, call.project["id"], call.fingerprint)
        if call.entry is None:
            raise TooManyMisses(
                f"Project {call.project['name']!r} has {call.project['max_misses']} calls parked "
                "(max_misses); answer or cancel some first."
            )


def answered_entry(ctx: Context, entry_id: str) -> dict[str, Any]:
    """The entry that answered a held call, read as the caller (row-level security sees it in hosted mode)."""
    return entries_service.get_row(ctx, entry_id)


def replay_miss(ctx: Context, call: Call) -> ReplayMiss:
    """A 424 whose message names the closest entry and the first path where the request differs."""
    rules = (json.loads(call.project["ignore_fields"]), json.loads(call.project["normalize"]))
    mine = fp.canonical_request(call.body, *rules)
    best, best_score = None, -1.0
    for row in ctx.store.all(
        "entry_candidates", project_id=call.project["id"], model=call.model, limit=CANDIDATES
    ):
        theirs = fp.canonical_request(json.loads(row["request"]), *rules)
        score = fp.closeness(mine, theirs)
        if score > best_score:
            best, best_score = (row["id"], theirs), score
    name = call.project["name"]
    if best is None:
        return ReplayMiss(
            f"No recorded entry matches this request: project {name!r} has no entries to replay."
        )
    path = fp.first_difference(mine, best[1]) or "(only in fields that are redacted when stored)"
    return ReplayMiss(
        f"No recorded entry matches this request in project {name!r}. "
        f"Closest entry: {best[0]}; first difference at {path}."
    )


def templated(entry: dict[str, Any]) -> bool:
    """Whether an entry's answer has templates to expand per response."""
    # Stored JSON never escapes braces, so an answer without "{{" in its text has nothing to expand.
    return "{{" in entry["response"] or "{{" in (entry.get("chunks") or "")


def _response_id() -> str:
    return "chatcmpl-" + os.urandom(12).hex()


def stamp_completion(completion: dict[str, Any], model: str, now: float) -> dict[str, Any]:
    """A completion as the app receives it: a fresh id and created, the request's model."""
    return {
        "id": _response_id(),
        "object": "chat.completion",
        "created": int(now),
        "model": model,
        **{k: v for k, v in completion.items() if k not in ("id", "object", "created", "model")},
    }


def render(call: Call, entry: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]] | None]:
    """The response for an entry: a completion, or (for stream requests) the chunks to send."""
    completion, chunks = entries_service.decode(entry)
    expand = templated(entry)
    now = time.time()
    if not call.stream:
        if completion is None or not completion.get("choices"):
            completion = stream.assemble_chunks(chunks or [])
        out = templates.expand_completion(completion, call.model, now) if expand else completion
        return stamp_completion(out, call.model, now), None
    if chunks:
        body = stream.replay_chunks(
            chunks, call.include_usage, completion.get("usage") if completion else None
        )
    else:
        body = stream.synthesize_chunks(completion, call.include_usage)
    if expand:
        body = templates.expand_chunks(body, call.model, now)
    return None, stream.stamp_chunks(body, _response_id(), int(now), call.model)


def log_row(
    ctx: Context,
    call: Call | None,
    *,
    outcome: str,
    status: int,
    started: float,
    project_id: str | None = None,
) -> dict[str, Any]:
    """The call-log row for one proxied call."""
    return {
        "workspace_id": ctx.principal.workspace_id if ctx.principal else "wsp_default",
        "project_id": call.project["id"] if call else project_id,
        "created_at": time.time(),
        "fingerprint": call.fingerprint if call else None,
        "model": call.model if call else None,
        "stream": int(call.stream) if call else 0,
        "outcome": outcome,
        "status": status,
        "duration_ms": round((time.monotonic() - started) * 1000, 3),
        "entry_id": call.entry["id"] if call and call.entry else None,
        "pending_id": call.pending_id if call else None,
        "token_id": ctx.principal.token_id if ctx.principal else None,
    }


def models(ctx: Context, project: dict[str, Any]) -> dict[str, Any]:
    """GET /v1/models: the models seen in the project's entries, as OpenAI's list."""
    require(ctx, role="viewer", scope="replay")
    rows = ctx.store.all("models_in_project", project_id=project["id"])
    return {
        "object": "list",
        "data": [{"id": r["model"], "object": "model", "created": 0, "owned_by": "semula"} for r in rows],
    }

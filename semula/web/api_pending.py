"""REST for the pending queue: list, get, answer, cancel, and claim with a lease (and release it).

Also what the answerer daemon needs when it talks to the server over HTTP: its candidates and a
claim of one given call.

The contract is docs/design/product.md §5.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request
from marshmallow import RAISE, Schema, fields, validate

from semula.core import answers
from semula.core.errors import BadRequest
from semula.service import answerer as answerer_service
from semula.service import load
from semula.service import pending as pending_service
from semula.web import context, json_body, raw_body
from semula.web.api import flag, paging

api_pending = Blueprint("api_pending", __name__, url_prefix="/api/v1")

MAX_SUMMARY_LENGTH = 1000


class ClaimOneSchema(Schema):
    """A claim of one given call: how long, under which worker name."""

    class Meta:
        unknown = RAISE

    lease_seconds = fields.Integer(
        strict=True,
        load_default=pending_service.DEFAULT_LEASE,
        validate=validate.Range(1, pending_service.MAX_LEASE),
    )
    worker = fields.String(
        load_default=None,
        allow_none=True,
        validate=validate.Length(1, pending_service.MAX_WORKER_LENGTH),
        # Not blank: the service checks it (a pattern marshmallow cannot say in the OpenAPI document).
        metadata={"pattern": "\\S", "description": "Shown as claimed_by."},
    )


class ClaimSchema(ClaimOneSchema):
    """A claim of the oldest call nobody holds, in one project or anywhere the token may see."""

    project = fields.String(
        load_default=None, allow_none=True, metadata={"description": "Claim only in this project."}
    )


class ReleaseSchema(Schema):
    class Meta:
        unknown = RAISE

    worker = fields.String(
        load_default=None,
        allow_none=True,
        validate=validate.Length(1, pending_service.MAX_WORKER_LENGTH),
        metadata={
            "pattern": "\\S",
            "description": "The worker name the call was claimed with (default: the token's).",
        },
    )


@api_pending.get("/pending")
def list_pending() -> Any:
    return pending_service.list_pending(
        context(),
        project=request.args.get("project") or None,
        status=request.args.get("status") or "pending",
        abandoned=flag("abandoned"),
        **paging(),
    )


@api_pending.post("/pending/claim")
def claim() -> Any:
    # The body is optional: an empty POST claims the oldest call anywhere the token may see.
    data = load(ClaimSchema(), json_body() if raw_body() else {})
    claimed = pending_service.claim_next(
        context(), project=data["project"], lease_seconds=data["lease_seconds"], worker=data["worker"]
    )
    if claimed is None:
        return Response(status=204)
    return claimed


@api_pending.post("/pending/<pending_id>/claim")
def claim_one(pending_id: str) -> Any:
    # 204 when it is no longer pending or someone else holds it, like a claim that found nothing.
    data = load(ClaimOneSchema(), json_body() if raw_body() else {})
    claimed = pending_service.claim_by_id(
        context(), pending_id, worker=data["worker"], lease_seconds=data["lease_seconds"]
    )
    if claimed is None:
        return Response(status=204)
    return claimed


@api_pending.get("/answerer/candidates")
def answerer_candidates() -> Any:
    page = paging()
    data = answerer_service.candidates(context(), after=page["after"], limit=page["limit"])
    return {"object": "list", "data": data, "has_more": len(data) == page["limit"]}


@api_pending.get("/pending/<pending_id>")
def get_pending(pending_id: str) -> Any:
    return pending_service.get(context(), pending_id)


@api_pending.post("/pending/<pending_id>/answer")
def answer(pending_id: str) -> Any:
    payload = json_body()
    summary = ""
    if answers.takes_summary(payload):
        payload = dict(payload)
        summary = payload.pop("summary")
        if not isinstance(summary, str) or len(summary) > MAX_SUMMARY_LENGTH:
            raise BadRequest(
                f"summary must be text of at most {MAX_SUMMARY_LENGTH} characters.", param="summary"
            )
    return pending_service.answer(context(), pending_id, payload, summary=summary)


@api_pending.post("/pending/<pending_id>/cancel")
def cancel(pending_id: str) -> Any:
    return pending_service.cancel(context(), pending_id)


@api_pending.post("/pending/<pending_id>/release")
def release(pending_id: str) -> Any:
    # The body is optional: without a worker, the claim made under the token's own name is released.
    data = load(ReleaseSchema(), json_body() if raw_body() else {})
    return pending_service.release(context(), pending_id, worker=data["worker"])

"""Synthetic embeddings: with the project setting `embeddings: synthetic`, a missed embeddings call in
record mode is answered at once with deterministic vectors (semula.core.vectors) instead of being parked
or forwarded, and saved as an entry by actor `synthetic`, so it exports and replays like any other
(docs/decisions/0035-embeddings.md)."""

from __future__ import annotations

import logging
from typing import Any

from semula.core import redact
from semula.core.errors import BadRequest
from semula.service import Context
from semula.service import entries as entries_service
from semula.service.record_through import FLIGHTS
from semula.service.replay import Call

logger = logging.getLogger("semula.synthetic")

SUMMARY = "synthetic vectors (embeddings: synthetic)"


def applies(call: Call) -> bool:
    return call.dialect.makes_vectors and call.project.get("embeddings") == "synthetic"


def answer(ctx: Context, call: Call) -> dict[str, Any]:
    """The entry row for a missed embeddings call, made of synthetic vectors (one save per prompt).

    An answer longer than SEMULA_MAX_BODY_BYTES is refused before a vector is made: it could not be
    imported again from an export, and a few requests of 2,048 inputs of 65,536 numbers would take
    gigabytes of a worker's memory."""
    size = call.dialect.synthetic_bytes(call.body)
    limit = ctx.settings.max_body_bytes
    if size > limit:
        raise BadRequest(
            f"The synthetic answer to this call would be about {size:,} bytes, more than a recording may "
            f"hold ({limit:,}, SEMULA_MAX_BODY_BYTES): send fewer inputs or fewer dimensions, or raise "
            "SEMULA_MAX_BODY_BYTES.",
            param="input",
            code="synthetic_answer_too_large",
        )
    stored = redact.redact_obj(call.body, ctx.settings.secrets())
    key = (ctx.principal.workspace_id, call.project["id"], call.fingerprint)
    return FLIGHTS.run(key, lambda: _save(ctx, call, stored))


def _save(ctx: Context, call: Call, stored: dict[str, Any]) -> dict[str, Any]:
    project_id = call.project["id"]
    # An identical call may have saved it since this one looked.
    entry = entries_service.lookup(ctx, project_id, call.fingerprint)
    if entry is not None:
        return entry
    # From the request as sent: a redacted input still gets the vector of its own text.
    response = call.dialect.synthetic_response(call.body)
    entries_service.check_quota(ctx, project_id, call.fingerprint)
    saved = entries_service.save(
        ctx.store,
        ctx,
        project_id=project_id,
        fingerprint=call.fingerprint,
        request=stored,
        response=response,
        chunks=None,
        actor="synthetic",
        summary=SUMMARY,
        api=call.dialect.name,
    )
    logger.info("synthetic", extra={"project_id": project_id, "entry_id": saved["id"]})
    return {
        "id": saved["id"],
        "response": saved["response"],
        "chunks": None,
        "review_status": "unreviewed",
        "model": stored.get("model"),
    }

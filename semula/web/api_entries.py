"""REST for entries (docs/design/product.md §6, §7): list and search, show, edit, revert, pin, review, delete,
bundle export and import, and the call log."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, request, stream_with_context
from werkzeug.exceptions import RequestEntityTooLarge

from semula.core import answers, bundle_format
from semula.core.errors import BadRequest
from semula.service import bundles, calllog
from semula.service import entries as entries_service
from semula.web import context, current_extension, json_body
from semula.web.api import flag, paging

api_entries = Blueprint("api_entries", __name__, url_prefix="/api/v1")


def _object_body() -> dict[str, Any]:
    body = json_body()
    if not isinstance(body, dict):
        raise BadRequest("The body must be a JSON object.")
    return body


@api_entries.get("/projects/<name>/entries")
def list_entries(name: str) -> Any:
    args = request.args
    return entries_service.list_entries(
        context(),
        name,
        model=args.get("model") or None,
        text=args.get("text") or None,
        review_status=args.get("review_status") or None,
        pinned=flag("pinned"),
        **paging(),
    )


@api_entries.get("/entries/<entry_id>")
def get_entry(entry_id: str) -> Any:
    return entries_service.get(context(), entry_id)


def _answer_and_summary() -> tuple[Any, str]:
    """An edit's body: an answer (any form of docs/design/product.md §4), and an optional `summary`."""
    body = json_body()
    summary = ""
    if answers.takes_summary(body):
        body = dict(body)
        summary = body.pop("summary")
        if not isinstance(summary, str):
            raise BadRequest("summary must be text.", param="summary")
    return body, summary


def _revision_and_summary() -> tuple[Any, str]:
    body = _object_body()
    unknown = sorted(set(body) - {"revision", "summary"})
    if unknown:
        raise BadRequest(f"Unknown field {unknown[0]!r}.", param=unknown[0])
    summary = body.get("summary", "")
    if not isinstance(summary, str):
        raise BadRequest("summary must be text.", param="summary")
    return body.get("revision"), summary


@api_entries.patch("/entries/<entry_id>")
def edit_entry(entry_id: str) -> Any:
    body, summary = _answer_and_summary()
    return entries_service.edit(context(), entry_id, body, summary=summary)


@api_entries.post("/entries/<entry_id>/revert")
def revert_entry(entry_id: str) -> Any:
    revision, summary = _revision_and_summary()
    return entries_service.revert(context(), entry_id, revision, summary=summary)


# One answer of a sequence (docs/decisions/0041-sequence-surfaces-and-record-through.md).


@api_entries.get("/entries/<entry_id>/answers/<int:seq>")
def get_answer(entry_id: str, seq: int) -> Any:
    return entries_service.get_answer(context(), entry_id, seq)


@api_entries.patch("/entries/<entry_id>/answers/<int:seq>")
def edit_answer(entry_id: str, seq: int) -> Any:
    body, summary = _answer_and_summary()
    return entries_service.edit_answer(context(), entry_id, seq, body, summary=summary)


@api_entries.post("/entries/<entry_id>/answers/<int:seq>/revert")
def revert_answer(entry_id: str, seq: int) -> Any:
    revision, summary = _revision_and_summary()
    return entries_service.revert_answer(context(), entry_id, seq, revision, summary=summary)


@api_entries.post("/entries/<entry_id>/answers/<int:seq>/pin")
def pin_answer(entry_id: str, seq: int) -> Any:
    return entries_service.pin_answer(context(), entry_id, seq, True)


@api_entries.post("/entries/<entry_id>/answers/<int:seq>/unpin")
def unpin_answer(entry_id: str, seq: int) -> Any:
    return entries_service.pin_answer(context(), entry_id, seq, False)


@api_entries.delete("/entries/<entry_id>/answers/<int:seq>")
def delete_answer(entry_id: str, seq: int) -> Any:
    return entries_service.delete_answer(context(), entry_id, seq)


@api_entries.post("/entries/<entry_id>/answers/reorder")
def reorder_answers(entry_id: str) -> Any:
    body = _object_body()
    unknown = sorted(set(body) - {"order"})
    if unknown:
        raise BadRequest(f"Unknown field {unknown[0]!r}.", param=unknown[0])
    return entries_service.reorder_answers(context(), entry_id, body.get("order"))


@api_entries.post("/entries/<entry_id>/pin")
def pin_entry(entry_id: str) -> Any:
    return entries_service.set_pinned(context(), entry_id, True)


@api_entries.post("/entries/<entry_id>/unpin")
def unpin_entry(entry_id: str) -> Any:
    return entries_service.set_pinned(context(), entry_id, False)


@api_entries.post("/entries/<entry_id>/review")
def review_entry(entry_id: str) -> Any:
    body = _object_body()
    unknown = sorted(set(body) - {"status"})
    if unknown:
        raise BadRequest(f"Unknown field {unknown[0]!r}.", param=unknown[0])
    return entries_service.review(context(), entry_id, body.get("status"))


@api_entries.delete("/entries/<entry_id>")
def delete_entry(entry_id: str) -> Any:
    return entries_service.delete(context(), entry_id)


@api_entries.get("/projects/<name>/export")
def export_project(name: str) -> Response:
    pieces = bundles.export_bundle(context(), name)
    return Response(
        stream_with_context(pieces),
        content_type="application/json; charset=utf-8",
        headers={"Content-Disposition": f'attachment; filename="{name}.semula.json"'},
    )


@api_entries.post("/projects/<name>/import")
def import_project(name: str) -> Any:
    """The body is the bundle itself, read as a stream: a bundle may be far larger than a request."""
    ctx = context()
    limit = ctx.settings.max_import_bytes
    request.max_content_length = limit
    try:
        return bundles.import_bundle(ctx, name, request.stream, offload=current_extension().get("offload"))
    except RequestEntityTooLarge:
        raise bundle_format.BundleTooLarge(
            f"The bundle is larger than {limit} bytes (SEMULA_MAX_IMPORT_BYTES); nothing was imported."
        ) from None


@api_entries.get("/projects/<name>/calls")
def list_calls(name: str) -> Any:
    return calllog.list_calls(context(), name, outcome=request.args.get("outcome") or None, **paging())

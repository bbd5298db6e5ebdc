"""Parked calls: park a miss, list, claim and answer it, and wake whoever holds it.

The contract is docs/design/product.md §3-§5; claims are docs/design/queue-and-claims.md.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from semula import dialects, metrics
from semula.core import answers
from semula.core.errors import BadRequest, Conflict, InvalidAnswer, NotFound, PendingResolved
from semula.core.ids import new_id
from semula.db import Store
from semula.service import Context, dumps, now, page, quotas
from semula.service import entries as entries_service
from semula.service import projects as projects_service
from semula.service.auth import require, visible

logger = logging.getLogger("semula.pending")

STATUSES = ("pending", "answered", "cancelled")
DEFAULT_LEASE = 300
MAX_LEASE = 3600
MAX_WORKER_LENGTH = 200
# Candidates read per look: enough that a claimer losing a race moves on without another SELECT.
CLAIM_BATCH = 16
# How many earlier responses a conversation view follows back through previous_response_id.
MAX_HISTORY = 100
# Looks a claim_next makes before it reports nothing to claim. Losing every candidate of one look is
# rare; losing them all this many times over means the claim guard and the candidates query disagree,
# and spinning on that would hold the caller (and its worker) forever.
CLAIM_LOOKS = 50
# How long a parked call counts as waited for without its holder renewing it (semula.parking renews
# the calls it holds every third of it): past it, nobody waits and the call is abandoned
# (docs/decisions/0063-abandoned-calls.md).
HOLD_LEASE = 30.0


def park(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    request: dict[str, Any],
    stream: bool,
    *,
    api: str = dialects.CHAT,
    seq: int = 1,
) -> str | None:
    """The id of the pending row for this miss (new or shared), or None when max_misses is reached.

    `seq` is the answer of the request's sequence it records (docs/decisions/0036-sequences-and-sessions.md).
    """
    return park_held(ctx, project, fingerprint, request, stream, api=api, seq=seq)[0]


def park_held(
    ctx: Context,
    project: dict[str, Any],
    fingerprint: str,
    request: dict[str, Any],
    stream: bool,
    *,
    api: str = dialects.CHAT,
    seq: int = 1,
) -> tuple[str | None, int]:
    """park(), and the epoch of the holders' count this request is counted in (migration 0029), which
    its holder hands to Parking.hold."""
    params = dict(project_id=project["id"], fingerprint=fingerprint, seq=seq)
    for _ in range(2):
        inserted = ctx.store.one(
            "insert_pending",
            id=new_id("pending"),
            workspace_id=ctx.principal.workspace_id,
            model=request.get("model"),
            request=dumps(request),
            stream=int(stream),
            api=api,
            max_misses=project["max_misses"],
            now=now(),
            held_until=now() + HOLD_LEASE,
            **params,
        )
        if inserted is not None:
            # Ours, even if someone answers or cancels it before the caller starts to hold it.
            metrics.pending_event("parked")
            logger.info(
                "parked", extra={"pending_id": inserted["id"], "project": project["name"], "api": api}
            )
            return inserted["id"], inserted["hold_epoch"]
        shared = ctx.store.one("pending_by_fingerprint", **params)
        if shared is not None:
            # One more holder (the call is waited for again if its lease had lapsed).
            at, ws = now(), ctx.principal.workspace_id
            until = at + HOLD_LEASE
            joined = ctx.store.one("join_pending", id=shared["id"], workspace_id=ws, now=at, held_until=until)
            logger.info(
                "parked", extra={"pending_id": shared["id"], "project": project["name"], "shared": True}
            )
            return shared["id"], joined["hold_epoch"] if joined is not None else 0
        # Neither inserted nor found: the cap is reached, or the identical call we collided with
        # was resolved in between; one more try tells the two apart.
    return None, 0


def hold_among(store: Store, ids: list[str], until: float) -> None:
    """Mark the calls among `ids` still pending as waited for until `until` (a renewal by their
    holder), or as let go at it (`until` now: their last client here went away or gave up)."""
    store.run("hold_among", ids=json.dumps(ids), until=until)


def renew_held(store: Store, held: dict[str, dict[int, int]], until: float) -> dict[str, int]:
    """Renew the calls a process holds (`held`: call id -> {epoch: its holders there counted in it})
    until `until`, adding back its holders counted in an epoch that is no longer the call's (migration
    0029); returns each call still pending -> its epoch, the one they are all counted in now."""
    rows = [[pending_id, epoch, n] for pending_id, epochs in held.items() for epoch, n in epochs.items()]
    return {r["id"]: r["hold_epoch"] for r in store.all("renew_held", held=json.dumps(rows), until=until)}


def let_go(store: Store, pending_id: str, at: float, epoch: int = 0) -> None:
    """One request holding the call (in this process), counted in `epoch`, ended without its answer:
    one holder fewer, across every process; the last one lets it go at `at` (abandoned then)."""
    store.run("let_go", id=pending_id, now=at, epoch=epoch)


def abandoned(row: dict[str, Any], at: float | None = None) -> bool:
    """Whether a call is pending with nobody waiting for it: its holder's lease lapsed or was let go."""
    held_until = row.get("held_until")
    return row["status"] == "pending" and (held_until is None or held_until <= (at or now()))


def get_row(ctx: Context, pending_id: str) -> dict[str, Any]:
    row = ctx.store.one("get_pending", id=pending_id, workspace_id=ctx.principal.workspace_id)
    if row is None or not visible(ctx, row["project_id"]):
        raise NotFound(f"No pending call {pending_id}.", code="pending_not_found")
    return row


def conversation(ctx: Context, project_id: str, api: str | None, request: dict[str, Any]) -> dict[str, Any]:
    """The common view of a request (every answerer sees it), with the recorded turns it continues."""
    dialect = dialects.get(api)
    history: list[tuple[dict[str, Any], dict[str, Any]]] = []
    previous, seen = dialect.previous(request), set()
    while previous is not None and previous not in seen and len(history) < MAX_HISTORY:
        seen.add(previous)
        row = entries_service.by_response_id(ctx, project_id, previous)
        if row is None:
            break
        earlier = json.loads(row["request"])
        response, chunks = entries_service.decode(row)
        history.insert(0, (earlier, dialect.common_response(response, chunks)))
        previous = dialect.previous(earlier)
    return dialect.conversation(request, history)


def present(row: dict[str, Any], *, full: bool = False, ctx: Context | None = None) -> dict[str, Any]:
    """The list view of a pending row; `full` adds the request, its conversation view and shape."""
    claimed = (
        row["claim_expires_at"] is not None and row["claim_expires_at"] > now() and row["status"] == "pending"
    )
    out: dict[str, Any] = {
        "object": "pending",
        "id": row["id"],
        "api": row.get("api") or dialects.CHAT,
        "project": row.get("project_name"),
        "status": row["status"],
        "model": row["model"],
        "stream": bool(row["stream"]),
        "created": int(row["created_at"]),
        "claimed_by": row["claimed_by"] if claimed else None,
        "claimed_until": int(row["claim_expires_at"]) if claimed else None,
        "entry_id": row["entry_id"],
        "seq": row.get("seq") or 1,
        "abandoned": abandoned(row),
    }
    if full:
        request = json.loads(row["request"])
        view = (
            conversation(ctx, row["project_id"], row.get("api"), request)
            if ctx is not None
            else dialects.get(row.get("api")).conversation(request)
        )
        out["request"] = request
        out["conversation"] = view
        out["shape"] = answers.shape(view)
        if view.get("notes"):
            out["shape"]["notes"] = view["notes"]
    return out


def get(ctx: Context, pending_id: str) -> dict[str, Any]:
    """The call in full, with its shape; viewer role and record scope."""
    require(ctx, role="viewer", scope="record")
    return present(get_row(ctx, pending_id), full=True, ctx=ctx)


def answer(
    ctx: Context,
    pending_id: str,
    payload: Any,
    *,
    actor: str = "agent",
    summary: str = "",
    chunks: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Validate an answer, save it as an entry revision and mark the call answered, in one transaction."""
    require(ctx, role="editor", scope="record")
    row = get_row(ctx, pending_id)
    if row["status"] != "pending":
        raise PendingResolved(f"Pending call {pending_id} is {row['status']} already.")
    request = json.loads(row["request"])
    quotas.check_answer(ctx, payload)
    dialect = dialects.get(row.get("api"))
    view = conversation(ctx, row["project_id"], row.get("api"), request)
    try:
        response, made_chunks = dialect.accept(payload, request, view)
    except InvalidAnswer as exc:
        # Every refusal shows the form this call takes, so one more try can get it right.
        raise InvalidAnswer(
            f"{_sentence(exc.message)} Answer this call in this form: {answers.expected_form(view)}",
            param=exc.param,
        ) from None
    chunks = chunks if chunks is not None else made_chunks
    entries_service.check_quota(ctx, row["project_id"], row["fingerprint"])
    with ctx.store.transaction(ctx.principal.workspace_id) as tx:
        entry = entries_service.save(
            tx,
            ctx,
            project_id=row["project_id"],
            fingerprint=row["fingerprint"],
            request=request,
            response=response,
            chunks=chunks,
            actor=actor,
            summary=summary or f"answered by {ctx.principal.actor}",
            api=dialect.name,
            seq=row.get("seq") or 1,
        )
        resolved_at = now()
        if not tx.run(
            "resolve_pending",
            id=pending_id,
            workspace_id=ctx.principal.workspace_id,
            status="answered",
            entry_id=entry["id"],
            now=resolved_at,
        ):
            raise PendingResolved(f"Pending call {pending_id} was resolved meanwhile.")
    notify(ctx, pending_id, "answered", entry["id"], resolved_at)
    kind = _actor_kind(ctx, actor, row)
    metrics.pending_event("answered")
    metrics.ANSWERS.labels(kind).inc()
    logger.info(
        "answered",
        extra={
            "pending_id": pending_id,
            "entry_id": entry["id"],
            "project": row.get("project_name"),
            "actor": kind,
            "by": ctx.principal.actor,
            "waited_s": round(resolved_at - row["created_at"], 3),
        },
    )
    return present(get_row(ctx, pending_id))


def cancel(ctx: Context, pending_id: str) -> dict[str, Any]:
    """Give up on a parked call: held requests fail, nothing is saved."""
    require(ctx, role="editor", scope="record")
    row = get_row(ctx, pending_id)
    resolved_at = now()
    if row["status"] != "pending" or not ctx.store.run(
        "resolve_pending",
        id=pending_id,
        workspace_id=ctx.principal.workspace_id,
        status="cancelled",
        entry_id=None,
        now=resolved_at,
    ):
        raise PendingResolved(f"Pending call {pending_id} is {row['status']} already.")
    notify(ctx, pending_id, "cancelled", None, resolved_at)
    metrics.pending_event("cancelled")
    logger.info(
        "cancelled",
        extra={"pending_id": pending_id, "project": row.get("project_name"), "by": ctx.principal.actor},
    )
    return present(get_row(ctx, pending_id))


def _actor_kind(ctx: Context, actor: str, row: dict[str, Any]) -> str:
    """human (the dashboard), answerer (the daemon) or agent (REST, CLI, MCP): a bounded metric label.

    The daemon is its principal's actor on the database, and the claim's worker over REST.
    """
    if actor == "human":
        return "human"
    daemon = ctx.principal.actor.startswith("answerer:") or (row.get("claimed_by") or "").startswith(
        "answerer:"
    )
    return "answerer" if daemon else "agent"


def notify(ctx: Context, pending_id: str, status: str, entry_id: str | None, resolved_at: float) -> None:
    """Tell the process's holder of parked calls (if it has one) that this call is resolved."""
    if ctx.on_resolved is not None:
        ctx.on_resolved(pending_id, status, entry_id, resolved_at)


def list_pending(
    ctx: Context,
    *,
    project: str | None = None,
    status: str | None = "pending",
    abandoned: bool | None = None,
    after: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """Parked calls, oldest first, as an OpenAI list; status None (or "all") lists every status,
    `abandoned` True only the pending calls nobody waits for, False all others."""
    require(ctx, role="viewer", scope="record")
    if status == "all":
        status = None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)} or all.", param="status")
    rows = ctx.store.all(
        "list_pending",
        workspace_id=ctx.principal.workspace_id,
        project_id=_project_filter(ctx, project),
        status=status,
        abandoned=None if abandoned is None else int(abandoned),
        now=now(),
        after=after,
        limit=limit + 1,
    )
    return page([present(r) for r in rows], limit)


def claim_next(
    ctx: Context, project: str | None = None, lease_seconds: int = DEFAULT_LEASE, worker: str | None = None
) -> dict[str, Any] | None:
    """Claim the oldest pending call nobody holds, for lease_seconds; None when there is none
    (or when every candidate went to someone else, look after look, CLAIM_LOOKS times).

    One guarded UPDATE decides each claim and its row count says who won; a lost race moves on
    to the next oldest. The same on SQLite and PostgreSQL, across processes: no SKIP LOCKED and
    no in-process lock. Not audited (docs/design/product.md §5).
    """
    require(ctx, role="editor", scope="record")
    lease = _lease(lease_seconds)
    worker = _worker(ctx, worker)
    project_id = _project_filter(ctx, project)
    for _ in range(CLAIM_LOOKS):
        candidates = ctx.store.all(
            "claim_candidates",
            workspace_id=ctx.principal.workspace_id,
            project_id=project_id,
            now=now(),
            limit=CLAIM_BATCH,
        )
        if not candidates:
            return None
        for candidate in candidates:
            claimed = _try_claim(ctx, candidate["id"], worker, lease)
            if claimed is not None:
                return claimed
        # Every candidate of this look went to someone else meanwhile: look again.
    logger.warning("claim_gave_up", extra={"looks": CLAIM_LOOKS, "worker": worker})
    return None


def claim_by_id(
    ctx: Context, pending_id: str, worker: str | None, lease_seconds: int = DEFAULT_LEASE
) -> dict[str, Any] | None:
    """Claim one given call (the answerer daemon, REST); None when it is resolved or someone holds it.

    See docs/design/answerer.md.
    """
    require(ctx, role="editor", scope="record")
    lease = _lease(lease_seconds)
    worker = _worker(ctx, worker)
    get_row(ctx, pending_id)
    return _try_claim(ctx, pending_id, worker, lease)


def release_claim(ctx: Context, pending_id: str, worker: str) -> bool:
    """Give back a call this worker holds, so the next claim_next takes it at once; service only."""
    require(ctx, role="editor", scope="record")
    get_row(ctx, pending_id)
    return bool(
        ctx.store.run("release_claim", id=pending_id, workspace_id=ctx.principal.workspace_id, worker=worker)
    )


def release(ctx: Context, pending_id: str, worker: str | None = None) -> dict[str, Any]:
    """Give back a call this worker (default: the token's actor) holds, so the next claim takes it at once."""
    require(ctx, role="editor", scope="record")
    worker = _worker(ctx, worker)
    row = get_row(ctx, pending_id)
    if row["status"] != "pending":
        raise PendingResolved(f"Pending call {pending_id} is {row['status']} already.")
    if not release_claim(ctx, pending_id, worker):
        raise Conflict(
            f"Pending call {pending_id} is not claimed by {worker!r}: nobody holds it, its lease ran out, "
            "or another worker holds it (see claimed_by; pass the worker name you claimed with).",
            code="claim_not_held",
        )
    logger.info("released", extra={"pending_id": pending_id})
    return present(get_row(ctx, pending_id))


def _try_claim(ctx: Context, pending_id: str, worker: str, lease: int) -> dict[str, Any] | None:
    """One guarded UPDATE; the call in full when this worker won it, None when someone else did."""
    at = now()
    until = at + lease
    row = ctx.store.one(
        "claim_pending",
        id=pending_id,
        workspace_id=ctx.principal.workspace_id,
        worker=worker,
        until=until,
        now=at,
    )
    if row is None:
        return None
    metrics.pending_event("claimed")
    logger.info(
        "claimed",
        extra={
            "pending_id": pending_id,
            "project": row.get("project_name"),
            "by": worker,
            "lease_seconds": lease,
        },
    )
    out = present(row, full=True, ctx=ctx)
    out["claim"] = {"worker": worker, "lease_seconds": lease, "claimed_until": int(until)}
    return out


def _project_filter(ctx: Context, project: str | None) -> str | None:
    """The project id to filter on: the named one (404 outside a token's binding), else the binding."""
    if project is not None:
        return projects_service.get_row(ctx, project)["id"]
    return ctx.principal.project_id


def _lease(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LEASE:
        raise BadRequest(
            f"lease_seconds must be a whole number from 1 to {MAX_LEASE}.", param="lease_seconds"
        )
    return value


def _worker(ctx: Context, worker: str | None) -> str:
    if worker is None:
        return ctx.principal.actor
    if not isinstance(worker, str) or not worker.strip() or len(worker) > MAX_WORKER_LENGTH:
        raise BadRequest(f"worker must be a name of 1 to {MAX_WORKER_LENGTH} characters.", param="worker")
    return worker.strip()


def _sentence(text: str) -> str:
    """A refusal ends as a sentence before the form is added to it (one ending in a parenthesis,
    `... (char 0)`, too)."""
    return text if text.endswith((".", "!", "?", ":")) else text + "."

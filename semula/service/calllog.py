"""The call log: one row per proxied call, written in small batches off the request path, and read
back as a project's calls, newest first, filtered by outcome (docs/design/product.md §3)."""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from semula import dialects
from semula.core import sampling
from semula.core.errors import BadRequest
from semula.core.ids import new_ids
from semula.db import DatabaseError, Store
from semula.service import Context, page
from semula.service import projects as projects_service
from semula.service.auth import require

logger = logging.getLogger("semula.calllog")

OUTCOMES = (
    "hit",
    "parked",
    "answered",
    "timeout",
    "replay_miss",
    "max_misses",
    "forwarded",
    "dry_run",
    "budget",
    "synthetic",
    "sequence_exhausted",
    "fault",
    "abandoned",
    "error",
)
MAX_BUFFER = 10_000
Offload = Callable[[Callable[[], Any]], Any]  # runs a function elsewhere and returns its result when done


class CallLog:
    """Buffers call-log rows and writes them in one short transaction per flush.

    A hit must not pay for a write transaction of its own (on SQLite every write takes the
    database lock); a crash loses at most one flush interval of log rows, never an entry.
    Without a background flusher (tests, the CLI) every row is written at once.
    """

    def __init__(self, store: Store, *, batched: bool = False, hit_share: float = 1.0):
        self.store = store
        self.batched = batched
        # The share of replay hits that get a row (SEMULA_CALL_LOG_HITS): every other call always does.
        self.hit_share = hit_share
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, row: dict[str, Any]) -> None:
        """Log one call (a row of call_log without its id: ids are given in order when it is written).

        A replay hit is logged only for `hit_share` of them, drawn at random: a test suite replaying
        thousands of calls a second can keep its call log (and the write each row costs) small.
        """
        if row["outcome"] == "hit" and not sampling.keep(self.hit_share):
            return
        if not self.batched:
            self._write([row])
            return
        with self._lock:
            if len(self._rows) < MAX_BUFFER:
                self._rows.append(row)

    def start(self, interval: float = 0.5, *, offload: Offload | None = None) -> None:
        """Flush from a background thread (a greenlet under gevent) every interval seconds.

        `offload` runs each batch's insert elsewhere: the server hands SQLite's writes to a native
        thread, where a busy wait or a WAL checkpoint's fsync does not stop the worker's event loop.
        Only the insert goes there; the buffer, its lock and the logging stay on this side.
        """
        self.batched = True

        def run() -> None:
            while True:
                time.sleep(interval)
                try:
                    self.flush(offload)
                except Exception:  # a bug must not stop the log for the life of the process
                    logger.exception("call log flush failed")

        threading.Thread(target=run, name="semula-calllog", daemon=True).start()
        atexit.register(self.flush)

    def flush(self, offload: Offload | None = None) -> int:
        with self._lock:
            rows, self._rows = self._rows, []
        if rows:
            self._write(rows, offload)
        return len(rows)

    def _write(self, rows: list[dict[str, Any]], offload: Offload | None = None) -> None:
        # Ids here, on the caller's side: the offloaded insert runs in a native thread, where the
        # id generator's (gevent-patched) lock has no business.
        for row, call_id in zip(rows, new_ids("call", len(rows)), strict=True):
            row["id"] = call_id
            row.setdefault("fault", None)  # only a faulted call's row names its fault (replay.log_row)
            for key, value in row.items():
                # A request's model may hold NUL, which no text field stores: the row is kept without it.
                if type(value) is str and "\x00" in value:
                    row[key] = value.replace("\x00", "\ufffd")
        failed = self._insert(rows) if offload is None else offload(lambda: self._insert(rows))
        for count, error in failed:
            logger.warning("call log write failed", extra={"rows": count, "error": error})

    def _insert(self, rows: list[dict[str, Any]]) -> list[tuple[int, str]]:
        """One transaction per workspace (under row-level security a row is written as its tenant),
        each on its own: one that fails costs no other workspace its rows. Returns the failures."""
        by_workspace: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_workspace.setdefault(row["workspace_id"], []).append(row)
        failed = []
        for workspace_id, group in by_workspace.items():
            try:
                with self.store.transaction(workspace_id) as tx:
                    tx.many("insert_calls", group)
            except DatabaseError as exc:
                failed.append((len(group), type(exc).__name__))
        return failed


def present(row: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "call",
        "id": row["id"],
        "api": row.get("api") or dialects.CHAT,
        "project": row.get("project_name"),
        "created": row["created_at"],
        "fingerprint": row["fingerprint"],
        "model": row["model"],
        "stream": bool(row["stream"]),
        "outcome": row["outcome"],
        "status": row["status"],
        "duration_ms": row["duration_ms"],
        "entry_id": row["entry_id"],
        "pending_id": row["pending_id"],
        "token_id": row["token_id"],
        # The injected fault: its rule, or the X-Semula-Fault header's kind and parameters.
        "fault": json.loads(row["fault"]) if row.get("fault") else None,
    }


def list_calls(
    ctx: Context, project: str, *, outcome: str | None = None, after: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """A project's call log as an OpenAI list, newest first; viewer role."""
    require(ctx, role="viewer")
    if outcome is not None and outcome not in OUTCOMES:
        raise BadRequest(f"outcome must be one of {', '.join(OUTCOMES)}.", param="outcome")
    project_id = projects_service.get_row(ctx, project)["id"]
    rows = ctx.store.all(
        "list_call_log", project_id=project_id, outcome=outcome, after=after, limit=limit + 1
    )
    return page([present(r) for r in rows], limit)

"""The call log: one row per proxied call, written in small batches off the request path."""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import Any

from semula.db import DatabaseError, Store
from semula.ids import new_id

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
    "error",
)
MAX_BUFFER = 10_000


class CallLog:
    """Buffers call-log rows and writes them in one short transaction per flush.

    A hit must not pay for a write transaction of its own (on SQLite every write takes the
    database lock); a crash loses at most one flush interval of log rows, never an entry.
    Without a background flusher (tests, the CLI) every row is written at once.
    """

    def __init__(self, store: Store, *, batched: bool = False):
        self.store = store
        self.batched = batched
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def record(self, **row: Any) -> None:
        row.setdefault("id", new_id("call"))
        if not self.batched:
            self._write([row])
            return
        with self._lock:
            if len(self._rows) < MAX_BUFFER:
                self._rows.append(row)

    def start(self, interval: float = 0.5) -> None:
        """Flush from a background thread (a greenlet under gevent) every interval seconds."""
        self.batched = True

        def run() -> None:
            while True:
                time.sleep(interval)
                self.flush()

        threading.Thread(target=run, name="semula-calllog", daemon=True).start()
        atexit.register(self.flush)

    def flush(self) -> int:
        with self._lock:
            rows, self._rows = self._rows, []
        if rows:
            self._write(rows)
        return len(rows)

    def _write(self, rows: list[dict[str, Any]]) -> None:
        # One transaction per workspace: under row-level security a row is written as its tenant.
        by_workspace: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_workspace.setdefault(row["workspace_id"], []).append(row)
        try:
            for workspace_id, group in by_workspace.items():
                with self.store.transaction(workspace_id) as tx:
                    tx.many("insert_call", group)
        except DatabaseError as exc:
            logger.warning("call log write failed", extra={"rows": len(rows), "error": type(exc).__name__})

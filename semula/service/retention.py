"""Retention: call-log rows older than SEMULA_LOG_RETENTION_DAYS, and the counters of replay sessions
unused for SEMULA_SESSION_RETENTION_DAYS, are deleted in small batches.

The contract is docs/design/product.md §7 (and docs/decisions/0041-sequence-surfaces-and-record-through.md
for session counters).

Each batch is its own short transaction, so pruning a large backlog never holds SQLite's write
lock (or a PostgreSQL row lock set) for long. It runs from `semula prune-logs` and hourly inside
each server worker (docs/retention.md).
"""

from __future__ import annotations

import logging
import random
import threading
import time

from semula.db import DatabaseError, Store
from semula.service import flights

logger = logging.getLogger("semula.retention")

BATCH = 500
INTERVAL = 3600.0
DAY = 86400.0


def prune_call_log(store: Store, days: int, *, batch: int = BATCH, now: float | None = None) -> int:
    """Delete call-log rows older than `days` days, `batch` rows per statement; return how many."""
    cutoff = (time.time() if now is None else now) - days * DAY
    total = 0
    while True:
        deleted = store.run("prune_call_log", cutoff=cutoff, batch=batch)
        total += deleted
        if deleted < batch:
            break
        time.sleep(0)  # Under gevent: let requests run between batches.
    if total:
        logger.info("pruned call log", extra={"rows": total, "retention_days": days})
    return total


def prune_session_counters(store: Store, days: int, *, batch: int = BATCH, now: float | None = None) -> int:
    """Delete the counters of sessions with no counted call for `days` days, `batch` sessions per
    statement; return how many counters (rows) went. A pruned session starts over at call 1."""
    cutoff = (time.time() if now is None else now) - days * DAY
    total = 0
    while deleted := store.run("prune_session_counters", cutoff=cutoff, batch=batch):
        total += deleted
        time.sleep(0)  # Under gevent: let requests run between batches.
    if total:
        logger.info("pruned session counters", extra={"rows": total, "retention_days": days})
    return total


def start_pruner(
    store: Store,
    days: int,
    *,
    session_days: int | None = None,
    interval: float = INTERVAL,
    stop: threading.Event | None = None,
) -> threading.Thread:
    """Prune every `interval` seconds (session counters too, given `session_days`) from a daemon
    thread (a greenlet under gevent's patching).

    The first run waits a random part of the interval, so the workers of one server, all started
    at once, do not prune at the same moment. Failures are logged by type and retried next time.
    """
    stop = stop or threading.Event()

    def run() -> None:
        delay = random.uniform(0, interval)
        while not stop.wait(delay):
            try:
                prune_call_log(store, days)
            except DatabaseError as exc:
                logger.warning("call log pruning failed", extra={"error": type(exc).__name__})
            try:
                flights.prune(store)  # record-through flights ended an hour ago (service.flights)
            except DatabaseError as exc:
                logger.warning("flight pruning failed", extra={"error": type(exc).__name__})
            if session_days is not None:
                try:
                    prune_session_counters(store, session_days)
                except DatabaseError as exc:
                    logger.warning("session counter pruning failed", extra={"error": type(exc).__name__})
            delay = interval

    thread = threading.Thread(target=run, name="semula-retention", daemon=True)
    thread.start()
    return thread

"""The per-process poller that holds parked calls.

Every held call waits on an Event. One background loop asks the database, once per
SEMULA_POLL_INTERVAL, which of *all* the calls held here are no longer pending, so the
load does not grow with the number of held calls. An answer committed in this process
wakes its calls at once: the app's contexts carry this Parking's release as `on_resolved`. On
PostgreSQL an answer committed by any other process (another worker, another host) sends a notice
that makes the loop ask at once rather than at its next turn (docs/decisions/0057-several-hosts.md);
the poll stays, for notices lost or late. The primitives are threading's: under gunicorn's gevent
worker they are monkey-patched into greenlets.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field

from semula import metrics
from semula.db import DatabaseError, Store

logger = logging.getLogger("semula.parking")


@dataclass
class _Hold:
    event: threading.Event = field(default_factory=threading.Event)
    holders: int = 0
    status: str | None = None
    entry_id: str | None = None


class Parking:
    def __init__(self, store: Store, poll_interval: float):
        self.store = store
        self.poll_interval = poll_interval
        self._holds: dict[str, _Hold] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by a notice of a call held here: poll now
        self._thread: threading.Thread | None = None
        self.polls = 0

    @property
    def held(self) -> int:
        return sum(h.holders for h in self._holds.values())

    def hold(self, pending_id: str, timeout: float) -> tuple[str, str | None] | None:
        """Wait until the call is resolved: (status, entry_id), or None on timeout."""
        with self._lock:
            hold = self._holds.setdefault(pending_id, _Hold())
            hold.holders += 1
        self._ensure_running()
        metrics.HELD.inc()
        try:
            if hold.event.wait(timeout):
                metrics.pending_event("released")
                logger.info("released", extra={"pending_id": pending_id, "status": hold.status})
                return hold.status, hold.entry_id
            metrics.pending_event("timeout")
            logger.info("hold timed out", extra={"pending_id": pending_id, "timeout_s": timeout})
            return None
        finally:
            metrics.HELD.dec()
            with self._lock:
                hold.holders -= 1
                if hold.holders == 0 and self._holds.get(pending_id) is hold:
                    del self._holds[pending_id]

    def release(self, pending_id: str, status: str, entry_id: str | None, resolved_at: float) -> None:
        with self._lock:
            hold = self._holds.pop(pending_id, None)
        if hold is None:
            return
        hold.status, hold.entry_id = status, entry_id
        hold.event.set()
        metrics.RELEASE_SECONDS.observe(max(0.0, time.time() - resolved_at))

    def poll_once(self) -> int:
        """One query for every held call; returns how many were released."""
        with self._lock:
            ids = list(self._holds)
        if not ids:
            return 0
        started = time.monotonic()
        rows = self.store.all("resolved_among", ids=json.dumps(ids))
        self.polls += 1
        for row in rows:
            self.release(row["id"], row["status"], row["entry_id"], row["resolved_at"])
        metrics.POLL_SECONDS.observe(time.monotonic() - started)
        return len(rows)

    def noticed(self, pending_id: str | None) -> None:
        """A call was resolved by some process (None: some may have been while notices were lost)."""
        if pending_id is None or pending_id in self._holds:
            self._wake.set()

    def _ensure_running(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self.store.on_notice("resolved", self.noticed)
                    self._thread = threading.Thread(target=self._run, name="semula-parking", daemon=True)
                    self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.poll_interval)
            self._wake.clear()  # before the poll: a notice during it makes the next one come at once
            if self._stop.is_set():
                return
            try:
                self.poll_once()
            except DatabaseError as exc:
                logger.warning("poll failed", extra={"error": type(exc).__name__, "detail": exc.describe()})

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

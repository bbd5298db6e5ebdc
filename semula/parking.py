"""The per-process poller that holds parked calls.

Every held call waits on an Event. One background loop asks the database, once per
SEMULA_POLL_INTERVAL, which of the calls held here are no longer pending: one query for all of them,
never one per call. Up to BY_IDS held calls it asks after each by id; past that it asks which calls were
resolved since its last look (minus MARGIN, for commits and clocks running late), so a poll costs the
calls resolved meanwhile rather than the calls held, and asks by id only after the calls held since the
last look and, once per SWEEP, after all of them, which catches anything later than MARGIN
(docs/decisions/0080-held-calls-at-scale.md). An answer committed in this process
wakes its calls at once: the app's contexts carry this Parking's release as `on_resolved`. On
PostgreSQL an answer committed by any other process (another worker, another host) sends a notice
that makes the loop ask at once rather than at its next turn (docs/decisions/0057-several-hosts.md);
the poll stays, for notices lost or late. The primitives are threading's: under gunicorn's gevent
worker they are monkey-patched into greenlets.

The same loop keeps what the database knows of who waits (docs/decisions/0063-abandoned-calls.md):
it renews the `held_until` of every call held here, and it looks, once per GONE_CHECK, whether each
held call's client is still connected. A request whose client went away ends its hold at once (so
the worker neither keeps the dead connection nor waits for it when stopping), and is one holder fewer
in the database (`pending.holders`, counted across every process and host): once the last holder of a
call, wherever it was, ends without an answer, the call shows as abandoned, pending and answerable. So
does a call whose holders were killed, once its lease lapses
(docs/decisions/0074-heavy-requests-and-holders.md). A request joining a call whose lease lapsed
counts from 1 again, in a new epoch of the count; a holder here counted in an earlier one (this
process could not renew in time) is added back by the next renewal, so the count is exact again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from semula import metrics, sockets
from semula.db import DatabaseError, Store
from semula.service import pending as pending_service

logger = logging.getLogger("semula.parking")

GONE = "gone"  # the status hold() returns when its client went away
GONE_CHECK = 1.0  # seconds between two looks at the held calls' clients
RENEWAL = pending_service.HOLD_LEASE / 3  # seconds between two renewals of the calls held here
BY_IDS = 500  # up to this many held calls, a poll asks after each by id (exact, and cheap at this size)
MARGIN = 2.0  # seconds a poll by time reaches back before the previous poll began
SWEEP = 10.0  # seconds between two polls by id of every held call, while polls go by time


def client_gone(sock: Any) -> Callable[[], bool] | None:
    """Whether a held call's client closed its connection (None when there is no socket to look at,
    as under Flask's test client). The end of the stream or an error is a client gone; bytes, or none
    yet, are a client still there (a client pipelining its next request is waiting too). A connection
    the client only half-closed reads as gone, as nginx takes it by default."""
    if sock is None:
        return None
    return lambda: sockets.unread(sock) is None


@dataclass
class _Waiter:
    """One request holding a call: its own event, so that its client going away ends its hold only."""

    gone: Callable[[], bool] | None
    event: threading.Event = field(default_factory=threading.Event)
    left: bool = False  # its client went away
    epoch: int = 0  # the epoch of the call's holders' count it is counted in (migration 0029)


@dataclass
class _Hold:
    waiters: list[_Waiter] = field(default_factory=list)
    status: str | None = None
    entry_id: str | None = None


class Parking:
    def __init__(self, store: Store, poll_interval: float, *, by_ids: int = BY_IDS):
        self.store = store
        self.poll_interval = poll_interval
        self.by_ids = by_ids
        self._holds: dict[str, _Hold] = {}
        # Asked after by id at the next poll: calls held since the last poll began (one resolved before
        # its hold began may be older than the look by time), and calls a notice named.
        self._fresh: set[str] = set()
        self._since: float | None = None  # the wall-clock time a poll by time looks back to
        self._sweep = False  # the next poll asks after every held call by id (notices were lost)
        self._lock = threading.Lock()
        # Held by a renewal and a holder letting go, around their statement: a holder leaving while
        # a renewal adds it back to the count lets go of the epoch the renewal counted it in.
        self._counting = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by a notice of a call held here: poll now
        self._thread: threading.Thread | None = None
        self.polls = 0
        self._renewed = self._checked = self._swept = self._timed = time.monotonic()

    @property
    def held(self) -> int:
        return sum(len(h.waiters) for h in self._holds.values())

    def hold(
        self, pending_id: str, timeout: float, gone: Callable[[], bool] | None = None, epoch: int = 0
    ) -> tuple[str, str | None] | None:
        """Wait until the call is resolved: (status, entry_id); (GONE, None) once `gone()` says the
        client went away (client_gone); None on timeout. `epoch` is the one of the holders' count its
        request was counted in when it parked or joined the call (pending_service.park_held)."""
        waiter = _Waiter(gone, epoch=epoch)
        with self._lock:
            hold = self._holds.setdefault(pending_id, _Hold())
            hold.waiters.append(waiter)
            self._fresh.add(pending_id)
        self._ensure_running()
        metrics.HELD.inc()
        try:
            waiter.event.wait(timeout)
            if hold.status is not None:
                metrics.pending_event("released")
                logger.info("released", extra={"pending_id": pending_id, "status": hold.status})
                return hold.status, hold.entry_id
            if waiter.left:
                metrics.pending_event("abandoned")
                logger.info("client gone", extra={"pending_id": pending_id})
                return GONE, None
            metrics.pending_event("timeout")
            logger.info("hold timed out", extra={"pending_id": pending_id, "timeout_s": timeout})
            return None
        finally:
            metrics.HELD.dec()
            with self._lock:
                hold.waiters.remove(waiter)
                if not hold.waiters and self._holds.get(pending_id) is hold:
                    del self._holds[pending_id]
            if hold.status is None:  # this request no longer waits for it, and it was not answered
                self._let_go(pending_id, waiter)

    def _let_go(self, pending_id: str, waiter: _Waiter) -> None:
        """One holder fewer for the call, in the database: the last one, in whichever process, marks
        it abandoned now rather than when its lease lapses."""
        try:
            with self._counting:
                pending_service.let_go(self.store, pending_id, time.time(), waiter.epoch)
        except DatabaseError as exc:  # it lapses with its lease all the same
            logger.warning("let go failed", extra={"error": type(exc).__name__, "detail": exc.describe()})

    def release(self, pending_id: str, status: str, entry_id: str | None, resolved_at: float) -> None:
        with self._lock:
            hold = self._holds.pop(pending_id, None)
        if hold is None:
            return
        hold.status, hold.entry_id = status, entry_id
        for waiter in hold.waiters:
            waiter.event.set()
        metrics.RELEASE_SECONDS.observe(max(0.0, time.time() - resolved_at))

    def check_clients(self) -> int:
        """End the holds whose client went away; returns how many."""
        with self._lock:
            watched = [
                w for h in self._holds.values() for w in h.waiters if w.gone is not None and not w.left
            ]
        ended = 0
        for waiter in watched:
            if waiter.gone is not None and waiter.gone():
                waiter.left = True
                waiter.event.set()
                ended += 1
        return ended

    def renew(self) -> None:
        """Tell the database the calls held here are still waited for (their lease, HOLD_LEASE), and
        count again the holders here a join left out of the count (counted in an earlier epoch)."""
        with self._counting:
            with self._lock:
                waiters = {pending_id: list(h.waiters) for pending_id, h in self._holds.items()}
            if not waiters:
                return
            held = {pending_id: Counter(w.epoch for w in ws) for pending_id, ws in waiters.items()}
            until = time.time() + pending_service.HOLD_LEASE
            for pending_id, epoch in pending_service.renew_held(self.store, held, until).items():
                for w in waiters[pending_id]:
                    w.epoch = epoch

    def poll_once(self, *, sweep: bool = False, timed: bool = True) -> int:
        """One look at the held calls; returns how many were released. `sweep` asks after every held
        call by id; `timed` False (a wake by notice between two turns) asks only after the calls held
        or named by a notice since the last look."""
        with self._lock:
            ids = list(self._holds)
            fresh = [pending_id for pending_id in self._fresh if pending_id in self._holds]
            self._fresh.clear()
            sweep = sweep or self._sweep or self._since is None or len(ids) <= self.by_ids
            self._sweep = False
        if not ids:
            self._since = None  # nothing held: the next hold starts with a look by id
            return 0
        started, began = time.monotonic(), time.time()
        rows: list[dict[str, Any]] = []
        if sweep:
            rows = self.store.all("resolved_among", ids=json.dumps(ids))
        else:
            if timed:
                rows = self.store.all("resolved_since", since=self._since)
            if fresh:
                rows += self.store.all("resolved_among", ids=json.dumps(fresh))
        if sweep or timed:
            self._since = began - MARGIN
        self.polls += 1
        released = 0
        for row in rows:
            if row["id"] in self._holds:
                self.release(row["id"], row["status"], row["entry_id"], row["resolved_at"])
                released += 1
        metrics.POLL_SECONDS.observe(time.monotonic() - started)
        return released

    def noticed(self, pending_id: str | None) -> None:
        """A call was resolved by some process (None: some may have been while notices were lost)."""
        if pending_id is None:
            self._sweep = True
            self._wake.set()
        elif pending_id in self._holds:
            with self._lock:
                self._fresh.add(pending_id)
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
                at = time.monotonic()
                timed = at - self._timed >= self.poll_interval * 0.9
                sweep = at - self._swept >= SWEEP
                if timed:
                    self._timed = at
                if sweep:
                    self._swept = at
                self.poll_once(sweep=sweep, timed=timed)
                at = time.monotonic()
                if at - self._checked >= GONE_CHECK:
                    self._checked = at
                    self.check_clients()
                if at - self._renewed >= RENEWAL:
                    self._renewed = at
                    self.renew()
            except DatabaseError as exc:
                logger.warning("poll failed", extra={"error": type(exc).__name__, "detail": exc.describe()})

    def close(self) -> None:
        self._stop.set()
        self._wake.set()

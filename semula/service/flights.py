"""Single flight across the deployment: identical record-through calls in flight at once, on any
worker of any host on one database, make one provider call (docs/decisions/0057-several-hosts.md).

In a process, identical calls share one flight already (record_through.FLIGHTS); that flight's leader
then claims it in the database (a row of `upstream_flights`, keyed like the answer it will record).
The claim's winner calls the provider, renewing its lease while the call runs. The others wait: woken
by a notice on PostgreSQL, and looking again every poll interval whatever the database. When the
flight ends with an entry, a waiter claims the flight in turn and finds the entry (the budget statement
re-checks it: record_through._budget_or_entry), so it pays nothing. When it ends with an error, the
waiters raise that error as their own. When its leader died, its lease runs out and a waiter takes
over: nothing waits longer than a lease past its leader.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from semula.core import errors
from semula.db import DatabaseError, Store
from semula.service import Context

logger = logging.getLogger("semula.upstream")
T = TypeVar("T")

LEASE = 10.0  # s a claim lasts unless its holder renews it: how long a dead leader's waiters wait
RENEW_EVERY = LEASE / 4  # s between renewals while the provider call runs
# s a flight is renewed at most: a provider call (a long stream included) ends well before, and a
# flight its process lost track of without ending it is let go then.
MAX_HOLD = 900.0
PRUNE_AFTER = 3600.0  # s an ended flight's row is kept at most (a failed one nobody called again)


class _Waiters:
    """This process's calls waiting on another process's flight, woken by the database's notices."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, list[threading.Event]] = {}

    def add(self, name: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._events.setdefault(name, []).append(event)
        return event

    def remove(self, name: str, event: threading.Event) -> None:
        with self._lock:
            events = self._events.get(name, [])
            if event in events:
                events.remove(event)
            if not events:
                self._events.pop(name, None)

    def wake(self, name: str | None) -> None:
        """A flight ended (None: some may have, while notices were not heard)."""
        with self._lock:
            events = [e for n, es in self._events.items() if name is None or n == name for e in es]
        for event in events:
            event.set()


WAITERS = _Waiters()


class Flight:
    """One record-through answer's flight in the database: claimed, renewed while held, ended."""

    def __init__(self, ctx: Context, project_id: str, fingerprint: str, seq: int):
        self.store = ctx.store
        self.workspace_id = ctx.principal.workspace_id
        self.key = {"project_id": project_id, "fingerprint": fingerprint, "seq": seq}
        self.name = f"{project_id} {fingerprint} {seq}"  # as the notice names it
        self.holder = secrets.token_hex(12)
        self._ended = threading.Event()

    def claim(self) -> bool:
        """Take the flight, when no one holds it (or its holder's lease ended): then renew it until end()."""
        at = time.time()
        params = dict(self.key, workspace_id=self.workspace_id, holder=self.holder, until=at + LEASE, now=at)
        if not self.store.run("claim_flight", **params):
            return False
        threading.Thread(target=self._renew, name="semula-flight-lease", daemon=True).start()
        return True

    def _renew(self) -> None:
        last = time.monotonic() + MAX_HOLD
        while not self._ended.wait(RENEW_EVERY) and time.monotonic() < last:
            try:
                self.store.run("renew_flight", **self.key, holder=self.holder, until=time.time() + LEASE)
            except DatabaseError as exc:  # tried again at the next turn; past the lease a waiter takes over
                logger.warning("record-through lease not renewed", extra={"error": type(exc).__name__})

    def end(self, error: BaseException | None = None) -> None:
        """End the flight held here: its entry is saved (or was not recordable), or `error` is what its
        waiters get. Once; a failure to end it costs the waiters at most the rest of the lease."""
        if self._ended.is_set():
            return
        self._ended.set()
        try:
            if error is None:
                self.store.run("end_flight", **self.key, holder=self.holder)
            else:
                shared = json.dumps(_shareable(error))
                self.store.run("fail_flight", **self.key, holder=self.holder, error=shared, now=time.time())
        except DatabaseError as exc:
            logger.warning("record-through flight not ended", extra={"error": type(exc).__name__})


def run(ctx: Context, project_id: str, fingerprint: str, seq: int, call: Callable[[], T]) -> T:
    """`call()` (the provider call, or the entry found meanwhile) once this caller leads the flight."""
    flight = lead(ctx, project_id, fingerprint, seq)
    try:
        result = call()
    except BaseException as exc:
        flight.end(exc)
        raise
    flight.end()
    return result


def lead(ctx: Context, project_id: str, fingerprint: str, seq: int) -> Flight:
    """The flight of this answer, claimed by this caller: at once when no one else holds it, else
    after the holder's flight ended (its entry saved, or its lease run out). Raises the error a flight
    it waited for ended with. The caller calls the provider (or finds the entry) and then `end()`s it."""
    flight = Flight(ctx, project_id, fingerprint, seq)
    woken = WAITERS.add(flight.name)  # before the first read: a notice from then on is not missed
    try:
        ctx.store.on_notice("flights", WAITERS.wake)
        _claim_or_wait(ctx, flight, woken)
    finally:
        WAITERS.remove(flight.name, woken)
    return flight


def _claim_or_wait(ctx: Context, flight: Flight, woken: threading.Event) -> None:
    waited_for: str | None = None  # the holder of the flight this caller waits for
    while True:
        woken.clear()  # before the reads: a notice that comes after them ends the wait at once
        row = ctx.store.one("get_flight", **flight.key) if waited_for is not None else None
        if row is None or row["holder"] != waited_for or _lapsed(row):
            if flight.claim():
                return
            row = ctx.store.one("get_flight", **flight.key)
            if row is None:  # ended between the two: claim it again
                continue
            waited_for = row["holder"]
        if row["error"] is not None:
            raise _shared(row["error"])
        left = row["expires_at"] - time.time()
        woken.wait(min(ctx.settings.poll_interval, max(left, 0.0) + 0.01))


def _lapsed(row: dict[str, Any]) -> bool:
    """A flight in progress whose holder stopped renewing it: a waiter takes over."""
    return row["error"] is None and row["expires_at"] <= time.time()


def _shareable(error: BaseException) -> dict[str, Any]:
    """What the waiters get of a leader's error: its status, code and message, which the app sees
    anyway (a provider's text is redacted before it is in one), never the exception itself."""
    if not isinstance(error, errors.SemulaError):
        error = errors.UpstreamError(f"The call recording this answer failed ({type(error).__name__}).")
    return {
        "status": error.status,
        "type": error.type,
        "code": error.code,
        "message": error.message,
        "param": error.param,
    }


def _shared(text: str) -> errors.SemulaError:
    data = json.loads(text)
    error = errors.SemulaError(data["message"], param=data["param"], code=data["code"])
    error.status, error.type = data["status"], data["type"]
    return error


def prune(store: Store, now: float | None = None) -> int:
    """Delete flights ended (or abandoned) more than PRUNE_AFTER ago."""
    return store.run("prune_flights", cutoff=(now or time.time()) - PRUNE_AFTER)

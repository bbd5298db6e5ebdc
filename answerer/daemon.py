"""The loop: find parked calls in projects with the answerer on, claim each, run one attempt or two.

Threads, not gevent: each call waits on a child process (or a POST), and there are at most
SEMULA_ANSWERER_CONCURRENCY of them. Every action goes through the service layer, on the database
or behind the server's REST API (answerer.server).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from answerer.config import AnswererConfig
from answerer.runners import Outcome, Runner, make_runner
from answerer.server import Server, ServiceServer, TokenRefused, Unavailable
from semula import metrics
from semula.core.errors import InvalidAnswer, PendingResolved, SemulaError
from semula.core.fingerprint import CHAT_API
from semula.db import DatabaseError
from semula.service import DEFAULT_WORKSPACE, Context, Principal

logger = logging.getLogger("semula.answerer")

POLL_INTERVAL = 0.5
# Failed polls in a row double the wait from POLL_INTERVAL up to this (decision 0052).
BACKOFF_CAP = 30.0
PAGE = 50
# After the grace (or a second signal) children are killed; their threads then only give claims back.
RELEASE_WAIT = 5.0
# What a poll or a give-back may meet that a later try can get past.
TRANSIENT = (DatabaseError, Unavailable)
# What a give-back or a renewal may meet: the lease runs out by itself whatever it was.
NOT_DONE = (SemulaError, TokenRefused, *TRANSIENT)


def worker_name() -> str:
    """The claim's owner and the revision's author: unique per daemon process."""
    return f"answerer:{socket.gethostname()}:{os.getpid()}"


def principal(worker: str) -> Principal:
    """The daemon acts as an editor with record scope, like an agent, in the one non-hosted workspace."""
    return Principal(workspace_id=DEFAULT_WORKSPACE, role="editor", scope="record", actor=worker)


def next_poll(interval: float, failures: int, cap: float = BACKOFF_CAP) -> float:
    """Seconds until the next poll: the interval, doubled for each failed poll in a row, at most cap."""
    return min(cap, interval * 2 ** min(failures, 32)) if failures else interval


def to_payload(output: bytes) -> Any:
    """A JSON object or array is the answer as is; anything else is the trimmed text.

    The contract of docs/design/answerer.md.
    """
    text = output.decode("utf-8", errors="replace").strip()
    try:
        value = json.loads(text)
    except ValueError:
        return {"content": text}
    return value if isinstance(value, dict | list) else {"content": text}


def document(
    call: dict[str, Any], attempt: int, rejection: InvalidAnswer | None, previous: str | None
) -> bytes:
    """The stdin JSON (and webhook body) of the contract of docs/design/answerer.md."""
    # The conversation view: the same shape whatever API the app called (docs/decisions/0030-dialects.md).
    request = call.get("conversation") or call["request"]
    doc: dict[str, Any] = {
        "request": {
            "messages": request.get("messages", []),
            "tools": request.get("tools", []),
            "params": {k: v for k, v in request.items() if k not in ("messages", "tools")},
        },
        "shape": call["shape"],
        "project": call["project"],
        # The claim names its API (any the server's registry has); one from a server from before the
        # other APIs does not, and is the default one's.
        "api": call.get("api") or CHAT_API,
        "pending_id": call["id"],
        "attempt": attempt,
    }
    if rejection is not None:
        doc["rejection"] = {"code": rejection.code, "message": rejection.message, "param": rejection.param}
        doc["previous_output"] = previous
    return json.dumps(doc, ensure_ascii=False).encode()


class Waker:
    """A self-pipe: worker threads and signal handlers wake the main loop by writing one byte.

    Not a threading.Event: Event.set() in a signal handler can deadlock on the Event's own lock
    when the signal lands while the main thread is inside Event.wait(). os.write cannot.
    """

    def __init__(self) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        # File objects close the pipe when the last thread holding the daemon lets go of it; an
        # explicit close could let a late worker write into a reused descriptor.
        self._files = (os.fdopen(read, "rb", buffering=0), os.fdopen(write, "wb", buffering=0))
        self._read, self._write = read, write

    def wake(self) -> None:
        # A full pipe holds wake-ups enough already.
        with contextlib.suppress(BlockingIOError):
            os.write(self._write, b"x")

    def wait(self, timeout: float) -> None:
        """Return at the next wake-up (or one that came since the last call), or after timeout."""
        select.select([self._read], [], [], max(0.0, timeout))
        self.clear()

    def clear(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._read, 4096):
                pass


@dataclass
class Timing:
    """Where one call's time went (for the benchmark): from its claim to the end, and in the children."""

    pending_id: str
    total: float
    attempts: float
    result: str


class Daemon:
    """Claims and answers parked calls until stopped; `stop()` is graceful, `abort()` kills at once."""

    def __init__(
        self,
        ctx: Context | None,
        config: AnswererConfig,
        *,
        server: Server | None = None,
        runner: Runner | None = None,
        poll_interval: float = POLL_INTERVAL,
        backoff_cap: float = BACKOFF_CAP,
        grace: float | None = None,
        worker: str | None = None,
        on_done: Callable[[Timing], None] | None = None,
    ):
        self.worker = worker or worker_name()
        if server is None:
            assert ctx is not None
            server = ServiceServer(ctx.as_(principal(self.worker)))
        self.server = server
        self.config = config
        self.runner = runner or make_runner(config)
        self.poll_interval = poll_interval
        self.backoff_cap = max(backoff_cap, poll_interval)
        # Polls that failed in a row: the first is logged, the rest back off quietly.
        self.failed_polls = 0
        # Children are already bounded by the timeout; the grace adds a little for answering.
        self.grace = config.timeout + 5 if grace is None else grace
        self.on_done = on_done
        self._tried: set[str] = set()
        self._running: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._waker = Waker()
        # Plain flags, not Events: stop() and abort() run in signal handlers.
        self._stopping = False
        self._aborted = False
        # Set when the server refuses the token: the daemon stops, and its entry point says why.
        self.refused: TokenRefused | None = None

    def stop(self) -> None:
        """Stop claiming; running calls finish within the grace. Safe in a signal handler."""
        self._stopping = True
        self._waker.wake()

    def abort(self) -> None:
        """Stop at once: running children are killed and their calls given back. Safe in a signal handler."""
        self._stopping = self._aborted = True
        self._waker.wake()

    @property
    def running(self) -> int:
        with self._lock:
            return len(self._running)

    def check(self) -> None:
        """Ask the server once, before starting: TokenRefused when it refuses the token, Unavailable
        when it cannot be reached (the polls then keep trying, and a refusal stops them)."""
        self.server.candidates(after=None, limit=1)

    def run(self) -> None:
        """Poll and dispatch until stop() or a refused token, then drain."""
        logger.info(
            "started",
            extra={
                "worker": self.worker,
                "runner": self.config.label,
                "concurrency": self.config.concurrency,
                "timeout": self.config.timeout,
            },
        )
        while not self._stopping:
            # Wake-ups that come while tick() runs stay in the pipe, so none is lost.
            self._waker.clear()
            try:
                self.tick()
            except TRANSIENT as exc:
                self._poll_failed(exc)
            except TokenRefused as exc:
                self._refuse(exc)
            else:
                self._poll_worked()
            self._waker.wait(next_poll(self.poll_interval, self.failed_polls, self.backoff_cap))
        self._drain()

    def _poll_failed(self, exc: Exception) -> None:
        """The database or the server may come back: say so once, then look again less and less often."""
        if not self.failed_polls:
            # Unavailable's text is `http:<status>` or requests' exception type, never its message (the URL).
            error = str(exc) if isinstance(exc, Unavailable) else type(exc).__name__
            logger.warning("poll_failed", extra=self._polled(error=error, retry_max_seconds=self.backoff_cap))
        self.failed_polls += 1

    def _poll_worked(self) -> None:
        if self.failed_polls:
            logger.info("poll_recovered", extra=self._polled(failed_polls=self.failed_polls))
            self.failed_polls = 0

    def _polled(self, **fields: Any) -> dict[str, Any]:
        """A poll's log fields, with the URL polled when it is the server's (never the database's)."""
        return {"url": self.server.poll_url, **fields} if self.server.poll_url else fields

    def tick(self) -> int:
        """Claim parked calls for the free slots and start them; the number started."""
        started = 0
        after: str | None = None
        while not self._stopping:
            free = self.config.concurrency - self.running
            if free <= 0:
                break
            rows = self.server.candidates(after=after, limit=PAGE)
            for row in rows:
                if free <= 0 or self._stopping:
                    break
                if row["id"] in self._tried:
                    continue
                began = time.monotonic()
                call = self._claim(row["id"])
                if call is None:
                    continue
                # Tried once per daemon lifetime, whatever comes of it: a failing command must not loop.
                self._tried.add(row["id"])
                self._start(call, began)
                started += 1
                free -= 1
            if len(rows) < PAGE:
                break
            after = rows[-1]["id"]
        return started

    def _refuse(self, exc: TokenRefused) -> None:
        """The token is refused (revoked while running, say): no later poll can do better, so stop."""
        if self.refused is None:
            self.refused = exc
        self.stop()

    def _claim(self, pending_id: str) -> dict[str, Any] | None:
        try:
            return self.server.claim(pending_id, self.worker, self.config.lease_seconds)
        except SemulaError:
            # Resolved or gone between the look and the claim.
            return None

    def _start(self, call: dict[str, Any], began: float) -> None:
        thread = threading.Thread(
            target=self._handle, args=(call, began), name=f"answer-{call['id']}", daemon=True
        )
        with self._lock:
            self._running[call["id"]] = thread
        thread.start()

    def _handle(self, call: dict[str, Any], began: float) -> None:
        pending_id = call["id"]
        spent = 0.0
        result = "failed"
        try:
            result, spent = self._attempts(call)
        except Exception:
            # A bug or a database failure: log its type (never its text) and give the call back.
            logger.error("error", extra={"pending_id": pending_id}, exc_info=True)
        finally:
            if result != "answered":
                self._release(pending_id)
            with self._lock:
                self._running.pop(pending_id, None)
                if result in ("answered", "resolved"):
                    # No longer pending, so never a candidate again: the set keeps only what may be.
                    self._tried.discard(pending_id)
            metrics.ANSWERER_RUNS.labels(result).inc()
            if self.on_done is not None:
                self.on_done(Timing(pending_id, time.monotonic() - began, spent, result))
            self._waker.wake()

    def _attempts(self, call: dict[str, Any]) -> tuple[str, float]:
        """Attempt 1, and attempt 2 only after invalid_answer; the result and the attempts' runtime."""
        pending_id = call["id"]
        rejection: InvalidAnswer | None = None
        previous: str | None = None
        spent = 0.0
        for attempt in (1, 2):
            if attempt == 2 and not self._renew(pending_id):
                return "lost_claim", spent
            outcome: Outcome = self.runner.run(document(call, attempt, rejection, previous))
            spent += outcome.child_seconds
            if not outcome.ok:
                logger.warning(
                    "failed", extra={"pending_id": pending_id, "attempt": attempt, "status": outcome.status}
                )
                return "failed", spent
            assert outcome.output is not None
            try:
                self.server.answer(
                    pending_id, to_payload(outcome.output), f"answered by the answerer ({self.config.label})"
                )
            except InvalidAnswer as exc:
                logger.warning(
                    "rejected", extra={"pending_id": pending_id, "attempt": attempt, "status": exc.code}
                )
                rejection, previous = exc, outcome.output.decode("utf-8", errors="replace")
                continue
            except PendingResolved:
                logger.info("resolved_meanwhile", extra={"pending_id": pending_id, "attempt": attempt})
                return "resolved", spent
            except TokenRefused as exc:
                logger.warning(
                    "failed",
                    extra={"pending_id": pending_id, "attempt": attempt, "status": f"http:{exc.status}"},
                )
                self._refuse(exc)
                return "failed", spent
            except SemulaError as exc:
                # A pinned entry, a deleted call: nothing a second run would change.
                logger.warning(
                    "failed", extra={"pending_id": pending_id, "attempt": attempt, "status": exc.code}
                )
                return "failed", spent
            logger.info("answered", extra={"pending_id": pending_id, "attempt": attempt})
            return "answered", spent
        return "rejected", spent

    def _renew(self, pending_id: str) -> bool:
        """A fresh lease for attempt 2: give the claim back and take it again (there is no renew call).

        Skipped once stopping: a stop lets running children finish but starts none.
        """
        if self._stopping:
            return False
        self._release(pending_id)
        try:
            return self.server.claim(pending_id, self.worker, self.config.lease_seconds) is not None
        except NOT_DONE:
            return False

    def _release(self, pending_id: str) -> None:
        try:
            self.server.release(pending_id, self.worker)
        except NOT_DONE as exc:
            # The lease runs out by itself; nothing else to do.
            logger.warning("release_failed", extra={"pending_id": pending_id, "error": type(exc).__name__})

    def _drain(self) -> None:
        """After stop: wait for running calls up to the grace (or an abort), then kill what is left."""
        if self.running:
            logger.info("stopping", extra={"running": self.running, "grace": self.grace})
        self._wait_idle(time.monotonic() + self.grace)
        if self.running:
            logger.warning("killing", extra={"running": self.running})
            self.runner.kill_all()
            self._wait_idle(time.monotonic() + RELEASE_WAIT, even_aborted=True)
        logger.info("stopped", extra={"worker": self.worker})

    def _wait_idle(self, deadline: float, *, even_aborted: bool = False) -> None:
        # Each finishing call and abort() wake us; clearing before looking loses neither.
        while True:
            self._waker.clear()
            remaining = deadline - time.monotonic()
            if not self.running or remaining <= 0 or (self._aborted and not even_aborted):
                return
            self._waker.wait(remaining)

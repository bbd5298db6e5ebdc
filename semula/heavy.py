"""A helper process for a worker's large bodies (decision 0074): the parse, the check and the fingerprint
of a request whose body is over fastpath.HEAVY_BODY, and a replay miss's comparison with its candidate
entries, run in another process, so the worker's event loop never shares the GIL with them.

In a native thread the event loop kept serving, but waited for the GIL after each of its system calls
(up to a switch interval each) and for the whole of orjson's parse (20-60 ms of a 2 MB body): with one
heavy client per worker, another tenant's light requests' p99 went to 5-10x. Here the worker's native
thread only writes the body to a pipe and waits, with the GIL released, for what comes back: the checked
request's summary (Request), its fingerprint, the id of the response it continues, and later, for a
miss, which candidate entry is closest and where it differs. The body itself stays in the helper: a
worker parses it too only when it needs it (a miss it parks or forwards, the project changed between
the fingerprint and the lookup), as before.

One helper per worker, started at its first large body (`python -m semula.heavy`, talking length-prefixed
pickles over two pipes), niced, used by one request at a time (the worker's HEAVY_TURN). It keeps the
last KEPT bodies, by the token the worker gave each, until their comparison; a body it no longer holds,
or a helper that died, is answered None, and the worker does the work itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import pickle
import struct
import sys
from types import SimpleNamespace
from typing import Any

from semula.core.errors import SemulaError

logger = logging.getLogger("semula.heavy")

PIPE_SIZE = 1 << 20  # bytes: Linux's most for a process without privileges (/proc/sys/fs/pipe-max-size)
KEPT = 2  # bodies the helper keeps for a miss's comparison (Gemini's at the caps: 55 MB of objects)
_LENGTH = struct.Struct("!Q")


def _write(fd: int, value: Any) -> None:
    data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    for whole in (_LENGTH.pack(len(data)), data):
        view = memoryview(whole)
        while view:
            view = view[os.write(fd, view) :]


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read(fd: int) -> Any:
    head = _read_exactly(fd, _LENGTH.size)
    if head is None:
        raise EOFError
    data = _read_exactly(fd, _LENGTH.unpack(head)[0])
    if data is None:
        raise EOFError
    return pickle.loads(data)


class Helper:
    """The worker's side. Its methods block on the pipe: call them in a native thread (the GIL is
    released while they wait), one at a time."""

    def __init__(self) -> None:
        self._pid: int | None = None
        self._to = self._from = -1
        self._token = 0

    def token(self) -> int:
        self._token += 1
        return self._token

    def start(self) -> None:
        """Start the helper process unless it runs. Called on the event loop, not in a native thread: a
        gevent worker's os.posix_spawn has its loop watch the child (and reap it once it exits)."""
        if self._pid is not None:
            return
        to_r, to_w = os.pipe()  # not inherited (PEP 446), but for the two ends the helper gets
        from_r, from_w = os.pipe()
        with contextlib.suppress(OSError):  # a body in a few writes, each taking the GIL back once
            fcntl.fcntl(to_w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
        os.set_inheritable(to_r, True)
        os.set_inheritable(from_w, True)
        try:
            self._pid = os.posix_spawn(
                sys.executable, [sys.executable, "-m", "semula.heavy", str(to_r), str(from_w)], os.environ
            )
        except OSError as exc:  # the worker does the work itself
            logger.warning("helper not started", extra={"error": type(exc).__name__})
            for fd in (to_w, from_r):
                os.close(fd)
            return
        finally:
            os.close(to_r)
            os.close(from_w)
        self._to, self._from = to_w, from_r

    def call(self, op: str, *args: Any) -> Any:
        """The helper's answer to `op`; None when it could not give one (not started, or it died: the
        next start() starts another). What the request's check raised there is raised here."""
        if self._pid is None:
            return None
        try:
            _write(self._to, (op, args))
            outcome, value = _read(self._from)
        except (OSError, EOFError, pickle.PickleError):
            self.close()
            return None
        if outcome == "error":
            raise value
        return value if outcome == "ok" else None

    def close(self) -> None:
        for fd in (self._to, self._from):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to = self._from = -1
        self._pid = None  # a helper that exited is reaped by the worker's child watcher (gevent's)


# Headers never handed to the helper: it reads none of them (Dialect.with_headers reads API options).
_CREDENTIALS = frozenset(("HTTP_AUTHORIZATION", "HTTP_X_API_KEY", "HTTP_X_GOOG_API_KEY", "HTTP_COOKIE"))


def headers(environ: dict[str, Any]) -> dict[str, str]:
    """The request headers _begin() hands to Dialect.with_headers, as the environ holds them."""
    return {k: v for k, v in environ.items() if k.startswith("HTTP_") and k not in _CREDENTIALS}


# The helper's side.


def _begin(
    kept: dict[int, Any],
    token: int,
    raw: bytes,
    api: str,
    in_path: tuple[Any, ...],
    headers: dict[str, str],
    rules: tuple[str, str],
) -> tuple[Any, str, bool, str | None]:
    """What fastpath's read() and replay_service.start's checked() do, and the response the request
    continues (Dialect.previous): (Request, fingerprint, plain, previous). `headers` are the request's
    as the WSGI environ has them (HTTP_...), credentials left out (headers())."""
    from semula import dialects
    from semula.service import replay
    from semula.web import policy

    speaks = dialects.get(api)
    parsed, plain = policy.read_json(raw)
    body = speaks.with_headers(parsed, lambda name: headers.get("HTTP_" + name.upper().replace("-", "_")))
    if in_path:
        body = speaks.with_route(body, *in_path)
    request = speaks.check(body)
    fingerprint = speaks.fingerprint(body, *replay.rules(*rules), plain=plain)
    kept[token] = (body, speaks)
    while len(kept) > KEPT:
        del kept[next(iter(kept))]
    return request, fingerprint, plain, speaks.previous(body)


def _closest(kept: dict[int, Any], token: int, project: dict[str, Any], rows: list[dict[str, Any]]) -> Any:
    """replay._closest for the body kept under `token`: (index of the closest row or None, difference);
    None when the body is no longer kept."""
    from semula.service import replay

    if token not in kept:
        return None
    body, speaks = kept.pop(token)  # compared once
    best, found = replay._closest(SimpleNamespace(project=project, body=body, dialect=speaks), rows)
    return (None if best is None else next(i for i, row in enumerate(rows) if row is best)), found


def serve(reading: int, writing: int) -> None:
    kept: dict[int, Any] = {}
    ops = {"begin": _begin, "closest": _closest}
    while True:
        try:
            op, args = _read(reading)
        except EOFError:
            return  # the worker is gone
        try:
            answer: tuple[str, Any] = ("ok", ops[op](kept, *args))
        except SemulaError as exc:
            answer = ("error", exc)
        except Exception as exc:  # a bug: the worker does the work itself, and meets it there
            answer = ("failed", type(exc).__name__)
        _write(writing, answer)


# The helper's niceness: the scheduler gives the CPU to the workers (every tenant's small requests) first,
# and to large bodies' work when they leave some.
NICE = 10

if __name__ == "__main__":
    os.nice(NICE)
    serve(int(sys.argv[1]), int(sys.argv[2]))

"""Structured JSON logs to stderr, one object a line, with the request id of the request being served.

Callers pass ids and counts in `extra`, never prompts, answers or secrets. Timestamps are ISO-8601
UTC. gunicorn's own lines go through the same formatter (semula/gunicorn_conf.py).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
import traceback
from contextvars import ContextVar
from typing import Any

from semula import redact

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_secrets: tuple[str, ...] = ()
_raw_secrets: tuple[str, ...] = ()
# A client's x-request-id is used when it looks like an id; anything else is replaced by ours.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Request:
    """What the log lines of one HTTP request share, and what its access line says (semula.web.access)."""

    __slots__ = ("id", "method", "started", "route", "outcome", "project", "token_id", "pending_id")

    def __init__(self, request_id: str, method: str, started: float):
        self.id = request_id
        self.method = method
        self.started = started
        self.route: str | None = None
        self.outcome: str | None = None
        self.project: str | None = None
        self.token_id: str | None = None
        self.pending_id: str | None = None


# Per greenlet under gevent (each greenlet has its own context), per thread otherwise.
CURRENT: ContextVar[Request | None] = ContextVar("semula_request", default=None)


def begin_request(client_id: str | None, method: str = "") -> Request:
    """Start a request's log context: the client's x-request-id when it is a plain id, else a new one."""
    request_id = client_id if client_id and _CLIENT_ID.fullmatch(client_id) else "req_" + os.urandom(10).hex()
    req = Request(request_id, method, time.monotonic())
    CURRENT.set(req)
    return req


def request_id() -> str | None:
    req = CURRENT.get()
    return req.id if req is not None else None


_stamp: tuple[int, str] = (-1, "")


def iso_utc(created: float) -> str:
    """2026-01-02T03:04:05.678Z; the seconds part formatted once a second."""
    global _stamp
    second = int(created)
    if _stamp[0] != second:
        _stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return f"{_stamp[1]}.{int((created - second) * 1000):03d}Z"


def frames(exc: BaseException | None) -> list[str]:
    """A traceback without the exception text (it can carry a URL, a key or a prompt): where, not what."""
    if exc is None:
        return []
    return [f"{f.filename}:{f.lineno} in {f.name}" for f in traceback.extract_tb(exc.__traceback__)]


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": iso_utc(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        req = CURRENT.get()
        if req is not None:
            out["request_id"] = req.id
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        # Values are redacted before they are serialised, so a credential in a message or an extra
        # (a provider's error text, a URL) never reaches the log, whatever its shape.
        out = redact.redact_obj(out, _raw_secrets)
        if record.exc_info and record.exc_info[0] is not None:
            # The type and the frames only: exception text can carry a URL, a key or a prompt.
            out["exc_type"] = record.exc_info[0].__name__
            out["traceback"] = frames(record.exc_info[1])
        line = json.dumps(out, default=str)
        # Last line of defence: a configured secret never leaves in a log line.
        for secret in _secrets:
            line = line.replace(secret, "[REDACTED]")
        return line


def setup(level: str = "info", secrets: tuple[str, ...] = ()) -> None:
    """Send every semula log line to stderr as one JSON object."""
    global _secrets, _raw_secrets
    _raw_secrets = tuple(secrets)
    _secrets = tuple(json.dumps(s)[1:-1] for s in secrets) + secrets
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())

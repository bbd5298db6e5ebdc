"""Structured JSON logs to stderr, one object a line, with the request id of the request being served
(at a terminal the same fields as a line a person reads, SEMULA_LOG_FORMAT).

Callers pass ids and counts in `extra`, never prompts, answers or secrets. Timestamps are ISO-8601
UTC. gunicorn's own lines go through the same formatter (semula/gunicorn_conf.py).
"""

from __future__ import annotations

import json
import logging
import random
import re
import sys
import time
import traceback
from contextvars import ContextVar
from typing import Any

import orjson

from semula.core import redact

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
# Loggers whose values are all checked where they are made (ids, numbers, route templates, fixed
# words, names that match the project pattern): their lines skip redact_obj, which would cost a
# replay hit more than the rest of its access line (semula.web.access; docs/decisions/0032-operations.md).
CHECKED = frozenset({"semula.access"})
_secrets: tuple[str, ...] = ()
_raw_secrets: tuple[str, ...] = ()
_handler: logging.StreamHandler | None = None  # setup()'s, while it is the only one
# A client's x-request-id is used when it looks like an id; anything else is replaced by ours.
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class Request:
    """What the log lines of one HTTP request share, and what its access line says (semula.web.access)."""

    __slots__ = (
        "id",
        "method",
        "started",
        "hit_sample",
        "route",
        "outcome",
        "project",
        "token_id",
        "pending_id",
    )

    def __init__(self, request_id: str, method: str, started: float, hit_sample: float = 1.0):
        self.id = request_id
        self.method = method
        self.started = started
        self.hit_sample = hit_sample  # the share of replay hits that get an access line: the app's setting
        self.route: str | None = None
        self.outcome: str | None = None
        self.project: str | None = None
        self.token_id: str | None = None
        self.pending_id: str | None = None


# Per greenlet under gevent (each greenlet has its own context), per thread otherwise.
CURRENT: ContextVar[Request | None] = ContextVar("semula_request", default=None)


def begin_request(client_id: str | None, method: str = "", hit_sample: float = 1.0) -> Request:
    """Start a request's log context: the client's x-request-id when it is a plain id, else a new one;
    `hit_sample`, the app's SEMULA_ACCESS_LOG_HITS (semula.web.access)."""
    # Not a secret, only unique: random's generator (reseeded in each forked worker) costs no system call.
    request_id = (
        client_id if client_id and _CLIENT_ID.fullmatch(client_id) else f"req_{random.getrandbits(80):020x}"
    )
    req = Request(request_id, method, time.monotonic(), hit_sample)
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
        return self.line(self.fields(record))

    def line(self, out: dict[str, Any]) -> str:
        """The fields as one JSON object, with no configured secret left in it."""
        try:
            line = orjson.dumps(out, default=str).decode()
        except TypeError:  # what orjson refuses (integers past 64 bits, non-string keys)
            line = json.dumps(out, default=str, separators=(",", ":"), ensure_ascii=False)
        # Last line of defence: a configured secret never leaves in a log line.
        return _unsecret(line)

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """What a line says of a record, redacted."""
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
        if record.name not in CHECKED:
            # Values are redacted before they are serialised, so a credential in a message or an
            # extra (a provider's error text, a URL) never reaches the log, whatever its shape.
            out = redact.redact_obj(out, _raw_secrets)
        if record.exc_info and record.exc_info[0] is not None:
            # The type and the frames only: exception text can carry a URL, a key or a prompt.
            out["exc_type"] = record.exc_info[0].__name__
            out["traceback"] = frames(record.exc_info[1])
        return out


class TextFormatter(JSONFormatter):
    """The same fields for a person at a terminal (`make run`): `HH:MM:SS level logger message`, then
    the other fields as key=value (strings that need it quoted as JSON), the traceback's frames last."""

    def line(self, out: dict[str, Any]) -> str:
        out = dict(out)
        head = f"{out.pop('ts')[11:19]} {out.pop('level').upper():<7} {out.pop('logger')}: {out.pop('msg')}"
        frames_ = out.pop("traceback", None)
        pairs = [f"{key}={_text_value(value)}" for key, value in out.items()]
        text = " ".join([head, *pairs])
        if frames_:
            text += "".join(f"\n    {frame}" for frame in frames_)
        return _unsecret(text)


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value and not any(c.isspace() or c in '"=' for c in value):
        return value
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return json.dumps(value, default=str, ensure_ascii=False)


def _unsecret(line: str) -> str:
    for secret in _secrets:
        line = line.replace(secret, "[REDACTED]")
    return line


def info_line(logger: logging.Logger, msg: str, fields: dict[str, Any]) -> None:
    """An INFO line of a CHECKED logger, the same JSON as format() makes, written without a LogRecord.

    A replay hit's access line is the only line most requests write; going through logging's record,
    handler and lock costs the hit more than the line itself. With any other handler installed (a
    test capturing logs, gunicorn's), the line goes through logging as usual.
    """
    handler = _handler
    if (
        handler is None
        or logging.root.handlers != [handler]
        or type(handler.formatter) is not JSONFormatter
        or not logger.isEnabledFor(logging.INFO)
    ):
        logger.info(msg, extra=fields)
        return
    out: dict[str, Any] = {"ts": iso_utc(time.time()), "level": "info", "logger": logger.name, "msg": msg}
    req = CURRENT.get()
    if req is not None:
        out["request_id"] = req.id
    out.update(fields)
    line = orjson.dumps(out).decode()
    for secret in _secrets:
        line = line.replace(secret, "[REDACTED]")
    # One write of one line: stderr is line-buffered, and a line this short reaches a pipe whole.
    handler.stream.write(line + "\n")


def formatter() -> logging.Formatter:
    """A new formatter of the kind setup() chose (JSON before it is called)."""
    return type(_handler.formatter)() if _handler is not None and _handler.formatter else JSONFormatter()


def setup(level: str = "info", secrets: tuple[str, ...] = (), form: str = "auto") -> None:
    """Send every semula log line to stderr: one JSON object a line (`form` json, or auto when stderr
    is no terminal), or a line for a person to read (text, or auto at a terminal)."""
    global _secrets, _raw_secrets, _handler
    _raw_secrets = tuple(secrets)
    _secrets = tuple(json.dumps(s)[1:-1] for s in secrets) + secrets
    handler = logging.StreamHandler(sys.stderr)
    text = form == "text" or (form == "auto" and sys.stderr.isatty())
    handler.setFormatter(TextFormatter() if text else JSONFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _handler = handler
    # The lines never show the caller's file and line, thread or process: not finding them out saves
    # a stack walk and a few lookups per line (a third of an access line's cost, decision 0032).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False

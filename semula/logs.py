"""Structured JSON logs to stderr.

Callers pass ids and counts in `extra`, never prompts, answers or secrets.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from semula import redact

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}
_secrets: tuple[str, ...] = ()
_raw_secrets: tuple[str, ...] = ()


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        # Values are redacted before they are serialised, so a credential in a message or an extra
        # (a provider's error text, a URL) never reaches the log, whatever its shape.
        out = redact.redact_obj(out, _raw_secrets)
        if record.exc_info and record.exc_info[0] is not None:
            # The type only: exception text can carry a URL, a key or a prompt.
            out["exc_type"] = record.exc_info[0].__name__
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
    logging.Formatter.converter = time.gmtime

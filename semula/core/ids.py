"""Public ids: a prefix and a time-ordered random part, so ids sort by creation."""

from __future__ import annotations

import os
import threading
import time

PREFIXES = {
    "pending": "pnd",
    "entry": "ent",
    "token": "tok",
    "call": "cal",
    "project": "prj",
    "revision": "rev",
    "audit": "aud",
    "workspace": "wsp",
    "session": "ses",
}
_lock = threading.Lock()
_last = (0, 0)


def new_id(kind: str) -> str:
    """`pnd_` + 12 hex digits of milliseconds + 12 hex digits, random but increasing within a millisecond.

    Like a monotonic ULID: ids made by one process always sort in the order they were made.
    """
    return new_ids(kind, 1)[0]


def new_ids(kind: str, count: int) -> list[str]:
    """`count` ids at once, in order: what new_id() would make called `count` times, for less."""
    global _last
    millis = int(time.time() * 1000)
    with _lock:
        last_millis, last_tail = _last
        if millis <= last_millis:
            millis, tail = last_millis, last_tail + 1
        else:
            tail = int.from_bytes(os.urandom(6), "big") >> 1  # half the range: room to count up
        _last = (millis, tail + count - 1)
    prefix = f"{PREFIXES[kind]}_{millis:012x}"
    return [f"{prefix}{t:012x}" for t in range(tail, tail + count)]

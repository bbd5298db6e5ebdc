"""Public ids: a prefix and a time-ordered random part, so ids sort by creation."""

from __future__ import annotations

import os
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
}


def new_id(kind: str) -> str:
    """`pnd_` + 12 hex digits of milliseconds + 12 random hex digits."""
    return f"{PREFIXES[kind]}_{int(time.time() * 1000):012x}{os.urandom(6).hex()}"

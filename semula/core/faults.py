"""Fault injection: an app's retry, timeout and broken-stream paths tested against real recordings (pure).

A call carrying `X-Semula-Fault: KIND; key=value; ...` gets that fault instead of (or on the way to)
its answer: an error in the API's own envelope (`rate_limit`, `server_error`, `bad_gateway`,
`unavailable`, `overloaded`), silence (`timeout`), a connection cut short (`disconnect`), or a slow
reply (`slow`). The header is never part of the fingerprint and never stored. decision 0060.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from semula.core.errors import BadRequest, SemulaError

HEADER = "X-Semula-Fault"
MAX_SECONDS = 600.0  # the longest a fault waits (after, ttfb, pace, retry_after)

# Each kind's parameters: name -> (kind of value, default).
KINDS: dict[str, dict[str, tuple[str, Any]]] = {
    "rate_limit": {"retry_after": ("seconds", 1.0)},
    "server_error": {},
    "bad_gateway": {},
    "unavailable": {},
    "overloaded": {},
    "timeout": {"after": ("seconds", None)},
    "disconnect": {"after_events": ("count", 0), "at": ("head|body", "body")},
    "slow": {"ttfb": ("seconds", 0.0), "pace": ("seconds", 0.0)},
}
# The kinds that answer with an error at once: (status, OpenAI type, code, message).
ERRORS: dict[str, tuple[int, str, str, str]] = {
    "rate_limit": (
        429,
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests (injected by semula).",
    ),
    "server_error": (500, "server_error", "server_error", "The server had an error (injected by semula)."),
    "bad_gateway": (502, "server_error", "bad_gateway", "Bad gateway (injected by semula)."),
    "unavailable": (
        503,
        "server_error",
        "service_unavailable",
        "The service is unavailable (injected by semula).",
    ),
    "overloaded": (503, "server_error", "overloaded", "The service is overloaded (injected by semula)."),
}


@dataclass(frozen=True)
class Fault:
    kind: str
    params: dict[str, Any] = field(default_factory=dict)

    def __getitem__(self, name: str) -> Any:
        return self.params[name]

    @property
    def is_error(self) -> bool:
        return self.kind in ERRORS


def parse(value: str) -> Fault:
    """The fault a header asks for: `KIND; key=value; ...`. A 400 naming what is valid otherwise."""
    parts = [part.strip() for part in value.split(";")]
    kind, given = parts[0].lower(), parts[1:]
    if kind not in KINDS:
        raise bad(f"unknown fault kind {kind[:40]!r}; the kinds are: {', '.join(KINDS)}.")
    allowed = KINDS[kind]
    params = {name: default for name, (_, default) in allowed.items()}
    for part in given:
        if not part:
            continue
        name, equals, raw = part.partition("=")
        name, raw = name.strip().lower(), raw.strip()
        if name not in allowed or not equals:
            known = ", ".join(f"{n}=<{k}>" for n, (k, _) in allowed.items()) or "none"
            raise bad(f"{kind} takes no parameter {part[:40]!r}; its parameters: {known}.")
        params[name] = _value(kind, name, allowed[name][0], raw)
    return Fault(kind, params)


def _value(kind: str, name: str, form: str, raw: str) -> Any:
    if form == "seconds":
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if not 0 <= number <= MAX_SECONDS:
            raise bad(f"{kind}: {name} is a number of seconds from 0 to {MAX_SECONDS:g}, not {raw[:20]!r}.")
        return number
    if form == "count":
        if not raw.isdigit() or int(raw) > 100_000:
            raise bad(f"{kind}: {name} is a whole number from 0 to 100000, not {raw[:20]!r}.")
        return int(raw)
    choices = form.split("|")
    if raw.lower() not in choices:
        raise bad(f"{kind}: {name} is one of {', '.join(choices)}, not {raw[:20]!r}.")
    return raw.lower()


def bad(message: str) -> BadRequest:
    return BadRequest(f"{HEADER}: {message}", param=HEADER, code="invalid_fault")


class InjectedFault(SemulaError):
    """An error a call asked for with X-Semula-Fault."""

    code = "injected_fault"


def error(
    fault: Fault, status: int | None = None, headers: tuple[tuple[str, str], ...] = ()
) -> InjectedFault:
    """The error an error kind answers with; `status` as the API has it (Anthropic's 529), `headers` the
    API's rate-limit headers for a rate_limit."""
    default, kind, code, message = ERRORS[fault.kind]
    exc = InjectedFault(message, code=code)
    exc.status, exc.type = status or default, kind
    if fault.kind == "rate_limit":
        seconds = fault["retry_after"]
        shown = str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
        exc.headers = (("Retry-After", shown), ("retry-after-ms", str(int(seconds * 1000))), *headers)
    return exc


def events(data: bytes) -> list[bytes]:
    """A server-sent-event body cut into its events (each with the blank line that ends it)."""
    out, rest = [], data
    while rest:
        cut = rest.find(b"\n\n")
        if cut < 0:
            out.append(rest)
            break
        out.append(rest[: cut + 2])
        rest = rest[cut + 2 :]
    return out

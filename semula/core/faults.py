"""Fault injection: an app's retry, timeout and broken-stream paths tested against real recordings (pure).

A call carrying `X-Semula-Fault: KIND; key=value; ...` gets that fault instead of (or on the way to)
its answer: an error in the API's own envelope (`rate_limit`, `server_error`, `bad_gateway`,
`unavailable`, `overloaded`), silence (`timeout`), a connection cut short (`disconnect`), or a slow
reply (`slow`). The header is never part of the fingerprint and never stored. decision 0060.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from semula.core import jsonio
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


def logged(fault: Fault) -> str:
    """A fault the header asked for, as the call log keeps it (a rule is kept as itself)."""
    return jsonio.compact({"kind": fault.kind, **fault.params, "via": "header"}).decode()


_EVENT_END = re.compile(rb"\r?\n\r?\n")


def events(data: bytes) -> list[bytes]:
    """A server-sent-event body cut into its events (each with the blank line that ends it: two line
    ends, which Google writes as CRLF)."""
    out, start = [], 0
    for end in _EVENT_END.finditer(data):
        out.append(data[start : end.end()])
        start = end.end()
    if start < len(data):
        out.append(data[start:])
    return out


# Rules: the `faults` setting of a project, a replay session or an entry (decision 0061). A rule is
# {"kind", the kind's parameters, "times", "probability", "seed", "match", "session", "entry"}.
RULE_KEYS = ("kind", "times", "probability", "seed", "match", "session", "entry")
MATCH_KEYS = ("api", "model", "fingerprint", "contains")
MAX_RULES = 50


def check_rules(value: Any, apis: Sequence[str] = ()) -> list[dict[str, Any]]:
    """A `faults` setting as stored: each rule checked, its parameters filled in; a 400 naming what is
    valid otherwise (`param` says which rule and key). `apis`: the names a match.api may take."""
    if not isinstance(value, list) or len(value) > MAX_RULES:
        raise _bad_rule(f"faults is a list of at most {MAX_RULES} rules", "faults")
    return [check_rule(rule, f"faults[{number}]", apis) for number, rule in enumerate(value)]


def check_rule(rule: Any, where: str = "fault", apis: Sequence[str] = ()) -> dict[str, Any]:
    """One rule, checked and with every parameter of its kind (the defaults where left out)."""
    if not isinstance(rule, dict):
        raise _bad_rule("a fault rule is an object with a kind", where)
    kind = rule.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        shown = repr(kind)[:40]
        raise _bad_rule(f"unknown fault kind {shown}; the kinds are: {', '.join(KINDS)}", f"{where}.kind")
    allowed = KINDS[kind]
    out: dict[str, Any] = {"kind": kind}
    for name, (form, default) in allowed.items():
        given = rule.get(name)
        if given is None:
            out[name] = default
        elif isinstance(given, bool) or not isinstance(given, str | int | float):
            raise _bad_rule(f"{kind}: {name} is a {form}", f"{where}.{name}")
        else:
            try:
                out[name] = _value(kind, name, form, str(given))
            except BadRequest as exc:
                raise _bad_rule(
                    exc.message.removeprefix(f"{HEADER}: ").rstrip("."), f"{where}.{name}"
                ) from None
    unknown = [name for name in rule if name not in RULE_KEYS and name not in allowed]
    if unknown:
        keys = ", ".join([*allowed, *RULE_KEYS[1:]])
        raise _bad_rule(f"{kind} rules take no key {unknown[0][:40]!r}; their keys: kind, {keys}", where)
    times = rule.get("times")
    if times is not None:
        if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= 1_000_000:
            raise _bad_rule("times is a whole number from 1 to 1000000", f"{where}.times")
        out["times"] = times
    probability = rule.get("probability")
    if probability is not None:
        if (
            isinstance(probability, bool)
            or not isinstance(probability, int | float)
            or not 0 < probability <= 1
        ):
            raise _bad_rule("probability is a number above 0 and at most 1", f"{where}.probability")
        out["probability"] = float(probability)
    seed = rule.get("seed")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int | str) or len(str(seed)) > 100:
            raise _bad_rule("seed is a whole number or a text of at most 100 characters", f"{where}.seed")
        out["seed"] = seed
    match = rule.get("match")
    if match is not None:
        out["match"] = _check_match(match, f"{where}.match", apis)
    for name in ("session", "entry"):
        scope = rule.get(name)
        if scope is not None:
            if not isinstance(scope, str) or not SCOPES[name].match(scope):
                raise _bad_rule(f"{name} is {SCOPE_TEXT[name]}", f"{where}.{name}")
            out[name] = scope
    return out


SCOPES = {
    "session": re.compile(r"^(?!\.\.?$)[A-Za-z0-9_.-]{1,64}$"),
    "entry": re.compile(r"^ent_[A-Za-z0-9]{1,64}$"),
}
SCOPE_TEXT = {
    "session": "a replay session's name (1 to 64 letters, digits, '.', '_' or '-')",
    "entry": "an entry's id (ent_...)",
}


def _check_match(match: Any, where: str, apis: Sequence[str]) -> dict[str, str]:
    if not isinstance(match, dict) or not match:
        raise _bad_rule(f"match is an object with one or more of: {', '.join(MATCH_KEYS)}", where)
    for name, value in match.items():
        if name not in MATCH_KEYS:
            raise _bad_rule(f"match takes no key {name[:40]!r}; its keys: {', '.join(MATCH_KEYS)}", where)
        if not isinstance(value, str) or not 0 < len(value) <= 1000:
            raise _bad_rule(f"match.{name} is a text of 1 to 1000 characters", f"{where}.{name}")
    if apis and "api" in match and match["api"] not in apis:
        raise _bad_rule(f"match.api is one of {', '.join(apis)}", f"{where}.api")
    return dict(match)


def _bad_rule(message: str, param: str) -> BadRequest:
    return BadRequest(f"Invalid fault rule: {message}.", param=param, code="invalid_fault")


def rule_fault(rule: dict[str, Any]) -> Fault:
    """The fault a (checked) rule injects."""
    return Fault(rule["kind"], {name: rule[name] for name in KINDS[rule["kind"]]})


def rule_key(rule: dict[str, Any]) -> str:
    """What a rule's count is kept under: its canonical JSON's digest (a changed rule counts anew)."""
    text = json.dumps(rule, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def draw(seed: Any, number: int) -> float:
    """The number in [0, 1) that decides call `number` of a probability rule: from the seed and the
    number alone, so a run gives the same pattern every time, in any process."""
    digest = hashlib.sha256(f"{seed}:{number}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def matches(
    rule: dict[str, Any],
    *,
    api: str,
    model: str,
    fingerprint: str,
    text: Callable[[], str],
    session: str | None,
    entry_id: str | None,
) -> bool:
    """Whether a rule applies to a call (`text()` gives the request as JSON, read only when asked)."""
    if "session" in rule and rule["session"] != session:
        return False
    if "entry" in rule and rule["entry"] != entry_id:
        return False
    match = rule.get("match")
    if not match:
        return True
    given = {"api": api, "model": model, "fingerprint": fingerprint}
    for name, wanted in match.items():
        if name == "contains":
            if wanted not in text():
                return False
        elif given[name] != wanted:
            return False
    return True

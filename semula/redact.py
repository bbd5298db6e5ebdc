"""Secret redaction for stored requests, logs, provider error text and exports (pure, no I/O).

Patterns demand realistic lengths and shapes, so prose about "tokens" or "sk-learn" is left alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

REDACTED = "[REDACTED]"

# Credential-ish names for key=value pairs: api_key, X-Api-Key, client_secret, db.password, AUTH_TOKEN...
_CREDENTIAL_NAME = (
    r"(?:[a-z0-9]+[_-]){0,4}"
    r"(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|secret|token|password|passwd|pwd|credentials?)"
    r"(?:[_-][a-z0-9]+){0,4}"
)


def _value(chars: str, shortest: int) -> str:
    """A regex for a secret-looking value made of `chars` (a character class body)."""
    # It has a digit or symbol, or is too long for a word: "password: required" and "token: string" stay.
    # And it is not "[REDACTED]" already, so redaction is idempotent and contains_secret() is false after it.
    return (
        rf"(?!\[REDACTED\])(?:(?=[{chars}]*(?![A-Za-z\s])[{chars}])[{chars}]{{{shortest},}}|[{chars}]{{12,}})"
    )


_BARE = r"^\s\"',;&"

# Where a pattern has groups named secret*, only those groups are replaced, so the text keeps
# which header or key held the secret ("api_key=[REDACTED]", "Bearer [REDACTED]").
PATTERNS: dict[str, re.Pattern[str]] = {
    "pem_private_key": re.compile(
        r"-----BEGIN ([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----.*?(?:-----END \1-----|\Z)", re.DOTALL
    ),
    "anthropic_key": re.compile(r"(?<![\w-])sk-ant-[A-Za-z0-9_-]{20,}"),
    # Legacy sk-..., project sk-proj-..., service account and admin keys; a real key has digits and
    # letters, which keeps out "sk-learn-is-a-machine-learning-library".
    "openai_key": re.compile(
        r"(?<![\w-])sk-(?!ant-)(?=[A-Za-z0-9_-]*[0-9])(?=[A-Za-z0-9_-]*[A-Za-z])[A-Za-z0-9_-]{20,}"
    ),
    "google_api_key": re.compile(r"(?<![\w-])AIza[0-9A-Za-z_-]{35}(?![\w-])"),
    "aws_access_key_id": re.compile(r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[0-9A-Z]{16}(?![A-Za-z0-9])"),
    "github_token": re.compile(r"(?<![\w-])(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    "slack_token": re.compile(r"(?<![\w-])xox[abprs]-[A-Za-z0-9-]{10,}"),
    "stripe_key": re.compile(r"(?<![\w-])(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"),
    "jwt": re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    "bearer_token": re.compile(r"\b(?i:bearer)\s+(?P<secret>" + _value(r"A-Za-z0-9._~+/=-", 16) + ")"),
    "authorization_header": re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|digest|token)\s+)?"
        r"(?!bearer\b)(?P<secret>" + _value(_BARE, 8) + ")"
    ),
    "url_credentials": re.compile(r"(?<=://)[^/\s:@]{1,256}:(?P<secret>(?!\[REDACTED\])[^/\s@]{1,256})@"),
    "key_value_credential": re.compile(
        r"(?i)\b" + _CREDENTIAL_NAME + r"[\"']?\s*[:=]\s*"
        r"(?:\"(?P<secret>" + _value(r'^"\n', 4) + r")\""
        r"|'(?P<secret2>" + _value(r"^'\n", 4) + r")'"
        r"|(?P<secret3>" + _value(_BARE, 6) + "))"
    ),
}

# An operator's own secret shorter than this is too likely to occur in ordinary text.
_MIN_EXTRA_SECRET = 6


def redact_text(text: str, extra_secrets: Iterable[str] = ()) -> str:
    """The text with every recognised secret and every exact `extra_secrets` string replaced by [REDACTED]."""
    for secret in sorted(
        {s for s in extra_secrets if s and len(s) >= _MIN_EXTRA_SECRET}, key=len, reverse=True
    ):
        text = text.replace(secret, REDACTED)
    for pattern in PATTERNS.values():
        text = pattern.sub(_replace, text)
    return text


def redact_obj(obj: Any, extra_secrets: Iterable[str] = ()) -> Any:
    """A copy of a JSON value with every string redacted; keys, numbers and structure are unchanged."""
    secrets = tuple(extra_secrets)
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {key: redact_obj(value, secrets) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [redact_obj(value, secrets) for value in obj]
    return obj


def contains_secret(obj: Any, extra_secrets: Iterable[str] = ()) -> bool:
    """Whether any string in a JSON value holds something redact_obj() would replace."""
    secrets = tuple(extra_secrets)
    if isinstance(obj, str):
        return redact_text(obj, secrets) != obj
    if isinstance(obj, dict):
        return any(contains_secret(value, secrets) for value in obj.values())
    if isinstance(obj, list | tuple):
        return any(contains_secret(value, secrets) for value in obj)
    return False


def provider_error_text(
    status: int, body: bytes | str, extra_secrets: Iterable[str] = (), limit: int = 300
) -> str:
    """A provider's error for people to read: its status and text, credentials redacted, then cut.

    Redaction comes before the cut, so a key straddling the limit is never left half visible.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    text = redact_text(text[: limit * 16], extra_secrets)
    text = " ".join(text.split())
    return f"{status}: {text[:limit]}" if text else str(status)


def _replace(match: re.Match[str]) -> str:
    spans = [match.span(name) for name in match.re.groupindex if name.startswith("secret")]
    spans = [(start, end) for start, end in spans if start >= 0]
    if not spans:
        return REDACTED
    text, offset = match.group(0), match.start()
    for start, end in sorted(spans, reverse=True):
        text = text[: start - offset] + REDACTED + text[end - offset :]
    return text

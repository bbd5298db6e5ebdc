"""Secret redaction for stored requests, logs, provider error text and exports (pure, no I/O).

Patterns demand realistic lengths and shapes, so prose about "tokens" or "sk-learn" is left alone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from functools import lru_cache
from typing import Any

REDACTED = "[REDACTED]"

# Credential-ish names for key=value pairs: api_key, X-Api-Key, client_secret, db.password, AUTH_TOKEN...
_CREDENTIAL_NAME = (
    r"(?:[a-z0-9]+[_-]){0,4}"
    r"(?:api[_-]?key|access[_-]?key|secret[_-]?key|private[_-]?key|secret|token|password|passwd|pwd|credentials?"
    # Azure connection strings: storage's AccountKey=, Service Bus's and Event Hubs' SharedAccessKey=.
    r"|account[_-]?key|shared[_-]?access[_-]?key)"
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
    # semula's own tokens (semula/service/auth.py): smt_ and 43 URL-safe characters.
    "semula_token": re.compile(r"(?<![\w-])smt_[A-Za-z0-9_-]{32,}"),
    "gitlab_token": re.compile(r"(?<![\w-])gl(?:pat|dt|rt|ptt|cbt|oas)-[A-Za-z0-9_.-]{20,}"),
    "huggingface_token": re.compile(r"(?<![\w-])hf_[A-Za-z0-9]{30,}(?![\w-])"),
    "npm_token": re.compile(r"(?<![\w-])npm_[A-Za-z0-9]{36,}(?![\w-])"),
    "sendgrid_key": re.compile(r"(?<![\w-])SG\.[A-Za-z0-9_-]{16,32}\.[A-Za-z0-9_-]{30,64}"),
    "twilio_key": re.compile(r"(?<![A-Za-z0-9])SK[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
    # The webhook URL is the credential: anyone holding it can post to the channel.
    "slack_webhook": re.compile(
        r"(?<=hooks\.slack\.com/)(?P<secret>(?:services|workflows|triggers)/[A-Za-z0-9_/-]{16,})"
    ),
    # An Azure shared access signature (a SAS URL or SharedAccessSignature= in a connection string):
    # its sig= is the HMAC that grants the access; the other fields only say what it grants.
    "azure_sas_signature": re.compile(r"(?<=[?&;\s])sig=(?P<secret>(?!\[REDACTED\])[A-Za-z0-9%+/=_-]{20,})"),
    "jwt": re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"),
    "bearer_token": re.compile(r"\b(?i:bearer)\s+(?P<secret>" + _value(r"A-Za-z0-9._~+/=-", 16) + ")"),
    "authorization_header": re.compile(
        r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?(?:(?:basic|digest|token)\s+)?"
        r"(?!bearer\b)(?P<secret>" + _value(_BARE, 8) + ")"
    ),
    # Database and broker URLs (postgresql://, mysql://, mongodb+srv://, amqp://...); a Redis URL
    # often has a password and no user (redis://:password@host).
    "url_credentials": re.compile(r"(?<=://)[^/\s:@]{0,256}:(?P<secret>(?!\[REDACTED\])[^/\s@]{1,256})@"),
    # Every pair on a line: a bare value is never the name of the next pair, so in
    # "password: aws_secret_access_key = wJalr..." the first name does not take the second as its value.
    "key_value_credential": re.compile(
        r"(?i)\b" + _CREDENTIAL_NAME + r"[\"']?\s*[:=]\s*"
        r"(?:\"(?P<secret>" + _value(r'^"\n', 4) + r")\""
        r"|'(?P<secret2>" + _value(r"^'\n", 4) + r")'"
        r"|(?!" + _CREDENTIAL_NAME + r"[\"']?\s*[:=])(?P<secret3>" + _value(_BARE, 6) + "))"
    ),
}

# Literals that every match of a pattern contains: a pattern runs only on text that holds one.
# `in` scans at memory speed, while a pattern that starts with a lookbehind is tried at every
# position (~0.3 s per pattern on 8 MB), and a bundle or a request body can be that large.
# The case-insensitive patterns' literals are lowercase and checked against ASCII text only.
_NEEDLES: dict[str, tuple[str, ...]] = {
    "pem_private_key": ("-----BEGIN",),
    "anthropic_key": ("sk-ant-",),
    "openai_key": ("sk-",),
    "google_api_key": ("AIza",),
    "aws_access_key_id": ("AKIA", "ASIA"),
    "github_token": ("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"),
    "slack_token": ("xox",),
    "stripe_key": ("_live_", "_test_"),
    "semula_token": ("smt_",),
    "gitlab_token": ("glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "gloas-"),
    "huggingface_token": ("hf_",),
    "npm_token": ("npm_",),
    "sendgrid_key": ("SG.",),
    "twilio_key": ("SK",),
    "slack_webhook": ("hooks.slack.com/",),
    "azure_sas_signature": ("sig=",),
    "jwt": ("eyJ",),
    "bearer_token": ("bearer",),
    "authorization_header": ("authorization",),
    "url_credentials": ("://",),
    "key_value_credential": ("key", "secret", "token", "passw", "pwd", "credential"),
}
_FOLDED = frozenset(name for name, pattern in PATTERNS.items() if pattern.flags & re.IGNORECASE) | {
    "bearer_token"  # (?i:...) applies to a group only, which the pattern's flags do not show
}

# An operator's own secret shorter than this is too likely to occur in ordinary text.
_MIN_EXTRA_SECRET = 6

# Characters that print as nothing: a key split by them ("sk-ab\u200bcd…") still works when pasted
# somewhere that drops them, and no pattern sees it.
_INVISIBLE = re.compile("[\u00ad\u180e\u200b-\u200d\u2060-\u2064\ufeff]")


def redact_text(text: str, extra_secrets: Iterable[str] = (), *, patterns: bool = True) -> str:
    """The text with every recognised secret and every exact `extra_secrets` string replaced by [REDACTED].

    An extra secret is also found as a JSON string literal writes it (quotes and backslashes escaped),
    since it may sit in JSON held as text. `patterns=False` replaces the extra secrets only.

    A secret that only shows once invisible characters are removed is redacted too; the text then
    loses its invisible characters (an emoji's zero-width joiner among them), and only then.
    """
    return _redact_text(text, _exact_forms(tuple(extra_secrets)), patterns)


@lru_cache(maxsize=64)
def _exact_forms(extra_secrets: tuple[str, ...]) -> tuple[str, ...]:
    """The operator's secrets long enough to look for, each as written and as a JSON literal writes it,
    longest first (so a secret holding a shorter one goes whole)."""
    forms = set()
    for secret in extra_secrets:
        if secret and len(secret) >= _MIN_EXTRA_SECRET:
            forms.update((secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]))
    return tuple(sorted(forms, key=len, reverse=True))


def _redact_text(text: str, forms: tuple[str, ...], patterns: bool) -> str:
    """redact_text() with the extra secrets given as _exact_forms()."""
    text = _redact(text, forms, patterns)
    if not text.isascii() and _INVISIBLE.search(text):
        visible = _INVISIBLE.sub("", text)
        redacted = _redact(visible, forms, patterns)
        if redacted != visible:
            return redacted
    return text


def _redact(text: str, forms: tuple[str, ...], patterns: bool) -> str:
    for secret in forms:
        if secret in text:
            text = text.replace(secret, REDACTED)
    if not patterns:
        return text
    lowered = None
    for name, pattern in PATTERNS.items():
        if name not in _FOLDED:
            run = any(needle in text for needle in _NEEDLES[name])
        elif text.isascii():
            lowered = lowered if lowered is not None else text.lower()
            run = any(needle in lowered for needle in _NEEDLES[name])
        else:
            run = True  # (?i) folds some non-ASCII letters to ASCII ones (the Kelvin sign is k)
        if run:
            redacted = pattern.sub(_replace, text)
            if redacted != text:
                text, lowered = redacted, None
    return text


def redact_obj(obj: Any, extra_secrets: Iterable[str] = (), *, patterns: bool = True) -> Any:
    """A copy of a JSON value with every string redacted; keys, numbers and structure are unchanged.

    A string that holds a JSON object or array (a tool call's arguments, a structured output) stays
    valid JSON: when redacting its text would break it, its values are redacted one by one instead,
    and a value whose key makes it a credential ("password") is replaced whole.
    """
    return _redact_value(obj, _exact_forms(tuple(extra_secrets)), patterns)


def _redact_value(obj: Any, forms: tuple[str, ...], patterns: bool) -> Any:
    if isinstance(obj, str):
        return _redact_string(obj, forms, patterns)
    if isinstance(obj, dict):
        return {key: _redact_value(value, forms, patterns) for key, value in obj.items()}
    if isinstance(obj, list | tuple):
        return [_redact_value(value, forms, patterns) for value in obj]
    return obj


def _redact_string(text: str, forms: tuple[str, ...], patterns: bool) -> str:
    redacted = _redact_text(text, forms, patterns)
    if redacted == text or text.lstrip()[:1] not in ("{", "["):
        return redacted
    try:
        json.loads(redacted)
        return redacted  # still JSON: the replacements sat inside its strings
    except ValueError:
        pass
    try:
        value = json.loads(text)
    except ValueError:
        return redacted  # it was never JSON
    if not isinstance(value, dict | list):
        return redacted
    clean = _redact_json(value, forms, patterns)
    if clean == value:
        return text  # what matched was the JSON's escapes or punctuation, not a secret in its strings
    compact = ": " not in text and ", " not in text
    return json.dumps(clean, ensure_ascii=False, separators=(",", ":") if compact else None)


def _redact_json(value: Any, forms: tuple[str, ...], patterns: bool) -> Any:
    """_redact_value() over a parsed JSON value, with each object member read together with its key."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            clean = _redact_json(item, forms, patterns)
            if patterns and clean == item and isinstance(item, str):
                pair = json.dumps({key: item}, ensure_ascii=False)
                if _redact_text(pair, forms, patterns) != pair:
                    clean = REDACTED
            out[key] = clean
        return out
    if isinstance(value, list):
        return [_redact_json(item, forms, patterns) for item in value]
    return _redact_value(value, forms, patterns)


def redact_answer(
    response: Any,
    chunks: list[Any] | None,
    secrets: Iterable[str],
    redact_response: Callable[[Any, Callable[[Any], Any]], Any] | None = None,
) -> tuple[Any, list[Any] | None]:
    """An answer (response and stream events) with the operator's `secrets` replaced, whoever wrote it.

    Only the exact secrets: an answer a person wrote may hold credential-shaped text on purpose (a
    fixture's fake key). `redact_response(response, redact)` applies `redact` to what of the response
    is text (Dialect.redact_response). Stream events that hold a secret, whole or split across them
    (their strings joined along each path, where every text delta of an answer sits), are dropped:
    a replay then makes the stream from the redacted response.
    """
    forms = _exact_forms(tuple(secrets))
    if not forms:
        return response, chunks

    def clean(value: Any) -> Any:
        return _redact_value(value, forms, False)

    response = redact_response(response, clean) if redact_response else clean(response)
    if chunks is not None and _holds_secret(chunks, forms):
        chunks = None if response else clean(chunks)
    return response, chunks


def _holds_secret(chunks: list[Any], forms: tuple[str, ...]) -> bool:
    """Whether stream events hold a secret (given as _exact_forms()), in one string or split across
    several."""
    joined: dict[str, list[str]] = {}
    _strings_by_path(chunks, "", joined)
    for parts in joined.values():
        text = "".join(parts)
        if _redact_text(text, forms, False) != text:
            return True
    return False


def _strings_by_path(value: Any, path: str, out: dict[str, list[str]]) -> None:
    """Every string of a JSON value, in order, grouped by the path it sits at (list indexes left out)."""
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            out.setdefault(where, []).append(item)
        elif isinstance(item, dict):
            stack.extend((v, f"{where}.{k}") for k, v in reversed(item.items()))
        elif isinstance(item, list | tuple):
            stack.extend((v, f"{where}[]") for v in reversed(item))


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


def secret_paths(obj: Any, extra_secrets: Iterable[str] = (), path: str = "") -> Iterator[str]:
    """Where a JSON value holds something shaped like a credential: paths, never the values.

    Objects add `.key`, lists `[]`; a credential used as an object key is reported as the path of
    that object followed by " (an object key)", and is itself [REDACTED] in every path.
    """
    secrets = tuple(extra_secrets)
    stack: list[tuple[Any, str]] = [(obj, path)]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            if contains_secret(value, secrets):
                yield redact_text(where, secrets)
        elif isinstance(value, dict):
            if any(contains_secret(key, secrets) for key in value):
                yield redact_text(where, secrets) + " (an object key)"
            stack.extend((item, f"{where}.{key}") for key, item in reversed(value.items()))
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{where}[]") for item in reversed(value))


def provider_error_text(
    status: int, body: bytes | str, extra_secrets: Iterable[str] = (), limit: int = 300
) -> str:
    """A provider's error for people to read: its status and text, credentials redacted, then cut.

    Redaction comes before the cut, so a key straddling the limit is never left half visible. Only
    the first limit * 16 characters are read (a provider's error can be megabytes, and redaction
    reads every character). A credential cut in two by that first read cannot be recognised, and
    collapsing the whitespace before it could bring it into the shown text; so when the read cut
    the text, the last PARTIAL_TAIL characters of what it read (after the collapse) are never shown.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    cut = len(text) > limit * 16
    text = " ".join(redact_text(text[: limit * 16], extra_secrets).split())
    if cut:
        tail = max([PARTIAL_TAIL, *(len(secret) for secret in extra_secrets)])
        text = text[: max(0, len(text) - tail)]
    return f"{status}: {text[:limit]}" if text else str(status)


# Longer than the credentials the patterns recognise (API keys are under 200 characters, a JWT a few
# hundred), so none straddling the read can show: an error body longer than the read shows its first
# `limit` characters unless it is mostly whitespace, and then only what came well before the cut.
PARTIAL_TAIL = 2048


def _replace(match: re.Match[str]) -> str:
    spans = [match.span(name) for name in match.re.groupindex if name.startswith("secret")]
    spans = [(start, end) for start, end in spans if start >= 0]
    if not spans:
        return REDACTED
    text, offset = match.group(0), match.start()
    for start, end in sorted(spans, reverse=True):
        text = text[: start - offset] + REDACTED + text[end - offset :]
    return text

"""What a recording keeps besides the body: a few provider response headers and stream timing (pure).

An entry's (or a later answer's) `meta` is `{"headers": {name: value}, "gaps": [seconds, ...]}`.
Record-through writes it from a provider's response; a bundle import takes it from a file someone
may have edited. Replay sends the headers back to the client as HTTP response headers and sleeps the
gaps, so both ends go through here: an import refuses what a provider could not have sent
(`MetaSchema`), and replay sends only what passes `replayable` (rows written before the check,
or by hand, are filtered rather than trusted). Never a cookie, a request id, or a line break that
would split one header into two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

# Provider response headers a recording keeps and replays: timing and rate limits an app may read
# (never cookies, request ids or anything that names the operator's account). Prefixes, lowercase.
RECORDED_HEADERS = (
    "openai-processing-ms",
    "openai-model",
    "openai-version",
    "x-ratelimit-",
    "anthropic-ratelimit-",
)

MAX_HEADERS = 32
MAX_HEADER_VALUE = 1024
MAX_GAP_SECONDS = 600.0  # far above any pause a provider makes between two stream events
MAX_GAPS = 100_000

# A header name as providers send them: ASCII letters, digits and hyphens (checked before lowering:
# str.lower() makes ASCII of some other letters, the Kelvin sign's "k" among them).
_NAME = re.compile(r"[A-Za-z0-9-]+", re.ASCII)
_VALUE = re.compile(r"[\x20-\x7e]*")  # printable ASCII: no CR, LF or other control characters


def kept(name: str) -> bool:
    """Whether a provider response header is one a recording keeps."""
    return _NAME.fullmatch(name) is not None and name.lower().startswith(RECORDED_HEADERS)


def safe_value(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= MAX_HEADER_VALUE and _VALUE.fullmatch(value) is not None


def safe_headers(headers: Mapping[str, Any]) -> dict[str, str]:
    """The headers a recording keeps: kept names with safe values, anything else dropped."""
    return {name: value for name, value in headers.items() if kept(name) and safe_value(value)}


def replayable(meta: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The recorded headers replay may send (safe_headers, at most MAX_HEADERS of them)."""
    headers = meta.get("headers")
    if not isinstance(headers, Mapping):
        return []
    return list(safe_headers(headers).items())[:MAX_HEADERS]


def recordable(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What record-through keeps of a provider's answer, within the limits an import checks (so an
    export always imports again): kept headers with safe values; gaps clamped to MAX_GAP_SECONDS,
    at most MAX_GAPS of them. Empty parts are left out."""
    out: dict[str, Any] = {}
    headers = dict(replayable(meta))
    if headers:
        out["headers"] = headers
    gaps = meta.get("gaps")
    if gaps:
        out["gaps"] = [min(max(0.0, float(gap)), MAX_GAP_SECONDS) for gap in gaps[:MAX_GAPS]]
    return out


def _check_name(name: str) -> None:
    if not kept(name):
        raise ValidationError(
            f"{name!r} is not a provider header semula records; a recording keeps only "
            "openai-processing-ms, openai-model, openai-version, x-ratelimit-* and anthropic-ratelimit-*."
        )


def _check_value(value: str) -> None:
    if not safe_value(value):
        raise ValidationError(
            f"a header value must be printable ASCII of at most {MAX_HEADER_VALUE} characters "
            "(no line breaks or other control characters)."
        )


class MetaSchema(Schema):
    """`meta` as a bundle may carry it: what record-through could have written, nothing else."""

    class Meta:
        unknown = RAISE

    headers = fields.Dict(
        keys=fields.String(validate=_check_name),
        values=fields.String(validate=_check_value),
        validate=validate.Length(max=MAX_HEADERS),
    )
    gaps = fields.List(
        fields.Float(allow_nan=False, validate=validate.Range(min=0, max=MAX_GAP_SECONDS)),
        validate=validate.Length(max=MAX_GAPS),
    )

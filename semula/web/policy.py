"""Request policy shared by both pipelines: the proxy's WSGI fast path (semula/web/fastpath.py) and the
Flask app (the REST API, the dashboard, /metrics). Each rule is written once here; a pipeline only
hands it what its request object holds (docs/decisions/0043-request-policy.md).

- Authentication: the bearer secret of an Authorization header (the scheme in any case), the
  Anthropic `x-api-key` that stands for one, the token's principal, and the proxy's principal cache.
- Errors: a service error's HTTP status line, the mapping of werkzeug's HTTP errors and database
  failures to semula errors, and the logging of what the client is not told.
- Bodies: the size limit and how a body is read and parsed.
"""

from __future__ import annotations

import hashlib
import logging
import time
from http import HTTPStatus
from typing import IO, Any

from semula.config import Settings
from semula.core import errors, jsonio
from semula.db import DatabaseError
from semula.service import LOCAL, Context, Principal
from semula.service.auth import principal_for_hash, token_hash

logger = logging.getLogger("semula.web")

# --- authentication ------------------------------------------------------------------------------------

# How long the proxy trusts a token it has checked (docs/decisions/0012-proxy-hot-path.md). The REST
# API and the dashboard check every request afresh.
PRINCIPAL_TTL = 1.0


def bearer(authorization: str | None) -> str | None:
    """The secret of `Authorization: Bearer <secret>`, stripped ("" when empty); None for another scheme."""
    scheme, _, secret = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer":  # RFC 7235: the scheme word is case-insensitive
        return None
    return secret.strip()


def authorization(header: str | None, api_key: str | None = None) -> str | None:
    """The Authorization header; without one, an `x-api-key` token (the Anthropic SDK's) stands for it.

    Pass `api_key` only on the routes that accept it (the Anthropic Messages API).
    """
    if header is None and api_key:
        return "Bearer " + api_key
    return header


def authenticate(ctx: Context, header: str | None) -> Principal:
    """The principal for an Authorization header; 401 when it is missing, unknown or revoked."""
    if not ctx.settings.auth:
        return LOCAL
    secret = bearer(header)
    if secret is None:
        raise errors.Unauthorized()
    if not secret:
        raise errors.Unauthorized("The token is unknown or revoked.")
    return principal_for_hash(ctx, token_hash(secret))


class PrincipalCache:
    """Principals by Authorization header for PRINCIPAL_TTL, so a replay hit costs no token query.

    A revoked token or a disabled workspace is refused by the proxy within the TTL. Only accepted
    tokens are kept, under a hash of the header.
    """

    def __init__(self, ttl: float = PRINCIPAL_TTL, size: int = 1024):
        self.ttl = ttl
        self.size = size
        self._kept: dict[bytes, tuple[float, Principal]] = {}

    def authenticate(self, ctx: Context, header: str | None) -> Principal:
        if not ctx.settings.auth or not header:
            return authenticate(ctx, header)
        key = hashlib.sha256(header.encode()).digest()
        now = time.monotonic()
        kept = self._kept.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        principal = authenticate(ctx, header)
        if len(self._kept) >= self.size:
            self._kept.clear()
        self._kept[key] = (now + self.ttl, principal)
        return principal


# --- errors --------------------------------------------------------------------------------------------

# The WSGI status line of every HTTP status ("424 Failed Dependency").
STATUS_LINES = {status.value: f"{status.value} {status.phrase}" for status in HTTPStatus}
STATUS_LINES[499] = "499 Client Closed Request"  # nginx's, for a held call's client gone (ClientGone)
# werkzeug's HTTP errors (routing, a too large body) that have a semula error of their own.
HTTP_ERRORS: dict[int, type[errors.SemulaError]] = {
    404: errors.NotFound,
    405: errors.MethodNotAllowed,
    413: errors.PayloadTooLarge,
}


def status_line(status: int) -> str:
    return STATUS_LINES.get(status) or f"{status} Error"


def from_http(status: int, description: str | None) -> errors.SemulaError:
    """The semula error of one of werkzeug's HTTP errors (404 routing, 405, 413, …)."""
    cls = HTTP_ERRORS.get(status)
    if cls is not None:
        return cls()
    err = errors.SemulaError(description or "HTTP error")
    err.status, err.code, err.type = status, "http_error", "invalid_request_error"
    return err


def from_database(exc: DatabaseError, path: str) -> errors.SemulaError:
    """A database failure as the client sees it (503 when busy or unreachable); the detail goes to the log."""
    logger.warning(
        "database error",
        extra={"error": type(exc).__name__, "kind": exc.kind, "detail": exc.describe(), "path": path},
    )
    return errors.from_database(exc)


def unexpected(exc: Exception, path: str) -> errors.SemulaError:
    """A bug: logged with its traceback, and a plain 500 to the client."""
    logger.error("unhandled error", exc_info=exc, extra={"path": path})
    return errors.SemulaError("Internal error.")


# --- bodies --------------------------------------------------------------------------------------------


def body_limit(settings: Settings) -> int:
    """The largest request body either pipeline reads (SEMULA_MAX_BODY_BYTES); a bundle import has its own."""
    return settings.max_body_bytes


def read_body(stream: IO[bytes], content_length: str | None, limit: int) -> bytes:
    """The whole body, at most `limit` bytes: 413 payload_too_large past it, declared or not."""
    length = content_length or ""
    if length.isdigit() and int(length) > limit:
        raise errors.PayloadTooLarge()
    try:
        raw = stream.read(int(length) if length.isdigit() else limit + 1)
    except TimeoutError:  # the worker's wait for the client's next bytes (SEMULA_BODY_TIMEOUT)
        raise errors.BodyTimeout(
            "The request body stopped coming before its end; the connection is closed."
        ) from None
    except (OSError, ValueError):  # pywsgi's reading of a broken chunk size or a body cut short
        raise errors.UnreadableBody(
            "The request body could not be read: its chunked encoding is malformed or it ends before "
            "its Content-Length."
        ) from None
    if len(raw) > limit:
        raise errors.PayloadTooLarge()
    return raw


def parse_json(raw: bytes) -> Any:
    """The parsed JSON body; 400 with a clear message when it is not JSON by semula.core.jsonio's rules."""
    return jsonio.loads(raw)


def read_json(raw: bytes) -> tuple[Any, bool]:
    """parse_json(), and whether the body is plain (semula.core.jsonio.read)."""
    return jsonio.read(raw)

"""How the daemon reaches semula: the service layer on the database, or the server's REST API.

Four actions, the same either way: the candidates (parked calls in projects with the answerer on),
a claim by id, an answer, giving a claim back. Over HTTP (SEMULA_ANSWERER_SERVER) the daemon holds
no database URL and its user need not read the database at all: it holds one editor token with
record scope (the narrowest role that may claim and answer).
docs/decisions/0042-answerer-supervisor-and-http-mode.md.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import requests

from semula.core.errors import InvalidAnswer, PendingResolved, SemulaError
from semula.service import Context
from semula.service import answerer as answerer_service
from semula.service import pending as pending_service
from semula.service.auth import TOKEN_PREFIX

# Every REST call is short; a server that does not answer in this long is as good as down.
HTTP_TIMEOUT = 30.0


class Unavailable(Exception):
    """The server could not be reached or failed (5xx); the poll or the release is tried again later."""


class TokenRefused(Exception):
    """The server refused the daemon's token (401: unknown, revoked, expired; 403: a role, scope or
    project binding that may not poll): no later poll will do better, so the daemon stops.

    `reason` is the server's error message, which names no secret."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


# What a refusal tells the operator to do (docs/answerer.md, decision 0042: the narrowest token that works).
TOKEN_ADVICE = (
    "give the daemon an editor token with record scope, not bound to a project "
    "(semula token create --role editor --scope record --name answerer) in SEMULA_ANSWERER_TOKEN, "
    "then restart it (docs/answerer.md)"
)


def public_url(url: str) -> str:
    """The URL as logs may show it: no user, password, query or fragment."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def token_label(token: str | None) -> str:
    """Which token, for a person who holds it: its first characters, never enough to use it.

    A semula secret is `smt_` and 43 random characters (256 bits); the 4 shown leave 232 unknown.
    Tokens have no other public name the daemon could know before the server accepts one."""
    if not token:
        return "SEMULA_ANSWERER_TOKEN (not set)"
    if not token.startswith(TOKEN_PREFIX):
        return f"SEMULA_ANSWERER_TOKEN (not a semula token: it does not start with {TOKEN_PREFIX})"
    return f"SEMULA_ANSWERER_TOKEN ({token[: len(TOKEN_PREFIX) + 4]}…)"


def refusal(base_url: str, token: str | None, exc: TokenRefused) -> str:
    """The one line the daemon prints when the server refuses its token: which token, why, what to do."""
    return (
        f"semula-answerer: {public_url(base_url)} refuses {token_label(token)}: "
        f"{exc.reason.rstrip('.')} (HTTP {exc.status}); {TOKEN_ADVICE}"
    )


class Server(Protocol):
    # Where the daemon polls, as a log line may show it (None: the database, whose URL is a secret).
    poll_url: str | None

    def candidates(self, *, after: str | None, limit: int) -> list[dict[str, Any]]: ...
    def claim(self, pending_id: str, worker: str, lease_seconds: int) -> dict[str, Any] | None: ...
    def answer(self, pending_id: str, payload: Any, summary: str) -> None: ...
    def release(self, pending_id: str, worker: str) -> None: ...


class ServiceServer:
    """The service layer on the database, as the daemon's principal (daemon.principal)."""

    poll_url = None

    def __init__(self, ctx: Context):
        self.ctx = ctx

    def candidates(self, *, after: str | None, limit: int) -> list[dict[str, Any]]:
        return answerer_service.candidates(self.ctx, after=after, limit=limit)

    def claim(self, pending_id: str, worker: str, lease_seconds: int) -> dict[str, Any] | None:
        return pending_service.claim_by_id(self.ctx, pending_id, worker, lease_seconds)

    def answer(self, pending_id: str, payload: Any, summary: str) -> None:
        pending_service.answer(self.ctx, pending_id, payload, actor="agent", summary=summary)

    def release(self, pending_id: str, worker: str) -> None:
        pending_service.release_claim(self.ctx, pending_id, worker)


def _error(response: requests.Response) -> Exception:
    """The REST error object as the service layer's exception (invalid_answer keeps its message and param)."""
    if response.status_code >= 500:
        return Unavailable(f"http:{response.status_code}")
    try:
        error = response.json()["error"]
        message, code, param = error.get("message"), error.get("code"), error.get("param")
    except (ValueError, KeyError, TypeError, AttributeError):
        message, code, param = None, None, None
    if response.status_code in (401, 403):
        return TokenRefused(response.status_code, message or f"HTTP {response.status_code}")
    if code == InvalidAnswer.code:
        return InvalidAnswer(message, param=param)
    if code == PendingResolved.code:
        return PendingResolved(message)
    error_type = type("ServerError", (SemulaError,), {"status": response.status_code})
    return error_type(message, param=param, code=code or f"http_{response.status_code}")


class HttpServer:
    """semula's REST API with the answerer's own token; nothing of the database in this process."""

    def __init__(self, base_url: str, token: str | None, timeout: float = HTTP_TIMEOUT):
        self.base_url = base_url.rstrip("/") + "/api/v1"
        self.poll_url = public_url(self.base_url + "/answerer/candidates")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.timeout = timeout
        self._local = threading.local()

    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        # One session (its connection pool) per thread: the daemon calls from several threads.
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        try:
            response = session.request(
                method,
                self.base_url + path,
                headers=self._headers,
                timeout=self.timeout,
                allow_redirects=False,
                **kwargs,
            )
        except requests.RequestException as exc:
            # The type only: requests' messages carry the URL.
            raise Unavailable(type(exc).__name__) from None
        if response.status_code >= 300:
            raise _error(response)
        return response

    def candidates(self, *, after: str | None, limit: int) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"limit": limit}
        if after:
            params["after"] = after
        # Anything but the candidates (a 404 or a page from something else at that URL, say) is a
        # failed poll, logged and tried again; a refused token is not (TokenRefused).
        try:
            response = self._request("GET", "/answerer/candidates", params=params)
        except SemulaError as exc:
            raise Unavailable(f"http:{exc.status}") from None
        try:
            return response.json()["data"]
        except (ValueError, KeyError, TypeError):
            raise Unavailable(f"http:{response.status_code}:not_candidates") from None

    def claim(self, pending_id: str, worker: str, lease_seconds: int) -> dict[str, Any] | None:
        response = self._request(
            "POST", f"/pending/{pending_id}/claim", json={"worker": worker, "lease_seconds": lease_seconds}
        )
        return None if response.status_code == 204 else response.json()

    def answer(self, pending_id: str, payload: Any, summary: str) -> None:
        # The REST body is the answer itself; an object's `summary` is the revision's (openapi: Answer).
        body = {**payload, "summary": summary} if isinstance(payload, dict) else payload
        self._request("POST", f"/pending/{pending_id}/answer", json=body)

    def release(self, pending_id: str, worker: str) -> None:
        self._request("POST", f"/pending/{pending_id}/release", json={"worker": worker})

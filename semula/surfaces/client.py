"""A small REST client for semula's /api/v1 (used by the CLI agent commands, the MCP server and tests).

The base URL comes from SEMULA_URL and the token from SEMULA_TOKEN. Every failure is a ClientError
carrying the OpenAI error object; the token never appears in a message, a repr or a log line.
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    import requests

DEFAULT_URL = "http://127.0.0.1:8080"
DEFAULT_TIMEOUT = 30.0
OPENAI_BASE = re.compile(r"(^|/)(p/[^/]+/)?v1/?$")


def _with_summary(answer: Any, summary: str) -> dict[str, Any]:
    """An answer with a revision note beside it: in an answer form (a JSON output's object goes in as
    content text, so its own fields, a `summary` among them, stay the answer's)."""
    from semula.core import answers

    if isinstance(answer, dict) and answers.takes_summary({**answer, "summary": summary}):
        return {**answer, "summary": summary}
    text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    return {"content": text, "summary": summary}


class ClientError(Exception):
    """A request failed; `error` is the OpenAI error object ({message, type, param, code})."""

    def __init__(self, status: int | None, error: dict[str, Any]):
        self.status = status
        self.error = error
        self.code = error.get("code")
        self.param = error.get("param")
        self.message = str(error.get("message") or "request failed")
        super().__init__(self.message)

    def __str__(self) -> str:
        # The field, unless the message starts with it ("content.total: 'total' is required").
        named = self.param and self.message.startswith(f"{self.param}:")
        where = f" ({self.param})" if self.param and not named else ""
        return f"{self.message}{where}"


class Client:
    """semula's REST API over requests; one session, so connections are reused."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        session: requests.Session | None = None,
    ):
        # Where the URL came from, so a set-up error can name the variable to fix.
        self.url_from = "argument" if url else "SEMULA_URL" if os.environ.get("SEMULA_URL") else "default"
        self.url = (url or os.environ.get("SEMULA_URL") or DEFAULT_URL).rstrip("/")
        self._token = token if token is not None else os.environ.get("SEMULA_TOKEN") or None
        self.timeout = timeout
        if session is None:
            # Here, not with the module: every `semula` command imports this one (decision 0062).
            import requests

            session = requests.Session()
        self.session = session

    def __repr__(self) -> str:
        return f"Client(url={self.url!r})"

    def request(
        self, method: str, path: str, *, json: Any = None, params: dict[str, Any] | None = None
    ) -> Any:
        """Send one request; the parsed JSON body, or None for 204."""
        self._check_url()
        headers = {"Accept": "application/json"}
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        params = {k: v for k, v in (params or {}).items() if v is not None}
        from requests import RequestException

        try:
            response = self.session.request(
                method,
                self.url + path,
                json=json,
                params=params,
                headers=headers,
                timeout=self.timeout,
            )
        except RequestException as exc:
            # The exception text names the URL only; the token travels in a header and is not in it.
            raise ClientError(
                None,
                {
                    "message": f"cannot reach semula at {self.url}: {type(exc).__name__}. {self._url_hint()}",
                    "type": "connection_error",
                    "param": None,
                    "code": "connection_error",
                },
            ) from None
        if response.status_code == 204:
            return None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.ok and body is not None:
            return body
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            error = body["error"]
            if response.status_code == 401:
                error = {**error, "message": f"{error.get('message')} {self._token_hint()}"}
            raise ClientError(response.status_code, error)
        raise ClientError(
            response.status_code,
            {
                "message": f"semula answered HTTP {response.status_code} without a JSON body",
                "type": "server_error",
                "param": None,
                "code": "bad_response",
            },
        )

    def _check_url(self) -> None:
        # An OpenAI base URL (/p/shop/v1, /v1) is the usual mistake: the REST API lives at the root.
        path = urlsplit(self.url).path
        if OPENAI_BASE.search(path):
            root = self.url[: len(self.url) - len(path)] if path else self.url
            raise ClientError(
                None,
                {
                    "message": (
                        f"{self.url} ({self._source()}) is an OpenAI base URL; the agent commands need the "
                        f"server's root: set SEMULA_URL={root}"
                    ),
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "bad_url",
                },
            )

    def _source(self) -> str:
        return "SEMULA_URL" if self.url_from == "SEMULA_URL" else "the URL given"

    def _url_hint(self) -> str:
        if self.url_from == "default":
            return (
                "SEMULA_URL is not set, so the default was tried: set SEMULA_URL to the server's address "
                "(what `semula serve` prints, like http://127.0.0.1:8080)."
            )
        return (
            f"Is the server running, and is {self._source()} its root address (like http://127.0.0.1:8080)?"
        )

    def _token_hint(self) -> str:
        if not self._token:
            return (
                "SEMULA_TOKEN is not set: set it to a token with role editor and scope record "
                "(`semula token create --role editor --scope record` prints one)."
            )
        return "SEMULA_TOKEN is not a valid token (revoked, or from another server): set a current one."

    # The pending queue (docs/design/product.md §5).

    def list_pending(
        self,
        project: str | None = None,
        status: str | None = None,
        after: str | None = None,
        limit: int | None = None,
        abandoned: bool | None = None,
    ) -> dict[str, Any]:
        params = {"project": project, "status": status, "after": after, "limit": limit}
        if abandoned is not None:
            params["abandoned"] = "true" if abandoned else "false"
        return self.request("GET", "/api/v1/pending", params=params)

    def get_pending(self, pending_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/pending/{_segment(pending_id)}")

    def answer_pending(self, pending_id: str, answer: Any, summary: str | None = None) -> dict[str, Any]:
        body = _with_summary(answer, summary) if summary else answer
        return self.request("POST", f"/api/v1/pending/{_segment(pending_id)}/answer", json=body)

    def cancel_pending(self, pending_id: str) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/pending/{_segment(pending_id)}/cancel")

    def release_claim(self, pending_id: str, worker: str | None = None) -> dict[str, Any]:
        body = {"worker": worker} if worker is not None else {}
        return self.request("POST", f"/api/v1/pending/{_segment(pending_id)}/release", json=body)

    def claim_next(
        self, project: str | None = None, lease_seconds: int | None = None, worker: str | None = None
    ) -> dict[str, Any] | None:
        """The claimed call in full, or None when there is nothing to claim."""
        body = {"project": project, "lease_seconds": lease_seconds, "worker": worker}
        return self.request(
            "POST", "/api/v1/pending/claim", json={k: v for k, v in body.items() if v is not None}
        )

    # One answer of an entry's sequence (docs/decisions/0041-sequence-surfaces-and-record-through.md).

    def get_entry(self, entry_id: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/entries/{_segment(entry_id)}")

    def _answer_path(self, entry_id: str, seq: int) -> str:
        return f"/api/v1/entries/{_segment(entry_id)}/answers/{int(seq)}"

    def get_entry_answer(self, entry_id: str, seq: int) -> dict[str, Any]:
        return self.request("GET", self._answer_path(entry_id, seq))

    def edit_entry_answer(
        self, entry_id: str, seq: int, answer: Any, summary: str | None = None
    ) -> dict[str, Any]:
        body = answer if isinstance(answer, dict) else {"content": answer}
        if summary:
            body = _with_summary(body, summary)
        return self.request("PATCH", self._answer_path(entry_id, seq), json=body)

    def pin_entry_answer(self, entry_id: str, seq: int, pinned: bool) -> dict[str, Any]:
        return self.request("POST", f"{self._answer_path(entry_id, seq)}/{'pin' if pinned else 'unpin'}")

    def delete_entry_answer(self, entry_id: str, seq: int) -> dict[str, Any]:
        return self.request("DELETE", self._answer_path(entry_id, seq))

    def reorder_entry_answers(self, entry_id: str, order: list[int]) -> dict[str, Any]:
        path = f"/api/v1/entries/{_segment(entry_id)}/answers/reorder"
        return self.request("POST", path, json={"order": order})

    # Fault rules (docs/decisions/0061-fault-rules.md).

    def list_faults(self, project: str) -> dict[str, Any]:
        return self.request("GET", f"/api/v1/projects/{_segment(project)}/faults")

    def add_fault(self, project: str, rule: dict[str, Any]) -> dict[str, Any]:
        return self.request("POST", f"/api/v1/projects/{_segment(project)}/faults", json=rule)

    def clear_faults(
        self, project: str, session: str | None = None, entry: str | None = None, index: int | None = None
    ) -> dict[str, Any]:
        params = {"session": session, "entry": entry, "index": index}
        return self.request("DELETE", f"/api/v1/projects/{_segment(project)}/faults", params=params)


def _segment(value: str) -> str:
    # An id is one path segment: "../tokens" must not walk to another route.
    return quote(value, safe="")

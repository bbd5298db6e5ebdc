"""One error base for every surface: a status, an OpenAI error code and a message."""

from __future__ import annotations

from typing import Any


class SemulaError(Exception):
    """Base error; the docstring of a subclass is its default message."""

    status = 500
    code = "internal_error"
    type = "server_error"
    headers: tuple[tuple[str, str], ...] = ()  # response headers the error adds

    def __init__(self, message: str | None = None, *, param: str | None = None, code: str | None = None):
        self.message = message or (self.__doc__ or "").strip()
        self.param = param
        if code is not None:
            self.code = code
        super().__init__(self.message)

    def to_dict(self) -> dict[str, Any]:
        """The OpenAI error object: the SDKs parse it into their usual exceptions."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


class BadRequest(SemulaError):
    """The request is not valid."""

    status = 400
    code = "invalid_request"
    type = "invalid_request_error"


class Unauthorized(SemulaError):
    """A valid semula token is required: send it as Authorization: Bearer <token>."""

    status = 401
    code = "invalid_api_key"
    type = "invalid_request_error"


class Forbidden(SemulaError):
    """This token may not do that."""

    status = 403
    code = "permission_denied"
    type = "invalid_request_error"


class NotFound(SemulaError):
    """Not found."""

    status = 404
    code = "not_found"
    type = "invalid_request_error"


class MethodNotAllowed(SemulaError):
    """This method is not allowed on this path."""

    status = 405
    code = "method_not_allowed"
    type = "invalid_request_error"


class Conflict(SemulaError):
    """The request conflicts with the current state."""

    status = 409
    code = "conflict"
    type = "invalid_request_error"


class UnreadableBody(BadRequest):
    """The request body could not be read whole: its framing is broken, or the client left."""

    code = "invalid_body"
    # The rest of the connection's bytes are no request to read: the response closes it.
    headers = (("Connection", "close"),)


class BodyTimeout(UnreadableBody):
    """The request body stopped coming: no byte of it within SEMULA_BODY_TIMEOUT seconds."""

    status = 408
    code = "request_timeout"


class PayloadTooLarge(SemulaError):
    """The request body is larger than SEMULA_MAX_BODY_BYTES allows."""

    status = 413
    code = "payload_too_large"
    type = "invalid_request_error"


class Unprocessable(SemulaError):
    """The request is well-formed but cannot be carried out."""

    status = 422
    code = "unprocessable"
    type = "invalid_request_error"


class InvalidAnswer(Unprocessable):
    """The answer does not fit the request."""

    code = "invalid_answer"


class PendingResolved(Conflict):
    """This pending call is no longer pending."""

    code = "pending_resolved"


class ReplayMiss(SemulaError):
    """No recorded entry matches this request, and the project replays only."""

    status = 424
    code = "semula_replay_miss"
    type = "invalid_request_error"


class SequenceExhausted(SemulaError):
    """This call in its session is past the last recorded answer, and the project has after_last: fail."""

    status = 424
    code = "semula_sequence_exhausted"
    type = "invalid_request_error"


class RecordTimeout(SemulaError):
    """Nobody answered this call within the project's record_timeout; it stays pending."""

    status = 504
    code = "semula_record_timeout"
    type = "server_error"


class ClientGone(SemulaError):
    """The client of a held call went away; the call stays pending, abandoned, and still answerable."""

    status = 499  # nginx's "client closed request": nobody reads this response
    code = "semula_client_gone"
    type = "server_error"
    headers = (("Connection", "close"),)


class TooManyMisses(SemulaError):
    """The project has max_misses calls parked already; answer some first."""

    status = 429
    code = "semula_max_misses"
    type = "rate_limit_error"


class ServiceUnavailable(SemulaError):
    """The service is not available right now."""

    status = 503
    code = "service_unavailable"
    type = "server_error"


class UpstreamBudget(SemulaError):
    """The project's record-through budget is spent; recorded answers still replay."""

    status = 429
    code = "semula_upstream_budget"
    type = "rate_limit_error"


class UpstreamDryRun(SemulaError):
    """Record-through is in dry run: this miss would have been forwarded, and was listed instead."""

    status = 424
    code = "semula_upstream_dry_run"
    type = "invalid_request_error"


class UpstreamError(SemulaError):
    """The upstream provider did not give a usable answer."""

    status = 502
    code = "semula_upstream_error"
    type = "server_error"


class QuotaExceeded(SemulaError):
    """This workspace has reached one of its quotas; nothing was written."""

    status = 429
    code = "semula_quota"
    type = "rate_limit_error"


class AnswerTooLarge(QuotaExceeded):
    """The answer is larger than this workspace's quota allows; nothing was written."""

    status = 413
    type = "invalid_request_error"  # too large, as OpenAI's 413s say: no rate to wait out


class DatabaseFailure(SemulaError):
    """The database failed this request."""

    code = "database_error"


def from_database(exc: Any) -> SemulaError:
    """The error a surface answers for a semula.db.DatabaseError: only a lock timeout says "busy"."""
    if exc.kind == "busy":
        return ServiceUnavailable("The database is busy; retry.", code="database_busy")
    if exc.kind in ("unavailable", "disk_full"):
        return ServiceUnavailable(exc.describe(), code=f"database_{exc.kind}")
    if exc.kind == "invalid_text":  # the request's text, not the database, is at fault
        return BadRequest(str(exc), code="invalid_text")
    return DatabaseFailure(exc.describe())

"""The access log and the request metrics: one JSON line and one count per HTTP request.

The proxy (semula/web/fastpath.py) and the Flask app both finish a request here. The line carries ids,
names and numbers only: method, route template, project, status, outcome, duration, token id and
(from semula.logs) the request id; never a path with ids in it, a prompt or a secret. Replay hits
can be sampled (SEMULA_ACCESS_LOG_HITS, docs/operations.md: the app's setting, carried by the
request's log context); a successful poll of a QUIET route
writes no line (docs/decisions/0052-quiet-answerer-and-loaded-schema.md); every other request is
always logged. Every request is counted.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from semula import dialects, logs, metrics
from semula.core import sampling

logger = logging.getLogger("semula.access")

PROXY_SURFACE, API_SURFACE = "proxy", "api"
# The line's values are checked here rather than redacted (semula.logs.CHECKED): a client's method
# or a project name from a URL is logged only when it is one of these, or a valid project name.
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
PROJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# What a daemon polls all day (the answerer, every 0.5 s: ~170,000 lines a day): a 2xx or 3xx writes
# no line, the count in semula_requests_total stays; a refusal or a failure is logged as any request.
QUIET = frozenset({"/api/v1/answerer/candidates"})


def finish(
    status: int, error_code: str | None = None, *, surface: str = PROXY_SURFACE
) -> list[tuple[str, str]]:
    """Log and count the current request's response; the headers to add to it (x-request-id)."""
    req = logs.CURRENT.get()
    if req is None:
        return []
    seconds = time.monotonic() - req.started
    outcome = req.outcome or "ok"
    if status >= 400 and error_code and outcome in ("ok", "error"):
        outcome = error_code  # the proxy's catch-all "error" says less than the code (a fixed set)
    route = req.route or "unmatched"
    metrics.count_request(surface, route, status, outcome, seconds)
    quiet = status < 400 and route in QUIET
    if not quiet and (outcome != "hit" or sampling.keep(req.hit_sample)):
        fields: dict[str, Any] = {
            "method": req.method if req.method in METHODS else "OTHER",
            "route": route,
            "project": req.project,
            "status": status,
            "outcome": outcome,
            "duration_ms": round(seconds * 1000, 3),
            "token_id": req.token_id,
        }
        if req.pending_id is not None:
            fields["pending_id"] = req.pending_id
        logs.info_line(logger, "request", fields)
    own = dialects.table().id_headers.get(route)  # the API's SDKs read the id there (Anthropic's)
    if own is not None:
        return [("x-request-id", req.id), (own, req.id)]
    return [("x-request-id", req.id)]

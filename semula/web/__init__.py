"""The Flask app factory: settings, storage, blueprints and OpenAI-shaped errors in one place."""

from __future__ import annotations

import hmac
import logging
import secrets
import threading
from datetime import timedelta
from typing import Any

from flask import Flask, Response, g, jsonify, request
from werkzeug.exceptions import HTTPException

from semula import logs, metrics
from semula.config import Settings
from semula.core import errors
from semula.db import Busy, DatabaseError, Store, Unavailable, connect
from semula.migrate import schema
from semula.parking import Parking
from semula.service import Context, sequences
from semula.service.calllog import CallLog
from semula.service.versions import Versions
from semula.web import access, policy
from semula.web.fastpath import ProxyApp

logger = logging.getLogger("semula.web")


def create_app(settings: Settings | None = None, store: Store | None = None) -> Flask:
    """Build the WSGI app; tests pass their own settings and store."""
    settings = settings or Settings.from_env()
    store = store or connect(settings.database_url, pool_size=settings.db_pool_size)
    app = Flask(__name__)
    # The body limit for what werkzeug parses itself (the dashboard's forms); JSON bodies are read by
    # the policy's rule (json_body below).
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.secret_key = settings.secret_key or secrets.token_urlsafe(32)
    app.config.update(
        SESSION_COOKIE_HTTPONLY=True,
        SESSION_COOKIE_SAMESITE="Strict",
        SESSION_COOKIE_SECURE=settings.cookie_secure,
        SESSION_COOKIE_NAME="semula_session",
        # The signed cookie is refused past the session's lifetime, besides the server's own check.
        PERMANENT_SESSION_LIFETIME=timedelta(seconds=settings.session_lifetime),
    )
    app.json.sort_keys = False
    parking = Parking(store, settings.poll_interval)
    calllog = CallLog(store, hit_share=settings.call_log_hits)
    counts = sequences.Counts()  # the server sets its offload (semula/web/wsgi.py)
    versions = Versions()  # the server makes it listen (SEMULA_CHANGE_CHECK=notify, semula/web/wsgi.py)
    app.extensions["semula"] = {
        "settings": settings,
        "store": store,
        "parking": parking,
        "calllog": calllog,
        "counts": counts,
        "versions": versions,
    }

    # The REST API, the dashboard and the OpenAPI document join the app before the first request the
    # fast path passes on to Flask, not here: their modules and rules are a fifth of a start's CPU
    # (`semula replay`, each worker), and most starts answer LLM calls first (decision 0062).
    routes = Routes(app)
    app.extensions["semula"]["routes"] = routes
    proxy = ProxyApp(routes, settings, store, parking, calllog, counts, versions)
    app.wsgi_app = proxy  # type: ignore[method-assign]
    app.extensions["semula"]["proxy"] = proxy  # the server sets its offload (semula/web/wsgi.py)

    @app.after_request
    def access_line(response: Response) -> Response:
        """The access line of a dashboard or REST request, and its x-request-id header."""
        req = logs.CURRENT.get()
        if req is not None:
            req.route = request.url_rule.rule if request.url_rule is not None else None
            name = (request.view_args or {}).get("name")
            req.project = name if isinstance(name, str) and access.PROJECT_NAME.fullmatch(name) else None
            ctx = g.get("semula_ctx")
            req.token_id = ctx.principal.token_id if ctx is not None else None
        code = None
        if response.status_code >= 400 and response.is_json:
            error = (response.get_json(silent=True) or {}).get("error")
            code = error.get("code") if isinstance(error, dict) else None
        for name, value in access.finish(response.status_code, code, surface=access.API_SURFACE):
            response.headers[name] = value
        return response

    @app.get("/healthz")
    def healthz() -> Any:
        """Liveness: the process answers. It reads nothing, so a database outage restarts no worker."""
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> Response:
        """Readiness: the database answers and its schema is the one this semula knows."""
        return readiness(store)

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        """Prometheus metrics; behind SEMULA_METRICS_TOKEN when set, and off in hosted mode without it."""
        if settings.metrics_token:
            given = policy.bearer(request.headers.get("Authorization"))
            if given is None or not hmac.compare_digest(given, settings.metrics_token):
                raise errors.Unauthorized("/metrics needs the bearer token in SEMULA_METRICS_TOKEN.")
        elif settings.hosted:
            # Project names are tenants' data: never to the world (docs/operations.md).
            raise errors.NotFound("/metrics is off in hosted mode without SEMULA_METRICS_TOKEN.")
        # The database gauges name projects and workspaces; in hosted mode the server's role could read
        # none of them anyway (row-level security), so only the process series are served there.
        body, content_type = metrics.render(None if settings.hosted else store)
        return Response(body, content_type=content_type)

    @app.errorhandler(errors.SemulaError)
    def semula_error(exc: errors.SemulaError) -> Response:
        return error_response(exc)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        response = error_response(policy.from_http(exc.code or 500, exc.description))
        # A 405 must name the methods the path has (RFC 9110); werkzeug's exception carries them.
        allow = dict(exc.get_headers()).get("Allow")
        if allow:
            response.headers["Allow"] = allow
        return response

    @app.errorhandler(DatabaseError)
    def database_error(exc: DatabaseError) -> Response:
        return error_response(policy.from_database(exc, request.path))

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        return error_response(policy.unexpected(exc, request.path))

    return app


class Routes:
    """Flask's own WSGI app, with the REST API, dashboard and OpenAPI routes registered before the
    first request it is given (and by `ready()`), once, whichever thread comes first."""

    def __init__(self, app: Flask):
        self.app, self.wsgi_app = app, app.wsgi_app
        self.registered = False
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if not self.registered:
            self.ready()
        return self.wsgi_app(environ, start_response)

    def ready(self) -> Flask:
        """The app with every route registered (`app.url_map` complete)."""
        with self._lock:
            if not self.registered:
                from semula.web import openapi
                from semula.web.api import api
                from semula.web.api_entries import api_entries
                from semula.web.api_pending import api_pending
                from semula.web.api_upstream import api_upstream
                from semula.web.ui import ui

                for blueprint in (api, api_entries, api_pending, api_upstream, ui):
                    self.app.register_blueprint(blueprint)
                # The description of every /api/v1 route (semula/web/openapi.py); public, like any API's.
                self.app.add_url_rule("/api/v1/openapi.json", "openapi", openapi.serve)
                self.registered = True
        return self.app


def routes(app: Flask) -> Flask:
    """`app` with every route registered: what reads `app.url_map` before a request calls this."""
    return app.extensions["semula"]["routes"].ready()


def readiness(store: Store) -> Response:
    """200 {"status": "ready"}, or 503 with a reason and what to do; never the database URL."""
    try:
        problem = schema(store).problem()
    except (Busy, Unavailable) as exc:
        logger.warning("not ready", extra={"reason": "database_unreachable", "error": type(exc).__name__})
        return not_ready("database_unreachable", "The database cannot be reached or stays busy; retry.")
    except DatabaseError as exc:
        logger.warning("not ready", extra={"reason": "database_error", "error": type(exc).__name__})
        return not_ready("database_error", "The database refused the schema check; see the server log.")
    if problem is not None:
        return not_ready(problem.reason, problem.message)
    return jsonify(status="ready")


def not_ready(reason: str, message: str) -> Response:
    response = jsonify(status="not_ready", reason=reason, message=message)
    response.status_code = 503
    return response


def error_response(exc: errors.SemulaError) -> Response:
    response = jsonify(exc.to_dict())
    response.status_code = exc.status
    response.headers.extend(exc.headers)
    return response


def context() -> Context:
    """The service context of this request, authenticated once per request."""
    ctx = g.get("semula_ctx")
    if ctx is None:
        ext = current_extension()
        base = Context(
            ext["store"],
            ext["settings"],
            None,  # type: ignore[arg-type]
            ext["parking"].release,
            versions=ext["versions"],
        )
        ctx = base.as_(policy.authenticate(base, request.headers.get("Authorization")))
        g.semula_ctx = ctx
    return ctx


def current_extension() -> dict[str, Any]:
    from flask import current_app

    return current_app.extensions["semula"]


def raw_body() -> bytes:
    """The request's body, read once by the proxy's rule: at most SEMULA_MAX_BODY_BYTES, else 413."""
    raw = g.get("semula_body")
    if raw is None:
        limit = current_extension()["settings"].max_body_bytes
        raw = g.semula_body = policy.read_body(request.stream, request.headers.get("Content-Length"), limit)
    return raw


def json_body() -> Any:
    """The parsed JSON body; 400 with a clear message when it is not JSON by semula.core.jsonio's rules."""
    return policy.parse_json(raw_body())

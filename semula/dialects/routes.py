"""The proxy's routes, as the dialects declare them: one table, built from the registry when it changes.

A dialect lists its routes (`Dialect.routes`): a path pattern, the route template the access log and
the metrics name its requests by, and what the proxy does there (`serves`: CALL replays or records a
POST; a Handler answers a route of the API's own, such as its model list or a stored response, from
what the service layer gives it, a `Served`). The table joins every route
into one regular expression, each route one named alternative, so finding a request's route is one
match and one dict lookup; it is rebuilt when a dialect is registered or unregistered, never per
request (docs/decisions/0064-one-registration-per-api.md).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from semula.core.errors import NotFound, SemulaError

if TYPE_CHECKING:
    from semula.dialects import Dialect

# A path may begin with a project (and a replay session) it is a call of.
PREFIX = r"^(?:/p/(?P<project>[a-z0-9][a-z0-9_-]{0,62})(?:/s/(?P<session>[A-Za-z0-9_.-]{1,64}))?)?"
PROJECT_LABEL = "/p/{project}"
_PARAMETER = re.compile(r"\(\?P<(\w+)>")


class Served(Protocol):
    """What a route's own handler is given (semula/service/served.py makes it): the request, and what
    the handler may read of the call's project, read through the service layer."""

    method: str  # the request's method, one of its handler's
    values: tuple[str, ...]  # the route's values: its path's parameters, then its constant arguments
    dialect: Dialect  # the route's API
    project: str  # the project's name, for error messages

    def body(self) -> Any:
        """The request's JSON body, with what its API carries in headers (Dialect.with_headers)."""

    def models(self) -> list[str]:
        """The models seen in the project's entries."""

    def recorded(self, response_id: str) -> tuple[dict[str, Any], Any, list[dict[str, Any]] | None]:
        """The request, response and chunks of the project's recorded response with this id (a
        Responses API id, Dialect.response_id); a 404 when there is none."""


@dataclass(frozen=True)
class Handler:
    """A route that neither replays nor records: the methods it takes (any other is a 405) and the
    function that answers it with a JSON object."""

    methods: tuple[str, ...]
    answer: Callable[[Served], dict[str, Any]]


CALL: Handler | None = None  # the route's POST is a call of its API, replayed or recorded


@dataclass(frozen=True)
class Socket:
    """What a route's WebSocket mode speaks (a GET upgraded on the route, semula/web/socket_mode.py,
    decision 0056). Each client message whose `type` is `turn` is one call of the route's API: its
    other members are the call's body (the socket always streams), answered by the events the call's
    stream carries, one message each; a turn that fails gets one error_event() and the socket stays
    open. The Responses API's is `response.create` (openai_responses.SOCKET)."""

    turn: str  # the `type` of a client message that is a call
    # A member of a turn naming its lane (not the call's): echoed on each of the turn's events.
    lane: str | None = None
    # Types of client messages answered with nothing (a client's acknowledgements).
    quiet: tuple[str, ...] = ()
    # Members of a turn this mode refuses (a 400 error event): what a socket cannot do.
    refused: tuple[str, ...] = ()

    def error_event(self, exc: SemulaError, dialect: Dialect) -> dict[str, Any]:
        """A failed turn's event: its status and the API's error envelope."""
        return {"type": "error", "status": exc.status, **dialect.error_body(exc)}


@dataclass(frozen=True)
class Route:
    """One route of an API, as its dialect declares it."""

    path: str  # the path after PREFIX, a regular expression whose named groups are its parameters
    label: str  # its route template in the access log and the metrics: a bounded set, no id in it
    serves: Handler | None = CALL
    # Constants the dialect's with_route() and a kept hit's key get after the path's parameters.
    args: tuple[str, ...] = ()
    # A GET upgraded to a WebSocket on the route speaks this (its socket mode), else it is no socket.
    websocket: Socket | None = None
    # The path is another route's (the same pattern): this one is taken instead when the request
    # carries this API's key (Dialect.api_key), as google-genai's GET /v1/models does.
    keyed: bool = False


def model_seen(served: Served, model: str) -> str:
    """A model of the project's entries; a 404 when no recording uses it."""
    if model not in served.models():
        raise NotFound(
            f"The model {model!r} does not exist in project {served.project!r}: no recording uses it.",
            param="model",
            code="model_not_found",
        )
    return model


def _model_object(model: str) -> dict[str, Any]:
    return {"id": model, "object": "model", "created": 0, "owned_by": "semula"}


def count_tokens(served: Served) -> dict[str, Any]:
    """An API's token-counting route (Dialect.count_tokens: an estimate; nothing is recorded)."""
    return served.dialect.count_tokens(served.body())


COUNT_TOKENS = Handler(("POST",), count_tokens)
# The model list OpenAI's and Anthropic's clients read: no API's own, answered in the default envelope.
MODELS = Route(
    "/v1/models",
    "/v1/models",
    Handler(("GET",), lambda s: {"object": "list", "data": [_model_object(m) for m in s.models()]}),
)
MODEL = Route(
    r"/v1/models/(?P<model>[^?#]{1,200})",
    "/v1/models/{model}",
    Handler(("GET",), lambda s: _model_object(model_seen(s, s.values[0]))),
)
SHARED = (MODELS, MODEL)


class Bound:
    """A route in the table: the route, the dialect that serves it and answers its errors, its
    templates (without and with a project in the path) and its parameters' group names."""

    __slots__ = ("route", "dialect", "group", "labels", "groups", "keyed")

    def __init__(self, route: Route, dialect: Dialect, number: int):
        # After the project's part of a path (/p/NAME/s/SESSION, all optional) comes the route's.
        if not route.path.startswith("/") or route.path.startswith(("/p/", "/s/")):
            raise ValueError(f"a route's path begins with a slash, and not with /p/ or /s/: {route.path}")
        self.route, self.dialect, self.group = route, dialect, f"r{number}"
        self.labels = (route.label, PROJECT_LABEL + route.label)
        self.groups = tuple(f"r{number}_{name}" for name in _PARAMETER.findall(route.path))
        self.keyed: Bound | None = None

    def pattern(self) -> str:
        """The route's alternative: its path, in a group named after it, its parameters' named apart."""
        return f"(?P<{self.group}>" + _PARAMETER.sub(rf"(?P<{self.group}_\1>", self.route.path) + ")"


# What a request's path amounts to: its route, the match of its project part (`project`, `session`)
# and the route's values: the path's parameters, then the route's constant arguments (Route.args).
Found = tuple[Bound, "re.Match[str]", tuple[str, ...]]


class Table:
    """Every route of every dialect, in the registry's order, then the shared model list. A path
    without parameters is found by a dict lookup; the others by one regular expression whose
    alternatives are tried in that order (the first that matches is the route)."""

    def __init__(self, speaking: Iterable[Dialect], default: Dialect):
        speaking = list(speaking)
        declared = [(route, dialect) for dialect in speaking for route in dialect.routes]
        declared += [(route, default) for route in SHARED]
        bound = [Bound(route, dialect, number) for number, (route, dialect) in enumerate(declared)]
        served = [b for b in bound if not b.route.keyed]
        for alternative in (b for b in bound if b.route.keyed):
            shared = next((b for b in served if b.route.path == alternative.route.path), None)
            if shared is None:
                raise ValueError(f"no route has the path of the keyed route {alternative.route.path}")
            shared.keyed = alternative
            alternative.groups = shared.groups  # the path's groups are the shared route's
        self.exact = {b.route.path: b for b in served if re.escape(b.route.path) == b.route.path}
        if len(self.exact) < sum(re.escape(b.route.path) == b.route.path for b in served):
            raise ValueError("two routes have the same path")
        matched = [b for b in served if b.route.path not in self.exact]
        self.by_group = {b.group: b for b in matched}
        self.pattern = re.compile("(?:" + "|".join(b.pattern() for b in matched) + ")$")
        for path, b in self.exact.items():
            if self.pattern.match(path):
                raise ValueError(f"the route {path} of {b.dialect.name} is another route's path too")
        # Paths that begin otherwise are no route's: one string comparison tells them.
        self.begins = _literal(os.path.commonprefix([b.route.path for b in matched]))
        self.project = re.compile(PREFIX)
        # Any other path under an API's version prefix is an API this server does not speak: said in
        # the envelope of the API that prefix is (/v1: the default one, /v1beta: Gemini's).
        self.prefixes = {"v1": default} | {d.owns_prefix: d for d in speaking if d.owns_prefix}
        versions = "|".join(sorted(self.prefixes, key=len, reverse=True))
        self.unknown = re.compile(rf"^(?:/p/[^/]*(?:/s/[^/]*)?)?/(?P<version>{versions})(?:/|$)")
        # The route templates whose responses also carry the request id under the API's own header.
        self.id_headers = {
            label: b.dialect.request_id_header
            for b in bound
            if b.dialect.request_id_header
            for label in b.labels
        }
        parts = [f"{d.summary or _summary(d)} ({d.title})" for d in speaking if d.routes]
        self.speaks = ", ".join([*parts, "GET /v1/models"])

    def find(self, path: str) -> Found | None:
        """The route of a path, or None."""
        project = self.project.match(path)
        rest = path[project.end() :]  # type: ignore[union-attr]
        exact = self.exact.get(rest)
        if exact is not None:
            return exact, project, exact.route.args  # type: ignore[return-value]
        if not rest.startswith(self.begins):
            return None
        match = self.pattern.match(rest)
        if match is None:
            return None
        bound = self.by_group[match.lastgroup]  # type: ignore[index]
        values = tuple(match[group] for group in bound.groups) + bound.route.args
        return bound, project, values  # type: ignore[return-value]

    def unknown_in(self, path: str) -> Dialect | None:
        """The dialect whose envelope a path under an API prefix that no route has is answered in."""
        prefix = self.unknown.match(path)
        return self.prefixes[prefix["version"]] if prefix else None


def _literal(text: str) -> str:
    """The part of a pattern before its first special character."""
    special = re.search(r"[\\.^$*+?{}\[\]|()]", text)
    return text[: special.start()] if special else text


def _summary(dialect: Dialect) -> str:
    """The routes a dialect that says nothing of them serves, for the unknown-path error."""
    return " and ".join(f"POST {r.label}" for r in dialect.routes if r.serves is CALL and not r.keyed)


def keyed(route: Route, serves: Handler) -> Route:
    """A shared route, served by another handler when the request carries the declaring API's key."""
    return replace(route, serves=serves, keyed=True)

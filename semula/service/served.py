"""What a route of an API's own gets (semula.dialects.routes.Handler: a model list, a stored response,
a token count): the request, and what it may read of the call's project, read here so that the
handler, declared in its dialect, does no I/O of its own (docs/decisions/0064-one-registration-per-api.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from semula.core.errors import NotFound
from semula.dialects import Dialect
from semula.service import Context
from semula.service import entries as entries_service
from semula.service.auth import require


class Served:
    """One request of a route's own handler, in a project the caller may replay in."""

    def __init__(
        self,
        ctx: Context,
        project: dict[str, Any],
        method: str,
        values: tuple[str, ...],
        dialect: Dialect,
        body: Callable[[], Any],
    ):
        require(ctx, role="viewer", scope="replay")
        self._ctx, self._project, self._body = ctx, project, body
        self.method, self.values, self.dialect, self.project = method, values, dialect, project["name"]

    def body(self) -> Any:
        return self._body()

    def models(self) -> list[str]:
        rows = self._ctx.store.all("models_in_project", project_id=self._project["id"])
        return [row["model"] for row in rows]

    def recorded(self, response_id: str) -> tuple[dict[str, Any], Any, list[dict[str, Any]] | None]:
        row = entries_service.by_response_id(self._ctx, self._project["id"], response_id)
        if row is None:
            raise NotFound(
                f"Response with id {response_id!r} not found: it is not a recorded response of project "
                f"{self.project!r}.",
                param="response_id",
                code="response_not_found",
            )
        response, chunks = entries_service.decode(row)
        return json.loads(row["request"]), response, chunks

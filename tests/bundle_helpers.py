"""Write a bundle as `semula export` would, from (request, answer) pairs recorded through the service."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from semula import dialects
from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, bundles, entries, projects


def write_bundle(path: Path, recorded: Iterable[tuple[Any, ...]]) -> None:
    """Record (request, answer) pairs, or (request, answer, api) for an API other than Chat Completions,
    in a scratch SQLite database beside `path` and export them to `path`. A list of answers is a
    sequence: answers 1..n of the request."""
    settings = Settings.from_env({"SEMULA_DATABASE_URL": f"sqlite:///{path.parent}/source.db"})
    store = connect(settings.database_url, pool_size=1)
    migrate(store)
    ctx = Context(store, settings, CLI)
    project = projects.create(ctx, {"name": "source"})
    with store.transaction() as tx:
        for request, answer, *api in recorded:
            dialect = dialects.get(api[0] if api else None)
            for seq, one in enumerate(answer if isinstance(answer, list) else [answer], start=1):
                response, chunks = dialect.accept(one, request, dialect.conversation(request))
                entries.save(
                    tx,
                    ctx,
                    project_id=project["id"],
                    fingerprint=dialect.fingerprint(request, [], []),
                    request=request,
                    response=response,
                    chunks=chunks,
                    actor="agent",
                    summary="recorded for a bundle",
                    api=dialect.name,
                    seq=seq,
                )
    path.write_bytes(b"".join(bundles.export_bundle(ctx, "source")))
    store.close()

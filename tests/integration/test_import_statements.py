"""A bundle import writes in batches: the statements it sends grow with its batches, not its entries
(a statement per entry is a round trip per entry on PostgreSQL, and most of a large import's time)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from semula.service import Context, bundles, projects
from tests.bundle_helpers import write_bundle


class Counting:
    """A Store that counts the statements sent through it and through its transactions."""

    def __init__(self, store: Any):
        self.store, self.statements = store, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def _count(self, target: Any, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            self.statements += method != "many" or bool(args[1])  # many() of no rows sends nothing
            return getattr(target, method)(*args, **kwargs)

        return call

    def one(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.store, "one")(*args, **kwargs)

    def all(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.store, "all")(*args, **kwargs)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return self._count(self.store, "run")(*args, **kwargs)

    @contextmanager
    def transaction(self, workspace_id: str | None = None):
        with self.store.transaction(workspace_id) as tx:
            yield _CountingTx(tx, self)


class _CountingTx:
    def __init__(self, tx: Any, counter: Counting):
        self.tx, self.counter = tx, counter

    def __getattr__(self, name: str) -> Any:
        if name in ("one", "all", "run", "many", "script"):
            return self.counter._count(self.tx, name)
        return getattr(self.tx, name)


def sequences(count: int, start: int = 0) -> list[tuple[dict[str, Any], list[dict[str, str]]]]:
    """`count` requests, each with a sequence of three answers."""
    return [
        (
            {"model": "gpt-4o", "messages": [{"role": "user", "content": f"question {i}"}]},
            [{"content": f"answer {i}.{n}"} for n in (1, 2, 3)],
        )
        for i in range(start, start + count)
    ]


def statements(ctx: Context, project: str, path) -> int:
    counting = Counting(ctx.store)
    with path.open("rb") as source:
        bundles.import_bundle(Context(counting, ctx.settings, ctx.principal), project, source)
    return counting.statements


def test_an_import_sends_statements_per_batch_not_per_entry(ctx, tmp_path, monkeypatch):
    monkeypatch.setattr(bundles, "BATCH", 10)
    counted: dict[tuple[str, int], int] = {}
    for batches in (3, 6):
        folder = tmp_path / str(batches)
        folder.mkdir()
        bundle = folder / "bundle.json"
        write_bundle(bundle, sequences(10 * batches))
        project = f"p{batches}"
        projects.create(ctx, {"name": project})
        counted["new", batches] = statements(ctx, project, bundle)
        # Its sequences read back whole: the batched writes are the import's.
        assert b"".join(bundles.export_bundle(ctx, project)) == bundle.read_bytes()
        # Again: every entry is found unchanged, the stored answers read with their batch's.
        counted["again", batches] = statements(ctx, project, bundle)
    # 30 entries more, each with two later answers: a statement per entry would add 30 or more.
    per_batch = 5  # the entries found, the entries, their revisions, the later answers, theirs
    assert counted["new", 6] - counted["new", 3] <= per_batch * 3
    assert counted["again", 6] - counted["again", 3] <= 2 * 3  # the entries found, their answers

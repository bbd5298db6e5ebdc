"""`semula replay` answering while its bundle is imported (docs/decisions/0062-replay-start-cache.md).

The server starts once the bundle's settings are read and written; the import runs beside it, a
batch of entries to a transaction. A request for an entry not imported yet is answered at once when
the bundle's own fingerprints point at it: an index of them, made by a scan of the bundle's bytes for
the lines `semula export` writes them on, gives the entry's bytes, which are read and checked as the
import reads and checks them; when what the import would make of them has the fingerprint asked for,
the entry is written ahead of the import (which then finds it written, unchanged) and served.

Anything else waits for the import's end: a fingerprint the index does not point at (a miss, or an
entry a person edited, whose fingerprint the bundle does not say), a pinned or rejected entry, any
route but a call's. So no request is answered as a miss while entries are still to come, and an
answer given while loading is the one the imported database gives. An import that fails stops the
server with its error, and answers what waits with a 503; the import's count of entries it found
written already checks that every entry written ahead was the bundle's.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import mmap
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from semula import dialects
from semula.core.bundle_format import read_entry
from semula.core.errors import SemulaError, ServiceUnavailable
from semula.db import Row
from semula.dialects.routes import CALL
from semula.service import Context, bundles
from semula.surfaces import replay_cache

# The line `semula export` writes an entry's fingerprint on, and the lines that open and close an entry.
FINGERPRINT_LINE = re.compile(rb'\n      "fingerprint": "(v[0-9]+:[0-9a-f]{64})",?\n')
ENTRY_OPENS, ENTRY_CLOSES = b"\n    {\n", b"\n    }"
AMBIGUOUS = -1  # a fingerprint the bundle says twice: not answered ahead (the import refuses it)
# Tables an import writes: a kept database holds only their rows, whatever was answered meanwhile.
IMPORTED = (
    "audit_log",
    "entries",
    "entry_answers",
    "entry_revisions",
    "projects",
    "replay_changes",
    "semula_migrations",
    "workspaces",
)


class Stopped(Exception):
    """The server stopped before the import ended."""


class Turns:
    """Writers one at a time, in the order they came, while the import writes (a lock that does not
    let the import, between two batches, take it again before a request that waits for it). Taken
    again by a thread that holds it, it is held already."""

    def __init__(self, until: threading.Event):
        self.until = until
        self._changed = threading.Condition()
        self._next = self._serving = 0
        self._holder: int | None = None

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        me = threading.get_ident()
        if self.until.is_set() or self._holder == me:
            yield
            return
        with self._changed:
            ticket, self._next = self._next, self._next + 1
            while ticket != self._serving:
                self._changed.wait()
            self._holder = me
        try:
            yield
        finally:
            with self._changed:
                self._holder = None
                self._serving += 1
                self._changed.notify_all()


class Loading:
    """A bundle imported while the server answers (see the module's text)."""

    def __init__(
        self,
        ctx: Context,
        project: str,
        bundle: Path,
        overrides: dict[str, Any],
        keep: tuple[Path, Any] | None = None,
    ):
        """Read and write the bundle's settings (their errors are raised here, before anything is
        served). `keep`: the cache's folder and the digest to add the bundle's bytes to, to keep the
        database made (replay_cache)."""
        with bundle.open("rb") as source:
            config = bundles.read_config(ctx, source)
        self.settings = bundles.apply_config(ctx, project, config, overrides)
        self.bundle, self.project, self.overrides, self.keep = bundle, project, overrides, keep
        self.done = threading.Event()
        self.imported = False  # the import ended and succeeded (done, and no error)
        self.error: BaseException | None = None
        self.turns = Turns(self.done)
        self.store = LoadingStore(ctx.store, self)
        self.ctx = dataclasses.replace(ctx, store=self.store)
        self.ahead = 0  # entries written ahead of the import
        self._index: dict[str, int] | None = None
        self._map: mmap.mmap | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self, on_failure: Callable[[], None]) -> None:
        self._thread = threading.Thread(
            target=self._run, args=(on_failure,), name="semula-replay-import", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """End the import if it runs (the server stopped), and wait for the thread."""
        self._stopped = True
        if self._thread is not None:
            self._thread.join()

    def check(self) -> None:
        """Raise the import's error, if it failed."""
        if self.error is not None and not isinstance(self.error, Stopped):
            raise self.error

    def wait(self) -> None:
        """Until the import ended; a 503 when it failed."""
        self.done.wait()
        if self.error is not None:
            raise ServiceUnavailable(f"The bundle was not imported: {_message(self.error)}")

    def _progress(self, stage: str, done: int, total: int | None) -> None:
        if self._stopped:
            raise Stopped

    def _run(self, on_failure: Callable[[], None]) -> None:
        reading = name = None
        try:
            with self.bundle.open("rb") as source:
                if self.keep is not None:
                    reading = replay_cache.Reading(source, self.keep[1])
                report = bundles.import_bundle(
                    self.ctx,
                    self.project,
                    reading or source,
                    progress=self._progress,
                    overrides=self.overrides,
                    apart=True,
                )
                name = reading.name() if reading is not None else None  # of every byte, read to the end
            with self._lock:
                # Every entry written ahead was found so by the import, and as the bundle has it.
                if report["updated"] or report["skipped"] or report["unchanged"] != self.ahead:
                    raise SemulaError(
                        "An answer given while the bundle was imported was not the bundle's entry (its "
                        "layout is not the one semula export writes); export the bundle again."
                    )
            if self.keep is not None and name is not None:
                # Kept before anything that waits for the import's end may write: an entry recorded
                # (--record) or made through REST is not the bundle's, which the name says it holds.
                replay_cache.save(self.keep[0], name, self.store.inner, only=IMPORTED)
            self.imported = True
            self.done.set()
        except BaseException as exc:
            self.error = exc
            self.done.set()
            on_failure()
        finally:
            with self._lock:
                if self._map is not None:
                    self._map.close()
                self._map = self._index = None

    def write_ahead(self, fingerprint: str) -> bool:
        """Write the entry with this fingerprint ahead of the import when the bundle points at it and
        it is what the import would make; False when the request is to wait for the import."""
        with self._lock:
            if self.done.is_set():
                return False
            at = self._indexed().get(fingerprint)
            if at is None or at == AMBIGUOUS or self._map is None:
                return False
            data = _entry_at(self._map, at)
        if data is None or len(data) > bundles.ENTRY_FACTOR * self.ctx.settings.max_body_bytes:
            return False
        try:
            item = bundles.prepare_entry(self.ctx, self.settings, read_entry(data))
        except SemulaError:
            return False  # the import says what is wrong with it
        if item.fingerprint != fingerprint or item.pinned or item.review_status == "rejected":
            return False
        with self._lock:
            if self.done.is_set():
                return False
            # Under the lock: the import's check of its count reads it after its last batch.
            self.ahead += bundles.write_entries(self.ctx, self.project, [item])["created"]
        return True

    def _indexed(self) -> dict[str, int]:
        """The bundle's fingerprints and where their lines start, scanned at the first need."""
        if self._index is None:
            self._index = {}
            try:
                with self.bundle.open("rb") as source:
                    self._map = mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):  # unreadable, or empty: nothing is answered ahead
                return self._index
            for found in FINGERPRINT_LINE.finditer(self._map):
                fingerprint = found.group(1).decode()
                self._index[fingerprint] = AMBIGUOUS if fingerprint in self._index else found.start()
        return self._index

    def gate(self, app: Callable[..., Iterable[bytes]]) -> Callable[..., Iterable[bytes]]:
        """`app`, with every request but a call waiting for the import (a call waits in
        LoadingStore when its entry is not there yet), and a 503 for all once an import failed."""
        table = dialects.table()

        def gated(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            if not self.done.is_set():
                found = table.find(environ.get("PATH_INFO", ""))
                if found is None or found[0].route.serves != CALL or environ.get("REQUEST_METHOD") != "POST":
                    self.done.wait()
            if self.error is not None:
                message = f"The bundle was not imported: {_message(self.error)}"
                body = json.dumps({"error": {"message": message, "code": "service_unavailable"}})
                start_response("503 Service Unavailable", [("Content-Type", "application/json")])
                return [body.encode()]
            return app(environ, start_response)

        return gated


def _entry_at(data: mmap.mmap, at: int) -> bytes | None:
    """The bytes of the entry whose fingerprint line starts at `at`, as `semula export` lays it out."""
    start = data.rfind(ENTRY_OPENS, 0, at)
    if start < 0 or data.rfind(ENTRY_CLOSES, start, at) >= 0:
        return None
    end = data.find(ENTRY_CLOSES, at)
    return None if end < 0 else data[start + 1 : end + len(ENTRY_CLOSES)]


def _message(error: BaseException) -> str:
    if isinstance(error, Stopped):
        return "the server stopped."
    return error.message if isinstance(error, SemulaError) else type(error).__name__


ENTRY = "entry_by_fingerprint"  # the lookup a call makes (service.versions.Versions.entry_at_version)
# What parks a call (service.pending.park): --record parks a sequence's call past its last answer
# only once the import ended, so what it records is never changed again by the import.
PARKS = frozenset({"insert_pending", "pending_by_fingerprint", "join_pending"})


class LoadingStore:
    """The store, for the server and the import while the bundle loads: a lookup that finds no entry
    (or a rejected one) writes it ahead or waits for the import, and writers take turns. Once the
    import ended, the store as it is."""

    def __init__(self, store: Any, loading: Loading):
        self.inner, self.loading = store, loading

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _entry(self, params: dict[str, Any]) -> Row | None:
        """The `entry_by_fingerprint` lookup (the replay path's, service.versions): an entry not there
        yet is written ahead from the bundle, or the lookup waits for the import."""
        loading = self.loading
        if loading.done.is_set():
            if loading.error is not None:
                loading.wait()  # raises
            return self._one(ENTRY, params)
        row = self._one(ENTRY, params)
        if row is not None and row["review_status"] != "rejected":
            return row
        if row is None and loading.write_ahead(params["fingerprint"]):
            row = self._one(ENTRY, params)
            if row is not None:
                return row
        loading.wait()
        return self._one(ENTRY, params)

    @contextlib.contextmanager
    def transaction(self, workspace_id: str | None = None) -> Iterator[Any]:
        with self.loading.turns.turn(), self.inner.transaction(workspace_id) as tx:
            yield tx

    def one(self, name: str, /, **params: Any) -> Row | None:
        if name == ENTRY:
            return self._entry(params)
        if name in PARKS:
            self.loading.wait()
        return self._one(name, params)

    def _one(self, name: str, params: dict[str, Any]) -> Row | None:
        with self.loading.turns.turn():
            return self.inner.one(name, **params)

    def all(self, name: str, /, **params: Any) -> list[Row]:
        with self.loading.turns.turn():
            return self.inner.all(name, **params)

    def run(self, name: str, /, **params: Any) -> int:
        if name in PARKS:
            self.loading.wait()
        with self.loading.turns.turn():
            return self.inner.run(name, **params)

    def many(self, name: str, rows: list[Row], /) -> None:
        with self.loading.turns.turn():
            self.inner.many(name, rows)

"""The replay change counter as the replay path reads it: concurrent reads joined into one statement,
and, when the process listens for change notices, the counters it read remembered until a notice
forgets them. One `Versions` per app, shared by the contexts it makes (Context.versions); the store
only runs the statements and delivers the notices (semula.db.Store.version, .on_notice).

Reads are joined where the store says a statement costs a round trip (Store.batches_lookups,
PostgreSQL); elsewhere (SQLite, whose counter is a read of shared memory) each caller reads alone.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Any

from semula.db import Row, Store
from semula.rounds import Round, Rounds

Key = Hashable  # what a read is for (a workspace's change counter, a fingerprint's entry)
Query = Callable[[list[Key]], dict[Key, object]]
# The entry rows a listening process remembers (ChangeCache.entry): all are forgotten when either
# bound is passed (a cache of rows each checked against the counter: dropping them changes no answer).
ENTRY_ROWS = 4096
ENTRY_BYTES = 16 * 1024 * 1024


class _Batch(Round):
    __slots__ = ("keys", "found")

    def __init__(self) -> None:
        super().__init__()
        self.keys: set[Key] = set()
        self.found: dict[Key, object] = {}

    def answer(self, key: Key) -> object:
        return self.found.get(key, object())  # no such project: a value equal to nothing


class VersionReads:
    """Reads asked for concurrently, done in one query: the counter each kept hit on PostgreSQL
    needs, and the entries (with the counter) of a project's first sights.

    A caller gets its value from a query that began *after* it asked, as a query of its own would
    (so it sees every commit that completed before it asked): keys that arrive while a query is in
    flight wait for it to end and are then read together by one of them (semula.rounds). One query per
    group is in flight at a time (a workspace's counter is read in a group of its own, as its tenant).
    """

    def __init__(self) -> None:
        self._rounds: Rounds[_Batch] = Rounds(lambda: _Batch())  # the class as it is when a round is made

    def read(self, group: Hashable, key: Key, query: Query) -> object:
        def send(batch: _Batch) -> None:
            batch.found = query(sorted(batch.keys))

        batch, _ = self._rounds.join(group, lambda batch: batch.keys.add(key), send)
        return batch.answer(key)


class ChangeCache:
    """The replay change counters a process has read, each good until a notice of a change to its
    workspace comes (SEMULA_CHANGE_CHECK=notify; docs/decisions/0047-change-notices.md), fed by the
    store's "changes" notices (heard(), lost()).

    A counter read is remembered only when no notice came, and the listening did not stop, between
    the moment before the read began and its end: a change it missed committed after the read's
    snapshot, so after LISTEN took effect, and its notice forgets the counter again. While the
    listening is lost, nothing is remembered and every check reads the counter, as without notices.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self.known: dict[str, int] = {}
        self.epoch = 0  # moves with every notice, and when the listening starts or stops
        self.listening = False
        # First sights' entry rows by (store scope, workspace, project, fingerprint), each with the
        # counter it was read with (entry()), and what they hold (the bounds above).
        self.entries: dict[tuple[Any, ...], tuple[dict[str, Any], int]] = {}
        self._entry_bytes = 0

    def version(self, workspace_id: str, read: Callable[[], object]) -> object:
        """The workspace's counter: remembered, or read (and remembered if no notice came meanwhile).

        Every kept hit comes here: the remembered value is looked up without the lock (a dict's get
        is atomic, and a notice that forgets it an instant later is one that came after this hit)."""
        epoch = self.epoch  # before the read begins: a notice from here on moves it
        listening = self.listening
        if listening:
            value = self.known.get(workspace_id)
            if value is not None:
                return value
        value = read()
        if listening and type(value) is int:
            with self._lock:
                if self.listening and self.epoch == epoch:
                    self.known[workspace_id] = value
        return value

    def entry(
        self, key: tuple[Any, ...], workspace_id: str, read: Callable[[], tuple[Any, object]]
    ) -> tuple[Any, object]:
        """A first sight's entry row and the counter read with it (Versions.entry_at_version): the row
        remembered with the counter this process knows now for its workspace, else read.

        The same rule as version()'s: a row read with the counter in one statement is remembered
        (with that counter, which is remembered too) only when no notice came and the listening did
        not stop between the moment before the read and its end; it is served while the counter
        this process remembers for the workspace is the one it was read with, so a change is seen
        once its notice has come, as by a kept hit (decision 0081). A copy is served, and kept: the
        caller may change the dict it gets."""
        epoch = self.epoch
        listening = self.listening
        if listening:
            value = self.known.get(workspace_id)
            held = self.entries.get(key)
            if value is not None and held is not None and held[1] == value:
                return dict(held[0]), value
        row, version = read()
        if listening and row is not None and type(version) is int:
            size = _row_bytes(row)
            with self._lock:
                if self.listening and self.epoch == epoch:
                    self.known[workspace_id] = version
                    if len(self.entries) >= ENTRY_ROWS or self._entry_bytes + size > ENTRY_BYTES:
                        self._forget_entries()
                    old = self.entries.get(key)
                    if old is not None:
                        self._entry_bytes -= _row_bytes(old[0])
                    self.entries[key] = (dict(row), version)
                    self._entry_bytes += size
        return row, version

    def wait_moved(self, epoch: int, timeout: float) -> bool:
        """Wait until the epoch is past `epoch` (a notice came, or the listening started or stopped)."""
        with self._changed:
            return self._changed.wait_for(lambda: self.epoch > epoch, timeout)

    def heard(self, workspace_id: str | None) -> None:
        """A notice: this workspace changed; None: the listening (re)started."""
        with self._changed:
            if workspace_id is None:
                self.listening = True
                self.known.clear()
                self._forget_entries()
            else:
                self.known.pop(workspace_id, None)
            self.epoch += 1
            self._changed.notify_all()

    def lost(self) -> None:
        """The listening stopped: notices may be missed from now on."""
        with self._changed:
            self.listening = False
            self.known.clear()
            self._forget_entries()
            self.epoch += 1
            self._changed.notify_all()

    def _forget_entries(self) -> None:
        self.entries.clear()
        self._entry_bytes = 0


def _row_bytes(row: dict[str, Any]) -> int:
    """About what a remembered entry row holds: its texts, and a few hundred bytes of objects."""
    return 512 + sum(len(value) for value in row.values() if type(value) is str)


class Versions:
    """The counter reads and entry lookups of one app's replay path (its contexts share it)."""

    def __init__(self) -> None:
        self.reads = VersionReads()
        self.cache: ChangeCache | None = None  # listen(): SEMULA_CHANGE_CHECK=notify

    def listen(self, store: Store) -> None:
        """Check kept hits by notice (SEMULA_CHANGE_CHECK=notify): version() answers from the counters
        it read until a change's notice forgets them, rather than reading the counter each time. A
        change is then seen once its notice has come, within milliseconds, where a read sees it from
        the very next request. Where the store sends no notices (SQLite, whose counter read is a look
        at shared memory already) nothing changes."""
        if self.cache is None:
            cache = ChangeCache()
            if store.on_notice("changes", cache.heard, cache.lost):
                self.cache = cache

    def version(self, store: Store, workspace_id: str) -> object:
        """The workspace's replay change counter (Store.version), read together with the concurrent
        reads of the same workspace where the store batches lookups, or remembered (listen())."""
        if not store.batches_lookups:
            return store.version(workspace_id)
        cache = self.cache
        if cache is None:
            return self._counter(store, workspace_id)
        return cache.version(workspace_id, lambda: self._counter(store, workspace_id))

    def _counter(self, store: Store, workspace_id: str) -> object:
        group = (store.workspace_id, workspace_id)  # under row-level security, a query reads as one tenant
        return self.reads.read(group, workspace_id, lambda keys: {keys[0]: store.version(keys[0])})

    def entry_at_version(
        self, store: Store, workspace_id: str, project_id: str, fingerprint: str
    ) -> tuple[Row | None, object]:
        """The `entry_by_fingerprint` row and a value of version(workspace_id) read no later than it:
        the row is current as of that version. Where the store batches lookups, the lookups of a
        project asked for while one is in flight are read together in the next statement, with the
        counter from the same snapshot (`entries_at_version`: a round trip for many first sights);
        elsewhere the counter is read, then the row."""
        if not store.batches_lookups:
            version = store.version(workspace_id)  # before the row: a later change moves it
            return store.one("entry_by_fingerprint", project_id=project_id, fingerprint=fingerprint), version
        group = (store.workspace_id, "entries", workspace_id, project_id)

        def read() -> tuple[Row | None, object]:
            found = self.reads.read(
                group, fingerprint, lambda keys: read_entries(store, workspace_id, project_id, keys)
            )
            assert isinstance(found, tuple)
            return found

        cache = self.cache
        if cache is None:
            return read()
        return cache.entry((*group, fingerprint), workspace_id, read)


def read_entries(
    store: Store, workspace_id: str, project_id: str, fingerprints: list[Key]
) -> dict[Key, object]:
    """The entries of these fingerprints, each with the counter read in the same statement (None for
    a fingerprint with no entry)."""
    rows = store.all(
        "entries_at_version", workspace_id=workspace_id, project_id=project_id, fingerprints=fingerprints
    )
    version = rows[0]["version"]  # one row at least: the counter's
    found: dict[Key, Any] = {fingerprint: (None, version) for fingerprint in fingerprints}
    for row in rows:
        fingerprint = row.pop("found_fingerprint")
        if fingerprint is not None:
            del row["version"]
            found[fingerprint] = (row, version)
    return found

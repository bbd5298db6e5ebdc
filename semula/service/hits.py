"""Replay hits kept per process: a repeated request costs no fingerprint, no entry query and no render.

A hit is kept under the exact request it answered (the raw body, the project selector and the
caller's workspace and binding) with the value of `store.version(workspace)` read *before* the
request's project and entry were read. It is served again only while that value is unchanged: a
counter that triggers move in the transaction of every change of a row an answer is made of (on
SQLite one for the database, behind the WAL-index header; on PostgreSQL one per workspace). An edit,
revert, rejection, deletion or re-recording, or a change of the project's settings, made through any
process, is therefore seen by the very next request, as without this cache
(docs/decisions/0024-kept-replay-hits.md, docs/decisions/0040-replay-change-counter.md).

The first sight of a request only notes which project and fingerprint it led to; the next one keeps
what it finds under the counter value its call read no later than its rows (Call.version). Answers
with templates are never kept, nor streams of an API whose dialect cannot stamp their bytes afresh
(Dialect.keeps_stream).

A request is keyed by the SHA-256 digest of its body, so a kept hit holds no copy of the request; a
body longer than MAX_BODY by its length and its first and last SAMPLE bytes instead, and a kept answer
is served only to a body with the SHA-256 digest of the one that found it: a first sight of a large
body costs no pass over all of its bytes, a kept hit one. A kept hit holds its answer as the bytes
it was sent as, with the few members its dialect stamps afresh for each reply (Dialect.stamped):
a reply replaces those bytes and serialises nothing, and the memory stays bounded whatever the size
of the requests agents send.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

from semula.service import Context
from semula.service.auth import require, visible
from semula.service.replay import Call, replay_headers, templated

# Bounds the memory: a request is keyed by its digest (a body longer than MAX_BODY by its length and
# its first and last SAMPLE bytes), and the cache holds about MAX_BYTES per process in all (`cost()`:
# ~2.9 KiB for a 1.6 KB request with a 1.2 KB answer, so ~14,000 of those). A full cache admits one new
# request in ADMIT, dropping its oldest (docs/decisions/0040-replay-change-counter.md).
MAX_BODY = 32 * 1024
SAMPLE = 2048
MAX_BYTES = 40 * 1024 * 1024
# What a kept hit holds besides its key and its answer's bytes (the Kept, the slimmed call, the stamps
# and its slot in the dict), and what a first sight's note holds: measured with tracemalloc for the
# 1.6 KB request of bench/workloads.py (2.9 KiB a kept hit in all, 0.5 KiB a note).
OVERHEAD = 1600
NOTE = 440
ADMIT = 8
PROJECTS = 1024  # slim project rows shared by kept hits
Key = tuple[str, str, str | None, str | None, str | None, bool, tuple[str | None, ...], object]
DIGEST_KEY = 32 + 33  # a digest's bytes object


def key(
    ctx: Context,
    api: str,
    path_project: str | None,
    header_project: str | None,
    raw: bytes,
    session: str | None = None,
    headers: tuple[str | None, ...] = (),
) -> Key:
    """What decides the answer to a request, besides the rows store.version() covers.

    In a session only whether there is one: a session call is kept only when its answer does not
    depend on its call number (one answer; decided by the entry and project rows, which the version
    covers), and then every session gets the same answer. `headers` are the values of the request
    headers its API reads into the request (Anthropic's betas).
    """
    workspace, bound = ctx.principal.workspace_id, ctx.principal.project_id
    body = hashlib.sha256(raw).digest() if len(raw) <= MAX_BODY else (len(raw), raw[:SAMPLE], raw[-SAMPLE:])
    return (api, workspace, bound, path_project, header_project, session is not None, headers, body)


@dataclass(slots=True)
class Kept:
    project_id: str
    fingerprint: str
    workspace_id: str  # the project's: store.version() covers its rows
    version: object = None  # None until a request has read it before its rows
    call: Call | None = None  # the call that found the hit: the call log's row is made from it
    data: bytes | None = None  # the reply as sent: a JSON body, or a stream's server-sent events
    stamps: dict[str, Any] | None = None  # the members restamp renews, as `data` has them
    headers: list[tuple[str, str]] = field(default_factory=list)  # recorded provider headers
    digest: bytes | None = None  # a large body's SHA-256, which a body must have to be served this hit

    @property
    def stream(self) -> bool:
        return self.call is not None and self.call.stream


def cost(key: Key, kept: Kept) -> int:
    """About how many bytes a kept hit holds: its key, its answer's bytes and the rest."""
    body = key[-1]
    held = OVERHEAD + len(kept.data) if kept.data is not None else NOTE
    return (DIGEST_KEY if isinstance(body, bytes) else 2 * SAMPLE + 128) + held


class HitCache:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._kept: dict[Key, Kept] = {}
        self._bytes = 0  # cost() of everything kept
        self._refused = 0  # new requests met while full
        self._projects: dict[tuple[str, str], dict[str, str]] = {}  # one slim project row per project

    def find(self, ctx: Context, key: Key, raw: bytes) -> Kept | None:
        """The kept hit for this request, if the rows it came from are unchanged since it was kept.

        A first sight, or a request only noted so far, reads nothing: its call reads the change
        counter with its entry (Call.version), and keep() keeps it under that value.
        """
        kept = self._kept.get(key)
        if kept is None or kept.data is None:
            return None
        if kept.digest is not None and hashlib.sha256(raw).digest() != kept.digest:
            return None  # another large body with the same length and ends
        if not visible(ctx, kept.project_id):
            return None
        if ctx.store.version(kept.workspace_id) != kept.version:
            self._drop(key)
            kept.version, kept.call, kept.data, kept.stamps = None, None, None, None
            self._put(key, kept, admitted=True)
            return None
        require(ctx, role="viewer", scope="replay")
        return kept

    def keep(
        self,
        key: Key,
        call: Call,
        body: dict[str, Any],
        version: object,
        raw: bytes,
        sse: bytes | None = None,
    ) -> None:
        """Keep a hit its call found at this change counter `version` (None: read later, or not at
        all); a first sight only notes where it led.

        `body` is the response as render() made it; a stream is kept as the bytes it was sent as
        (`sse`, `body` then its first event) when its dialect can stamp those bytes afresh for each
        reply; otherwise it is not kept. So is a body whose stamps its dialect cannot find in its bytes.
        """
        if call.entry is None or templated(call.entry):
            return
        if call.stream and (sse is None or not call.dialect.keeps_stream(call.request)):
            return
        if call.session is not None and (call.call_number or call.project["sequences"] == "record"):
            return  # its answer depends on its number in the session, or would for a caller who may record
        kept = self._kept.get(key)
        found = (call.project["id"], call.fingerprint)
        if kept is None or version is None or (kept.project_id, kept.fingerprint) != found:
            self._put(key, Kept(*found, call.project["workspace_id"]))
            return
        if sse is not None:
            data, stamps = sse, call.dialect.stamps(body)
        else:
            made = call.dialect.kept_json(body)
            if made is None:
                return
            data, stamps = made
        # Only what the call log and restamp() read of the call: not its parsed body, project or entry rows.
        slim = replace(call, body={}, project=self._project(call.project), entry={"id": call.entry["id"]})
        self._drop(key)
        # A copy: orjson's bytes keep the whole buffer it wrote into (8 KiB for a 700-byte answer).
        data = bytes(memoryview(data))
        kept.version, kept.call, kept.data, kept.stamps = version, slim, data, stamps
        kept.headers = replay_headers(call.entry)
        kept.digest = hashlib.sha256(raw).digest() if len(raw) > MAX_BODY else None
        self._put(key, kept, admitted=True)

    def _project(self, project: dict[str, Any]) -> dict[str, str]:
        """The id and name of a kept hit's project, one dict for all the hits of a project."""
        ident = (project["id"], project["name"])
        slim = self._projects.get(ident)
        if slim is None:
            if len(self._projects) >= PROJECTS:
                self._projects.clear()
            slim = self._projects[ident] = {"id": ident[0], "name": ident[1]}
        return slim

    def _drop(self, key: Key) -> None:
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= cost(key, old)

    def _put(self, key: Key, kept: Kept, *, admitted: bool = False) -> None:
        """Keep (or keep again, as answered) a request, dropping the oldest while over max_bytes.

        When full, a new request is kept only one time in ADMIT: requests cycling through more than
        fit (a test suite's recordings) then find most of the cache still there on their next pass,
        where dropping the oldest for each would leave nothing of it, and a new set of requests
        still takes the cache over within a few passes.
        """
        if not admitted and key not in self._kept and self._bytes + cost(key, kept) > self.max_bytes:
            self._refused += 1
            if self._refused % ADMIT:
                return
        self._drop(key)
        self._bytes += cost(key, kept)
        self._kept[key] = kept
        while self._bytes > self.max_bytes and len(self._kept) > 1:
            oldest = next(iter(self._kept))
            self._bytes -= cost(oldest, self._kept.pop(oldest))

    @staticmethod
    def reply(kept: Kept) -> bytes:
        """A kept answer's bytes with this reply's stamps (id, created, ...) as its dialect's render()
        would give them: a JSON body, or a stream's events."""
        call, data, stamps = kept.call, kept.data, kept.stamps
        assert call is not None and data is not None and stamps is not None
        if call.stream:
            return call.dialect.restamp_sse(data, stamps, call.request, time.time())
        return call.dialect.restamp_json(data, stamps, call.request, time.time())

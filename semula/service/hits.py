"""Replay hits kept per process: a repeated request costs no fingerprint, no entry query and no render.

A hit is kept under the exact request it answered (the raw body, the project selector and the
caller's workspace and binding) with the value of `store.version(workspace)` read *before* the
request's project and entry were read. It is served again only while that value is unchanged: a
counter that triggers move in the transaction of every change of a row an answer is made of (on
SQLite one for the database, behind the WAL-index header; on PostgreSQL one per workspace). An edit,
revert, rejection, deletion or re-recording, or a change of the project's settings, made through any
process, is therefore seen by the very next request, as without this cache
(docs/decisions/0024-kept-replay-hits.md, docs/decisions/0040-replay-change-counter.md).

The first sight of a request only notes which project and fingerprint it led to; the next one reads
the version first and keeps what it finds. Streams and answers with templates are never kept.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from semula.service import Context
from semula.service.auth import require, visible
from semula.service.proxy import Call, replay_headers, templated

# Bounds the memory: requests of at most MAX_BODY bytes each, and about MAX_BYTES per process in all
# (`cost()`: ~5 KiB for a 1.6 KB request with a short answer, so ~8,000 of those). A full cache admits
# one new request in ADMIT, dropping its oldest (docs/decisions/0040-replay-change-counter.md).
MAX_BODY = 32 * 1024
MAX_BYTES = 40 * 1024 * 1024
# What a kept hit holds besides its request and answer text: the dicts, the key, the slimmed call.
OVERHEAD = 2560
ADMIT = 8
Key = tuple[str, str, str | None, str | None, str | None, bool, tuple[str | None, ...], bytes]


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
    return (api, workspace, bound, path_project, header_project, session is not None, headers, raw)


@dataclass
class Kept:
    project_id: str
    fingerprint: str
    workspace_id: str  # the project's: store.version() covers its rows
    version: object = None  # None until a request has read it before its rows
    call: Call | None = None  # the call that found the hit: the call log's row is made from it
    completion: dict[str, Any] | None = None  # as render() made it; stamped afresh for each response
    headers: list[tuple[str, str]] = field(default_factory=list)  # recorded provider headers
    size: int = 0  # the length of the answer's JSON, for cost()


def cost(key: Key, kept: Kept) -> int:
    """About how many bytes a kept hit holds: its request, its answer (parsed: ~3× its JSON) and the rest."""
    return len(key[-1]) + 3 * kept.size + OVERHEAD


class HitCache:
    def __init__(self, max_bytes: int = MAX_BYTES, max_body: int = MAX_BODY):
        self.max_bytes = max_bytes
        self.max_body = max_body
        self._kept: dict[Key, Kept] = {}
        self._bytes = 0  # cost() of everything kept
        self._refused = 0  # new requests met while full

    def find(self, ctx: Context, key: Key) -> tuple[Kept | None, object]:
        """The kept hit for this request if the rows it came from are unchanged, and the version.

        Without a current hit, the version is what `keep()` keeps the slow path's hit under: it was
        read before the slow path reads the project and the entry (None on a first sight).
        """
        kept = self._kept.get(key)
        if kept is None:
            return None, None
        version = ctx.store.version(kept.workspace_id)
        if kept.completion is None or not visible(ctx, kept.project_id):
            return None, version
        if version != kept.version:
            kept.version, kept.call, kept.completion = None, None, None
            return None, version
        require(ctx, role="viewer", scope="replay")
        return kept, version

    def keep(self, key: Key, call: Call, completion: dict[str, Any], version: object) -> None:
        """Keep a hit that `find()` read `version` for; a first sight only notes where it led."""
        if call.stream or call.entry is None or templated(call.entry) or len(key[-1]) > self.max_body:
            return
        if call.session is not None and (call.call_number or call.project["sequences"] == "record"):
            return  # its answer depends on its number in the session, or would for a caller who may record
        kept = self._kept.get(key)
        found = (call.project["id"], call.fingerprint)
        if kept is None or version is None or (kept.project_id, kept.fingerprint) != found:
            self._put(key, Kept(*found, call.project["workspace_id"]))
            return
        # Only what the call log and restamp() read of the call: not its parsed body, project or entry rows.
        slim = replace(
            call,
            body={},
            project={k: call.project[k] for k in ("id", "name")},
            entry={"id": call.entry["id"]},
        )
        kept.version, kept.call, kept.completion = version, slim, completion
        kept.headers = replay_headers(call.entry)
        self._put(key, kept, len(call.entry["response"]))

    def _put(self, key: Key, kept: Kept, size: int = 0) -> None:
        """Keep (or keep again, as answered) a request, dropping the oldest while over max_bytes.

        When full, a new request is kept only one time in ADMIT: requests cycling through more than
        fit (a test suite's recordings) then find most of the cache still there on their next pass,
        where dropping the oldest for each would leave nothing of it, and a new set of requests
        still takes the cache over within a few passes.
        """
        old = self._kept.pop(key, None)
        if old is not None:
            self._bytes -= cost(key, old)
        elif self._bytes + cost(key, kept) > self.max_bytes:
            self._refused += 1
            if self._refused % ADMIT:
                return
        kept.size = size
        self._bytes += cost(key, kept)
        self._kept[key] = kept
        while self._bytes > self.max_bytes and len(self._kept) > 1:
            oldest = next(iter(self._kept))
            self._bytes -= cost(oldest, self._kept.pop(oldest))

    @staticmethod
    def completion(kept: Kept) -> dict[str, Any]:
        """The kept answer stamped afresh (id, created) as its dialect's render() would."""
        assert kept.call is not None and kept.completion is not None
        return kept.call.dialect.restamp(kept.completion, kept.call.request, time.time())

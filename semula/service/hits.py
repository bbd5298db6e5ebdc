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
the version first and keeps what it finds. Answers with templates are never kept, nor streams of
an API whose dialect cannot stamp their bytes afresh (Dialect.keeps_stream).

A body longer than MAX_BODY is kept under its length and its first and last SAMPLE bytes, and a
kept answer is served only to a body with the SHA-256 digest of the one that found it: a first sight
of a large body costs no pass over all of its bytes, a kept hit one. A kept hit holds neither the
request nor the recorded entry (only what the call log and the answer need), so the memory stays
bounded whatever the size of the requests agents send.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field, replace
from typing import Any

from semula.service import Context
from semula.service.auth import require, visible
from semula.service.replay import Call, replay_headers, templated

# Bounds the memory: a request is keyed by at most MAX_BODY bytes (a longer one by its length and its
# first and last SAMPLE bytes), and the cache holds about MAX_BYTES per process in all (`cost()`:
# ~5 KiB for a 1.6 KB request with a short answer, so ~8,000 of those). A full cache admits one new
# request in ADMIT, dropping its oldest (docs/decisions/0040-replay-change-counter.md).
MAX_BODY = 32 * 1024
SAMPLE = 2048
MAX_BYTES = 40 * 1024 * 1024
# What a kept hit holds besides its request and answer text: the dicts, the key, the slimmed call.
OVERHEAD = 2560
ADMIT = 8
Key = tuple[str, str, str | None, str | None, str | None, bool, tuple[str | None, ...], object]


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
    body = raw if len(raw) <= MAX_BODY else (len(raw), raw[:SAMPLE], raw[-SAMPLE:])
    return (api, workspace, bound, path_project, header_project, session is not None, headers, body)


@dataclass
class Kept:
    project_id: str
    fingerprint: str
    workspace_id: str  # the project's: store.version() covers its rows
    version: object = None  # None until a request has read it before its rows
    call: Call | None = None  # the call that found the hit: the call log's row is made from it
    completion: dict[str, Any] | None = None  # as render() made it; stamped afresh for each response
    headers: list[tuple[str, str]] = field(default_factory=list)  # recorded provider headers
    digest: bytes | None = None  # a large body's SHA-256, which a body must have to be served this hit
    size: int = 0  # the length of the answer's JSON, for cost()
    sse: bytes | None = None  # a kept stream's bytes as sent; `completion` then holds its first event


def _key_bytes(body: object) -> int:
    return len(body) if isinstance(body, bytes) else 2 * SAMPLE + 64  # a long body's (length, head, tail)


def cost(key: Key, kept: Kept) -> int:
    """About how many bytes a kept hit holds: its request, its answer (parsed: ~3× its JSON) and the rest."""
    return _key_bytes(key[-1]) + 3 * kept.size + OVERHEAD


class HitCache:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._kept: dict[Key, Kept] = {}
        self._bytes = 0  # cost() of everything kept
        self._refused = 0  # new requests met while full

    def find(self, ctx: Context, key: Key, raw: bytes) -> tuple[Kept | None, object]:
        """The kept hit for this request if the rows it came from are unchanged, and the version.

        Without a current hit, the version is what `keep()` keeps the slow path's hit under: it was
        read before the slow path reads the project and the entry (None on a first sight).
        """
        kept = self._kept.get(key)
        if kept is None or kept.digest is not None and hashlib.sha256(raw).digest() != kept.digest:
            return None, None  # a first sight (or another large body with the same length and ends)
        version = ctx.store.version(kept.workspace_id)
        if kept.completion is None or not visible(ctx, kept.project_id):
            return None, version
        if version != kept.version:
            kept.version, kept.call, kept.completion = None, None, None
            return None, version
        require(ctx, role="viewer", scope="replay")
        return kept, version

    def keep(
        self,
        key: Key,
        call: Call,
        completion: dict[str, Any],
        version: object,
        raw: bytes,
        sse: bytes | None = None,
    ) -> None:
        """Keep a hit that `find()` read `version` for; a first sight only notes where it led.

        A stream is kept as the bytes it was sent as (`sse`, with `completion` its first event) when
        its dialect can stamp those bytes afresh for each reply; otherwise it is not kept.
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
        # Only what the call log and restamp() read of the call: not its parsed body, project or entry rows.
        slim = replace(
            call,
            body={},
            project={k: call.project[k] for k in ("id", "name")},
            entry={"id": call.entry["id"]},
        )
        kept.version, kept.call, kept.completion = version, slim, completion
        kept.headers = replay_headers(call.entry)
        kept.sse = sse
        kept.digest = hashlib.sha256(raw).digest() if len(raw) > MAX_BODY else None
        self._put(key, kept, len(call.entry["response"]) + len(sse or b""))

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

    @staticmethod
    def stream(kept: Kept) -> bytes:
        """A kept stream's bytes with this reply's stamps (id, created) as its dialect's render() would."""
        assert kept.call is not None and kept.completion is not None and kept.sse is not None
        return kept.call.dialect.restamp_sse(kept.sse, kept.completion, kept.call.request, time.time())

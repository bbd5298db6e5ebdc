"""Replay hits kept per process: a repeated request costs no fingerprint, no entry query and no render.

A hit is kept under the exact request it answered (the raw body, the project selector and the
caller's workspace and binding) with the value of `store.version(workspace)` read *before* the
request's project and entry were read. It is served again only while that value is unchanged: a
counter that triggers move in the transaction of every change of a row an answer is made of (on
SQLite one for the database, behind the WAL-index header; on PostgreSQL one per workspace). An edit,
revert, rejection, deletion or re-recording, or a change of the project's settings, made through any
process, is therefore seen by the very next request, as without this cache
(docs/decisions/0024-kept-replay-hits.md, docs/decisions/0040-replay-change-counter.md).

The first sight of a request only notes that it was seen; the next one keeps what it finds under the
counter value its call read no later than its rows (Call.version). Answers with templates are never
kept, nor streams of an API whose dialect cannot stamp their bytes afresh (Dialect.keeps_stream),
nor answers that would repeat a first reply's stamps where a render gives fresh ones
(Dialect.keeps_json: with restamp `recorded`, a Chat answer recorded without its own).

A request is keyed by one SHA-256 digest of its context (the API, workspace, binding, project
selectors, session and answer headers) and its body; a body longer than MAX_BODY
by its length and its first and last SAMPLE bytes instead, and a kept answer is served only to a body
with the SHA-256 digest of the one that found it: a first sight of a large body costs no pass over all
of its bytes, a kept hit one. A kept hit holds its answer as the bytes it was sent as, with the few
members its dialect stamps afresh for each reply (Dialect.stamped): a reply replaces those bytes and
serialises nothing. What hits share (the project's id and name, the API, the request's model and
flags, the recorded headers) is held once for all of them (Shared), and the rest of a hit as one
bytes object, which find() makes a Kept of (_encode, _decode): an object for each of its parts
cost, besides what they held, about half the memory of a packed answer.

Once the cache is half full, answers are kept packed (semula/core/packing.py): about half the bytes
of a completion, for a few microseconds of unpacking per reply, so a store of many recordings keeps
about twice as many of them (docs/decisions/0045-first-sight-path.md).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from semula.core import packing
from semula.dialects import Dialect, Request
from semula.service import Context, entries
from semula.service.auth import require, visible
from semula.service.replay import Call, replay_headers, templated

# Bounds the memory: the cache holds about max_bytes per process in all (`cost()`; MAX_BYTES unless
# the server's SEMULA_HIT_CACHE_MB says otherwise), each kept hit its bytes (_encode) and HIT more,
# each request seen once NOTED. A full cache admits one new request in ADMIT, dropping its oldest
# (docs/decisions/0040-replay-change-counter.md).
MAX_BODY = 32 * 1024
SAMPLE = 2048
MAX_BYTES = 40 * 1024 * 1024
# Measured with sys.getsizeof (tests/integration/test_hits.py checks them): a kept hit besides the
# bytes it is held as (its key, its slot in the dict, the bytes object's own header), and a request
# seen once (its key and its slot).
HIT = 160
NOTED = 120
ADMIT = 8
HEADER = 200  # what a recorded header costs besides its name's and value's characters (its objects)
# What a Shared holds besides its headers (itself, its project's id and name, its request, its key
# in the table): charged once while a kept hit uses it, so hits whose recorded headers differ per
# answer, each with a Shared of its own, are charged for every one of them.
SHARED_COST = 1024

# A kept hit is held as one bytes object: its change counter value, its Shared's number and flags,
# then a large body's digest, the fingerprint, the entry id, the stamps and the answer (_encode).
# A Python object for each of those took 315 bytes a hit more (a hit of the 1.6 KB pair, its answer
# packed: 1,174 bytes against 859, python -m bench.kept_memory), so the same budget holds about 1.37
# times as many hits this way.
# A Shared's number is never reused (itertools.count): 32 bits would run out after some 4 billion
# Shareds, ten days of a hit with headers of its own kept 5,000 times a second.
_HEAD = struct.Struct("<qQBHHH")  # version, Shared's number, flags, lengths of three texts
_PACKED, _DIGEST, _HEXED, _COUNTED = 1, 2, 4, 8
_HEX = re.compile(r"[0-9a-f]{64}")

Key = bytes


class _Seen:
    """What a request seen once is noted as: nothing but that it was seen."""


SEEN = _Seen()
PREFIXES = 1024  # contexts whose hashed repr() is kept, to hash a request's body after it
_prefixes: dict[tuple[Any, ...], Any] = {}


def key(
    ctx: Context,
    api: str,
    path_project: str | None,
    header_project: str | None,
    raw: bytes,
    session: str | None = None,
    headers: tuple[str | None, ...] = (),
) -> Key:
    """What decides the answer to a request, besides the rows store.version() covers, as one digest.

    In a session only whether there is one: a session call whose answer does not depend on its call
    number (one answer; decided by the entry and project rows, which the version covers) gives every
    session the same answer, and one whose answer does is kept as a sequence whose answer each call's
    own number picks (keep(sequences=True), decision 0068). `headers` are the values of the request
    headers its API reads into the request (Anthropic's betas). The context is hashed as its
    repr(), which no other context of strings, None and booleans shares, then a tag for how the
    body is taken, then the body.
    """
    principal = ctx.principal
    context = (
        api,
        principal.workspace_id,
        principal.project_id,
        path_project,
        header_project,
        session is not None,
        headers,
    )
    prefix = _prefixes.get(context)
    if prefix is None:
        if len(_prefixes) >= PREFIXES:
            _prefixes.clear()  # a cache of a pure function: dropping it changes no key
        prefix = _prefixes[context] = hashlib.sha256(repr(context).encode("utf-8", "surrogatepass"))
    digest = prefix.copy()
    if len(raw) <= MAX_BODY:
        digest.update(b"\0whole\0")
        digest.update(raw)
    else:
        digest.update(b"\0sampled\0")
        digest.update(len(raw).to_bytes(8, "big"))
        digest.update(raw[:SAMPLE])
        digest.update(raw[-SAMPLE:])
    return digest.digest()


@dataclass(slots=True, eq=False)
class Shared:
    """What many kept hits have in common, held once: their project, API, request and headers."""

    project: dict[str, str]  # the id and name: what the call log and the access line read
    workspace_id: str  # the project's: store.version() covers its rows
    dialect: Dialect
    request: Request
    headers: tuple[tuple[str, str], ...]  # the provider headers the entry recorded
    ident: tuple[Any, ...]  # its key in HitCache._shared
    size: int  # what it holds (SHARED_COST and its headers), charged while a kept hit uses it
    number: int  # what a kept hit's bytes name it by (HitCache._numbers)
    users: int = 0  # the kept hits that use it


class Kept:
    """A kept hit as find() gives it: its answer's bytes (packed or not), its stamps and what the call
    log reads. The cache holds it as bytes (_encode), and makes this of them for each hit."""

    __slots__ = (
        "version",
        "data",
        "packed",
        "stamps",
        "fingerprint",
        "entry_id",
        "shared",
        "digest",
        "sequence",
    )

    def __init__(
        self,
        version: int,
        data: bytes,
        packed: bool,
        stamps: dict[str, Any],
        fingerprint: str,
        entry_id: str,
        shared: Shared,
        digest: bytes | None,
        sequence: tuple[int, str] | None = None,
    ):
        self.version = version
        self.data = data  # the reply as sent (a JSON body, or a stream's events), packed or not
        self.packed = packed
        # The dialect's `stamped` members the body has, with their values in `data` (for a stream, what
        # Dialect.stream_stamps() keeps with it: where they are, too).
        self.stamps = stamps
        self.fingerprint = fingerprint
        self.entry_id = entry_id
        self.shared = shared
        self.digest = digest  # a large body's SHA-256, which a body must have to be served this hit
        # A kept sequence (its answers and after_last): no answer of its own, which its call's number
        # decides (HitCache.find_answer)
        self.sequence = sequence

    # What the call log and the access line read of a call (replay.log_row), for a hit.
    pending_id = None
    fault = None

    @property
    def project(self) -> dict[str, str]:
        return self.shared.project

    @property
    def dialect(self) -> Dialect:
        return self.shared.dialect

    @property
    def model(self) -> str:
        return self.shared.request.model

    @property
    def stream(self) -> bool:
        return self.shared.request.stream

    @property
    def entry(self) -> dict[str, str]:
        return {"id": self.entry_id}

    @property
    def headers(self) -> tuple[tuple[str, str], ...]:
        return self.shared.headers


def _encode(
    version: int,
    number: int,
    data: bytes,
    packed: bool,
    stamps: dict[str, Any],
    fingerprint: str,
    entry_id: str,
    digest: bytes | None,
    *,
    counted: bool = False,
) -> bytes:
    """A kept hit as the bytes the cache holds: _HEAD (with the lengths of what follows), the digest
    (with _DIGEST), the fingerprint (with _HEXED its version, then its SHA-256 as 32 bytes rather than
    64 hex digits), the entry id, the stamps as JSON, then the answer's bytes to the end. A text past
    64 KiB cannot be held (struct.error): such a hit is not kept. A kept sequence (`counted`) holds
    its answers and after_last where the stamps are, and no answer."""
    flags = (_PACKED if packed else 0) | (_DIGEST if digest is not None else 0) | (_COUNTED if counted else 0)
    head, colon, tail = fingerprint.rpartition(":")
    if colon and _HEX.fullmatch(tail):
        flags |= _HEXED
        printed = head.encode("utf-8", "surrogatepass")
        parts = [printed, bytes.fromhex(tail)]
    else:
        printed = fingerprint.encode("utf-8", "surrogatepass")
        parts = [printed]
    entry, stamped = entry_id.encode("utf-8", "surrogatepass"), orjson.dumps(stamps)
    head_bytes = _HEAD.pack(version, number, flags, len(printed), len(entry), len(stamped))
    return b"".join([head_bytes, digest or b"", *parts, entry, stamped, data])


def _decode(held: bytes, shared: Shared) -> Kept:
    version, _, flags, printed, entry, stamped = _HEAD.unpack_from(held)
    at = _HEAD.size
    digest = None
    if flags & _DIGEST:
        digest, at = held[at : at + 32], at + 32
    if flags & _HEXED:
        fingerprint = (
            held[at : at + printed].decode("utf-8", "surrogatepass")
            + ":"
            + held[at + printed : at + printed + 32].hex()
        )
        at += printed + 32
    else:
        fingerprint, at = held[at : at + printed].decode("utf-8", "surrogatepass"), at + printed
    entry_id = held[at : at + entry].decode("utf-8", "surrogatepass")
    at += entry
    stamps = orjson.loads(held[at : at + stamped])
    data = held[at + stamped :]
    if flags & _COUNTED:
        sequence = (stamps["answers"], stamps["after_last"])
        return Kept(version, data, False, {}, fingerprint, entry_id, shared, digest, sequence)
    return Kept(version, data, bool(flags & _PACKED), stamps, fingerprint, entry_id, shared, digest)


def answer_key(key: Key, seq: int) -> Key:
    """Where answer `seq` of a kept sequence is kept: its request's key and the number."""
    return key + seq.to_bytes(4, "big")


def cost(key: Key, held: bytes | _Seen) -> int:
    """About how many bytes a request in the cache holds (`key` is a digest whatever the body's size),
    besides its Shared's, which the cache charges once for all the hits that use it."""
    if isinstance(held, _Seen):
        return NOTED
    return HIT + len(held)


class HitCache:
    def __init__(self, max_bytes: int = MAX_BYTES):
        self.max_bytes = max_bytes
        self._kept: dict[Key, bytes | _Seen] = {}  # a kept hit as _encode() made it, or SEEN
        self._dropped = 0  # evictions since self._kept was last copied (_put)
        self._bytes = 0  # cost() of everything kept, and the size of every Shared a kept hit uses
        self._refused = 0  # new requests met while full
        # What /metrics reports of this cache (semula/metrics.py, KeptHits): kept hits served, and
        # requests dropped to stay within max_bytes, since the process started.
        self.served = 0
        self.evicted = 0
        self._shared: dict[tuple[Any, ...], Shared] = {}
        self._numbers: dict[int, Shared] = {}  # the same Shareds by the number a kept hit holds
        self._count = itertools.count()

    def find(self, ctx: Context, key: Key, raw: bytes, *, sequences: bool = False) -> Kept | None:
        """The kept hit for this request, if the rows it came from are unchanged since it was kept.

        A first sight, or a request only noted so far, reads nothing: its call reads the change
        counter with its entry (Call.version), and keep() keeps it under that value. With `sequences`,
        a kept sequence too (Kept.sequence: no answer until its call is counted, find_answer()),
        unchecked: the statement that counts its call reads the counter (sequences.kept_number), and
        find_answer() compares it, so a counted call costs one round trip, not two (decision 0068).
        """
        held = self._kept.get(key)
        if held is None or isinstance(held, _Seen):
            return None
        version, number, flags, *_ = _HEAD.unpack_from(held)
        if flags & _COUNTED and not sequences:
            return None
        if flags & _DIGEST and hashlib.sha256(raw).digest() != held[_HEAD.size : _HEAD.size + 32]:
            return None  # another large body with the same length and ends
        shared = self._numbers[number]
        if not visible(ctx, shared.project["id"]):
            return None
        if not flags & _COUNTED and ctx.versions.version(ctx.store, shared.workspace_id) != version:
            self._put(key, SEEN, admitted=True)
            return None
        require(ctx, role="viewer", scope="replay")
        kept = _decode(held, shared)
        if kept.sequence is None:  # a kept sequence is served once its answer is found (find_answer)
            self.served += 1
        return kept

    def find_answer(self, key: Key, kept: Kept, seq: int | None, version: object) -> Kept | None:
        """Answer `seq` of the kept sequence find() gave for `key`, if the change counter its call's
        count read (`version`) is the one it was kept at, and the answer was kept at it too (None
        also for no `seq`: after_last `fail`, past the last)."""
        if version != kept.version:  # changed since: the call goes the whole way (and keeps it anew)
            held = self._kept.get(key)
            if (
                held is not None
                and not isinstance(held, _Seen)
                and _HEAD.unpack_from(held)[0] == kept.version
            ):
                self._put(key, SEEN, admitted=True)  # unless another call kept it anew meanwhile
            return None
        if seq is None:
            return None
        held = self._kept.get(answer_key(key, seq))
        if held is None or isinstance(held, _Seen) or _HEAD.unpack_from(held)[0] != version:
            return None
        self.served += 1
        return _decode(held, self._shared_of(held))

    @property
    def held_bytes(self) -> int:
        """What the cache holds now, as it counts it against max_bytes (cost(), and the Shareds)."""
        return self._bytes

    def held(self) -> Iterator[tuple[Key, Kept]]:
        """Every kept hit with its key, as find() would give it (what tests and a debugger look at)."""
        for key, held in self._kept.items():
            if not isinstance(held, _Seen):
                yield key, _decode(held, self._shared_of(held))

    def keep(
        self,
        key: Key,
        call: Call,
        body: dict[str, Any],
        version: object,
        raw: bytes,
        data: bytes,
        *,
        sequences: bool = False,
    ) -> None:
        """Keep a hit its call found at this change counter `version` (None: read later, or not at
        all); a first sight only notes that it was seen.

        With `sequences`, a counted session call (its answer depends on its number) is kept too: the
        request as a kept sequence, and its answer as answer `call.seq` of it (find_answer()).

        `body` is the response as render() made it and `data` its bytes as sent (jsonio.compact()); a
        stream is kept as the bytes it was sent as (`data`, `body` then its first event) when its
        dialect can stamp those bytes afresh for each reply; otherwise it is not kept. So is a body
        whose stamps its dialect cannot find in its bytes.
        """
        entry = call.entry
        if entry is None or templated(entry) or call.project["faults"] != "[]":
            return  # a project with fault rules looks at each call (decision 0061)
        if call.stream and not call.dialect.keeps_stream(call.request):
            return
        if call.session is not None and call.project["sequences"] == "record":
            return  # its answer would depend on its number in the session for a caller who may record
        counted = call.session is not None and call.call_number is not None
        if counted and not sequences:
            return  # its answer depends on its number in the session
        if version is None or key not in self._kept:
            self._put(key, SEEN)
            return
        if type(version) is not int:
            return  # a counter of this store that cannot be held as bytes (none of semula's)
        dialect = call.dialect
        if call.stream:
            stamps = dialect.stream_stamps(body, data)
            if stamps is None:
                return  # stamps its dialect cannot find in the kept bytes
        else:
            if not call.request.fresh and not dialect.keeps_json(call.request, entries.decode(entry)[0]):
                return  # restamp `recorded`, and the answer has no stamps of its own to keep
            made = dialect.kept_json(body, data)
            if made is None:
                return
            data, stamps = made
        packed = packing.pack(data) if self._bytes * 2 > self.max_bytes else None
        shared = self._shared_for(call, entry)
        digest = hashlib.sha256(raw).digest() if len(raw) > MAX_BODY else None
        try:
            if counted:
                sequence = {"answers": entry["answers"], "after_last": call.project["after_last"]}
                marker = _encode(
                    version,
                    shared.number,
                    b"",
                    False,
                    sequence,
                    call.fingerprint,
                    entry["id"],
                    digest,
                    counted=True,
                )
                self._put(key, marker, admitted=True)
                key = answer_key(key, call.seq)
            held = _encode(
                version,
                shared.number,
                packed if packed is not None else data,
                packed is not None,
                stamps,
                call.fingerprint,
                entry["id"],
                digest,
            )
        except Exception:  # a stamp orjson cannot write, a text past 64 KiB: not kept
            if not shared.users:
                self._forget(shared)
            raise
        self._put(key, held, admitted=True)

    def _shared_for(self, call: Call, entry: dict[str, Any]) -> Shared:
        project, headers = call.project, tuple(replay_headers(entry))
        ident = (
            project["id"],
            project["name"],
            project["workspace_id"],
            call.dialect.name,
            call.request,
            headers,
        )
        shared = self._shared.get(ident)
        if shared is None:
            # Held while a kept hit uses it (_hold, _release): the table is no larger than the cache.
            slim = {"id": project["id"], "name": project["name"]}
            size = SHARED_COST + sum(HEADER + len(name) + len(value) for name, value in headers)
            number = next(self._count)
            shared = Shared(
                slim, project["workspace_id"], call.dialect, call.request, headers, ident, size, number
            )
            self._shared[ident] = self._numbers[number] = shared
        return shared

    def _hold(self, key: Key, held: bytes | _Seen) -> None:
        self._bytes += cost(key, held)
        if not isinstance(held, _Seen):
            shared = self._shared_of(held)
            if not shared.users:
                self._bytes += shared.size
            shared.users += 1

    def _release(self, key: Key, held: bytes | _Seen) -> None:
        self._bytes -= cost(key, held)
        if not isinstance(held, _Seen):
            shared = self._shared_of(held)
            shared.users -= 1
            if not shared.users:
                self._bytes -= shared.size
                self._forget(shared)

    def _shared_of(self, held: bytes) -> Shared:
        return self._numbers[_HEAD.unpack_from(held)[1]]

    def _forget(self, shared: Shared) -> None:
        """Drop a Shared no kept hit uses any more from the tables."""
        del self._numbers[shared.number]
        if self._shared.get(shared.ident) is shared:
            del self._shared[shared.ident]

    def _put(self, key: Key, kept: bytes | _Seen, *, admitted: bool = False) -> None:
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
        old = self._kept.pop(key, None)
        self._hold(key, kept)  # before the release: a Shared the two use stays in the table
        if old is not None:
            self._release(key, old)
        self._kept[key] = kept
        while self._bytes > self.max_bytes and len(self._kept) > 1:
            oldest = next(iter(self._kept))
            self._release(oldest, self._kept.pop(oldest))
            self._dropped += 1
            self.evicted += 1
        if self._dropped * self._dropped > 100 * len(self._kept):
            # A dict leaves a dropped key's slot empty at its front, and next(iter()) walks every such
            # slot until the dict happens to resize: each eviction of a full cache cost up to ~100 us.
            # Copied after sqrt(100 n) evictions, the walk (~1 ns a slot) and the copy (~100 ns an
            # entry) cost a few microseconds an eviction together.
            self._kept = dict(self._kept)
            self._dropped = 0

    @staticmethod
    def reply(kept: Kept) -> bytes:
        """A kept answer's bytes with this reply's stamps (id, created, ...) as its dialect's render()
        would give them: a JSON body, or a stream's events."""
        shared = kept.shared
        data = packing.unpack(kept.data) if kept.packed else kept.data
        stamps = kept.stamps
        if shared.request.stream:
            return shared.dialect.restamp_sse(data, stamps, shared.request, time.time())
        return shared.dialect.restamp_json(data, stamps, shared.request, time.time())

"""The bundle format: a project's entries and non-operator settings as versioned JSON (pure: no storage).

The contract is docs/design/product.md §6. The format is JSON with sorted keys and two-space indents,
entries ordered by fingerprint, so a bundle kept in git diffs line by line and the same entries always
export to the same bytes:

    {
      "bundle": {"format": "semula-bundle", "version": 1},
      "config": {non-operator settings},
      "entries": [{"chunks", "fingerprint", "pinned", "request", "response", "review_status"}, ...]
    }

An entry whose request has a sequence of answers (docs/decisions/0036-sequences-and-sessions.md)
keeps answer 1 where it always was and adds `later_answers`: answers 2..n, each
{"chunks", "pinned", "response"}. An entry without it is a sequence of one, as every older bundle's.

The key names sort so that the header comes before the entries, which lets an import read a
bundle of any size in one streaming pass (ijson) without holding it in memory. This module reads,
writes and checks that format; semula/service/bundles.py exports and imports projects with it.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable, Iterator
from typing import IO, Any

import ijson
from marshmallow import RAISE, Schema, ValidationError, fields, validate

from semula.core import jsonio, recorded_meta, redact
from semula.core.errors import BadRequest, PayloadTooLarge

FORMAT = "semula-bundle"


VERSION = 1


MAX_ANSWERS = 999  # answers 2..n of one request's sequence in a bundle entry


FINGERPRINT_PATTERN = r"^v[0-9]+:[0-9a-f]{64}$"


TOP_LEVEL = ("bundle", "config", "entries")


WRAPPING = 3  # levels a bundle adds around a request: the root object, entries and the entry


# progress(stage, done, total): stage "read" counts bytes (total unknown), "write" counts entries.
Progress = Callable[[str, int, int | None], None]


class InvalidBundle(BadRequest):
    """The bundle is not valid."""

    code = "invalid_bundle"


def dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, indent=2, ensure_ascii=False)


def nested(value: Any, indent: int) -> str:
    # json.dumps escapes newlines inside strings, so every raw newline is structure and may be indented.
    return dump(value).replace("\n", "\n" + " " * indent)


def encode(text: str) -> bytes:
    # A lone surrogate (valid in JSON, not in UTF-8) is written as its \\u escape, which reads back the same.
    return text.encode("utf-8", "backslashreplace")


def json_error(exc: Exception) -> InvalidBundle:
    # The first line only: the parser's later lines quote the bundle, which may hold anything.
    raw = exc.args[0] if exc.args else ""
    message = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(exc)
    text = message.strip().splitlines()[0][:200] if message.strip() else type(exc).__name__
    if "premature EOF" in text or "Incomplete" in text:
        return InvalidBundle(f"The bundle ends too early (truncated JSON): {text}")
    return InvalidBundle(f"The bundle is not valid JSON: {text}")


# A \u escape of a UTF-16 surrogate, when the backslash before it is not itself escaped.
_SURROGATE = re.compile(rb"\\u[dD]([89a-fA-F])[0-9a-fA-F]{2}")


class Surrogates:
    r"""A bundle's bytes, read through unchanged, refusing a lone UTF-16 surrogate escape (`"\ud800"`).

    The streaming parser reads one as "?" (or fails with a decoding error): it would change the text
    silently, where every other entrance refuses it (semula.core.jsonio). Every backslash in JSON
    text starts an escape, so `\ud800` is an escape when an odd number of backslashes ends at its
    own; the scan only stops at surrogate escapes (rare), and keeps the last six bytes of a read for
    the next, which may complete an escape or hold its pair.
    """

    def __init__(self, source: IO[bytes]):
        self.source = source
        self.carry = b""  # the end of the last read, scanned again with the next
        self.base = 0  # the offset of carry[0] in the bundle
        self.run = 0  # backslashes just before carry[0]
        self.low_at: int | None = None  # where the low surrogate a high one needs must start

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self._scan(data, final=not data)
        return data

    def finish(self) -> None:
        """Scan what was held back for the next read as if the bundle ended there."""
        self._scan(b"", final=True)

    def _scan(self, data: bytes, final: bool) -> None:
        text = self.carry + data if self.carry else data
        done = len(text) if final else max(0, len(text) - 6)
        if b"\\u" in text:
            for match in _SURROGATE.finditer(text):
                if not final and match.end() > len(text) - 6:
                    done = min(done, match.start())  # its pair may come with the next read
                    break
                if self._backslashes(text, match.start()) % 2 == 0:
                    continue  # `\\ud800`: an escaped backslash, then text
                at, high = self.base + match.start(), match.group(1) in b"89abAB"
                if self.low_at is not None:
                    if at != self.low_at or high:
                        raise _lone(self.low_at - 6)
                    self.low_at = None
                elif high:
                    self.low_at = self.base + match.end()
                else:
                    raise _lone(at)
        if self.low_at is not None and (final or self.low_at < self.base + done):
            raise _lone(self.low_at - 6)  # the scan is past where the pair should start, and met none
        self.run = self._backslashes(text, done - 1) if done else self.run
        self.carry, self.base = text[done:], self.base + done

    def _backslashes(self, text: bytes, end: int) -> int:
        """How many backslashes end at text[end] (0 if it is none), those before this text included."""
        if end < 0:
            return self.run
        start = end
        while start >= 0 and text[start] == 0x5C:
            start -= 1
        return end - start + (self.run if start < 0 else 0)


def _lone(offset: int) -> InvalidBundle:
    return InvalidBundle(
        f"The bundle holds a lone UTF-16 surrogate escape (\\ud800-\\udfff without its pair) at byte "
        f"{offset}, which is not valid Unicode text."
    )


_STARTS = {"start_map": dict, "start_array": list}


_ENDS = frozenset({"end_map", "end_array"})


# The deepest a container may open: jsonio.MAX_DEPTH for a request, within what a bundle wraps it in.
DEPTH_LIMIT = jsonio.MAX_DEPTH + WRAPPING


def too_deep() -> InvalidBundle:
    return InvalidBundle(jsonio.too_deep("The bundle").message)


def build(event: str, value: Any, events: Iterator[tuple[str, Any]], around: int) -> Any:
    """The whole JSON value that starts with this event (a small builder: the hot loop of an import),
    inside `around` open containers; refused when it nests past DEPTH_LIMIT."""
    make = _STARTS.get(event)
    if make is None:
        return value
    root = make()
    stack: list[Any] = [root]
    if around + 1 > DEPTH_LIMIT:
        raise too_deep()
    key = None
    for event, value in events:
        if event == "map_key":
            key = value
            continue
        if event in _ENDS:
            stack.pop()
            if not stack:
                return root
            continue
        make = _STARTS.get(event)
        item = make() if make else value
        top = stack[-1]
        if type(top) is dict:
            top[key] = item
        else:
            top.append(item)
        if make:
            stack.append(item)
            if around + len(stack) > DEPTH_LIMIT:
                raise too_deep()
    return root


def read_bundle(
    source: IO[bytes], entry_started: Callable[[], None] | None = None
) -> Iterator[tuple[str, Any]]:
    """Yield ("bundle", header), ("config", settings) and ("entry", value) in file order, streaming.

    `entry_started` is called when an entry's first event has been read, before it is built.
    """
    guard = Surrogates(source)
    try:
        # The parser's events go straight to the loops below and build(), which checks their nesting
        # (a generator between, counting them again, was a third of a large import's reading).
        yield from _read(ijson.basic_parse(guard, use_float=True), entry_started)
    except ijson.JSONError as exc:
        raise json_error(exc) from None
    except UnicodeDecodeError as exc:  # the parser's own decoding: bytes that are not UTF-8 text
        # A lone low surrogate escape fails the parser's decoding too, perhaps in the bytes the scan
        # held back for the next read: scanned to the end, it says which it was.
        guard.finish()
        raise InvalidBundle(
            f"The bundle is not valid UTF-8 text: a string holds bytes that are not UTF-8 ({exc.reason})."
        ) from None


def _read(
    events: Iterator[tuple[str, Any]], entry_started: Callable[[], None] | None
) -> Iterator[tuple[str, Any]]:
    first = next(events, None)
    if first is None:
        raise InvalidBundle("The bundle is empty.")
    if first[0] != "start_map":
        raise InvalidBundle("A bundle is a JSON object with bundle, config and entries.")
    seen: set[str] = set()
    for event, key in events:
        if event == "end_map":
            break
        if key not in TOP_LEVEL:
            raise InvalidBundle(f"Unknown key {key!r} in the bundle.", param=str(key))
        if key in seen:
            raise InvalidBundle(f"The bundle has {key!r} twice.", param=key)
        seen.add(key)
        event, value = next(events)
        if key != "entries":
            yield key, build(event, value, events, 1)  # inside the root object
            continue
        if "bundle" not in seen:
            raise InvalidBundle('The bundle header ("bundle") must come before "entries".', param="bundle")
        if event != "start_array":
            raise InvalidBundle("entries must be a list.", param="entries")
        for event, value in events:
            if event == "end_array":
                break
            if entry_started is not None:
                entry_started()
            yield "entry", build(event, value, events, 2)  # inside the root object and the entries
    if "bundle" not in seen:
        raise InvalidBundle('This is not a semula bundle: it has no "bundle" header.', param="bundle")
    for _ in events:
        pass  # Drain to the end, so trailing garbage is reported as invalid JSON.


def read_entry(data: bytes) -> Any:
    """One entry of a bundle from its own bytes, with the checks read_bundle() makes of it there (its
    nesting within the bundle, valid JSON and UTF-8, no lone surrogate); InvalidBundle otherwise."""
    guard = Surrogates(io.BytesIO(data))
    try:
        events = ijson.basic_parse(guard, use_float=True)
        first = next(events, None)
        if first is None:
            raise InvalidBundle("An entry is a JSON object.")
        value = build(*first, events, 2)  # inside the root object and the entries, as in a bundle
        for _ in events:
            raise InvalidBundle("More than one JSON value.")
    except ijson.JSONError as exc:
        raise json_error(exc) from None
    except UnicodeDecodeError:
        raise InvalidBundle("The bundle is not valid UTF-8 text.") from None
    guard.finish()
    return value


def redacted(value: Any, secrets: tuple[str, ...]) -> Any:
    """redact_obj(), with one scan over all the strings first: almost every entry has nothing to redact."""
    strings: list[str] = []
    _strings(value, strings)
    if not redact.contains_secret("\n".join(strings), secrets):
        return value
    return redact.redact_obj(value, secrets)


def _strings(value: Any, out: list[str]) -> None:
    # Keys too: contains_secret() over the joined text can only over-report, never miss one.
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.append(key)
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


class HeaderSchema(Schema):
    class Meta:
        unknown = RAISE

    format = fields.String(required=True, validate=validate.Equal(FORMAT))
    version = fields.Integer(required=True, strict=True, validate=validate.Range(min=1))


class AnswerSchema(Schema):
    class Meta:
        unknown = RAISE

    response = fields.Raw(required=True, allow_none=False)
    chunks = fields.List(fields.Dict(), load_default=None, allow_none=True)
    pinned = fields.Boolean(load_default=False, truthy={True}, falsy={False})
    meta = fields.Nested(recorded_meta.MetaSchema, load_default=None, allow_none=True)  # as an entry's


def first_error(exc: ValidationError) -> tuple[str, str]:
    messages: Any = exc.normalized_messages()
    path = []
    while isinstance(messages, dict):
        key, messages = next(iter(messages.items()))
        path.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    text = messages[0] if isinstance(messages, list) else str(messages)
    return "".join(path).lstrip("."), text


def check_header(value: Any) -> None:
    if not isinstance(value, dict):
        raise InvalidBundle("bundle must be an object with format and version.", param="bundle")
    version = value.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version > VERSION:
        raise InvalidBundle(
            f"This bundle is format version {version}; this semula reads version {VERSION} and older. "
            "Upgrade semula to import it.",
            param="bundle.version",
            code="bundle_version_unsupported",
        )
    try:
        HEADER.load(value)
    except ValidationError as exc:
        path, text = first_error(exc)
        raise InvalidBundle(f"bundle.{path}: {text}", param=f"bundle.{path}") from None


class BundleTooLarge(PayloadTooLarge):
    """The bundle, or one entry of it, is larger than this server imports."""

    code = "bundle_too_large"


class CountingReader:
    """Reports how many bytes were read (a progress bar over a stream of unknown structure), and
    refuses an entry longer than `entry_limit` bytes before the parser has built it."""

    def __init__(self, source: IO[bytes], progress: Progress | None, entry_limit: int | None = None):
        self.source, self.progress, self.entry_limit = source, progress, entry_limit
        self.total, self.entry_start, self.entry = 0, None, -1

    def start_entry(self) -> None:
        # Counted from what was read when the entry's first event came out: up to one parser buffer
        # after where it really starts, so the limit is generous by at most that.
        self.entry_start, self.entry = self.total, self.entry + 1

    def read(self, size: int = -1) -> bytes:
        if size == 0:
            # ijson probes with read(0); werkzeug's request stream takes an empty read for a disconnect.
            return b""
        data = self.source.read(size)
        self.total += len(data)
        if (
            self.entry_limit
            and self.entry_start is not None
            and self.total - self.entry_start > self.entry_limit
        ):
            # Parsing one long string costs time that grows faster than its length (~17 s for 60 MB).
            raise BundleTooLarge(
                f"entries[{self.entry}]: one entry of the bundle is longer than {self.entry_limit} "
                "bytes, three times SEMULA_MAX_BODY_BYTES (its request, response and chunks at that "
                "limit); nothing was imported.",
                param=f"entries[{self.entry}]",
            )
        if self.progress and data:
            self.progress("read", len(data), None)
        return data


def parse_with_prefixes(source: IO[bytes]) -> Iterator[tuple[str, str, Any]]:
    try:
        yield from ijson.parse(source, use_float=True)
    except ijson.JSONError as exc:
        raise json_error(exc) from None


def find_secrets(
    source: IO[bytes], extra_secrets: tuple[str, ...] = (), limit: int = 20
) -> tuple[list[str], int]:
    """Paths in a bundle file whose text looks like a credential (first `limit`), and how many in all."""
    found: list[str] = []
    total = 0
    index = -1
    for prefix, event, value in parse_with_prefixes(source):
        if prefix == "entries.item" and event == "start_map":
            index += 1
        if event not in ("string", "map_key") or not redact.contains_secret(value, extra_secrets):
            continue
        total += 1
        if len(found) < limit:
            path = prefix.replace(".item", "[]")
            if prefix.startswith("entries.item"):
                path = f"entries[{index}]" + prefix[len("entries.item") :].replace(".item", "[]")
            # The path names keys, and a key may be the credential: it is redacted like a value.
            path = redact.redact_text(path, extra_secrets)
            found.append(path + (" (an object key)" if event == "map_key" else ""))
    return found, total


HEADER, ANSWER = HeaderSchema(), AnswerSchema()

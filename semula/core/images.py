"""Images in a parked call: a short placeholder to read instead of base64, and the bytes to look at.

Pure, no I/O. Images reach the conversation view as `image_url` parts (docs/decisions/0030-dialects.md),
whatever API the app called. Only `data:image/*;base64,` URLs up to MAX_IMAGE_BYTES are decoded; a
remote URL is named, never fetched.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

# OpenAI's own limit for one image; a larger one is described, not decoded.
MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_URL_SHOWN = 200
_DATA_URL = re.compile(r"data:([^,;]*)((?:;[^,;]*)*),", re.IGNORECASE)
_EXTENSIONS = {"image/jpeg": "jpg", "image/svg+xml": "svg", "image/x-icon": "ico"}


class NotDecoded(ValueError):
    """The URL's image is not decoded; the message says why, for the reader."""


@dataclass(frozen=True)
class ImagePart:
    """One image part of the conversation view: messages[message].content[part]."""

    message: int
    part: int
    url: str

    @property
    def where(self) -> str:
        return f"messages[{self.message}].content[{self.part}]"

    @property
    def remote(self) -> bool:
        return not _DATA_URL.match(self.url)

    def file_name(self, pending_id: str, media_type: str) -> str:
        """`<pending id>-<message index>-<part index>.<ext>`; the id is cut to a safe file name."""
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", pending_id)[:64] or "pending"
        return f"{safe}-{self.message}-{self.part}.{extension(media_type)}"


def image_parts(view: Any) -> list[ImagePart]:
    """The image parts of a conversation view's messages, in order."""
    found = []
    messages = view.get("messages") if isinstance(view, dict) else None
    for m, message in enumerate(messages if isinstance(messages, list) else ()):
        content = message.get("content") if isinstance(message, dict) else None
        for p, part in enumerate(content if isinstance(content, list) else ()):
            url = image_url(part)
            if url is not None:
                found.append(ImagePart(m, p, url))
    return found


def image_url(part: Any) -> str | None:
    """The URL of an `image_url` content part ("" when it has none); None for any other part."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return None
    inner = part.get("image_url")
    url = inner.get("url") if isinstance(inner, dict) else inner
    return url if isinstance(url, str) else ""


def describe(url: str) -> str:
    """The placeholder shown instead of an image: `[image image/png 12.3 KB]`, or the remote URL."""
    data = _DATA_URL.match(url)
    if not data:
        shown = url if len(url) <= MAX_URL_SHOWN else url[:MAX_URL_SHOWN] + "…"
        return f"[image {shown}]" if shown else "[image]"
    media_type, size = _media_type(data), _decoded_size(url, data)
    kind = "image" if media_type.startswith("image/") else "data"
    return f"[{kind} {media_type} {format_size(size)}]"


def decode(url: str) -> tuple[str, bytes]:
    """The media type and bytes of a `data:image/*;base64,` URL; NotDecoded says why not."""
    data = _DATA_URL.match(url)
    if not data:
        raise NotDecoded("remote: not fetched")
    media_type = _media_type(data)
    if not media_type.startswith("image/"):
        raise NotDecoded(f"{media_type} is not an image media type: not decoded")
    if not _is_base64(data):
        raise NotDecoded(f"{media_type} data not in base64: not decoded")
    size = _decoded_size(url, data)
    if size > MAX_IMAGE_BYTES:
        limit = format_size(MAX_IMAGE_BYTES)
        raise NotDecoded(f"{media_type} of {format_size(size)} is over the {limit} limit: not decoded")
    try:
        return media_type, base64.b64decode(re.sub(r"\s+", "", url[data.end() :]), validate=True)
    except (binascii.Error, ValueError):
        raise NotDecoded(f"{media_type} data is not valid base64: not decoded") from None


def without_data(value: Any) -> Any:
    """A copy of a JSON value with every data URL string replaced by its placeholder."""
    if isinstance(value, str):
        return describe(value) if _DATA_URL.match(value) else value
    if isinstance(value, dict):
        return {key: without_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_data(item) for item in value]
    return value


def decoded(parts: list[ImagePart]) -> Iterator[tuple[ImagePart, str, bytes | None, str]]:
    """Each part with its media type, its bytes (None when not decoded) and a note: the label or why not."""
    for part in parts:
        try:
            media_type, data = decode(part.url)
        except NotDecoded as exc:
            yield part, "", None, str(exc)
        else:
            yield part, media_type, data, describe(part.url)


def extension(media_type: str) -> str:
    """A file extension for an image media type: png, jpg, webp, svg, …"""
    if media_type in _EXTENSIONS:
        return _EXTENSIONS[media_type]
    subtype = media_type.partition("/")[2].partition("+")[0]
    return re.sub(r"[^a-z0-9]", "", subtype.lower())[:10] or "img"


def format_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def _media_type(data: re.Match[str]) -> str:
    return data.group(1).strip().lower() or "text/plain"


def _is_base64(data: re.Match[str]) -> bool:
    return "base64" in (p.strip().lower() for p in data.group(2).split(";"))


def _decoded_size(url: str, data: re.Match[str]) -> int:
    payload = len(url) - data.end()
    if not _is_base64(data):
        return payload
    # Three bytes for every four characters, less the padding; counted without decoding.
    return max(0, payload * 3 // 4 - len(url[-2:]) + len(url[-2:].rstrip("=")))

"""semula.core.images: placeholders instead of base64, the bytes of data-URL images, and what is refused."""

from __future__ import annotations

import base64

import pytest

from semula import dialects
from semula.core import images
from tests.agent_helpers import PNG


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def test_describe_gives_media_type_and_size_or_the_url():
    assert images.describe(data_url(PNG)) == f"[image image/png {len(PNG)} B]"
    assert images.describe(data_url(b"x" * 12_600, "image/jpeg")) == "[image image/jpeg 12.3 KB]"
    assert images.describe(data_url(b"x" * 3 * 1024 * 1024)) == "[image image/png 3.0 MB]"
    assert images.describe("https://example.com/cat.png") == "[image https://example.com/cat.png]"
    long = "https://example.com/" + "a" * 500
    assert images.describe(long) == f"[image {long[: images.MAX_URL_SHOWN]}…]"
    assert images.describe(data_url(b"<html>", "text/html")) == "[data text/html 6 B]"
    assert images.describe("") == "[image]"


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 100])
def test_the_size_is_counted_without_decoding(size):
    assert images.describe(data_url(b"y" * size)) == f"[image image/png {size} B]"


def test_decode_returns_the_bytes_of_an_image():
    assert images.decode(data_url(PNG)) == ("image/png", PNG)
    assert images.decode("DATA:Image/PNG;BASE64," + base64.b64encode(PNG).decode()) == ("image/png", PNG)


@pytest.mark.parametrize(
    "url, why",
    [
        ("https://example.com/cat.png", "remote: not fetched"),
        (data_url(b"<script>", "text/html"), "text/html is not an image media type"),
        ("data:,hello", "text/plain is not an image media type"),
        ("data:image/svg+xml,<svg/>", "not in base64"),
        ("data:image/png;base64,not*base64!", "not valid base64"),
    ],
)
def test_decode_refuses_what_is_not_a_base64_image(url, why):
    with pytest.raises(images.NotDecoded, match=why):
        images.decode(url)


def test_decode_refuses_an_image_over_the_limit_before_decoding(monkeypatch):
    monkeypatch.setattr(images, "MAX_IMAGE_BYTES", 1000)
    assert images.decode(data_url(b"z" * 1000))[1] == b"z" * 1000
    too_big = data_url(b"z" * 1025)

    def must_not_decode(*args, **kwargs):
        raise AssertionError("decoded an image over the limit")

    monkeypatch.setattr(images.base64, "b64decode", must_not_decode)
    with pytest.raises(images.NotDecoded, match=r"image/png of 1.0 KB is over the 1000 B limit"):
        images.decode(too_big)


def test_image_parts_of_a_chat_and_a_responses_view():
    url = data_url(PNG)
    chat = dialects.get("openai.chat").conversation(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "Describe images."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": url}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/b.png"}},
                    ],
                },
            ],
        }
    )
    parts = images.image_parts(chat)
    assert [(p.message, p.part, p.url, p.remote) for p in parts] == [
        (1, 1, url, False),
        (1, 2, "https://example.com/b.png", True),
    ]
    assert parts[0].where == "messages[1].content[1]"

    responses = dialects.get("openai.responses").conversation(
        {
            "model": "m",
            "input": [
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "What is this?"},
                        {"type": "input_image", "image_url": url},
                    ],
                }
            ],
        }
    )
    assert [(p.message, p.part, p.url) for p in images.image_parts(responses)] == [(0, 1, url)]


def test_without_data_replaces_every_data_url_and_nothing_else():
    url = data_url(PNG)
    call = {
        "request": {"input": [{"content": [{"type": "input_image", "image_url": url}]}]},
        "conversation": {"messages": [{"content": [{"type": "image_url", "image_url": {"url": url}}]}]},
        "note": "data: is only a prefix here",
        "remote": "https://example.com/c.png",
        "n": 3,
    }
    shown = images.without_data(call)
    label = f"[image image/png {len(PNG)} B]"
    assert shown["request"]["input"][0]["content"][0]["image_url"] == label
    assert shown["conversation"]["messages"][0]["content"][0]["image_url"]["url"] == label
    assert {k: shown[k] for k in ("note", "remote", "n")} == {k: call[k] for k in ("note", "remote", "n")}
    assert call["conversation"]["messages"][0]["content"][0]["image_url"]["url"] == url  # not changed


def test_file_names_are_safe_and_carry_the_extension():
    part = images.ImagePart(2, 1, "")
    assert part.file_name("pnd_abc123", "image/png") == "pnd_abc123-2-1.png"
    assert part.file_name("../../etc/x", "image/jpeg") == "______etc_x-2-1.jpg"
    assert part.file_name("pnd_a", "image/svg+xml") == "pnd_a-2-1.svg"
    assert part.file_name("pnd_a", "image/../..") == "pnd_a-2-1.img"

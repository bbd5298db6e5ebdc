"""The caps on items and content blocks a request may hold (docs/decisions/0063-abandoned-calls.md):
past one, each API refuses with its own 400 before any item is looked at."""

from __future__ import annotations

import pytest

from semula import dialects
from semula.core import chat_requests
from semula.core.errors import BadRequest
from semula.core.limits import MAX_BLOCKS, MAX_ITEMS, blocks
from semula.dialects import anthropic_checks, gemini_checks, openai_responses

TEXT = "x"


def responses(items: int, parts: int) -> dict:
    content = [{"type": "input_text", "text": TEXT}] * parts
    return {
        "model": "m",
        "input": [{"role": "user", "content": TEXT}] * items + [{"role": "user", "content": content}],
    }


def chat(items: int, parts: int) -> dict:
    content = [{"type": "text", "text": TEXT}] * parts
    return {
        "model": "m",
        "messages": [{"role": "user", "content": TEXT}] * items + [{"role": "user", "content": content}],
    }


def anthropic(items: int, parts: int) -> dict:
    content = [{"type": "text", "text": TEXT}] * parts
    turns = [{"role": "user", "content": TEXT}, {"role": "assistant", "content": TEXT}] * (items // 2)
    return {"model": "m", "max_tokens": 5, "messages": [*turns, {"role": "user", "content": content}]}


def gemini(items: int, parts: int) -> dict:
    contents = [{"role": "user", "parts": [{"text": TEXT}]}] * items + [
        {"role": "user", "parts": [{"text": TEXT}] * parts}
    ]
    return {"model": "m", "contents": contents}


# Each API: its name, a body of n items (plus one) and m blocks, the module holding its caps, the
# function that checks one item (made to fail: past a cap, no item is looked at), and its errors.
APIS = {
    "responses": (dialects.RESPONSES, responses, openai_responses, "_check_item"),
    "chat": (dialects.CHAT, chat, chat_requests, "_message"),
    "anthropic": (dialects.ANTHROPIC, anthropic, anthropic_checks, "_check_message"),
    "gemini": (dialects.GEMINI, gemini, gemini_checks, "_check_content"),
}


@pytest.mark.parametrize("api", ["responses", "chat", "gemini"])
def test_more_items_than_the_cap_are_refused_before_any_is_checked(api, monkeypatch):
    name, body, module, item_check = APIS[api]
    monkeypatch.setattr(module, item_check, lambda *a, **k: pytest.fail("an item was checked"))
    with pytest.raises(BadRequest) as info:
        dialects.get(name).check(body(MAX_ITEMS, 1))
    error = info.value
    assert error.status == 400 and error.param in ("input", "messages", "contents")
    assert f"{MAX_ITEMS + 1}" in error.message and f"{MAX_ITEMS}" in error.message
    if api in ("responses", "chat"):
        assert error.code == "array_above_max_length"
        assert error.message == (
            f"Invalid '{error.param}': array too long. Expected an array with maximum length {MAX_ITEMS}, "
            f"but got an array with length {MAX_ITEMS + 1} instead."
        )
    else:
        assert dialects.get(name).error_body(error)["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("api", list(APIS))
def test_more_blocks_than_the_cap_are_refused_before_any_item_is_checked(api, monkeypatch):
    name, body, module, item_check = APIS[api]
    monkeypatch.setattr(module, item_check, lambda *a, **k: pytest.fail("an item was checked"))
    with pytest.raises(BadRequest) as info:
        dialects.get(name).check(body(0, MAX_BLOCKS + 1))
    error = info.value
    assert (
        error.status == 400
        and f"{MAX_BLOCKS + 1}" in error.message
        and f"at most {MAX_BLOCKS}" in error.message
    )
    shaped = dialects.get(name).error_body(error)
    if api == "anthropic":
        assert shaped["type"] == "error" and shaped["error"]["type"] == "invalid_request_error"
    elif api == "gemini":
        assert shaped["error"]["code"] == 400
    else:
        assert shaped["error"]["code"] == "array_above_max_length"


@pytest.mark.parametrize("api", list(APIS))
def test_a_request_at_the_caps_is_checked_as_before_and_one_more_is_refused(api, monkeypatch):
    name, body, module, _ = APIS[api]
    check = dialects.get(name).check
    monkeypatch.setattr(module, "MAX_BLOCKS", 5)  # made small: a request at the real ones takes a while
    check(body(0, 5))
    with pytest.raises(BadRequest):
        check(body(0, 6))
    if hasattr(module, "MAX_ITEMS"):  # Anthropic's messages: MAX_MESSAGES (decision 0054)
        monkeypatch.setattr(module, "MAX_ITEMS", 5)
        check(body(4, 1))
        with pytest.raises(BadRequest):
            check(body(5, 1))


def test_blocks_counts_lists_only():
    assert (
        blocks(
            [{"content": "text"}, {"content": [1, 2]}, "odd", {"content": None}, {"content": [3]}], "content"
        )
        == 3
    )

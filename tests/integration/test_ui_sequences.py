"""The dashboard's entry page lists a sequence's answers (issue 21, decision 0041): each answer has its
own page and revisions; editors edit, revert, pin, move and delete one answer; both databases."""

from __future__ import annotations

import re

import pytest

from semula.service import entries, projects
from tests.entry_helpers import save_entry
from tests.integration.test_auth import signed_in
from tests.integration.test_sequences import add_answer


@pytest.fixture
def entry_id(ctx):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    saved = save_entry(ctx, "shop", "next step?", {"content": "one"})
    add_answer(ctx, "shop", 2, "two")
    add_answer(ctx, "shop", 3, "three")
    return saved["id"]


@pytest.fixture
def editor(app, make_token):
    return signed_in(app, make_token("editor"))


def contents(ctx, entry_id) -> list[str]:
    return [a["answer"]["content"] for a in entries.get(ctx, entry_id)["sequence"]]


def sequence_rows(page: str) -> list[str]:
    table = page.split('aria-label="sequence"', 1)[1].split("</table>", 1)[0]
    return [re.sub(r"<[^>]+>", " ", "<tr" + row).split()[1] for row in table.split("<tr")[2:]]


def test_the_entry_page_lists_the_answers_and_each_has_its_page(app, entry_id, editor):
    browser, _ = editor
    page = browser.get(f"/ui/entries/{entry_id}").get_data(as_text=True)
    assert "answer 1 of 3" in page and sequence_rows(page) == ["one", "two", "three"]
    assert 'aria-label="Move up answer 2"' in page and 'aria-label="Delete answer 3"' in page
    r = browser.get(f"/ui/entries/{entry_id}/answers/2")
    assert r.status_code == 200
    page = r.get_data(as_text=True)
    assert "answer 2 of 3" in page and "Revisions of answer 2" in page and "two" in page
    assert browser.get(f"/ui/entries/{entry_id}/answers/4").status_code == 404


def test_an_editor_edits_reverts_and_pins_one_answer(ctx, app, entry_id, editor):
    browser, csrf = editor
    url = f"/ui/entries/{entry_id}/answers/2"
    r = browser.post(url, data={"csrf": csrf, "action": "edit", "answer": "TWO", "summary": "louder"})
    assert r.status_code == 302 and r.headers["Location"].endswith(url)
    assert contents(ctx, entry_id) == ["one", "TWO", "three"]
    assert [v["summary"] for v in entries.get_answer(ctx, entry_id, 2)["revisions"]] == ["test", "louder"]
    assert browser.post(url, data={"csrf": csrf, "action": "revert", "number": "1"}).status_code == 302
    assert contents(ctx, entry_id) == ["one", "two", "three"]
    assert browser.post(url, data={"csrf": csrf, "action": "pin"}).status_code == 302
    assert entries.get_answer(ctx, entry_id, 2)["pinned"] and not entries.get(ctx, entry_id)["pinned"]
    # A bad answer is shown on the page, in the answer's own form, and changes nothing.
    r = browser.post(url, data={"csrf": csrf, "action": "edit", "answer": '{"tool_calls": "nope"}'})
    assert r.status_code == 422 and "tool_calls" in r.get_data(as_text=True)
    assert contents(ctx, entry_id) == ["one", "two", "three"]


def test_an_editor_moves_and_deletes_answers(ctx, app, entry_id, editor):
    browser, csrf = editor
    url = f"/ui/entries/{entry_id}"
    assert browser.post(url, data={"csrf": csrf, "action": "up", "seq": "3"}).status_code == 302
    assert contents(ctx, entry_id) == ["one", "three", "two"]
    assert browser.post(url, data={"csrf": csrf, "action": "down", "seq": "1"}).status_code == 302
    assert contents(ctx, entry_id) == ["three", "one", "two"]
    r = browser.post(url, data={"csrf": csrf, "action": "down", "seq": "3"})
    assert r.status_code == 400 and contents(ctx, entry_id) == ["three", "one", "two"]
    r = browser.post(url, data={"csrf": csrf, "action": "delete_answer", "seq": "2"})
    assert r.status_code == 302 and contents(ctx, entry_id) == ["three", "two"]
    page = browser.get(url).get_data(as_text=True)
    assert sequence_rows(page) == ["three", "two"]


def test_a_viewer_sees_the_answers_but_cannot_change_them(ctx, app, entry_id, make_token):
    browser, csrf = signed_in(app, make_token("viewer"))
    page = browser.get(f"/ui/entries/{entry_id}").get_data(as_text=True)
    assert sequence_rows(page) == ["one", "two", "three"] and "Move up" not in page
    r = browser.post(f"/ui/entries/{entry_id}", data={"csrf": csrf, "action": "delete_answer", "seq": "2"})
    assert r.status_code == 403 and contents(ctx, entry_id) == ["one", "two", "three"]


def test_the_entries_list_shows_how_many_answers_a_sequence_has(ctx, app, entry_id, editor):
    browser, _ = editor
    save_entry(ctx, "shop", "a single question", {"content": "only"})
    page = browser.get("/ui/p/shop/entries").get_data(as_text=True)
    assert page.count(" answers</span>") == 1 and "3 answers</span>" in page


@pytest.mark.parametrize("field, action", [("number", "revert"), ("seq", "up"), ("seq", "delete_answer")])
def test_a_form_number_that_is_no_number_is_a_400_on_the_page(ctx, app, entry_id, editor, field, action):
    browser, csrf = editor
    before = contents(ctx, entry_id)
    r = browser.post(f"/ui/entries/{entry_id}/answers/2", data={"csrf": csrf, "action": action, field: "abc"})
    assert r.status_code == 400 and "must be a whole number" in r.get_data(as_text=True)
    assert contents(ctx, entry_id) == before

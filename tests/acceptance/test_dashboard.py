"""The dashboard in headless Chromium (Debian's, driven by Playwright) against the real server."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from semula.service import projects, tokens
from tests.acceptance import shared
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = os.environ.get("SEMULA_SCREENSHOTS")  # set to a folder to refresh docs/img
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip(
            "browser tests skipped: Debian's chromium is not installed (make test installs it as root)"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.dialogs = dialogs
    yield page
    context.close()


def sign_in(page, server, ctx, role: str = "editor") -> None:
    secret = tokens.create(ctx, {"role": role, "scope": "full"})["token"]
    page.goto(server.url + "/ui/")
    page.fill("input[name=token]", secret)
    page.click("button:text('Sign in')")
    page.wait_for_url(server.url + "/ui/")


def park(pool, client, ctx, shop, content: str, tools=None):
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}
    if tools:
        request["tools"] = tools
    # Read what is parked already before sending: a fast server parks the call before a read after.
    before = {r["id"] for r in ctx.store.all("parked_in_project", project_id=shop["id"])}
    future = pool.submit(client.chat.completions.create, **request)
    pending_id = wait_for(
        lambda: next(
            (
                r["id"]
                for r in ctx.store.all("parked_in_project", project_id=shop["id"])
                if r["id"] not in before
            ),
            None,
        ),
        what="a parked call",
    )
    return future, pending_id


def test_a_person_answers_a_held_call(server, ctx, shop, openai_client, page):
    client = openai_client(server)
    sign_in(page, server, ctx)
    with ThreadPoolExecutor(2) as pool:
        future, pending_id = park(
            pool, client, ctx, shop, "What is the capital of Norway? <script>alert('x')</script>"
        )
        page.goto(f"{server.url}/ui/p/shop/pending")
        page.wait_for_selector(f"text={pending_id}")
        if SHOTS:
            page.screenshot(path=str(Path(SHOTS) / "queue.png"))
        page.click(f"text={pending_id}")
        assert "<script>alert('x')</script>" in page.inner_text(".msg.user")
        assert page.dialogs == []
        page.fill("textarea[name=content]", "Oslo.")
        page.click("button:text('Answer')")
        page.wait_for_url(f"{server.url}/ui/p/shop/pending")
        assert future.result(timeout=30).choices[0].message.content == "Oslo."


def test_an_invalid_tool_call_shows_the_field_error(server, ctx, shop, openai_client, page):
    client = openai_client(server)
    sign_in(page, server, ctx)
    with ThreadPoolExecutor(2) as pool:
        future, pending_id = park(pool, client, ctx, shop, "weather in Oslo?", tools=[WEATHER])
        page.goto(f"{server.url}/ui/pending/{pending_id}")
        assert page.is_checked("input[value=tool]")  # pre-filled from the skeleton
        page.fill("textarea[name=arguments]", '{"city": 42}')
        page.click("button:text('Answer')")
        error = page.wait_for_selector(".error[data-field=arguments]")
        assert "tool_calls[0].arguments.city" in error.inner_text()
        if SHOTS:
            page.screenshot(path=str(Path(SHOTS) / "answer-error.png"), full_page=True)
        page.fill("textarea[name=arguments]", '{"city": "Oslo"}')
        page.click("button:text('Answer')")
        page.wait_for_url(f"{server.url}/ui/p/shop/pending")
        call = future.result(timeout=30).choices[0].message.tool_calls[0]
        assert call.function.name == "get_weather"


def test_a_viewer_sees_no_answer_form(server, ctx, shop, openai_client, page):
    sign_in(page, server, ctx, role="viewer")
    with ThreadPoolExecutor(2) as pool:
        future, pending_id = park(pool, openai_client(server, timeout=5), ctx, shop, "viewer?")
        page.goto(f"{server.url}/ui/pending/{pending_id}")
        assert page.query_selector("form#answer") is None
        assert "can read but not answer" in page.inner_text("main")
        from semula.service import pending

        pending.cancel(ctx, pending_id)
        with pytest.raises(Exception):  # noqa: B017 - the SDK raises its conflict error
            future.result(timeout=30)


def test_a_form_without_its_csrf_token_is_refused(server, ctx, shop, openai_client, page):
    sign_in(page, server, ctx)
    with ThreadPoolExecutor(2) as pool:
        future, pending_id = park(pool, openai_client(server, timeout=120), ctx, shop, "csrf?")
        page.goto(f"{server.url}/ui/pending/{pending_id}")
        page.evaluate("document.querySelectorAll('input[name=csrf]').forEach(e => e.remove())")
        page.fill("textarea[name=content]", "forged")
        with page.expect_response(lambda r: r.request.method == "POST") as info:
            page.click("button:text('Answer')")
        assert info.value.status == 400
        assert (
            ctx.store.one("get_pending", id=pending_id, workspace_id=ctx.principal.workspace_id)["status"]
            == "pending"
        )
        from semula.service import pending

        pending.answer(ctx, pending_id, {"content": "real"})
        assert future.result(timeout=30).choices[0].message.content == "real"


def test_overview_lists_projects_with_counts(server, ctx, shop, page):
    projects.create(ctx, {"name": "other", "mode": "replay"})
    sign_in(page, server, ctx, role="admin")
    rows = page.inner_text("table")
    assert "shop" in rows and "other" in rows and "replay" in rows
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / "projects.png"))


def test_entries_search_edit_diff_and_review(server, ctx, shop, openai_client, page):
    client = openai_client(server)
    with ThreadPoolExecutor(2) as pool:
        future, pending_id = park(pool, client, ctx, shop, "Name a <b>colour</b>")
        from semula.service import pending

        pending.answer(ctx, pending_id, {"content": "Blue."})
        future.result(timeout=30)
    sign_in(page, server, ctx, role="editor")
    page.goto(f"{server.url}/ui/p/shop/entries?text=colour")
    assert "Name a <b>colour</b>" in page.inner_text("table")
    page.click("td a")
    page.fill("textarea[name=answer]", '{"role": "assistant", "content": "Green."}')
    page.fill("input[name=summary]", "greener")
    page.click("button:text('Save as a new revision')")
    page.wait_for_selector("text=Saved.")
    diff = page.inner_text("pre.diff")
    assert '-      "content": "Blue."' in diff and '+      "content": "Green."' in diff
    page.click("button:text('Reject')")
    page.wait_for_selector("text=Saved.")
    assert "review rejected" in page.inner_text("main p.muted")
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / "entry.png"), full_page=True)
    page.click("button:text('Approve')")
    page.wait_for_selector("text=review approved")
    assert (
        client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "Name a <b>colour</b>"}]
        )
        .choices[0]
        .message.content
        == "Green."
    )

    def logged_hit() -> bool:  # the server writes its call log in batches, every half second
        page.goto(f"{server.url}/ui/p/shop/calls?outcome=hit")
        return "hit" in page.inner_text("table")

    wait_for(logged_hit, what="the hit in the call log")
    assert "200" in page.inner_text("table")

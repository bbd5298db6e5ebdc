"""The MCP tools through the SDK's in-process client, against the app in-process over client.py.

tests/acceptance/test_agents.py runs `semula mcp` over stdio against a real server.
"""

from __future__ import annotations

import base64
import json

import anyio
import pytest
from mcp import Client

from semula.service import projects as projects_service
from semula.surfaces.mcp_server import build
from tests.agent_helpers import PNG, PNG_URL, REMOTE_IMAGE, in_process_client, park, two_project_queue
from tests.entry_helpers import save_entry

TOOLS = {
    "list_pending",
    "get_pending",
    "claim_next",
    "answer_pending",
    "release_claim",
    "cancel_pending",
    "get_entry",
    "get_entry_answer",
    "edit_entry_answer",
    "pin_entry_answer",
    "delete_entry_answer",
    "reorder_entry_answers",
    "list_faults",
    "add_fault",
    "clear_faults",
}


@pytest.fixture
def queue(ctx):
    """The two projects' parked calls, and an entry of beta's (e1)."""
    return {**two_project_queue(ctx), "e1": save_entry(ctx, "beta", "recorded?", {"content": "x"})["id"]}


@pytest.fixture
def mcp_call(app, make_token):
    """Call tools in order as one token; a list of CallToolResults."""

    def run(*calls: tuple[str, dict], role="editor", scope="record", project=None):
        server = build(in_process_client(app, make_token(role, scope=scope, project=project)))

        async def session():
            async with Client(server) as client:
                return [await client.call_tool(name, args) for name, args in calls]

        return anyio.run(session)

    return run


def error_of(result) -> dict:
    assert result.is_error
    text = result.content[0].text
    return json.loads(text.splitlines()[-1])["error"]  # the error object is the last line


def test_tools_are_listed_with_descriptions_an_agent_can_work_from(app):
    async def listing():
        async with Client(build(in_process_client(app))) as client:
            return (await client.list_tools()).tools

    tools = {tool.name: tool for tool in anyio.run(listing)}
    assert set(tools) == TOOLS
    assert (
        "skeleton" in tools["claim_next"].description and "answer_pending" in tools["claim_next"].description
    )
    answer = tools["answer_pending"]
    assert "tool_calls" in answer.description and "invalid_answer" in answer.description
    assert set(answer.input_schema["required"]) == {"pending_id", "answer"}


def test_list_claim_answer(mcp_call, queue):
    listed, claimed, bad, good, empty = mcp_call(
        ("list_pending", {}),
        ("claim_next", {"project": "beta", "worker": "claude"}),
        (
            "answer_pending",
            {"pending_id": queue["b1"], "answer": {"tool_calls": [{"name": "get_weather", "arguments": {}}]}},
        ),
        (
            "answer_pending",
            {
                "pending_id": queue["b1"],
                "answer": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
            },
        ),
        ("claim_next", {"project": "beta"}),
    )
    assert [p["id"] for p in listed.structured_content["data"]] == [queue["a1"], queue["b1"]]
    call = claimed.structured_content
    assert call["claimed"] is True and call["id"] == queue["b1"] and call["claimed_by"] == "claude"
    assert call["shape"]["skeleton"] == {"tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]}
    assert "request" not in call and call["conversation"]["tools"]  # the messages and tools once
    error = error_of(bad)
    assert error["code"] == "invalid_answer" and error["param"] == "tool_calls[0].arguments.city"
    [text] = [part.text for part in bad.content]
    assert text.count("is a required property") == text.count("Answer this call") == 1  # said once
    assert good.is_error is False and good.structured_content["status"] == "answered"
    assert empty.structured_content == {"claimed": False, "message": empty.structured_content["message"]}


def test_get_and_answer_with_plain_text(mcp_call, queue):
    got, answered, again = mcp_call(
        ("get_pending", {"pending_id": queue["a1"]}),
        ("answer_pending", {"pending_id": queue["a1"], "answer": "4", "summary": "arithmetic"}),
        ("answer_pending", {"pending_id": queue["a1"], "answer": "4"}),
    )
    assert got.structured_content["conversation"]["messages"][0]["content"] == "What is 2+2?"
    assert "request" not in got.structured_content  # the same messages once, in the conversation
    assert answered.structured_content["entry_id"].startswith("ent_")
    assert error_of(again)["code"] == "pending_resolved"


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_images_come_as_image_content_and_placeholders_in_the_json(mcp_call, ctx, api):
    projects_service.create(ctx, {"name": "pics"})
    pid = park(ctx, "pics", "What is in this picture?", image=True, api=api)
    got, claimed = mcp_call(("get_pending", {"pending_id": pid}), ("claim_next", {}))
    label = f"[image image/png {len(PNG)} B]"
    for result in (got, claimed):
        assert result.is_error is False
        call = result.structured_content
        assert call["id"] == pid
        parts = call["conversation"]["messages"][0]["content"]
        assert [p.get("image_url", {}).get("url") for p in parts] == [None, label, REMOTE_IMAGE]
        assert "request" not in call  # its messages are the conversation's
        text, caption, image, remote = result.content
        assert json.loads(text.text) == call and PNG_URL.partition(",")[2] not in text.text
        assert caption.text == f"messages[0].content[1]: {label}"
        assert (image.type, image.mime_type, base64.b64decode(image.data)) == ("image", "image/png", PNG)
        assert remote.text == f"messages[0].content[2]: [image {REMOTE_IMAGE}] (remote: not fetched)"
    assert claimed.structured_content["claimed"] is True


def test_a_call_without_images_is_its_json_alone(mcp_call, queue):
    got, claimed, empty = mcp_call(
        ("get_pending", {"pending_id": queue["a1"]}),
        ("claim_next", {"project": "alpha"}),
        ("claim_next", {"project": "alpha"}),
    )
    assert [c.type for c in got.content] == ["text"]
    assert json.loads(got.content[0].text) == got.structured_content
    assert [c.type for c in claimed.content] == ["text"] and claimed.structured_content["claimed"] is True
    assert empty.structured_content["claimed"] is False


# Roles, scopes and binding on every tool (docs/design/product.md §5, §8)


def tool_calls(queue):
    return {
        "list_pending": {"project": "beta"},
        "get_pending": {"pending_id": queue["b1"]},
        "claim_next": {"project": "beta"},
        "answer_pending": {"pending_id": queue["b1"], "answer": "hello"},
        "release_claim": {"pending_id": queue["b1"]},
        "cancel_pending": {"pending_id": queue["b1"]},
        "get_entry": {"entry_id": queue["e1"]},
        "get_entry_answer": {"entry_id": queue["e1"], "seq": 1},
        "edit_entry_answer": {"entry_id": queue["e1"], "seq": 1, "answer": "y"},
        "pin_entry_answer": {"entry_id": queue["e1"], "seq": 1},
        "delete_entry_answer": {"entry_id": queue["e1"], "seq": 1},
        "reorder_entry_answers": {"entry_id": queue["e1"], "order": [1]},
        "list_faults": {"project": "beta"},
        "add_fault": {"project": "beta", "rule": {"kind": "rate_limit"}},
        "clear_faults": {"project": "beta"},
    }


@pytest.mark.parametrize("tool", ["claim_next", "answer_pending", "release_claim", "cancel_pending"])
def test_viewer_cannot_claim_or_answer(mcp_call, queue, tool):
    (result,) = mcp_call((tool, tool_calls(queue)[tool]), role="viewer")
    assert error_of(result)["code"] == "insufficient_role"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_replay_scope_cannot_use_the_queue(mcp_call, queue, tool):
    (result,) = mcp_call((tool, tool_calls(queue)[tool]), role="admin", scope="replay")
    assert error_of(result)["code"] == "insufficient_scope"


@pytest.mark.parametrize("tool", sorted(TOOLS))
def test_bound_token_gets_not_found_for_another_project(mcp_call, queue, tool):
    result, own = mcp_call(
        (tool, tool_calls(queue)[tool]), ("list_pending", {}), project="alpha", scope="full"
    )
    assert error_of(result)["code"] in ("pending_not_found", "project_not_found", "entry_not_found")
    assert [p["id"] for p in own.structured_content["data"]] == [queue["a1"]]


def test_release_gives_a_claim_back_and_cancel_ends_the_call(mcp_call, queue):
    claimed, wrong_worker, released, again, cancelled, gone = mcp_call(
        ("claim_next", {"project": "beta", "worker": "w1"}),
        ("release_claim", {"pending_id": queue["b1"], "worker": "w2"}),
        ("release_claim", {"pending_id": queue["b1"], "worker": "w1"}),
        ("claim_next", {"project": "beta"}),
        ("cancel_pending", {"pending_id": queue["b1"]}),
        ("claim_next", {"project": "beta"}),
    )
    assert claimed.structured_content["claimed_by"] == "w1"
    assert error_of(wrong_worker)["code"] == "claim_not_held"
    assert released.structured_content["claimed_by"] is None
    assert again.structured_content["id"] == queue["b1"]  # at once, not after w1's lease
    assert cancelled.structured_content["status"] == "cancelled"
    assert gone.structured_content["claimed"] is False


def test_one_answer_of_a_sequence_through_the_tools(mcp_call, ctx):
    """Show, edit, pin, reorder and delete one answer of a sequence, as an editor would over REST."""
    from tests.integration.test_sequences import add_answer

    projects_service.create(ctx, {"name": "shop", "mode": "replay"})
    entry_id = save_entry(ctx, "shop", "next step?", {"content": "one"})["id"]
    add_answer(ctx, "shop", 2, "two")
    add_answer(ctx, "shop", 3, "three")
    whole, shown, edited, bad, pinned, reordered, deleted = mcp_call(
        ("get_entry", {"entry_id": entry_id}),
        ("get_entry_answer", {"entry_id": entry_id, "seq": 2}),
        ("edit_entry_answer", {"entry_id": entry_id, "seq": 2, "answer": "TWO", "summary": "by an agent"}),
        ("edit_entry_answer", {"entry_id": entry_id, "seq": 3, "answer": {"tool_calls": "nope"}}),
        ("pin_entry_answer", {"entry_id": entry_id, "seq": 3}),
        ("reorder_entry_answers", {"entry_id": entry_id, "order": [3, 2, 1]}),
        ("delete_entry_answer", {"entry_id": entry_id, "seq": 3}),
        scope="full",
    )
    said = lambda answers: [a["answer"]["content"] for a in answers]  # noqa: E731
    assert whole.structured_content["answers"] == 3
    assert shown.structured_content["answer"]["content"] == "two"
    assert edited.structured_content["revision"] == 2
    assert [r["summary"] for r in edited.structured_content["revisions"]] == ["test", "by an agent"]
    assert error_of(bad)["code"] == "invalid_answer" and error_of(bad)["param"].startswith("tool_calls")
    assert pinned.structured_content["pinned"] is True
    assert said(reordered.structured_content["sequence"]) == ["three", "TWO", "one"]
    assert reordered.structured_content["pinned"] is True  # the pin moved with its answer, now answer 1
    assert said(deleted.structured_content["sequence"]) == ["three", "TWO"]


def test_a_viewer_reads_answers_but_cannot_change_them(mcp_call, ctx):
    projects_service.create(ctx, {"name": "shop", "mode": "replay"})
    entry_id = save_entry(ctx, "shop", "next step?", {"content": "one"})["id"]
    shown, refused, whole = mcp_call(
        ("get_entry_answer", {"entry_id": entry_id, "seq": 1}),
        ("delete_entry_answer", {"entry_id": entry_id, "seq": 1}),
        ("get_entry", {"entry_id": entry_id}),
        role="viewer",
        scope="full",
    )
    assert shown.structured_content["answer"]["content"] == "one"
    assert refused.is_error and error_of(refused)["code"] == "insufficient_role"
    # The entry tools keep the entry rules: the queue's usual token (scope record) does not edit entries.
    (record_scope,) = mcp_call(("edit_entry_answer", {"entry_id": entry_id, "seq": 1, "answer": "x"}))
    assert error_of(record_scope)["code"] == "insufficient_scope"
    assert whole.structured_content["answers"] == 1

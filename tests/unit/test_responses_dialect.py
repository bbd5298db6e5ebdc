"""The Responses dialect's own rules, in process: what a fingerprint leaves out."""

from __future__ import annotations

from semula import dialects


def codex_like(turn: str, ids: str) -> dict:
    """A Responses request as Codex sends one: its own session and turn ids in client_metadata and
    fresh ids on the input items it makes, a reference to a stored item by id."""
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex.",
        "input": [
            {
                "type": "message",
                "role": "user",
                "id": f"msg_{ids}",
                "content": [{"type": "input_text", "text": "hi"}],
            },
            {
                "type": "function_call",
                "id": f"fc_{ids}",
                "call_id": "call_1",
                "name": "shell",
                "arguments": "{}",
            },
            {"type": "function_call_output", "id": f"fco_{ids}", "call_id": "call_1", "output": "ok"},
            {"type": "item_reference", "id": "msg_stored"},
        ],
        "client_metadata": {"session_id": turn, "root_turn_id": turn},
        "prompt_cache_key": turn,
        "stream": True,
    }


def test_ids_a_client_makes_afresh_are_out_of_the_fingerprint():
    dialect = dialects.get(dialects.RESPONSES)
    first, second = codex_like("t1", "aaaa"), codex_like("t2", "bbbb")
    assert dialect.fingerprint(first, [], []) == dialect.fingerprint(second, [], [])
    assert first["input"][0]["id"] == "msg_aaaa"  # the request is not changed
    # An item_reference is its id: another reference is another request.
    other = codex_like("t1", "aaaa")
    other["input"][3]["id"] = "msg_other"
    assert dialect.fingerprint(other, [], []) != dialect.fingerprint(first, [], [])
    # What the items say still counts.
    said = codex_like("t1", "aaaa")
    said["input"][2]["output"] = "failed"
    assert dialect.fingerprint(said, [], []) != dialect.fingerprint(first, [], [])
    assert "client_metadata" not in dialect.canonical(first, [], [])
    assert all("id" not in item for item in dialect.canonical(first, [], [])["input"][:3])


def test_a_custom_tool_in_a_namespace_is_offered_and_answered_as_a_custom_tool_call():
    """Codex's default model: tools in an additional_tools item, a namespace, a custom tool with a grammar."""
    from semula.core import answers
    from semula.dialects.openai_responses import synthesize_events

    dialect = dialects.get(dialects.RESPONSES)
    grammar = {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"}
    request = {
        "model": "gpt-6.2-sol",
        "input": [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "functions",
                        "description": "",
                        "tools": [
                            {"type": "custom", "name": "exec", "description": "Run JS", "format": grammar}
                        ],
                    }
                ],
            },
            {"type": "message", "role": "user", "content": "list the files"},
        ],
    }
    view = dialect.conversation(request)
    [tool] = view["tools"]
    assert tool["function"]["name"] == "exec" and "start: /.+/" in tool["function"]["description"]
    assert tool["function"]["parameters"]["required"] == ["input"]
    completion = answers.parse_answer(
        {"tool_calls": [{"name": "exec", "arguments": {"input": "ls()"}}]}, view
    )
    answers.validate_against_request(completion, view)
    [call] = dialect.respond(completion, request)["output"]
    assert call["type"] == "custom_tool_call" and call["name"] == "exec" and call["input"] == "ls()"
    assert call["id"].startswith("ctc_") and call["call_id"]
    events = [e["type"] for e in synthesize_events(dialect.respond(completion, request))]
    assert (
        "response.custom_tool_call_input.done" in events
        and "response.function_call_arguments.done" not in events
    )
    # The call and its output, sent back, show as an assistant tool call and a tool message.
    follow_up = {
        **request,
        "input": [
            *request["input"],
            {**call, "id": "ctc_x"},
            {
                "type": "custom_tool_call_output",
                "call_id": call["call_id"],
                "output": [{"type": "input_text", "text": "a.py"}, {"type": "input_text", "text": "b.txt"}],
            },
        ],
    }
    messages = dialect.conversation(follow_up)["messages"]
    assert messages[-2]["tool_calls"][0]["function"] == {"name": "exec", "arguments": '{"input": "ls()"}'}
    assert messages[-1] == {"role": "tool", "tool_call_id": call["call_id"], "content": "a.py\nb.txt"}
    assert (
        dialect.common(dialect.respond(completion, request), None)["choices"][0]["message"]["tool_calls"][0][
            "function"
        ]["name"]
        == "exec"
    )


def test_presets_are_named_normalize_rules():
    import pytest

    from semula.core import fingerprint
    from semula.core.errors import BadRequest

    assert fingerprint.validate_normalize([{"preset": "codex"}]) == [{"preset": "codex"}]
    for rules, says in (
        ([{"preset": "nope"}], "unknown preset 'nope'; the presets are: claude-code, codex, gemini-cli"),
        ([{"preset": "codex", "pattern": "x"}], "a preset rule is"),
        ([{"preset": {}}], "unknown preset '{}'"),
    ):
        with pytest.raises(BadRequest) as refused:
            fingerprint.validate_normalize(rules)
        assert says in refused.value.message
    body = {
        "model": "m",
        "input": [{"type": "function_call_output", "call_id": "c", "output": "Chunk ID: 89c3bd"}],
    }
    canonical = dialects.get(dialects.RESPONSES).canonical(body, [], [{"preset": "codex"}])
    assert canonical["input"][0]["output"] == "Chunk ID: <id>"

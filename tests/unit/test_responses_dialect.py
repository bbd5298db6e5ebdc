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

"""The server's own secrets in answers (redact_answer) and JSON held as text staying JSON (no database)."""

from __future__ import annotations

import copy
import io
import json

import pytest

from semula import dialects
from semula.config import Settings
from semula.core import bundle_format
from semula.core.redact import REDACTED, redact_answer, redact_obj

SECRET = "upstream-canary-Qm7vX2pL9"
NEAR_MISSES = [
    SECRET[:-1],  # a prefix
    SECRET[:-1] + "8",  # one character off
    SECRET.upper(),
    SECRET.replace("-", "_"),
    SECRET[:10] + " " + SECRET[10:],
]


def chat(content=None, tool_calls=None):
    message = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
    }


def tool_call(arguments: str):
    return {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}


def deltas(*pieces: str):
    return [
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": p}}],
        }
        for p in pieces
    ]


def test_the_secret_goes_from_text_tool_arguments_and_tool_inputs():
    response = chat(f"The key is {SECRET}.", [tool_call(json.dumps({"key": SECRET, "n": 3}))])
    before = copy.deepcopy(response)
    clean, chunks = redact_answer(response, None, (SECRET,))
    assert response == before and chunks is None
    assert SECRET not in json.dumps(clean)
    message = clean["choices"][0]["message"]
    assert message["content"] == f"The key is {REDACTED}."
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"key": REDACTED, "n": 3}
    anthropic = {
        "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {"deep": [f"k={SECRET}"]}}]
    }
    assert redact_answer(anthropic, None, (SECRET,))[0]["content"][0]["input"] == {"deep": [f"k={REDACTED}"]}


@pytest.mark.parametrize("near", NEAR_MISSES)
def test_a_near_miss_is_stored_byte_for_byte(near):
    response = chat(f"see {near}!", [tool_call(json.dumps({"key": near}))])
    chunks = deltas(f"see {near[:5]}", f"{near[5:]}!")
    assert redact_answer(response, chunks, (SECRET,)) == (response, chunks)


def test_credential_shaped_text_a_person_wrote_is_kept():
    """Only the server's own secrets go from an answer: a fixture's fake key is the answer."""
    response = chat("Use api_key=abc123def456 and sk-proj-" + "Ab3" * 12)
    assert redact_answer(response, None, (SECRET,))[0] == response


@pytest.mark.parametrize(
    "secret",
    [
        'op-secret-"quoted"-1',  # written \" inside JSON text
        "op-secret-back\\slash",  # written \\ inside JSON text
        "op-sécret-ünïcode-1",  # written \u00e9 by an ASCII-only encoder
    ],
)
def test_tool_arguments_stay_valid_json_whatever_the_secret_holds(secret):
    for arguments in (
        json.dumps({"note": f"use {secret} now"}),
        json.dumps({"note": f"use {secret}"}, ensure_ascii=False),
    ):
        clean, _ = redact_answer(chat(None, [tool_call(arguments)]), None, (secret,))
        text = clean["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
        assert json.loads(text) == {"note": f"use {REDACTED}" + (" now" if "now" in arguments else "")}


def test_what_only_looks_like_the_secret_in_json_escapes_is_not_touched():
    """`\\nfoo…` in JSON text is a newline and `foo…`: a secret `nfoo…` is not in it, and replacing
    it there would leave an invalid escape."""
    arguments = json.dumps({"note": "line\nfoo12345 bar"})
    response = chat(None, [tool_call(arguments)])
    assert redact_answer(response, None, ("nfoo12345",))[0] == response


def test_a_credential_pattern_in_json_text_keeps_it_json():
    """Pattern redaction (requests, provider answers) of a quoted value holding an escaped quote."""
    arguments = json.dumps({"password": 'abc"def', "city": "Paris"})
    clean = redact_obj({"arguments": arguments})["arguments"]
    assert json.loads(clean) == {"password": REDACTED, "city": "Paris"}
    compact = json.dumps({"token": 'x1y2"z3', "n": 1}, separators=(",", ":"))
    assert redact_obj(compact) == '{"token":"[REDACTED]","n":1}'


def test_a_secret_in_one_event_drops_the_events():
    chunks = deltas("The key is ", f"{SECRET}.", " Done")
    clean, kept = redact_answer(chat(f"The key is {SECRET}. Done"), chunks, (SECRET,))
    assert kept is None and clean["choices"][0]["message"]["content"] == f"The key is {REDACTED}. Done"
    # With no response to make the stream from, the events are redacted one by one instead.
    assert redact_answer({}, chunks, (SECRET,))[1] == deltas("The key is ", f"{REDACTED}.", " Done")


def test_a_secret_split_across_events_drops_the_events():
    """No event holds the secret whole; joined they do. The stream is then made from the response."""
    chunks = deltas("The key is ", SECRET[:9], SECRET[9:], ".")
    clean, kept = redact_answer(chat(f"The key is {SECRET}."), chunks, (SECRET,))
    assert kept is None and SECRET not in json.dumps(clean)
    arguments = [
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": part}}]}}]}
        for part in ('{"key": "', SECRET[:4], SECRET[4:], '"}')
    ]
    assert redact_answer(chat("x"), arguments, (SECRET,))[1] is None


def test_embedding_vectors_are_left_alone():
    embeddings = dialects.get(dialects.EMBEDDINGS)
    # A base64 vector that happens to hold the secret's characters is data, not text.
    vector = "AAAA" + "upstreamcanaryQm7vX2pL9" + "AAA="
    response = {
        "object": "list",
        "data": [{"object": "embedding", "index": 0, "embedding": vector}],
        "model": "m",
    }
    clean, _ = redact_answer(response, None, ("upstreamcanaryQm7vX2pL9",), embeddings.redact_response)
    assert clean["data"][0]["embedding"] == vector


def test_nothing_configured_changes_nothing():
    response = chat(f"The key is {SECRET}.")
    assert redact_answer(response, None, ())[0] is response


def test_the_database_password_is_one_of_the_servers_secrets():
    settings = Settings(
        database_url="postgresql://semula:p%40ss-Word-42@db/semula",
        owner_database_url="postgresql://owner:owner-Pa55word@db/semula",
        metrics_token="metrics-canary-token",
    )
    secrets = settings.secrets()
    assert {"p%40ss-Word-42", "p@ss-Word-42", "owner-Pa55word", "metrics-canary-token"} <= set(secrets)
    assert Settings(database_url="postgresql://semula@db/semula").secrets() == ()
    assert Settings().secrets() == ()


@pytest.mark.parametrize(
    "secret",
    [
        "DefaultEndpointsProtocol=https;AccountName=shop;AccountKey=Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6"
        "IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==;EndpointSuffix=core.windows.net",
        "Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey=Zm9vYmFyYmF6cXV4Zm9v",
        "postgresql://app:Tr0ub4dor@db/shop",
        "redis://:s3cretRedisPass@cache:6379/0",
        f"password: aws_secret_access_key = {'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY'}",
    ],
)
def test_a_bundle_check_flags_connection_strings(secret):
    bundle = {
        "bundle": {"format": "semula-bundle", "version": 1},
        "entries": [{"request": {"messages": [{"role": "user", "content": "hi"}]}, "response": chat(secret)}],
    }
    found, total = bundle_format.find_secrets(io.BytesIO(json.dumps(bundle).encode()))
    assert total == 1 and found == ["entries[0].response.choices[].message.content"]

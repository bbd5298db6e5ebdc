"""Fault rules through real gunicorn with the official SDKs: a project's or a session's `faults` setting
gives the calls it matches their fault, counted in the database, so every worker agrees (issue #50,
docs/decisions/0061-fault-rules.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import openai
import pytest
import requests

from semula.core import faults as fault_kinds
from semula.service import Context, calllog, faults, projects, sequences
from tests.acceptance import shared
from tests.entry_helpers import save_entry
from tests.fake_upstream import FakeUpstream
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

MESSAGES = [{"role": "user", "content": "hello"}]
RECORDED = "Hi there, how can I help you today?"


@pytest.fixture
def replaying(ctx, shop):
    save_entry(ctx, "shop", "hello", {"content": RECORDED})


def test_a_rate_limit_rule_is_retried_twice_then_the_recording_then_the_next_call_at_once(
    ctx, replaying, server, token
):
    added = requests.post(
        f"{server.url}/api/v1/projects/shop/faults",
        json={"kind": "rate_limit", "times": 2, "retry_after": 0.1},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    assert added.status_code == 201, added.text
    client = openai.OpenAI(base_url=f"{server.url}/p/shop/v1", api_key=token, max_retries=3)
    try:
        first = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        assert first.retries_taken == 2
        assert first.parse().choices[0].message.content == RECORDED
        second = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        assert second.retries_taken == 0
        assert second.parse().choices[0].message.content == RECORDED
    finally:
        client.close()

    def outcomes():
        return [c["outcome"] for c in reversed(calllog.list_calls(ctx, "shop", limit=50)["data"])]

    wait_for(lambda: len(outcomes()) == 4, what="four calls in the call log")
    assert outcomes() == ["fault", "fault", "hit", "hit"]
    logged = calllog.list_calls(ctx, "shop", outcome="fault")["data"][0]["fault"]
    assert logged == {"kind": "rate_limit", "retry_after": 0.1, "times": 2}
    [rule] = faults.list_rules(ctx, "shop")["data"]
    assert rule["counts"] == [{"session": None, "calls": 4, "faults": 2}]


def pattern(client, count: int) -> list[bool]:
    """Which of `count` calls got the fault (a 500), in order."""
    got = []
    for _ in range(count):
        try:
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            got.append(False)
        except openai.InternalServerError:
            got.append(True)
    return got


def test_a_seeded_probability_rule_gives_the_same_calls_their_fault_on_every_run(
    ctx, replaying, server, openai_client
):
    faults.add(ctx, "shop", {"kind": "server_error", "probability": 0.5, "seed": 7})
    run = openai_client(server, "shop/s/run-1")
    first = pattern(run, 12)
    expected = [fault_kinds.draw(7, number) < 0.5 for number in range(1, 13)]
    assert first == expected and any(first) and not all(first)
    # The session starts over (as the pytest plugin does before each test): the same pattern again, and
    # another session has the same one from its first call.
    sequences.reset(ctx, "shop", "run-1")
    assert pattern(run, 12) == first
    assert pattern(openai_client(server, "shop/s/run-2"), 12) == first


def test_rules_and_their_counts_hold_across_two_workers(ctx, replaying, start_server, openai_client):
    faults.add(ctx, "shop", {"kind": "unavailable", "times": 3})
    server = start_server(workers=2)

    def one(_: int) -> bool:
        # A client of its own per call: a connection of its own, to either worker.
        client = openai_client(server)
        try:
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            return False
        except openai.InternalServerError as exc:
            assert exc.status_code == 503
            return True

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(16)))
    assert results.count(True) == 3
    [rule] = faults.list_rules(ctx, "shop")["data"]
    assert rule["counts"] == [{"session": None, "calls": 16, "faults": 3}]
    # Cleared, the rule's calls are served; added again, it counts from one.
    faults.clear(ctx, "shop")
    assert one(0) is False
    faults.add(ctx, "shop", {"kind": "unavailable", "times": 3})
    assert [one(n) for n in range(4)] == [True, True, True, False]


def test_the_google_genai_sdk_gets_client_and_server_errors_and_retries_when_told(ctx, shop, server, token):
    from google import genai
    from google.genai import errors as genai_errors
    from google.genai import types

    from tests.acceptance.test_responses_api import recorded

    def client(**retry):
        options = types.HttpOptions(
            base_url=f"{server.url}/p/shop",
            api_version="v1beta",
            timeout=60_000,
            retry_options=types.HttpRetryOptions(**retry) if retry else None,
        )
        return genai.Client(api_key=token, http_options=options)

    plain = client()
    ask = lambda made: made.models.generate_content(model="gemini-2.5-flash", contents="Say hello")  # noqa: E731
    assert recorded(ctx, shop, "Hello!", set(), lambda: ask(plain)).text == "Hello!"
    faults.add(ctx, "shop", {"kind": "rate_limit", "times": 1, "match": {"api": "gemini.generate_content"}})
    with pytest.raises(genai_errors.ClientError) as limited:
        ask(plain)
    assert limited.value.code == 429 and limited.value.status == "RESOURCE_EXHAUSTED"
    assert ask(plain).text == "Hello!"
    faults.clear(ctx, "shop")
    faults.add(ctx, "shop", {"kind": "overloaded", "times": 2})
    with pytest.raises(genai_errors.ServerError) as overloaded:
        ask(plain)
    assert overloaded.value.code == 503
    # Told to retry (HttpRetryOptions), the SDK retries 429 and 5xx: the second fault, then the recording.
    assert ask(client(attempts=3, initial_delay=0.1, jitter=0)).text == "Hello!"


def test_google_genai_sees_a_timeout_and_a_cut_as_httpx_errors(ctx, shop, server, token):
    """What docs/testing.md says google-genai raises for the two faults without a status: its HTTP
    library's errors (httpx's; google-genai 3.x ships it as httpx2)."""
    from google import genai
    from google.genai import types

    from tests.acceptance.test_responses_api import recorded

    def client(fault: str | None = None, timeout: int = 60_000):
        headers = {"X-Semula-Fault": fault} if fault else None
        options = types.HttpOptions(base_url=f"{server.url}/p/shop", timeout=timeout, headers=headers)
        return genai.Client(api_key=token, http_options=options)

    ask = lambda made: made.models.generate_content(model="gemini-2.5-flash", contents="Say hello")  # noqa: E731
    assert recorded(ctx, shop, "Hello!", set(), lambda: ask(client())).text == "Hello!"
    with pytest.raises(Exception) as timed_out:
        ask(client("timeout; after=1", timeout=500))
    assert type(timed_out.value).__name__ == "ReadTimeout"
    with pytest.raises(Exception) as cut:
        ask(client("disconnect; at=body"))
    assert type(cut.value).__name__ == "RemoteProtocolError"


def test_a_disconnect_on_a_record_through_miss_calls_no_provider_and_the_retry_is_recorded_once(
    start_server, ctx, openai_client
):
    """Decision 0061: a disconnect stands for a provider that went away, so a record-through miss it
    cuts is not forwarded; the call it is counted against is the rule's use, and the retry after it is
    forwarded once and recorded."""
    fake = FakeUpstream()
    key = "sk-upstream-test-0123456789abcdefghijkl"
    try:
        server = start_server(SEMULA_UPSTREAM_KEY=key, SEMULA_UPSTREAM_URL=fake.url)
        operator = Context(ctx.store, replace(ctx.settings, upstream_key=key), ctx.principal)
        projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
        faults.add(ctx, "shop", {"kind": "disconnect", "times": 1, "match": {"contains": "stream me"}})
        client = openai_client(server)
        streamed = [{"role": "user", "content": "stream me"}]
        # A stream: its head (the SDK returns the stream), no event, then the cut (its iteration
        # raises); no provider call.
        stream = client.chat.completions.create(model="gpt-4o", messages=streamed, stream=True)
        received = []
        with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
            for chunk in stream:
                received.append(chunk)
        assert received == [] and fake.calls == []
        # The rule used up, the retry is forwarded once and recorded; the next call replays it.
        for _ in range(2):
            chunks = client.chat.completions.create(model="gpt-4o", messages=streamed, stream=True)
            text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
            assert text == "upstream says: stream me"
        assert len(fake.calls) == 1
        # The header on a plain call: its head, then the cut (a broken read, which the SDK retries when
        # it may; this client may not); no provider call.
        with pytest.raises(openai.APIConnectionError):
            client.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "disconnect; at=head"}
            )
        headers = {"Authorization": f"Bearer {client.api_key}", "X-Semula-Fault": "disconnect; at=head"}
        url = f"{server.url}/p/shop/v1/chat/completions"
        body = {"model": "gpt-4o", "messages": MESSAGES}
        with httpx.stream("POST", url, json=body, headers=headers, timeout=30) as cut:
            assert cut.status_code == 200  # the head came, then no body
            with pytest.raises(httpx.RemoteProtocolError):
                cut.read()
        assert len(fake.calls) == 1
        # A rule's disconnect and the SDK's own retry: the app gets the reply of one provider call.
        faults.add(ctx, "shop", {"kind": "disconnect", "times": 1, "match": {"contains": "hello"}})
        reply = client.with_options(max_retries=1).chat.completions.create(model="gpt-4o", messages=MESSAGES)
        assert reply.choices[0].message.content == "upstream says: hello" and len(fake.calls) == 2

        def outcomes():
            rows = calllog.list_calls(ctx, "shop", limit=50)["data"]
            return [row["outcome"] for row in reversed(rows)] if len(rows) == 7 else None

        logged = wait_for(outcomes, what="seven calls in the call log")
        assert logged == ["fault", "forwarded", "hit", "fault", "fault", "fault", "forwarded"]
    finally:
        fake.close()

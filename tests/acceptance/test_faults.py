"""Fault injection through real gunicorn with the official SDKs: X-Semula-Fault on any API call gives the
error, silence, cut or delay it names, and the SDK reacts as it does to the provider's (issue #50)."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest
import requests

from semula.service import calllog, projects
from tests.acceptance import shared
from tests.entry_helpers import save_entry
from tests.helpers import metric_samples, metric_value, wait_for

pytestmark = pytest.mark.acceptance
db_url, ctx, server = shared.db_url, shared.ctx, shared.server  # one server for the module's tests

MESSAGES = [{"role": "user", "content": "hello"}]
CLAUDE = "claude-sonnet-4-6"


@pytest.fixture
def replaying(ctx, shop, server):
    """The module's server, with a Chat recording of `hello` (project shop stays in record mode, so an
    Anthropic call can be recorded too)."""
    save_entry(ctx, "shop", "hello", {"content": "Hi there, how can I help you today?"})
    return server


def rate_limits_counted(server) -> float:
    series = metric_samples(requests.get(server.url + "/metrics", timeout=10).text)
    return metric_value(series, "semula_faults_total", kind="rate_limit")


def record_anthropic(ctx, server, anthropic_client):
    from concurrent.futures import ThreadPoolExecutor

    from semula.service import pending
    from tests.helpers import parked

    client = anthropic_client(server)
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.messages.create, model=CLAUDE, max_tokens=64, messages=MESSAGES)
        [row] = parked(ctx, projects.get(ctx, "shop"))
        pending.answer(ctx, row["id"], "Hello from Claude.")
        return future.result(30)


def faults_logged(ctx) -> int:
    return [c["outcome"] for c in calllog.list_calls(ctx, "shop", limit=500)["data"]].count("fault")


def test_a_rate_limit_is_the_providers_429_with_retry_after(ctx, replaying, openai_client, anthropic_client):
    counted = rate_limits_counted(replaying)  # the module's earlier tests' (its server's)
    client = openai_client(replaying)
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "rate_limit; retry_after=2"}
        )
    headers = limited.value.response.headers
    assert headers["retry-after"] == "2" and headers["x-ratelimit-remaining-requests"] == "0"
    assert limited.value.code == "rate_limit_exceeded"
    # Without the header the same call gets its recording: the fault rode on it.
    reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].message.content == "Hi there, how can I help you today?"

    record_anthropic(ctx, replaying, anthropic_client)
    with pytest.raises(anthropic.RateLimitError) as claude_limited:
        anthropic_client(replaying).messages.create(
            model=CLAUDE, max_tokens=64, messages=MESSAGES, extra_headers={"X-Semula-Fault": "rate_limit"}
        )
    assert claude_limited.value.response.headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert claude_limited.value.body["error"]["type"] == "rate_limit_error"
    assert rate_limits_counted(replaying) - counted == 2
    wait_for(lambda: faults_logged(ctx) == 2, what="both faults in the call log")


def test_overloaded_on_the_anthropic_route_is_a_529_the_sdk_retries(ctx, replaying, anthropic_client):
    from anthropic import Anthropic

    record_anthropic(ctx, replaying, anthropic_client)
    token = anthropic_client(replaying).api_key
    retrying = Anthropic(base_url=f"{replaying.url}/p/shop", api_key=token, max_retries=2)
    try:
        with pytest.raises(anthropic.APIStatusError) as overloaded:
            retrying.messages.create(
                model=CLAUDE, max_tokens=64, messages=MESSAGES, extra_headers={"X-Semula-Fault": "overloaded"}
            )
    finally:
        retrying.close()
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    wait_for(lambda: faults_logged(ctx) == 3, what="the first try and two retries in the call log")


def test_a_stream_cut_after_two_events_leaves_the_client_two_events_and_an_error(replaying, openai_client):
    client = openai_client(replaying)
    received = []
    with pytest.raises((httpx.RemoteProtocolError, openai.APIConnectionError)):
        stream = client.chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,
            stream=True,
            extra_headers={"X-Semula-Fault": "disconnect; after_events=2"},
        )
        for chunk in stream:
            received.append(chunk)
    assert len(received) == 2
    whole = list(client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True))
    assert len(whole) > 2


def test_a_timeout_trips_the_clients_own_timeout(replaying, openai_client):
    client = openai_client(replaying, timeout=0.5)
    with pytest.raises(openai.APITimeoutError):
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "timeout; after=1"}
        )


def test_a_slow_reply_arrives_whole_and_a_bad_fault_is_a_400_naming_the_kinds(replaying, openai_client):
    client = openai_client(replaying)
    started = time.monotonic()
    slow = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "slow; ttfb=0.3"}
    )
    assert time.monotonic() - started >= 0.3
    assert slow.choices[0].message.content == "Hi there, how can I help you today?"
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "flood"}
        )
    assert "unknown fault kind 'flood'; the kinds are: rate_limit, server_error" in refused.value.message
    with pytest.raises(openai.BadRequestError) as unknown:
        client.chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers={"X-Semula-Fault": "timeout; seconds=3"}
        )
    assert "timeout takes no parameter 'seconds=3'; its parameters: after=<seconds>" in unknown.value.message

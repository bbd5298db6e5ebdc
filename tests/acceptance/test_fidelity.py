"""Faithful recordings: what the provider sent is what the app gets, forwarded and replayed.

A fake provider on 127.0.0.1 answers like OpenAI does today (every field, n choices, logprobs, and
fields semula does not know), through real gunicorn + gevent workers.
"""

from __future__ import annotations

import io
import json
import threading
import time
from dataclasses import replace

import openai
import pytest
import requests

from semula.service import Context, bundles, pending, projects
from tests.fake_upstream import FakeUpstream
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance
KEY = "sk-upstream-fidelity-0123456789abcdefghij"


@pytest.fixture
def rich(start_server, ctx, token):
    fake = FakeUpstream()
    fake.mode = "rich"
    server = start_server(SEMULA_UPSTREAM_KEY=KEY, SEMULA_UPSTREAM_URL=fake.url)
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=KEY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True})
    yield fake, server, f"{server.url}/p/shop/v1/chat/completions", {"Authorization": f"Bearer {token}"}
    fake.close()


def provider_sent(fake: FakeUpstream, body: dict) -> dict:
    """What the fake provider answers to `body`, asked directly."""
    return json.loads(fake.respond_rich(body, "")[2])


def without_stamps(completion: dict) -> dict:
    return {k: v for k, v in completion.items() if k not in ("id", "created")}


def test_forwarded_and_replayed_completions_are_what_the_provider_sent(rich, ctx):
    fake, server, url, headers = rich
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "n": 2, "logprobs": True}
    expected = provider_sent(fake, body)
    forwarded = requests.post(url, json=body, headers=headers, timeout=30)
    assert forwarded.status_code == 200, forwarded.text
    got = forwarded.json()
    assert without_stamps(got) == without_stamps(expected)
    assert list(got) == list(expected)  # the provider's key order, too
    assert len(got["choices"]) == 2 and got["choices"][1]["logprobs"]["content"][0]["token"] == "Hi"

    projects.update(ctx, "shop", {"mode": "replay"})
    replayed = requests.post(url, json=body, headers=headers, timeout=30).json()
    assert without_stamps(replayed) == without_stamps(expected) and replayed["id"] != expected["id"]
    projects.update(ctx, "shop", {"restamp": "recorded"})
    assert requests.post(url, json=body, headers=headers, timeout=30).json() == expected
    assert len(fake.calls) == 1


def test_a_forwarded_stream_reaches_the_app_as_the_provider_sends_it(rich, ctx, token):
    fake, server, url, headers = rich
    fake.chunk_delay = 0.3
    client = openai.OpenAI(base_url=url.rsplit("/chat/", 1)[0], api_key=token, max_retries=0, timeout=60)
    arrived = []
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "a story"}]}
    for chunk in client.chat.completions.create(**request, stream=True):
        arrived.append((time.monotonic(), chunk))
    text = "".join(c.choices[0].delta.content or "" for _, c in arrived if c.choices)
    assert text == "Once upon a time."
    # The first chunk reached the app before the provider had sent its last one.
    assert arrived[0][0] < fake.sent_at[-1]
    assert all(c.usage is None for _, c in arrived)  # semula asked for usage; the app did not
    assert {c.system_fingerprint for _, c in arrived} == {"fp_rich01"}

    # Recorded once the stream completed: the replay sends the same chunks.
    projects.update(ctx, "shop", {"mode": "replay"})
    chunks = list(client.chat.completions.create(**request, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[0].model == "gpt-4o-mini-2024-07-18" and len(fake.calls) == 1


def test_an_agent_answers_each_of_n_choices(start_server, ctx, shop, token):
    server = start_server()
    client = openai.OpenAI(base_url=f"{server.url}/p/shop/v1", api_key=token, max_retries=0, timeout=60)
    request = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "two names"}], "n": 2}
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("r", client.chat.completions.create(**request)))
    thread.start()
    [row] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="the call")
    call = pending.get(ctx, row["id"])
    assert call["shape"]["choices"] == 2 and len(call["shape"]["skeleton"]["choices"]) == 2
    with pytest.raises(Exception) as refused:
        pending.answer(ctx, row["id"], "just one")
    assert "n=2" in str(refused.value)
    pending.answer(
        ctx, row["id"], {"choices": [{"message": {"content": "Ada"}}, {"message": {"content": "Bo"}}]}
    )
    thread.join(30)
    assert [c.message.content for c in out["r"].choices] == ["Ada", "Bo"]
    assert [c.index for c in out["r"].choices] == [0, 1] and out["r"].choices[0].message.refusal is None
    projects.update(ctx, "shop", {"mode": "replay"})
    assert [c.message.content for c in client.chat.completions.create(**request).choices] == ["Ada", "Bo"]


PROVIDER_HEADERS = {
    "openai-processing-ms": "123",
    "x-ratelimit-remaining-requests": "99",
    "x-request-id": "req_upstream",
    "set-cookie": "session=provider-secret",
}


def test_allowlisted_provider_headers_are_recorded_and_replayed(rich, ctx):
    fake, server, url, headers = rich
    fake.headers = PROVIDER_HEADERS
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "headers"}]}
    forwarded = requests.post(url, json=body, headers=headers, timeout=30)
    projects.update(ctx, "shop", {"mode": "replay"})
    replays = [requests.post(url, json=body, headers=headers, timeout=30) for _ in range(3)]  # kept hits too
    # And in a bundle: exported, imported elsewhere, replayed there with them.
    exported = b"".join(bundles.export_bundle(ctx, "shop"))
    assert json.loads(exported)["entries"][0]["meta"]["headers"]["openai-processing-ms"] == "123"
    projects.create(ctx, {"name": "copy", "mode": "replay"})
    bundles.import_bundle(ctx, "copy", io.BytesIO(exported))
    copied = requests.post(url.replace("/p/shop/", "/p/copy/"), json=body, headers=headers, timeout=30)
    for response in [forwarded, *replays, copied]:
        assert response.status_code == 200
        assert response.headers["openai-processing-ms"] == "123"
        assert response.headers["x-ratelimit-remaining-requests"] == "99"
        assert "set-cookie" not in response.headers and response.headers.get("x-request-id") != "req_upstream"


def test_stream_pacing_replays_the_recorded_gaps(rich, ctx):
    """Bounds a loaded machine cannot break: a paced reply's last event cannot come before the pauses
    it owes have passed; how much sooner a machine's load lets it come is not asserted."""
    fake, server, url, headers = rich
    fake.chunk_delay = 0.1
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "paced"}], "stream": True}

    def replay() -> tuple[requests.Response, float]:
        started = time.monotonic()
        response = requests.post(url, json=body, headers=headers, timeout=60)  # until its last byte
        assert response.status_code == 200, response.text
        return response, time.monotonic() - started

    requests.post(url, json=body, headers=headers, timeout=60)  # recorded live, through record-through
    [entry] = json.loads(b"".join(bundles.export_bundle(ctx, "shop")))["entries"]
    gaps = entry["meta"]["gaps"]
    projects.update(ctx, "shop", {"mode": "replay"})
    at_once, _ = replay()  # stream_pacing none: one write, its length known before the first byte
    assert at_once.headers.get("Content-Length") == str(len(at_once.content))
    events = at_once.text.count("data: ")
    # The pauses before the 2nd to the last event the app gets ([DONE] included): the provider's
    # stream had more events (the usage semula asked for), so more gaps were recorded.
    owed = sum(gaps[: events - 1])
    assert events >= 5 and owed > 0, (gaps, at_once.text)
    projects.update(ctx, "shop", {"stream_pacing": "recorded"})
    paced, took = replay()
    assert "Content-Length" not in paced.headers and paced.text.count("data: ") == events  # event by event
    assert took >= 0.95 * owed, (took, gaps)  # 0.95: a gevent timer may fire a little early
    projects.update(ctx, "shop", {"stream_pacing": 3})  # a factor above 1, so a lower bound shows it
    paced, took = replay()
    assert paced.text.count("data: ") == events and took >= 0.95 * 3 * owed, (took, gaps)

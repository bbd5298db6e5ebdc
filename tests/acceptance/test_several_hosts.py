"""Two `semula serve` hosts on one database behave as one semula (docs/operations.md, Several hosts;
docs/decisions/0057-several-hosts.md): on PostgreSQL and on one SQLite file."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace

import pytest
import requests

from semula.core.fingerprint import fingerprint
from semula.service import Context, entries, projects
from tests.fake_upstream import FakeUpstream
from tests.helpers import metric_samples, wait_for

pytestmark = pytest.mark.acceptance
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"


@pytest.fixture
def slow_provider():
    with closing(FakeUpstream(delay=1.0)) as server:
        yield server


def test_six_identical_calls_split_across_two_hosts_reach_the_provider_once(
    start_server, ctx, slow_provider, openai_client
):
    upstream = {"SEMULA_UPSTREAM_KEY": CANARY, "SEMULA_UPSTREAM_URL": slow_provider.url}
    hosts = [start_server(workers=2, **upstream), start_server(**upstream)]
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 10})
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "the same question"}]}

    def ask(n: int) -> str:
        """Calls 0-5 alternate between the hosts; calls 2 and 3 stream (the same request, one flight)."""
        client = openai_client(hosts[n % 2])
        if n in (2, 3):
            chunks = client.chat.completions.create(**request, stream=True)
            return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        return client.chat.completions.create(**request).choices[0].message.content

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, range(6)))

    assert answers == ["upstream says: the same question"] * 6
    assert len(slow_provider.calls) == 1
    shop = projects.get_row(ctx, "shop")
    assert ctx.store.one("get_upstream_usage", project_id=shop["id"])["calls"] == 1
    entry = entries.lookup(ctx, shop["id"], fingerprint(request))
    assert len(entries.get(ctx, entry["id"])["revisions"]) == 1


def test_calls_parked_on_one_host_are_released_by_answers_through_the_other_and_metrics_add_up(
    start_server, ctx, shop, token, openai_client, db_url
):
    """On PostgreSQL host A polls once a minute: the releases come by notice. On SQLite it polls."""
    on_postgres = db_url.startswith("postgresql")
    a = start_server(workers=2, SEMULA_POLL_INTERVAL="10" if on_postgres else "0.2")
    b = start_server()
    headers = {"Authorization": f"Bearer {token}"}
    prompts = [f"question {n}" for n in range(5)]

    def ask(prompt: str) -> tuple[str, float]:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": prompt}]}
        reply = openai_client(a).chat.completions.create(**body).choices[0].message.content
        return reply, time.monotonic()

    with ThreadPoolExecutor(5) as pool:
        held = [pool.submit(ask, prompt) for prompt in prompts]
        wait_for(
            lambda: len(ctx.store.all("parked_in_project", project_id=shop["id"])) == 5, 30, what="parked"
        )

        # Both hosts scraped together: the parked calls counted once, by the one host serving them.
        pages = [metric_samples(requests.get(f"{h.url}/metrics", timeout=10).text) for h in (a, b)]
        assert total(pages, "semula_parked_calls", project="shop") == 5
        assert total(pages, "semula_database_gauges_exporter") == 1
        assert total(pages, "semula_held_calls") == 5  # all on host A, over its two workers

        listed = requests.get(f"{b.url}/api/v1/pending", headers=headers, timeout=10).json()["data"]
        answered_at = {}
        for call in listed:
            url = f"{b.url}/api/v1/pending/{call['id']}/answer"
            text = f"answer {call['id']}"
            assert requests.post(url, json={"content": text}, headers=headers, timeout=10).status_code == 200
            answered_at[text] = time.monotonic()
        replies = [future.result(timeout=9) for future in held]  # within A's poll interval on PostgreSQL

    assert sorted(reply for reply, _ in replies) == sorted(answered_at)
    release = sorted(at - answered_at[reply] for reply, at in replies)
    print(f"release across hosts on {db_url.split(':')[0]}: median {release[2] * 1000:.0f} ms")
    pages = [metric_samples(requests.get(f"{h.url}/metrics", timeout=10).text) for h in (a, b)]
    assert total(pages, "semula_parked_calls", project="shop") == 0
    assert total(pages, "semula_pending_events_total", event="released") == 5
    assert total(pages, "semula_answers_total", actor="agent") == 5


def total(pages: list[dict], name: str, **labels: str) -> float:
    """sum(name{labels}) over every host's page, as Prometheus would add them up."""
    wanted = set(labels.items())
    return sum(v for page in pages for (n, have), v in page.items() if n == name and wanted <= have)

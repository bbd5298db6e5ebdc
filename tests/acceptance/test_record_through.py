"""Record-through through real gunicorn workers and a fake provider on 127.0.0.1.

The design is docs/design/record-through.md.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest
import requests

from semula.service import Context, projects
from tests.fake_upstream import FakeUpstream

pytestmark = pytest.mark.acceptance
CANARY = "sk-upstream-CANARY0123456789abcdefghijklmnop"


@pytest.fixture
def fake():
    server = FakeUpstream(delay=0.2)
    yield server
    server.close()


def test_budget_holds_across_two_workers_and_the_key_stays_secret(start_server, ctx, token, fake):
    server = start_server(workers=2, SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True, "upstream_max_calls": 100})
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{server.url}/p/shop/v1/chat/completions"

    def miss(i: int) -> int:
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"distinct {i}"}]}
        return requests.post(url, json=body, headers=headers, timeout=60).status_code

    with ThreadPoolExecutor(100) as pool:
        statuses = list(pool.map(miss, range(300)))
    assert statuses.count(200) == 100 and statuses.count(429) == 200, sorted(set(statuses))
    assert len(fake.calls) == 100
    usage = requests.get(f"{server.url}/api/v1/projects/shop/upstream", headers=headers, timeout=10).json()
    assert usage["calls"] == 100

    # A call the provider answered with an error is spent, and its echo of the key is redacted.
    requests.post(f"{server.url}/api/v1/projects/shop/upstream/reset", headers=headers, timeout=10)
    fake.mode = "error"
    r = requests.post(
        url,
        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "echo"}]},
        headers=headers,
        timeout=30,
    )
    assert r.status_code == 502 and "[REDACTED]" in r.text and CANARY not in r.text
    after = requests.get(f"{server.url}/api/v1/projects/shop/upstream", headers=headers, timeout=10)
    assert after.json()["calls"] == 1
    server.stop()
    assert CANARY not in server.log()
    logged = ctx.store.all("calls_in_project", project_id=projects.get(ctx, "shop")["id"])
    assert len(logged) == 301 and CANARY not in json.dumps(logged)


def test_identical_calls_of_one_session_across_two_workers_record_distinct_answers(
    start_server, ctx, fake, openai_client
):
    """Issue 21 with record-through: a session's identical calls in flight at once, over two gunicorn
    workers and the official SDK, each get their own provider answer, recorded once as a sequence."""
    server = start_server(workers=2, SEMULA_UPSTREAM_KEY=CANARY, SEMULA_UPSTREAM_URL=fake.url)
    operator = Context(ctx.store, replace(ctx.settings, upstream_key=CANARY), ctx.principal)
    projects.create(operator, {"name": "shop", "record_through": True, "sequences": "record"})
    fake.numbered = True
    loop = {"model": "gpt-4o", "messages": [{"role": "user", "content": "sample"}]}

    def ask(client) -> str:
        return client.chat.completions.create(**loop).choices[0].message.content

    racing = openai_client(server, "shop/s/race")
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: ask(racing), range(4)))
    assert sorted(got) == [f"upstream says: sample #{n}" for n in range(1, 5)]
    assert len(fake.calls) == 4
    # Another session replays the four answers in the order they were recorded, then records a fifth.
    replay = openai_client(server, "shop/s/replay")
    replayed = [ask(replay) for _ in range(5)]
    assert sorted(replayed[:4]) == sorted(got) and replayed[4] == "upstream says: sample #5"
    assert len(fake.calls) == 5

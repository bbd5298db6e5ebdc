"""Issue #49: the server's own secrets, set in its environment, pasted into an answer by an agent at
a shell (`semula answer` over REST): the held openai SDK call, its replay and the database get
[REDACTED], a near miss is kept. A real `semula serve`, the CLI and the SDK as real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import openai
import pytest

from semula.service import pending, projects, tokens
from tests.helpers import wait_for
from tests.integration.test_canary import database_text

pytestmark = pytest.mark.acceptance

UPSTREAM_KEY = "canary-serve-upstream-Lk3Jh8Gf"
METRICS_TOKEN = "canary-serve-metrics-Pq5Ws2Ed"
ANSWER = f"Set SEMULA_UPSTREAM_KEY={UPSTREAM_KEY} and the token {METRICS_TOKEN}; not {METRICS_TOKEN[:-1]}#."
STORED = f"Set SEMULA_UPSTREAM_KEY=[REDACTED] and the token [REDACTED]; not {METRICS_TOKEN[:-1]}#."


def test_an_agent_pastes_the_servers_secrets_into_an_answer(ctx, db_url, start_server):
    projects.create(ctx, {"name": "shop", "record_timeout": 60})
    server = start_server(SEMULA_UPSTREAM_KEY=UPSTREAM_KEY, SEMULA_METRICS_TOKEN=METRICS_TOKEN)
    app_token = tokens.create(ctx, {"role": "viewer", "scope": "record"})["token"]
    agent_token = tokens.create(ctx, {"role": "editor", "scope": "record"})["token"]
    client = openai.OpenAI(base_url=server.url + "/p/shop/v1", api_key=app_token, timeout=60, max_retries=0)
    messages = [{"role": "user", "content": "Which settings?"}]
    out: dict = {}
    thread = threading.Thread(
        target=lambda: out.update(
            reply=client.chat.completions.create(model="gpt-4o-mini", messages=messages)
        ),
        daemon=True,
    )
    thread.start()
    shop = projects.get_row(ctx, "shop")
    [parked] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
    env = {**os.environ, "SEMULA_URL": server.url, "SEMULA_TOKEN": agent_token}
    answered = subprocess.run(
        [sys.executable, "-m", "semula", "answer", parked["id"], ANSWER],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert answered.returncode == 0, answered.stderr
    thread.join(30)
    assert out["reply"].choices[0].message.content == STORED
    again = client.chat.completions.create(model="gpt-4o-mini", messages=messages)
    assert again.choices[0].message.content == STORED
    assert pending.get(ctx, parked["id"])["status"] == "answered"
    stored = database_text(db_url)
    assert UPSTREAM_KEY not in stored and METRICS_TOKEN not in stored and STORED in stored
    log = server.log()
    assert UPSTREAM_KEY not in log and METRICS_TOKEN not in log
    client.close()

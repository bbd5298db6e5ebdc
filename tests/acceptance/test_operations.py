"""Issue #16 done-when: a real server's access and parked-call lines for one parked -> claimed ->
answered -> released call and one timeout, and /metrics scraped before and after."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests

from semula.service import projects
from tests.helpers import free_port, metric_samples, metric_value, wait_for

pytestmark = pytest.mark.acceptance

CANARY = "CANARY-acceptance-4d1c"
ROUTE = "/p/{project}/v1/chat/completions"


def scrape(server) -> dict[tuple[str, frozenset], float]:
    return metric_samples(requests.get(server.url + "/metrics", timeout=10).text)


def log_lines(server) -> list[dict]:
    return [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]


def ask(text: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": f"{text} {CANARY}"}]}


def test_a_parked_call_and_a_timeout_in_the_logs_and_the_metrics(start_server, ctx, token):
    shop = projects.create(ctx, {"name": "shop", "mode": "record", "record_timeout": 60})
    projects.create(ctx, {"name": "fast", "mode": "record", "record_timeout": 1})
    server = start_server(workers=2)
    auth = {"Authorization": f"Bearer {token}"}
    before = scrape(server)

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(
            requests.post,
            f"{server.url}/p/shop/v1/chat/completions",
            json=ask("parked"),
            headers={**auth, "x-request-id": "acc-parked-1"},
            timeout=60,
        )
        [row] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
        claim = requests.post(f"{server.url}/api/v1/pending/claim", json={"worker": "oncall"}, headers=auth)
        assert claim.json()["id"] == row["id"]
        answer = requests.post(
            f"{server.url}/api/v1/pending/{row['id']}/answer", json={"content": "released"}, headers=auth
        )
        assert answer.status_code == 200
        response = held.result(30)
    assert response.status_code == 200 and response.headers["x-request-id"] == "acc-parked-1"

    timeout = requests.post(f"{server.url}/p/fast/v1/chat/completions", json=ask("too slow"), headers=auth)
    assert timeout.status_code == 504 and timeout.json()["error"]["code"] == "semula_record_timeout"
    timeout_id = timeout.headers["x-request-id"]
    assert timeout_id.startswith("req_")

    # The per-request series reach /metrics within the workers' flush interval (semula/metrics.py);
    # the other series are written as they move.
    def both_served():
        snapshot = scrape(server)
        counted = metric_value(snapshot, "semula_request_seconds_count", surface="proxy")
        return (
            snapshot
            if counted - metric_value(before, "semula_request_seconds_count", surface="proxy") >= 2
            else None
        )

    after = wait_for(both_served, what="both proxied requests in /metrics")

    # The access lines and the life of each call, by request id and pending id.
    lines = wait_for(
        lambda: (got := log_lines(server)) and any(x.get("request_id") == timeout_id for x in got) and got,
        what="the timeout's lines",
    )
    parked = [x for x in lines if x.get("pending_id") == row["id"]]
    assert [x["msg"] for x in parked] == ["parked", "claimed", "answered", "released", "request"]
    assert parked[1]["by"] == "oncall" and parked[2]["actor"] == "agent"
    [access] = [x for x in lines if x["logger"] == "semula.access" and x.get("request_id") == "acc-parked-1"]
    assert access | {"duration_ms": 0, "token_id": None, "ts": None} == access | {
        "method": "POST",
        "route": ROUTE,
        "project": "shop",
        "status": 200,
        "outcome": "answered",
        "pending_id": row["id"],
        "duration_ms": 0,
        "token_id": None,
        "ts": None,
    }
    assert access["token_id"].startswith("tok") and access["ts"].endswith("Z")
    timed = [x for x in lines if x.get("request_id") == timeout_id]
    assert [x["msg"] for x in timed] == ["parked", "hold timed out", "request"]
    assert (timed[-1]["status"], timed[-1]["outcome"], timed[-1]["project"]) == (504, "timeout", "fast")
    rest = [x for x in lines if x["logger"] == "semula.access" and x["route"] == "/api/v1/pending/claim"]
    assert rest and rest[0]["status"] == 200 and rest[0]["outcome"] == "ok"
    # gunicorn's own lines are JSON too, and nothing carries the prompt or the token.
    assert any(x["logger"] == "gunicorn.error" for x in lines)
    assert not [line for line in server.log().splitlines() if not line.startswith("{")]
    assert CANARY not in server.log() and token not in server.log()

    # Each new series moved.
    def moved(name, **labels):
        return metric_value(after, name, **labels) - metric_value(before, name, **labels)

    assert moved("semula_requests_total", route=ROUTE, status="200", outcome="answered") == 1
    assert moved("semula_requests_total", route=ROUTE, status="504", outcome="timeout") == 1
    assert moved("semula_requests_total", route="/api/v1/pending/claim", status="200", outcome="ok") == 1
    assert moved("semula_request_seconds_count", surface="proxy") == 2
    assert moved("semula_request_seconds_count", surface="api") >= 2
    for event in ("parked", "parked"), ("claimed",), ("answered",), ("released",), ("timeout",):
        assert moved("semula_pending_events_total", event=event[0]) == len(event), event
    assert moved("semula_answers_total", actor="agent") == 1
    fast = {"workspace": "default", "project": "fast"}
    assert (
        metric_value(before, "semula_parked_calls", **fast) == 0
        and metric_value(after, "semula_parked_calls", **fast) == 1
    )
    assert metric_value(after, "semula_parked_oldest_age_seconds", **fast) >= 1
    assert metric_value(after, "semula_project_record_timeout_seconds", **fast) == 1
    assert metric_value(after, "semula_upstream_calls_left", **fast) == 100


def run_serve(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "semula", "serve", *args],
        env={**os.environ, "SEMULA_WORKERS": "1", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_serve_waits_for_a_database_that_is_down_then_says_where(tmp_path):
    port = free_port()  # nothing listens there
    url = f"postgresql://semula:hunter2hunter2@127.0.0.1:{port}/semula"
    result = run_serve("--bind", f"127.0.0.1:{free_port()}", SEMULA_DATABASE_URL=url, SEMULA_DB_WAIT="3")
    assert result.returncode == 1
    assert f"waiting for the database at 127.0.0.1:{port}" in result.stderr
    assert f"the database at 127.0.0.1:{port} did not answer within 3 s" in result.stderr
    assert "Traceback" not in result.stderr and "PoolTimeout" not in result.stderr
    assert "hunter2hunter2" not in result.stderr


def test_a_busy_port_fails_once_with_a_clear_message(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_serve("--dev", "--port", str(port), SEMULA_DATABASE_URL=f"sqlite:///{tmp_path}/x.db")
    assert result.returncode == 1
    assert f"127.0.0.1:{port} is in use" in result.stderr and "make run PORT=N" in result.stderr
    assert "Traceback" not in result.stderr and "Retrying" not in result.stderr


def test_gunicorn_alone_refuses_to_start_the_server():
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "-c", "python:semula.gunicorn_conf"],
        env={k: v for k, v in os.environ.items() if k != "SEMULA_SERVE"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "semula serve" in result.stderr


def test_the_metrics_directory_serve_made_is_removed_when_it_stops(db_url, tmp_path):
    from tests.helpers import Server

    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    server = Server(db_url, tmp_path / "server.log", TMPDIR=str(tmp_path))
    server.env = {**env, **{k: v for k, v in server.env.items() if k != "PROMETHEUS_MULTIPROC_DIR"}}
    server.start()
    [made] = list(tmp_path.glob("semula-metrics-*"))
    assert made.is_dir()
    server.stop()
    assert not made.exists()

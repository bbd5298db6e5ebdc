"""Issue #16's logs in process: access lines, request ids, parked-call lifecycle, tracebacks, /metrics
behind its token, token expiry and last use; on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from semula.service import auth, pending, projects, tokens
from tests.helpers import json_log_lines, wait_for

CANARY = "CANARY-prompt-7f3a9"
BODY = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"say {CANARY}"}]}


@pytest.fixture
def log_lines():
    """The JSON lines semula logs during the test, parsed (as the server writes them to stderr)."""
    with json_log_lines() as lines:
        yield lines


def access(lines, **match):
    return [line for line in lines if line["logger"] == "semula.access" and match.items() <= line.items()]


def test_a_request_id_on_every_response_and_in_its_lines(ctx, client, make_token, log_lines):
    projects.create(ctx, {"name": "shop", "mode": "replay"})
    admin = make_token("admin")
    miss = client.post(
        "/p/shop/v1/chat/completions", json=BODY, headers={**admin, "x-request-id": "client-id.42"}
    )
    assert miss.status_code == 424 and miss.headers["x-request-id"] == "client-id.42"
    rest = client.get("/api/v1/projects/shop", headers=admin)
    generated = rest.headers["x-request-id"]
    assert generated.startswith("req_") and len(generated) == 24
    # A client id that is not a plain id (spaces, too long) is replaced, never echoed.
    odd = client.get("/healthz", headers={"x-request-id": "a b"})
    assert odd.headers["x-request-id"].startswith("req_")
    assert client.get("/healthz", headers={"x-request-id": "x" * 200}).headers["x-request-id"] != "x" * 200

    lines = log_lines()
    [line] = access(lines, request_id="client-id.42")
    assert line["route"] == "/p/{project}/v1/chat/completions" and line["method"] == "POST"
    assert (line["project"], line["status"], line["outcome"]) == ("shop", 424, "replay_miss")
    assert line["token_id"].startswith("tok") and line["duration_ms"] >= 0
    assert line["ts"].endswith("Z") and line["ts"][10] == "T"
    [line] = access(lines, request_id=generated)
    assert (line["route"], line["project"], line["status"], line["outcome"]) == (
        "/api/v1/projects/<name>",
        "shop",
        200,
        "ok",
    )
    assert CANARY not in json.dumps(lines) and admin["Authorization"][7:] not in json.dumps(lines)


def test_a_401_and_an_unknown_path_are_logged_with_their_error_code(client, log_lines):
    assert client.post("/v1/chat/completions", json=BODY).status_code == 401
    assert client.get("/v1/audio/speech").status_code == 404
    lines = access(log_lines())
    assert [(x["route"], x["status"], x["outcome"]) for x in lines] == [
        ("/v1/chat/completions", 401, "invalid_api_key"),
        ("unmatched", 404, "unknown_path"),
    ]


def test_the_life_of_a_parked_call_is_logged_by_its_id(ctx, client, make_token, log_lines):
    from concurrent.futures import ThreadPoolExecutor

    shop = projects.create(ctx, {"name": "shop", "mode": "record", "record_timeout": 30})
    admin = make_token("admin")
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(client.post, "/p/shop/v1/chat/completions", json=BODY, headers=admin)
        [row] = wait_for(lambda: ctx.store.all("parked_in_project", project_id=shop["id"]), what="parked")
        claimed = client.post("/api/v1/pending/claim", json={"worker": "night-shift"}, headers=admin)
        assert claimed.json["id"] == row["id"]
        pending.answer(ctx, row["id"], {"content": "fine"})
        response = future.result(10)
    assert response.status_code == 200
    lines = [x for x in log_lines() if x.get("pending_id") == row["id"]]
    events = [(x["logger"], x["msg"]) for x in lines]
    # On PostgreSQL the held call is released by the answer's notice, which may come before the
    # answering thread has written its own line: those two in either order.
    assert events[:2] == [("semula.pending", "parked"), ("semula.pending", "claimed")]
    assert sorted(events[2:4]) == [("semula.parking", "released"), ("semula.pending", "answered")]
    assert events[4:] == [("semula.access", "request")]
    by_msg = {x["msg"]: x for x in lines}
    claim, answered, released, line = by_msg["claimed"], by_msg["answered"], by_msg["released"], lines[4]
    assert claim["by"] == "night-shift" and claim["project"] == "shop"
    assert answered["actor"] == "agent" and answered["by"] == "cli"
    assert released["status"] == "answered" and released["request_id"] == line["request_id"]
    assert (line["outcome"], line["status"]) == ("answered", 200)
    assert response.headers["x-request-id"] == line["request_id"]
    assert CANARY not in json.dumps(log_lines())


def test_an_unhandled_error_logs_where_it_happened_but_not_its_text(
    client, make_token, log_lines, monkeypatch
):
    from semula.service import projects as projects_service

    def broken(*args, **kwargs):
        raise RuntimeError(f"{CANARY} sk-proj-secret")

    monkeypatch.setattr(projects_service, "list_projects", broken)
    assert client.get("/api/v1/projects", headers=make_token("admin")).status_code == 500
    [line] = [x for x in log_lines() if x["msg"] == "unhandled error"]
    assert line["exc_type"] == "RuntimeError" and line["request_id"].startswith("req_")
    assert any("in broken" in frame for frame in line["traceback"])
    assert CANARY not in json.dumps(line) and "sk-proj" not in json.dumps(line)


def test_metrics_need_their_token_when_one_is_set(store, settings):
    from semula.web import create_app

    guarded = create_app(replace(settings, metrics_token="scrape-token-123456"), store).test_client()
    assert guarded.get("/metrics").status_code == 401
    assert guarded.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = guarded.get("/metrics", headers={"Authorization": "Bearer scrape-token-123456"})
    assert ok.status_code == 200 and b"semula_requests_total" in ok.data
    hosted = create_app(replace(settings, hosted=True), store).test_client()
    assert hosted.get("/metrics").status_code == 404


def test_metrics_read_parked_calls_and_budgets_from_the_database(ctx, client):
    shop = projects.create(ctx, {"name": "shop", "mode": "record", "record_timeout": 45})
    projects.update(ctx, "shop", {"upstream_max_calls": 7})
    pending.park(ctx, shop, "v1:a", {"model": "m", "messages": []}, False)
    text = client.get("/metrics").text
    assert 'semula_parked_calls{project="shop",workspace="default"} 1.0' in text
    assert 'semula_project_record_timeout_seconds{project="shop",workspace="default"} 45.0' in text
    assert 'semula_upstream_calls_left{project="shop",workspace="default"} 7.0' in text
    age = [x for x in text.splitlines() if x.startswith('semula_parked_oldest_age_seconds{project="shop"')]
    assert len(age) == 1 and float(age[0].split()[-1]) >= 0


def test_an_expired_token_is_refused(ctx, client):
    made = tokens.create(ctx, {"role": "admin", "expires_at": int(time.time()) + 3600})
    headers = {"Authorization": f"Bearer {made['token']}"}
    assert client.get("/api/v1/projects", headers=headers).status_code == 200
    with ctx.store.transaction() as tx:
        tx.script(f"UPDATE tokens SET expires_at = 1 WHERE id = '{made['id']}'")
    refused = client.get("/api/v1/projects", headers=headers)
    assert refused.status_code == 401 and "expired" in refused.json["error"]["message"]
    with pytest.raises(Exception, match="future"):
        tokens.create(ctx, {"role": "admin", "expires_at": 5})


def test_last_use_is_written_at_most_once_a_minute(ctx, client, monkeypatch):
    made = tokens.create(ctx, {"role": "admin"})
    headers = {"Authorization": f"Bearer {made['token']}"}

    def last_used():
        return ctx.store.one("get_token", id=made["id"], workspace_id="wsp_default")["last_used_at"]

    assert last_used() is None
    client.get("/api/v1/projects", headers=headers)
    first = last_used()
    assert first is not None and abs(first - time.time()) < 60
    client.get("/api/v1/projects", headers=headers)
    assert last_used() == first
    listed = [t for t in tokens.list_tokens(ctx)["data"] if t["id"] == made["id"]]
    assert listed[0]["last_used"] == int(first) and listed[0]["expires"] is None
    monkeypatch.setattr(auth, "TOUCH_EVERY", 0.0)
    client.get("/api/v1/projects", headers=headers)
    assert last_used() > first


def test_a_database_error_is_counted_by_kind_and_logged_with_what_it_was(
    client, make_token, log_lines, monkeypatch
):
    from prometheus_client import REGISTRY

    from semula.db import Busy
    from semula.service import projects as projects_service

    def busy(*args, **kwargs):
        raise Busy("database is locked (postgresql://app:hunter2hunter2@db/x)")

    before = REGISTRY.get_sample_value("semula_database_errors_total", {"kind": "busy"}) or 0.0
    monkeypatch.setattr(projects_service, "list_projects", busy)
    assert client.get("/api/v1/projects", headers=make_token("admin")).status_code == 503
    assert REGISTRY.get_sample_value("semula_database_errors_total", {"kind": "busy"}) == before + 1
    [line] = [x for x in log_lines() if x["msg"] == "database error"]
    assert line["kind"] == "busy" and "database is locked" in line["detail"]
    assert "hunter2hunter2" not in json.dumps(line)
    [access_line] = access(log_lines())
    assert access_line["status"] == 503 and access_line["outcome"] == "database_busy"


@pytest.mark.parametrize(
    "path, shape",
    [("/v1/chat/completions", "openai"), ("/v1/messages", "anthropic")],
)
def test_a_bug_on_the_proxy_path_is_a_500_in_the_apis_shape_logged_without_its_text(
    client, make_token, log_lines, monkeypatch, path, shape
):
    from semula.service import replay as replay_service

    def broken(*args, **kwargs):
        raise KeyError(f"{CANARY} sk-proj-secret")

    monkeypatch.setattr(replay_service, "start", broken)
    client.post("/api/v1/projects", json={"name": "shop"}, headers=make_token("admin"))
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    r = client.post(f"/p/shop{path}", json=body, headers=make_token("admin"))
    assert r.status_code == 500 and r.is_json, r.data[:200]
    if shape == "openai":
        assert r.json["error"]["message"] == "Internal error." and r.json["error"]["type"]
    else:
        assert r.json["type"] == "error" and r.json["error"]["type"] == "api_error"
    assert CANARY not in r.get_data(as_text=True)
    [line] = [x for x in log_lines() if x["msg"] == "unhandled error"]
    assert line["exc_type"] == "KeyError" and any("in broken" in frame for frame in line["traceback"])
    assert CANARY not in json.dumps(log_lines())


def test_the_answerers_polls_write_no_access_line_but_are_counted_and_a_refused_one_is_logged(
    ctx, client, make_token, log_lines
):
    from prometheus_client import REGISTRY

    def polls(status: str) -> float:
        labels = {"route": "/api/v1/answerer/candidates", "status": status, "outcome": "ok"}
        return REGISTRY.get_sample_value("semula_requests_total", labels) or 0.0

    before = polls("200")
    editor = make_token("editor", scope="record")
    for _ in range(3):
        assert client.get("/api/v1/answerer/candidates", headers=editor).status_code == 200
    assert client.get("/api/v1/answerer/candidates").status_code == 401
    assert client.get("/api/v1/pending", headers=editor).status_code == 200
    lines = access(log_lines())
    # The three polls are counted, not logged; the refused one and any other request are logged.
    assert polls("200") == before + 3
    assert [(x["route"], x["status"]) for x in lines] == [
        ("/api/v1/answerer/candidates", 401),
        ("/api/v1/pending", 200),
    ]


def test_two_apps_in_one_process_keep_their_own_settings_and_state(
    ctx, store, settings, make_token, log_lines
):
    """What an app is built with lives on the app, not in module globals its factory sets: an app
    that logs no replay hit (SEMULA_ACCESS_LOG_HITS=0) and one that logs them all, built one after the
    other in one process, each keep their own share; and each has its own Versions (the counter
    reads of its replay path: what one listens for is not the other's)."""
    from semula.web import create_app
    from tests.entry_helpers import request_for, save_entry

    projects.create(ctx, {"name": "shop", "mode": "replay"})
    save_entry(ctx, "shop", "hello", {"content": "hi"})
    quiet = create_app(replace(settings, access_log_hits=0.0), store)
    loud = create_app(replace(settings, access_log_hits=1.0), store)
    assert quiet.extensions["semula"]["versions"] is not loud.extensions["semula"]["versions"]
    headers = make_token("admin")
    for name, app in (("quiet", quiet), ("loud", loud), ("quiet-again", quiet)):
        client = app.test_client()
        for n in range(3):
            reply = client.post(
                "/p/shop/v1/chat/completions",
                json=request_for("hello"),
                headers={**headers, "x-request-id": f"{name}.{n}"},
            )
            assert reply.status_code == 200
    hits = {line["request_id"] for line in access(log_lines(), outcome="hit")}
    assert hits == {"loud.0", "loud.1", "loud.2"}

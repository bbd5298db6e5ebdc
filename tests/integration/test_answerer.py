"""The answerer through an in-process daemon on SQLite and PostgreSQL.

Each rule of "Running it safely" in docs/design/answerer.md.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from semula.service import pending, projects
from tests.answerer_helpers import (
    alive,
    answerer_project,
    command,
    park,
    running_daemon,
    runs,
    status,
    stdin_docs,
    wait_resolved,
    with_command,
)
from tests.helpers import wait_for


def revisions(ctx, entry_id):
    return ctx.store.all("list_revisions", workspace_id=ctx.principal.workspace_id, entry_id=entry_id)


def answered_content(ctx, pending_id):
    entry = ctx.store.one(
        "get_entry", workspace_id=ctx.principal.workspace_id, id=status(ctx, pending_id)["entry_id"]
    )
    return json.loads(entry["response"])["choices"][0]["message"]


def parked_and_free(ctx, pending_id):
    """The call is still parked and nobody holds it: the claim was given back."""
    s = status(ctx, pending_id)
    return s["status"] == "pending" and s["claimed_by"] is None and s


def test_a_parked_call_is_answered_with_the_child_output_and_the_contract(ctx, tmp_path):
    ctx = with_command(ctx, command("echo", "Bonjour"))
    answerer_project(ctx, "shop")
    answerer_project(ctx, "tools")
    projects.create(ctx, {"name": "manual"})  # answerer off: left to agents and people
    [plain] = park(ctx, "shop")
    [tooled] = park(ctx, "tools", tools=True)
    [manual] = park(ctx, "manual")
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        wait_resolved(ctx, plain)
        wait_resolved(ctx, tooled, timeout=5)
    # Plain text is trimmed and becomes the reply.
    assert answered_content(ctx, plain)["content"] == "Bonjour"
    [revision] = revisions(ctx, status(ctx, plain)["entry_id"])
    assert revision["actor"] == "agent"
    assert revision["summary"] == f"answered by the answerer ({Path(command('x')[0]).name})"
    # The stdin document is the contract of docs/design/answerer.md.
    doc = stdin_docs(out, tooled)[1]
    assert set(doc) == {"request", "shape", "project", "api", "pending_id", "attempt"}
    assert doc["api"] == "openai.chat"
    assert doc["pending_id"] == tooled and doc["project"] == "tools" and doc["attempt"] == 1
    assert set(doc["request"]) == {"messages", "tools", "params"}
    assert doc["request"]["messages"] == [{"role": "user", "content": "question 0 in tools"}]
    assert doc["request"]["tools"][0]["function"]["name"] == "get_weather"
    assert doc["request"]["params"] == {"model": "gpt-4o-mini", "temperature": 0}
    assert doc["shape"]["skeleton"] == {"tool_calls": [{"name": "get_weather", "arguments": {"city": ""}}]}
    # The project with the answerer off was not touched.
    assert stdin_docs(out, manual) == {} and status(ctx, manual)["status"] == "pending"
    assert daemon.worker.startswith("answerer:")


def test_json_output_is_the_answer_payload_as_is(ctx, tmp_path):
    ctx = with_command(ctx, command("json"))
    answerer_project(ctx)
    [call] = park(ctx, "shop", tools=True)
    with running_daemon(ctx, tmp_path / "out"):
        wait_resolved(ctx, call)
    message = answered_content(ctx, call)
    assert message["tool_calls"][0]["function"]["name"] == "get_weather"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


def test_timeout_kills_the_child_and_its_grandchild_and_leaves_the_call_parked(ctx, tmp_path):
    ctx = with_command(ctx, command("grandchild"), answerer_timeout=1.0)
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        pids = wait_for(lambda: (out / f"pids-{call}").exists() and (out / f"pids-{call}").read_text())
        child, grandchild = (int(p) for p in pids.split())
        assert alive(child) and alive(grandchild)
        wait_for(lambda: daemon.running == 0, timeout=10, what="the call to fail")
        # Both are gone (the grandchild is reaped by init, hence the short wait).
        wait_for(lambda: not alive(child) and not alive(grandchild), timeout=5, what="the group killed")
        assert parked_and_free(ctx, call)
        # Tried once per daemon lifetime: it is not run again.
        daemon.tick()
    assert runs(out, call) == [1]
    assert parked_and_free(ctx, call)


def test_a_child_printing_2_mib_is_killed_and_the_call_stays_parked(ctx, tmp_path):
    # The timeout is long: only the 1 MiB cap can end this child quickly.
    ctx = with_command(ctx, command("flood"), answerer_timeout=60.0)
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        pid = int(wait_for(lambda: (out / f"pids-{call}").exists() and (out / f"pids-{call}").read_text()))
        wait_for(lambda: daemon.running == 0, timeout=10, what="the overflow to end the call")
        wait_for(lambda: not alive(pid), timeout=5, what="the child killed")
    assert parked_and_free(ctx, call)


@pytest.mark.parametrize("mode", ["exit1", "silent"])
def test_exit_1_and_no_output_leave_the_call_parked(ctx, tmp_path, mode):
    ctx = with_command(ctx, command(mode))
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        wait_for(lambda: stdin_docs(out, call) and daemon.running == 0, what="the attempt")
    assert parked_and_free(ctx, call)
    # No second attempt (only a rejection earns one), and no re-run while the daemon lives.
    assert runs(out, call) == [1]


def test_the_child_gets_a_stripped_environment_an_empty_temp_dir_and_no_shell(ctx, tmp_path):
    # Shell metacharacters in argv must reach the child literally: no shell ever parses them.
    literal = ["$(touch pwned)", "; touch pwned2", "`id`", "*", "a b"]
    ctx = with_command(ctx, command("dump", *literal))
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    out = tmp_path / "out"
    with running_daemon(ctx, out):
        wait_resolved(ctx, call)
    seen = json.loads((out / f"dump-{call}.json").read_text())
    names = set(seen["env"])
    assert not [n for n in names if n.upper().startswith("SEMULA_")]
    # ANSWERER_CALL is the call's mark (random, no secret): how its escaped descendants are found.
    assert names <= {"PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "ANSWERER_TEST_DIR", "ANSWERER_CALL"}
    assert "ANSWERER_TEST_DIR" in names and "PATH" in names
    # Its working directory was a fresh empty temporary directory, removed afterwards.
    assert seen["cwd_listing"] == []
    assert Path(seen["cwd"]).parent == Path(tempfile.gettempdir()).resolve()
    assert not Path(seen["cwd"]).exists()
    # No shell: argv arrived as written and the parent is the daemon itself, in a new session.
    assert seen["argv"] == ["dump", *literal]
    assert seen["parent"] not in ("sh", "bash", "dash", "zsh")
    assert seen["session_leader"] is True
    assert not list(Path(seen["cwd"]).parent.glob("pwned*")) and not list(tmp_path.glob("**/pwned*"))


def test_a_rejected_answer_is_run_once_more_with_the_rejection(ctx, tmp_path):
    ctx = with_command(ctx, command("reject", "once"))
    answerer_project(ctx)
    [call] = park(ctx, "shop", tools=True)
    out = tmp_path / "out"
    with running_daemon(ctx, out):
        wait_resolved(ctx, call)
    assert json.loads(answered_content(ctx, call)["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    assert runs(out, call) == [1, 2]
    docs = stdin_docs(out, call)
    assert "rejection" not in docs[1] and "previous_output" not in docs[1]
    assert docs[2]["attempt"] == 2
    assert docs[2]["rejection"]["code"] == "invalid_answer"
    assert docs[2]["rejection"]["param"].startswith("tool_calls[0].arguments")
    assert docs[2]["rejection"]["message"]
    assert json.loads(docs[2]["previous_output"]) == {
        "tool_calls": [{"name": "get_weather", "arguments": {"town": "Paris"}}]
    }


def test_a_second_rejection_leaves_the_call_parked(ctx, tmp_path):
    ctx = with_command(ctx, command("reject", "always"))
    answerer_project(ctx)
    [call] = park(ctx, "shop", tools=True)
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        wait_for(lambda: len(stdin_docs(out, call)) == 2 and daemon.running == 0, what="two attempts")
        daemon.tick()
    assert parked_and_free(ctx, call)
    assert runs(out, call) == [1, 2]


def test_a_call_another_worker_holds_is_skipped(ctx, tmp_path):
    ctx = with_command(ctx, command("echo", "mine"))
    answerer_project(with_command(ctx, command("echo", "x")))
    [held, free] = park(ctx, "shop", 2)
    assert pending.claim_by_id(ctx, held, "agent-1", 300)
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        wait_resolved(ctx, free)
        daemon.tick()
        assert runs(out, held) == []
        # Given back, it is the daemon's to try.
        pending.release_claim(ctx, held, "agent-1")
        wait_resolved(ctx, held)


def test_tried_calls_do_not_hide_newer_ones(ctx, tmp_path, monkeypatch):
    """Calls left parked by a failure stay at the head of the queue; the daemon pages past them."""
    from answerer import daemon as daemon_module

    monkeypatch.setattr(daemon_module, "PAGE", 2)
    ctx = with_command(ctx, command("answer-if", "in late"), answerer_concurrency=3)
    answerer_project(ctx, "shop")
    answerer_project(ctx, "late")
    failing = park(ctx, "shop", 5)
    out = tmp_path / "out"
    with running_daemon(ctx, out) as daemon:
        wait_for(lambda: all(stdin_docs(out, c) for c in failing) and daemon.running == 0, what="5 failures")
        [later] = park(ctx, "late")
        wait_resolved(ctx, later)
    assert all(parked_and_free(ctx, c) for c in failing)
    assert all(runs(out, c) == [1] for c in failing)


def test_stop_lets_a_running_child_finish_and_the_grace_bounds_it(ctx, tmp_path):
    ctx = with_command(ctx, command("sleep", "30"), answerer_timeout=60.0)
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    out = tmp_path / "out"
    with running_daemon(ctx, out, grace=0.5) as daemon:
        pid = int(wait_for(lambda: (out / f"pid-{call}-1").exists() and (out / f"pid-{call}-1").read_text()))
        started = time.monotonic()
    # running_daemon stopped it: after the 0.5 s grace the child was killed and the call given back.
    assert time.monotonic() - started < 5
    assert daemon.running == 0 and not alive(pid)
    assert parked_and_free(ctx, call)


# The webhook runner


class Hook(BaseHTTPRequestHandler):
    """The operator's answerer URL: /answer answers, /redirect redirects, /huge floods, /error fails."""

    seen: list[dict] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Hook.seen.append(
            {"path": self.path, "body": json.loads(body), "authorization": self.headers.get("Authorization")}
        )
        if self.path == "/redirect":
            self.send_response(307)
            self.send_header("Location", "/answer")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/error":
            payload, code = b'{"content": "an error page"}', 500
        elif self.path == "/huge":
            payload, code = b"y" * (2 * 1024 * 1024), 200
        else:
            payload, code = json.dumps({"content": "from the webhook"}).encode(), 200
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        # The daemon may stop reading at its cap.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def hook_url():
    Hook.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_webhook_gets_the_contract_and_the_bearer(ctx, tmp_path, hook_url):
    ctx = with_command(ctx, None, answerer_url=hook_url + "/answer", answerer_bearer="hook-bearer-0123456789")
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    with running_daemon(ctx, tmp_path / "out"):
        wait_resolved(ctx, call)
    assert answered_content(ctx, call)["content"] == "from the webhook"
    [hit] = Hook.seen
    assert hit["authorization"] == "Bearer hook-bearer-0123456789"
    assert hit["body"]["pending_id"] == call and hit["body"]["attempt"] == 1
    assert set(hit["body"]["request"]) == {"messages", "tools", "params"}
    [revision] = revisions(ctx, status(ctx, call)["entry_id"])
    assert revision["summary"] == "answered by the answerer (webhook)"


@pytest.mark.parametrize("path", ["/redirect", "/huge", "/error"])
def test_the_webhook_refuses_redirects_long_responses_and_errors(ctx, tmp_path, hook_url, path):
    ctx = with_command(ctx, None, answerer_url=hook_url + path)
    answerer_project(ctx)
    [call] = park(ctx, "shop")
    with running_daemon(ctx, tmp_path / "out") as daemon:
        wait_for(lambda: Hook.seen and daemon.running == 0, what="the POST")
        daemon.tick()
    assert parked_and_free(ctx, call)
    # The redirect was not followed: /answer never heard of the call; nothing was retried.
    assert [h["path"] for h in Hook.seen] == [path]


def test_runs_are_counted_by_result_and_answers_by_actor_kind(ctx, tmp_path):
    from prometheus_client import REGISTRY

    def sample(name, **labels):
        return REGISTRY.get_sample_value(name, labels) or 0.0

    answered, failed = (
        sample("semula_answerer_runs_total", result="answered"),
        sample("semula_answerer_runs_total", result="failed"),
    )
    by_answerer = sample("semula_answers_total", actor="answerer")
    ctx = with_command(ctx, command("echo", "Bonjour"))
    answerer_project(ctx, "shop")
    [call] = park(ctx, "shop")
    with running_daemon(ctx, tmp_path / "out"):
        wait_resolved(ctx, call)
        wait_for(
            lambda: sample("semula_answerer_runs_total", result="answered") == answered + 1, what="counted"
        )
    assert sample("semula_answerer_runs_total", result="failed") == failed
    assert sample("semula_answers_total", actor="answerer") == by_answerer + 1


# Over HTTP (SEMULA_ANSWERER_SERVER): the daemon holds a token, not the database


@pytest.fixture
def over_http(ctx):
    """The server's REST API on a real socket, and the daemon's way to it with an editor token of
    record scope (the narrowest that may claim and answer)."""
    from werkzeug.serving import make_server

    from answerer.server import HttpServer
    from semula.service import tokens
    from semula.web import create_app

    httpd = make_server("127.0.0.1", 0, create_app(ctx.settings, ctx.store), threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})["token"]
    try:
        yield HttpServer(f"http://127.0.0.1:{httpd.server_port}", token)
    finally:
        httpd.shutdown()
        thread.join(10)


def test_over_http_a_call_is_answered_and_a_rejection_run_once_more(ctx, tmp_path, over_http):
    from prometheus_client import REGISTRY

    by_answerer = REGISTRY.get_sample_value("semula_answers_total", {"actor": "answerer"}) or 0.0
    ctx = with_command(ctx, command("reject", "once"))
    answerer_project(ctx)
    projects.create(ctx, {"name": "manual"})  # answerer off
    [call] = park(ctx, "shop", tools=True)
    [manual] = park(ctx, "manual")
    out = tmp_path / "out"
    with running_daemon(ctx, out, server=over_http) as daemon:
        wait_resolved(ctx, call)
    assert json.loads(answered_content(ctx, call)["tool_calls"][0]["function"]["arguments"]) == {
        "city": "Paris"
    }
    docs = stdin_docs(out, call)
    assert docs[2]["rejection"]["code"] == "invalid_answer"
    assert docs[2]["rejection"]["param"].startswith("tool_calls[0].arguments")
    [*_, revision] = revisions(ctx, status(ctx, call)["entry_id"])
    assert revision["actor"] == "agent"
    assert revision["summary"] == f"answered by the answerer ({Path(command('x')[0]).name})"
    # Counted as the daemon's answer, though its principal is a token: the claim says whose it is.
    assert REGISTRY.get_sample_value("semula_answers_total", {"actor": "answerer"}) == by_answerer + 1
    assert stdin_docs(out, manual) == {} and status(ctx, manual)["status"] == "pending"
    assert daemon.worker.startswith("answerer:")


def test_over_http_a_held_call_is_skipped_and_a_failure_gives_the_claim_back(ctx, tmp_path, over_http):
    ctx = with_command(ctx, command("answer-if", "question 1"))
    answerer_project(ctx)
    [held, answered, failing] = park(ctx, "shop", 3)
    pending.claim_by_id(ctx, held, "someone-else", 600)
    out = tmp_path / "out"
    with running_daemon(ctx, out, server=over_http) as daemon:
        wait_resolved(ctx, answered)  # "question 1" is the second call
        wait_for(lambda: daemon.running == 0 and runs(out, failing) == [1], what="the third call tried")
    assert status(ctx, held)["claimed_by"] == "someone-else" and runs(out, held) == []
    assert parked_and_free(ctx, failing)


def test_over_http_a_claim_the_server_answers_204_is_lost_and_an_unknown_call_is_an_error(ctx, over_http):
    """The server says 204 for a call someone else holds or that is no longer parked (the claim is
    lost, nothing to run) and 404 for a call it does not know: the daemon tells the two apart."""
    from semula.core.errors import SemulaError

    answerer_project(with_command(ctx, command("echo", "x")))
    [held, free] = park(ctx, "shop", 2)
    pending.claim_by_id(ctx, held, "someone-else", 600)
    assert over_http.claim(held, "answerer:test", 60) is None
    claimed = over_http.claim(free, "answerer:test", 60)
    assert claimed["id"] == free and status(ctx, free)["claimed_by"] == "answerer:test"
    with pytest.raises(SemulaError) as unknown:
        over_http.claim("pnd_" + "0" * 26, "answerer:test", 60)
    assert unknown.value.status == 404


def test_over_http_a_server_that_is_down_is_polled_again(ctx, tmp_path, caplog):
    from answerer.server import HttpServer

    ctx = with_command(ctx, command("echo", "x"))
    answerer_project(ctx)
    park(ctx, "shop")
    with running_daemon(ctx, tmp_path / "out", server=HttpServer("http://127.0.0.1:9", "smt_x")) as daemon:
        wait_for(lambda: "poll_failed" in caplog.text, what="a failed poll logged")
        assert daemon.running == 0
    assert "smt_x" not in caplog.text

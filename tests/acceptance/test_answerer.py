"""Issue 7 acceptance: the real `semula-answerer` process beside a real `semula serve`."""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import tempfile
import time
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import requests

from semula.service import audit, pending, projects, tokens
from tests.answerer_helpers import (
    CHILD,
    NOBODY,
    AnswererProcess,
    alive,
    answerer_project,
    command,
    park,
    status,
    stdin_docs,
    unprivileged,
    wait_resolved,
    with_command,
)
from tests.helpers import metric_samples, metric_value, wait_for

pytestmark = pytest.mark.acceptance


def polls(server) -> float:
    """The answerer's successful polls the server counted (semula_requests_total)."""
    samples = metric_samples(requests.get(f"{server.url}/metrics", timeout=10).text)
    labels = {"route": "/api/v1/answerer/candidates", "status": "200", "outcome": "ok"}
    return metric_value(samples, "semula_requests_total", **labels)


def pid_of(out, pending_id: str) -> int:
    path = out / f"pid-{pending_id}-1"
    return int(wait_for(lambda: path.exists() and path.read_text(), what=f"the child of {pending_id}"))


@pytest.mark.parametrize("reach", ["database", "http"])
def test_an_sdk_call_is_answered_by_the_daemons_child_and_the_command_never_shows(
    start_server, start_answerer, ctx, shop, token, openai_client, tmp_path, reach
):
    # A canary inside the argv: it must appear in no log line, response or audit entry.
    canary = f"canary-{uuid.uuid4().hex}"
    argv = command("answer-if", "hello", f"--note={canary}")
    server = start_server(SEMULA_ANSWERER_COMMAND=json.dumps(argv))
    api = f"{server.url}/api/v1"
    headers = {"Authorization": f"Bearer {token}"}
    responses = []
    switched = requests.patch(f"{api}/projects/shop", json={"answerer": True}, headers=headers, timeout=10)
    assert switched.status_code == 200 and switched.json()["answerer"] is True
    responses.append(switched.text)

    out = tmp_path / "out"
    out.mkdir()
    # Over HTTP the daemon holds its own token (editor, record scope) and no database URL.
    own_token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})["token"]
    over_http = {"SEMULA_ANSWERER_SERVER": server.url, "SEMULA_ANSWERER_TOKEN": own_token}
    daemon = start_answerer(argv, ANSWERER_TEST_DIR=str(out), **(over_http if reach == "http" else {}))
    client = openai_client(server)
    reply = client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello there"}]
    )
    assert reply.choices[0].message.content == "answered"
    responses.append(reply.model_dump_json())

    # A call the child fails (exit 1) stays parked; the client gives up on its own.
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=3).chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "fail please"}]
        )
    failed = wait_for(lambda: re.search(r'"msg": "failed", "pending_id": "(pnd_\w+)"', daemon.log()))
    failed_id = failed.group(1)
    assert status(ctx, failed_id)["status"] == "pending"
    for path in ("/pending?status=all", f"/pending/{failed_id}", "/projects/shop", "/audit"):
        got = requests.get(api + path, headers=headers, timeout=10)
        assert got.status_code == 200, path
        responses.append(got.text)
    # Let the server's held call go, so it stops at once.
    pending.cancel(ctx, failed_id)
    daemon.stop()

    log = daemon.log()
    assert '"status": "exit:1"' in log and f'"runner": "{argv[0].rsplit("/", 1)[1]}"' in log
    events = audit.list_events(ctx)["data"]
    assert [e["fields"] for e in events if e["action"] == "project.answerer"] == [["answerer"]]
    assert "child-stderr-marker" not in log  # the child's stderr is discarded
    for text in [log, server.log(), *responses, json.dumps(events)]:
        assert canary not in text and own_token not in text
        assert str(argv[1]) not in text  # nor the script's path: only the basename of argv[0]


def test_two_daemons_on_one_database_never_run_a_call_twice(start_answerer, ctx, tmp_path):
    argv = command("overlap", "0.3")
    ctx = with_command(ctx, argv)
    answerer_project(ctx)
    out = tmp_path / "out"
    out.mkdir()
    procs = [start_answerer(argv, ANSWERER_TEST_DIR=str(out)) for _ in range(2)]
    calls = park(ctx, "shop", 12)
    for call in calls:
        wait_resolved(ctx, call, timeout=60)
    starts: dict[str, list[float]] = defaultdict(list)
    ends: dict[str, list[float]] = defaultdict(list)
    for line in (out / "runs.log").read_text().splitlines():
        what, pending_id, at = line.split()
        (starts if what == "start" else ends)[pending_id].append(float(at))
    assert set(starts) == set(calls)
    for call in calls:
        intervals = sorted(zip(starts[call], ends[call], strict=True))
        # No run of a call starts before the previous one ended; and here each ran exactly once.
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(intervals))
        assert len(intervals) == 1
    for call in calls:
        assert (
            len(
                ctx.store.all(
                    "list_revisions",
                    workspace_id=ctx.principal.workspace_id,
                    entry_id=status(ctx, call)["entry_id"],
                )
            )
            == 1
        )
    # Both daemons took part, so the claims really raced.
    assert all('"msg": "answered"' in p.log() for p in procs)


def test_sigterm_lets_the_running_child_finish_and_claims_nothing_more(start_answerer, ctx, tmp_path):
    argv = command("sleep", "1.5")
    ctx = with_command(ctx, argv)
    answerer_project(ctx)
    out = tmp_path / "out"
    out.mkdir()
    daemon = start_answerer(argv, ANSWERER_TEST_DIR=str(out), SEMULA_ANSWERER_TIMEOUT="10")
    [first] = park(ctx, "shop")
    pid_of(out, first)
    daemon.signal(signal.SIGTERM)
    wait_for(lambda: '"msg": "stopping"' in daemon.log(), what="the daemon to stop claiming")
    [second] = park(ctx, "shop", first=1)
    assert daemon.proc.wait(15) == 0
    assert status(ctx, first)["status"] == "answered"
    assert stdin_docs(out, second) == {} and status(ctx, second)["claimed_by"] is None


def test_a_second_signal_kills_the_children_at_once(start_answerer, ctx, tmp_path):
    argv = command("sleep", "60")
    ctx = with_command(ctx, argv)
    answerer_project(ctx)
    out = tmp_path / "out"
    out.mkdir()
    daemon = start_answerer(argv, ANSWERER_TEST_DIR=str(out), SEMULA_ANSWERER_CONCURRENCY="2")
    calls = park(ctx, "shop", 2)
    pids = [pid_of(out, call) for call in calls]
    daemon.signal(signal.SIGTERM)
    wait_for(lambda: '"msg": "stopping"' in daemon.log(), what="the first signal")
    assert all(alive(pid) for pid in pids)  # the first signal lets them run
    sent = time.monotonic()
    daemon.signal(signal.SIGINT)
    assert daemon.proc.wait(10) == 0 and time.monotonic() - sent < 5
    assert not any(alive(pid) for pid in pids)
    for call in calls:
        s = status(ctx, call)
        assert s["status"] == "pending" and s["claimed_by"] is None


def test_the_daemon_runs_beside_sdk_calls_under_load(start_server, start_answerer, ctx, shop, openai_client):
    """Eight concurrent SDK calls, each answered by its own child, at concurrency 4."""
    argv = command("answer-if", "question")
    server = start_server(SEMULA_ANSWERER_COMMAND=json.dumps(argv))
    with_ctx = with_command(ctx, argv)
    projects.update(with_ctx, "shop", {"answerer": True})
    start_answerer(argv, SEMULA_ANSWERER_CONCURRENCY="4")
    client = openai_client(server)
    with ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(
                client.chat.completions.create,
                model="gpt-4o-mini",
                messages=[{"role": "user", "content": f"question {i}"}],
            )
            for i in range(8)
        ]
        assert [f.result(timeout=60).choices[0].message.content for f in futures] == ["answered"] * 8


@pytest.mark.parametrize("how", ["setsid", "double-fork"])
def test_a_daemon_killed_with_sigkill_leaves_nothing_of_its_call_running(start_answerer, ctx, tmp_path, how):
    # The child ignores SIGTERM, and so does its grandchild, which left the child's session (by
    # setsid, or by a double fork that also drops the call's mark); the daemon dies mid-call.
    argv = command("escape", f"ignore-term+{how}")
    ctx = with_command(ctx, argv)
    answerer_project(ctx)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    daemon = start_answerer(argv, ANSWERER_TEST_DIR=str(out), TMPDIR=str(tmp), SEMULA_ANSWERER_TIMEOUT="600")
    [call] = park(ctx, "shop")
    escaped = out / f"escaped-{call}"
    child, left, workdir = wait_for(
        lambda: escaped.exists() and escaped.read_text(), what="the child"
    ).split()
    assert alive(int(left)) and (tmp / workdir.rsplit("/", 1)[1]).is_dir()
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)
    # No daemon starts again: the call's supervisor ends every process of the call by itself.
    wait_for(
        lambda: not alive(int(child)) and not alive(int(left)),
        timeout=10,
        what="every process of the call gone",
    )
    wait_for(lambda: list(tmp.iterdir()) == [], timeout=10, what="the call's temporary directory removed")
    assert status(ctx, call)["status"] == "pending"


def test_a_restarted_daemon_cleans_what_a_killed_one_left(start_answerer, ctx, tmp_path):
    # What a call's supervisor could not end (it was killed with the daemon), the next daemon
    # start kills, and it removes the directory.
    argv = command("escape", "ignore-term+setsid")
    ctx = with_command(ctx, argv)
    answerer_project(ctx)
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    out.mkdir()
    tmp.mkdir()
    daemon = start_answerer(argv, ANSWERER_TEST_DIR=str(out), TMPDIR=str(tmp), SEMULA_ANSWERER_TIMEOUT="600")
    [call] = park(ctx, "shop")
    escaped = out / f"escaped-{call}"
    child, left, workdir = wait_for(
        lambda: escaped.exists() and escaped.read_text(), what="the child"
    ).split()
    supervisor = int(Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[1])
    # Stopped first, so it cannot act on the daemon's death before it is killed itself.
    os.kill(supervisor, signal.SIGSTOP)
    daemon.signal(signal.SIGKILL)
    daemon.proc.wait(10)
    os.kill(supervisor, signal.SIGKILL)
    wait_for(lambda: not alive(supervisor), timeout=10, what="the supervisor killed")
    assert alive(int(child)) and alive(int(left))
    start_answerer(argv, ANSWERER_TEST_DIR=str(out), TMPDIR=str(tmp))
    wait_for(
        lambda: not alive(int(child)) and not alive(int(left)), timeout=10, what="the call's processes gone"
    )
    wait_for(lambda: list(tmp.iterdir()) == [], timeout=10, what="the temporary directory removed")


def test_over_http_the_child_finds_none_of_the_servers_secrets(start_server, start_answerer, ctx, db_url):
    # As deployed (deploy/semula-answerer.service): the daemon reaches the server over REST with its
    # own token, holds no database URL, and runs as a user that is not the server's.
    python, as_user, env = unprivileged()
    if not as_user:
        pytest.skip("the server and the answerer must be two users: a root test run makes them so")
    server_secret = f"server-secret-{uuid.uuid4().hex}"
    server = start_server(SEMULA_SECRET=server_secret)
    token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})["token"]
    work = Path(tempfile.mkdtemp(prefix="semula-test-http-"))
    try:
        out, tmp = work / "out", work / "tmp"
        for path in (work, out, tmp):
            path.mkdir(exist_ok=True)
            os.chown(path, NOBODY, NOBODY)
        # What the child hunts for: the token, the database URL and the server's own secret. The
        # file is the test's way to tell it, outside its argv.
        canaries = out / "canaries"
        canaries.write_text("|".join([token, db_url, server_secret]))
        database = [db_url.removeprefix("sqlite:///")] if db_url.startswith("sqlite") else []
        argv = [python, str(CHILD), "snoop", f"@{canaries}", *database]
        ctx = with_command(ctx, argv)
        answerer_project(ctx)
        daemon = start_answerer(
            argv,
            args=[*as_user, python, "-m", "answerer"],
            SEMULA_ANSWERER_SERVER=server.url,
            SEMULA_ANSWERER_TOKEN=token,
            ANSWERER_TEST_DIR=str(out),
            TMPDIR=str(tmp),
            **env,
        )
        # The daemon itself holds no database URL.
        daemon_env = Path(f"/proc/{daemon.proc.pid}/environ").read_bytes()
        assert b"SEMULA_DATABASE_URL" not in daemon_env and db_url.encode() not in daemon_env
        assert token.encode() in daemon_env
        [call] = park(ctx, "shop")
        wait_resolved(ctx, call, timeout=60)
        entry = ctx.store.one(
            "get_entry", workspace_id=ctx.principal.workspace_id, id=status(ctx, call)["entry_id"]
        )
        seen = json.loads(json.loads(entry["response"])["choices"][0]["message"]["content"])
        # Its own environment opens and holds none of them; the supervisor's and the daemon's
        # environment and memory, and the database file, do not open.
        assert seen.pop("/proc/self/environ") == "opened", seen
        assert len(seen) == 6 + len(database)
        assert all(result.startswith("refused:") for result in seen.values()), seen
        assert token not in daemon.log()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def refused_token_line(daemon, token: str) -> str:
    """The daemon's whole output after a refused token: one line that names the token by its first
    characters only, never the secret, and no traceback."""
    output = daemon.log().strip()
    assert "\n" not in output and "Traceback" not in output and '"started"' not in output, output
    assert token not in output
    assert f"SEMULA_ANSWERER_TOKEN ({token[:8]}…)" in output, output
    assert "semula token create --role editor --scope record" in output, output
    return output


def test_a_refused_token_stops_the_daemon_at_start_with_one_line_and_status_2(
    start_server, ctx, db_url, tmp_path
):
    # RestartPreventExitStatus=2 in the unit: restarting cannot fix a token.
    from answerer.__main__ import EXIT_CONFIG

    unit = (Path(__file__).resolve().parents[2] / "deploy" / "semula-answerer.service").read_text()
    assert f"RestartPreventExitStatus={EXIT_CONFIG}" in unit
    server = start_server()
    projects.create(ctx, {"name": "bound"})
    revoked = tokens.create(ctx, {"role": "editor", "scope": "record"})
    tokens.revoke(ctx, revoked["id"])
    cases = {
        "revoked": (revoked["token"], "unknown or revoked", 401),
        "unknown": ("smt_" + "A" * 43, "unknown or revoked", 401),
        "bound": (
            tokens.create(ctx, {"role": "editor", "scope": "record", "project": "bound"})["token"],
            "bound to one project",
            403,
        ),
        "replay": (
            tokens.create(ctx, {"role": "editor", "scope": "replay"})["token"],
            "scope is replay",
            403,
        ),
        "viewer": (tokens.create(ctx, {"role": "viewer", "scope": "full"})["token"], "role is viewer", 403),
    }
    for name, (token, why, http_status) in cases.items():
        daemon = AnswererProcess(
            db_url,
            tmp_path / f"refused-{name}.log",
            command("json"),
            SEMULA_ANSWERER_SERVER=server.url,
            SEMULA_ANSWERER_TOKEN=token,
            # ANSWERER_TEST_DIR is named in SEMULA_ANSWERER_ENV but not set: the warning about it
            # would come after the token check, so it is not printed.
        )
        assert daemon.run_to_end() == EXIT_CONFIG, (name, daemon.log())
        line = refused_token_line(daemon, token)
        assert line.startswith(f"semula-answerer: {server.url} refuses ") and why in line, (name, line)
        assert f"(HTTP {http_status})" in line, (name, line)


def test_a_token_revoked_while_running_stops_the_daemon_with_the_same_line(
    start_server, start_answerer, ctx, tmp_path
):
    from answerer.__main__ import EXIT_CONFIG

    server = start_server()
    made = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})
    daemon = start_answerer(
        command("json"), SEMULA_ANSWERER_SERVER=server.url, SEMULA_ANSWERER_TOKEN=made["token"]
    )
    tokens.revoke(ctx, made["id"])
    assert daemon.proc.wait(30) == EXIT_CONFIG
    *json_lines, last = daemon.log().strip().splitlines()
    assert "Traceback" not in daemon.log() and made["token"] not in daemon.log()
    assert "unknown or revoked" in last and f"({made['token'][:8]}…)" in last, last
    assert any('"msg": "stopped"' in line for line in json_lines)


def test_the_daemon_reads_its_env_file_and_its_polls_leave_no_access_lines(
    start_server, ctx, db_url, tmp_path
):
    argv = command("echo", "Bonjour")
    server = start_server()
    token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})["token"]
    answerer_project(with_command(ctx, argv))
    out = tmp_path / "out"
    out.mkdir()
    env_file = tmp_path / "answerer.env"
    env_file.write_text(
        f"SEMULA_ANSWERER_SERVER={server.url}\nSEMULA_ANSWERER_TOKEN={token}\n"
        f"SEMULA_ANSWERER_COMMAND={json.dumps(argv)}\nSEMULA_ANSWERER_ENV=ANSWERER_TEST_DIR\n"
    )
    daemon = AnswererProcess(db_url, tmp_path / "answerer.log", ANSWERER_TEST_DIR=str(out))
    daemon.args += ["--env-file", str(env_file)]
    # Every setting comes from the file: the environment holds none.
    daemon.env = {k: v for k, v in daemon.env.items() if not k.startswith("SEMULA_")}
    try:
        daemon.start()
        [call] = park(ctx, "shop")
        wait_resolved(ctx, call)
        polled = wait_for(lambda: (n := polls(server)) >= 3 and n, what="three polls")
    finally:
        daemon.stop()
    assert stdin_docs(out, call)[1]["pending_id"] == call and status(ctx, call)["status"] == "answered"
    lines = [json.loads(x) for x in server.log().splitlines() if x.startswith("{")]
    routes = {line.get("route") for line in lines if line.get("logger") == "semula.access"}
    # Polled (and counted) at least three times, logged never; the claim and the answer are logged.
    assert polled >= 3 and "/api/v1/answerer/candidates" not in routes
    assert {"/api/v1/pending/<pending_id>/claim", "/api/v1/pending/<pending_id>/answer"} <= routes


def test_a_daemon_started_before_its_server_says_so_once_and_when_it_is_back(
    start_answerer, ctx, db_url, tmp_path
):
    from tests.helpers import Server

    token = tokens.create(ctx, {"role": "editor", "scope": "record", "name": "answerer"})["token"]
    server = Server(db_url, tmp_path / "server.log")  # its port chosen, not started yet
    daemon = start_answerer(
        command("json"),
        SEMULA_ANSWERER_SERVER=server.url,
        SEMULA_ANSWERER_TOKEN=token,
        ANSWERER_TEST_DIR=str(tmp_path),
    )
    wait_for(lambda: '"poll_failed"' in daemon.log(), what="the failed poll logged")
    try:
        server.start()
        log = wait_for(
            lambda: '"poll_recovered"' in (text := daemon.log()) and text,
            timeout=90,
            what="the server seen again",
        )
    finally:
        server.stop()
    lines = [json.loads(line) for line in log.splitlines()]
    failed_lines = [line for line in lines if line["msg"] == "poll_failed"]
    assert len(failed_lines) == 1, log
    [failed] = failed_lines
    [back] = [line for line in lines if line["msg"] == "poll_recovered"]
    assert failed["url"] == back["url"] == f"{server.url}/api/v1/answerer/candidates"
    assert failed["error"] == "ConnectionError" and back["failed_polls"] >= 1
    assert token not in daemon.log()

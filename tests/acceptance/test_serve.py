"""The real `semula serve`: gunicorn with gevent workers, over HTTP."""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import requests

pytestmark = __import__("pytest").mark.acceptance


def test_serve_answers_health_and_projects(start_server, db_url):
    server = start_server(workers=2)
    assert requests.get(server.url + "/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(server.url + "/readyz", timeout=5).json() == {"status": "ready"}
    assert requests.get(server.url + "/api/v1/projects", timeout=5).status_code == 401

    created = subprocess.run(
        [sys.executable, "-m", "semula", "token", "create", "--role", "admin"],
        env=server.env,
        capture_output=True,
        text=True,
        check=True,
    )
    canary = created.stdout.strip()
    headers = {"Authorization": f"Bearer {canary}"}
    r = requests.post(server.url + "/api/v1/projects", json={"name": "shop"}, headers=headers, timeout=5)
    assert r.status_code == 201 and r.json()["name"] == "shop"
    listing = requests.get(server.url + "/api/v1/projects", headers=headers, timeout=5)
    assert [p["name"] for p in listing.json()["data"]] == ["shop"]
    bad = requests.post(server.url + "/api/v1/projects", data="{oops", headers=headers, timeout=5)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_request"

    # The canary token reached the server many times; it is in no log line and no response but its own.
    tokens = requests.get(server.url + "/api/v1/tokens", headers=headers, timeout=5)
    assert canary not in tokens.text and tokens.status_code == 200
    server.stop()
    log = server.log()
    assert "Booting worker" in log and "gevent" in log
    assert canary not in log


def test_serve_dev_is_local_auth_off_with_a_default_project(start_server):
    server = start_server(dev=True)
    assert server.url.startswith("http://127.0.0.1:")
    projects = requests.get(server.url + "/api/v1/projects", timeout=5).json()["data"]
    assert [(p["name"], p["mode"]) for p in projects] == [("default", "record")]


def test_serve_dev_honours_a_loopback_bind_and_refuses_another(start_server, db_url, tmp_path):
    from tests.helpers import Server, free_port

    server = Server(db_url, tmp_path / "dev-bind.log")
    port = free_port()
    server.args = [sys.executable, "-m", "semula", "serve", "--dev", "--bind", f"127.0.0.1:{port}"]
    server.port, server.url = port, f"http://127.0.0.1:{port}"
    try:
        server.start()
        projects = requests.get(server.url + "/api/v1/projects", timeout=5).json()["data"]
        assert [p["name"] for p in projects] == ["default"]
    finally:
        server.stop()
    for args, says in (
        (["--dev", "--bind", f"0.0.0.0:{port}"], "only on a loopback address"),
        (["--bind", f"127.0.0.1:{port}", "--port", str(port)], "not both"),
    ):
        refused = subprocess.run(
            [sys.executable, "-m", "semula", "serve", *args],
            env=server.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert refused.returncode == 2 and says in refused.stderr


def raw_exchange(url: str, data: bytes) -> bytes:
    """Send bytes on one connection and read all the server sends back until it closes."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(data)
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    return received


def read_response(conn: socket.socket) -> bytes:
    """One HTTP response with a Content-Length, read whole from a connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        received += conn.recv(65536)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(
        next(line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:"))[15:]
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_slow_first_request_is_served_and_an_idle_connection_is_closed(start_server):
    """The keep-alive time (1 s in tests) bounds the wait between two requests of a connection, not
    the wait for its first: a client slow to send it (a busy thread, as under load) is still served.
    A connection that has sent nothing does not hold a stopping worker."""
    server = start_server()
    host, port = server.url.removeprefix("http://").split(":")
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with socket.create_connection((host, int(port)), timeout=15) as conn:
        time.sleep(2.5)  # the slow client itself: more than twice the keep-alive time
        started = time.monotonic()
        conn.sendall(request)
        assert read_response(conn).startswith(b"HTTP/1.1 200 ")
        assert conn.recv(65536) == b""  # idle after its response: the server closes it
        assert 0.9 < time.monotonic() - started < 10

    with socket.create_connection((host, int(port)), timeout=15) as silent:
        with socket.create_connection((host, int(port)), timeout=15) as served:
            served.sendall(request)  # served after the silent one opened: the worker has accepted both
            assert read_response(served).startswith(b"HTTP/1.1 200 ")
        started = time.monotonic()
        server.stop()
        assert server.proc.returncode == 0, server.log()[-2000:]
        assert time.monotonic() - started < 10  # not the 30 s a first request may take
        assert silent.recv(65536) == b""


def test_malformed_framing_is_a_400_and_nothing_is_smuggled(start_server, token):
    """Two Content-Length headers (the second would leave a hidden request in the body) and a broken
    chunk size: each a 400 and a closed connection, never a reset or a second response."""
    server = start_server(SEMULA_AUTH="on")
    hidden = f"GET /api/v1/projects HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
    head = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    for framing in (
        f"Content-Length: 2\r\nContent-Length: {2 + len(hidden)}\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        "Transfer-Encoding: gzip, chunked\r\nContent-Length: 2\r\n",
        "Content-Length: 1_0\r\n",
    ):
        answer = raw_exchange(server.url, f"{head}{framing}\r\n{{}}{hidden}".encode())
        assert answer.startswith(b"HTTP/1.1 400 "), (framing, answer[:200])
        assert answer.count(b"HTTP/1.1 ") == 1 and b'"data"' not in answer, (framing, answer)
    chunked = (
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        f"Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\r\nzz\r\n{{}}\r\n0\r\n\r\n"
    ).encode()
    answer = raw_exchange(server.url, chunked)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:200]
    assert answer.count(b"HTTP/1.1 ") == 1 and b'"code":"invalid_body"' in answer, answer
    server.stop()
    assert "Traceback" not in server.log()


def test_heads_nginx_refuses_get_their_status_and_never_a_reset(start_server):
    """Through the real worker: each refused form gets its status (raw_exchange raises on a reset),
    even when the client has sent far more than was read (a 100 KB target, a 1 MB header)."""
    server = start_server()
    for request, status in (
        (b"GET /healthz HTTP/1.1\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
        (b"get /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET\t/healthz HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-A: 1\r\n" * 5000 + b"\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 1_000_000 + b"\r\n\r\n", 431),
    ):
        answer = raw_exchange(server.url, request)
        assert answer.startswith(b"HTTP/1.1 %d " % status), (request[:60], answer[:200])
        assert answer.count(b"\r\n\r\n") == 1, answer
    assert raw_exchange(server.url, b"GET /healthz HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
    server.stop()
    assert "Traceback" not in server.log()


def _until_closed(conn: socket.socket) -> bytes:
    received = b""
    while chunk := conn.recv(65536):
        received += chunk
    return received


def test_a_slow_head_and_a_short_body_are_cut_off_by_their_deadlines(start_server):
    """With SEMULA_HEADER_TIMEOUT and SEMULA_BODY_TIMEOUT at 1 s: a head sent in part gets a 408, a
    body shorter than its Content-Length gets the API's 408 (request_timeout), each with a close,
    while /healthz is served. The socket timeout (30 s) is only a bound on the wait for the close."""
    server = start_server(dev=True, SEMULA_HEADER_TIMEOUT="1", SEMULA_BODY_TIMEOUT="1")
    host, port = server.url.removeprefix("http://").split(":")
    with (
        socket.create_connection((host, int(port)), timeout=30) as head,
        socket.create_connection((host, int(port)), timeout=30) as body,
    ):
        head.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-")
        body.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": '
        )
        assert requests.get(server.url + "/healthz", timeout=5).status_code == 200
        late_head, late_body = _until_closed(head), _until_closed(body)
    assert late_head.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in late_head
    assert late_body.startswith(b"HTTP/1.1 408 ") and b'"code":"request_timeout"' in late_body
    assert b"Connection: close" in late_body
    server.stop()
    assert "Traceback" not in server.log()


def _helpers_of(pid: int) -> list[int]:
    """The semula.heavy helper processes among the descendants of `pid`."""
    from pathlib import Path

    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = Path(f"/proc/{parent}/task/{parent}/children")
        for child in map(int, children.read_text().split() if children.exists() else []):
            todo.append(child)
            cmdline = Path(f"/proc/{child}/cmdline")
            if cmdline.exists() and b"semula.heavy" in cmdline.read_bytes():
                found.append(child)
    return found


def test_a_large_body_is_answered_through_the_worker_s_helper_process(start_server, ctx):
    """Decision 0074: a gevent worker hands a large body's check and fingerprint to its helper process,
    started at its first such body: a hit, a replay miss naming the closest entry, and in record mode a
    miss parked (the worker reads that body itself) and answered."""
    import json
    import threading

    from semula.service import pending as pending_service
    from semula.service import projects
    from semula.web import fastpath
    from tests.entry_helpers import save_entry
    from tests.helpers import wait_for

    filler = "x" * 1000
    messages = [{"role": "user", "content": f"{i} {filler}"} for i in range(300)]
    large = {"model": "gpt-4o", "messages": messages}
    assert len(json.dumps(large)) > fastpath.HEAVY_BODY
    projects.create(ctx, {"name": "big", "mode": "replay"})
    save_entry(ctx, "big", "hit", {"content": "the large answer"}, messages=messages)
    projects.create(ctx, {"name": "rec", "mode": "record", "record_timeout": 60})
    server = start_server(workers=1, SEMULA_AUTH="off")
    assert server.proc is not None and _helpers_of(server.proc.pid) == []
    url = server.url + "/p/{}/v1/chat/completions"
    hit = requests.post(url.format("big"), json=large, timeout=60)
    assert hit.status_code == 200 and hit.json()["choices"][0]["message"]["content"] == "the large answer"
    assert len(_helpers_of(server.proc.pid)) == 1
    missed = {**large, "messages": [*messages[:-1], {"role": "user", "content": "other"}]}
    miss = requests.post(url.format("big"), json=missed, timeout=60)
    assert miss.status_code == 424 and "first difference at messages[299].content" in miss.text

    answered = []
    held = threading.Thread(
        target=lambda: answered.append(requests.post(url.format("rec"), json=large, timeout=60))
    )
    held.start()
    wait_for(lambda: pending_service.list_pending(ctx)["data"], what="the large call parked")
    [parked] = pending_service.list_pending(ctx)["data"]
    pending_service.answer(ctx, parked["id"], {"content": "answered by hand"})
    held.join(60)
    [reply] = answered
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == "answered by hand"
    assert len(_helpers_of(server.proc.pid)) == 1

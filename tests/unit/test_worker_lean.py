"""The worker's lean path (semula.worker.Handler.lean) against pywsgi's own: the same requests, sent
to a server of each, get the same bytes back (but the Date), and the app sees the same environ.

Both servers run in this process on gevent's own sockets (the suite is not monkey-patched); the
client is a greenlet beside them.
"""

from __future__ import annotations

import re
import threading
import time

import gevent
import pytest
from gevent import socket
from gevent.pywsgi import WSGIServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.worker_cpu import Lean, Pywsgi, _Log
from semula import worker

SEEN: list[dict] = []  # what the app was given, request by request


def _environ(env: dict) -> dict:
    shown = {k: v for k, v in env.items() if k.isupper() and k not in ("REMOTE_PORT", "SERVER_PORT")}
    shown["body"] = env["wsgi.input"].read() if env.get("QUERY_STRING") != "unread" else None
    return shown


def app(env, start_response):
    """Answers as the request's path says, to exercise each way a WSGI app can answer."""
    how = env["PATH_INFO"].rsplit("/", 1)[-1]
    SEEN.append(_environ(env))
    body = b"answer to %s" % env["REQUEST_METHOD"].encode()
    if how == "list":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    if how == "unsized":
        start_response("201 Created", [("X-A", "1")])
        return [body, b"", b" and more"]
    if how == "big":
        data = b"x" * (worker.ONE_SEND + 100)
        start_response("200 OK", [("Content-Length", str(len(data)))])
        return [data]
    if how == "stream":
        start_response("200 OK", [("Content-Type", "text/event-stream")])
        return iter([b"data: 1\n\n", b"", b"data: 2\n\n"])
    if how == "lazy":

        def lazily():
            start_response("200 OK", [("Content-Length", "4")])
            yield b"lazy"

        return lazily()
    if how == "empty":
        start_response("200 OK", [])
        return iter([])
    if how == "nocontent":
        start_response("204 No Content", [])
        return []
    if how == "write":
        write = start_response("200 OK", [("Content-Length", "10")])
        write(b"written ")
        return [b"ok"]
    if how == "close":
        start_response("200 OK", [("Connection", "close"), ("Content-Length", "2")])
        return [b"by"]
    if how == "dated":
        start_response("200 OK", [("Date", "Thu, 01 Jan 1970 00:00:00 GMT"), ("Content-Length", "0")])
        return [b""]
    if how == "raises":
        raise RuntimeError("a bug")
    if how == "splits":
        start_response("200 OK", [("X-Bad", "a\r\nSet-Cookie: b")])
        return [b""]
    if how == "nostart":
        return [b"never started"]
    start_response("404 Not Found", [("Content-Length", "0")])
    return []


HOWS = [
    "list",
    "unsized",
    "big",
    "stream",
    "lazy",
    "empty",
    "nocontent",
    "write",
    "close",
    "dated",
    "raises",
    "splits",
    "nostart",
    "other",
]
DATE = re.compile(rb"Date: [^\r]*\r\n")


def _serve(handler_class: type) -> WSGIServer:
    server = WSGIServer(("127.0.0.1", 0), app, handler_class=handler_class, log=None, error_log=None)
    server.log = _Log()
    server.start()
    return server


@pytest.fixture(scope="module")
def servers():
    both = {cls: _serve(cls) for cls in (Lean, Pywsgi)}
    yield both
    for server in both.values():
        server.stop()


def exchange(server: WSGIServer, data: bytes) -> bytes:
    """Send `data` on one connection and read until the server closes it, which every exchange here
    asks for (a last request with `Connection: close`, or one it refuses): silence is no reply."""
    conn = socket.create_connection(("127.0.0.1", server.server_port))
    try:
        conn.sendall(data)
        received = b""
        with gevent.Timeout(10, AssertionError(f"the server did not end the exchange: {received[:300]!r}")):
            while chunk := conn.recv(65536):
                received += chunk
        return received
    finally:
        conn.close()


def both(servers, data: bytes) -> tuple[bytes, bytes, list, list]:
    answers, seen = [], []
    for cls in (Lean, Pywsgi):
        SEEN.clear()
        answers.append(DATE.sub(b"Date: -\r\n", exchange(servers[cls], data)))
        seen.append(list(SEEN))
    return answers[0], answers[1], seen[0], seen[1]


HEADER_NAMES = st.sampled_from(["X-Semula-Project", "Accept", "User-Agent", "X-Thing", "Cookie", "x_under"])
HEADER_VALUES = st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12)


@st.composite
def requests(draw) -> bytes:
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "PATCH"]))
    how = draw(st.sampled_from(HOWS))
    query = draw(st.sampled_from(["", "?a=1", "?unread", "?x=%20y"]))
    path = draw(st.sampled_from(["/p/", "/v1/%7Eq/", "/p/s/"]))
    lines = [f"{method} {path}{how}{query} HTTP/1.1"]
    for name, value in draw(st.lists(st.tuples(HEADER_NAMES, HEADER_VALUES), max_size=5)):
        lines.append(f"{name}: {value}")
    lines.insert(draw(st.integers(1, len(lines))), "Host: x")
    body = draw(st.binary(max_size=40))
    if body or draw(st.booleans()):
        lines.append(f"Content-Length: {len(body)}")
    if draw(st.booleans()):
        lines.append("Content-Type: application/json")
    if draw(st.integers(0, 5)) == 0:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(requests(), min_size=1, max_size=3))
def test_the_lean_path_answers_what_pywsgi_answers(servers, sequence):
    """Pipelined on one connection: the same bytes back, the app given the same environ."""
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, b"".join(sequence) + LAST)
    assert lean == pywsgi and lean.startswith(b"HTTP/1.1 ") and b" 400 Bad Request" not in lean
    assert lean_seen == pywsgi_seen


LAST = b"GET /p/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"  # the server ends the exchange
# Header values as clients send them, and as they should not: spaces and tabs around, control bytes,
# bytes past ASCII (latin-1 on the wire), UTF-8.
ODD_VALUES = st.text(
    alphabet=st.sampled_from(
        [
            " ",
            "\t",
            "a",
            "1",
            ",",
            "\x00",
            "\x01",
            "\x0b",
            "\x1f",
            "\x7f",
            "\x80",
            "\x85",
            "\xa0",
            "\xff",
            "é",
        ]
    ),
    max_size=6,
)
# What may follow a framing header's value: the odd bytes but digits, so a Content-Length says the
# body's length or is no number (a longer one would hold the exchange until the body deadline).
ODD_SUFFIXES = st.text(
    alphabet=st.sampled_from(
        [" ", "\t", "a", ",", "\x00", "\x01", "\x0b", "\x1f", "\x7f", "\x80", "\xa0", "é"]
    ),
    max_size=6,
)
FRAMING_NAMES = st.sampled_from(
    ["Content-Length", "content-length", "CONTENT-LENGTH", "cOnTeNt-LeNgTh", "Content-Type", "content-TYPE"]
)


@st.composite
def odd_requests(draw) -> bytes:
    """A request whose header values are odd in one of these ways, some of its framing headers in
    mixed case with odd spaces, a body of the length it says (or, when its length is not a number,
    of any length)."""
    method = draw(st.sampled_from(["GET", "POST", "HEAD"]))
    lines = [f"{method} /p/list HTTP/1.1"]
    for name in draw(st.lists(st.sampled_from(["X-Odd", "x-odd", "Accept", "Cookie"]), max_size=3)):
        lines.append(f"{name}:{draw(ODD_VALUES)}")
    body = draw(st.binary(max_size=8))
    for name in draw(st.lists(FRAMING_NAMES, max_size=2)):
        before = draw(st.sampled_from(["", " ", "  ", "\t"]))
        value = str(len(body)) if "length" in name.lower() else "application/json"
        lines.append(f"{name}:{before}{value}{draw(ODD_SUFFIXES)}")
    lines.insert(draw(st.integers(1, len(lines))), "Host: x")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(odd_requests())
def test_odd_bytes_and_framing_get_the_same_reply_on_both_paths(servers, request_bytes):
    """Whitespace, control bytes, bytes >= 0x80 and mixed-case framing headers: both paths reply (a
    status line arrives and the server ends the exchange), with the same bytes, and the app sees the
    same environ; a request with a control byte in a value is refused with a 400 by both."""
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, request_bytes + LAST)
    assert lean.startswith(b"HTTP/1.1 ") and pywsgi.startswith(b"HTTP/1.1 ")
    assert lean == pywsgi
    assert lean_seen == pywsgi_seen
    head = request_bytes.split(b"\r\n\r\n", 1)[0].replace(b"\r\n", b"")
    if worker.CONTROL.search(head.decode("latin-1")):
        assert lean.startswith(b"HTTP/1.1 400 ") and lean_seen == []
    for seen in lean_seen:  # a value reaches the app without the spaces and tabs around it, only those
        for key in ("CONTENT_LENGTH", "CONTENT_TYPE", "HTTP_X_ODD"):
            assert key not in seen or seen[key] == seen[key].strip(" \t")


def test_a_content_length_with_spaces_reaches_the_app_as_its_digits_on_both_paths(servers):
    """`Content-Length:  2 ` was '2' on the lean path and '2 ' on pywsgi's."""
    request = b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-Length:  2 \r\nX-A: \xa0b\xa0\r\n\r\n{}" + LAST
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, request)
    assert lean == pywsgi and lean_seen == pywsgi_seen
    assert lean_seen[0]["CONTENT_LENGTH"] == "2" and lean_seen[0]["body"] == b"{}"
    assert lean_seen[0]["HTTP_X_A"] == "\xa0b\xa0"  # latin-1 text, only spaces and tabs stripped


@pytest.mark.parametrize("how", HOWS)
def test_each_way_of_answering_is_served_by_the_lean_path(servers, how, monkeypatch):
    """Each app answer above goes through the lean path (not a fallback), and as pywsgi sends it."""
    taken = []
    lean = Lean.lean
    monkeypatch.setattr(Lean, "lean", lambda self: taken.append(lean(self)) or taken[-1])
    request = f"POST /v1/{how} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode()
    a, b, _, _ = both(servers, request + LAST)
    assert a == b and a.startswith(b"HTTP/1.1 ")
    assert taken[0] in (True, False)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"HEAD /p/list HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /p/list HTTP/1.0\r\n\r\n",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-Length: 1_0\r\n\r\n{}",
        b"GET http://x/p/list HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /p/list HTTP/1.1\r\nHost: x\r\nFolded: a\r\n b\r\n\r\n",
        b"GET /p/list HTTP/1.1\nHost: x\n\n",
        b"GET  /p/list HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_what_the_lean_path_does_not_take_goes_to_pywsgi_unread(servers, request_bytes, monkeypatch):
    """Each of these is pywsgi's to read (it refuses some of them): the lean path hands it over
    having read nothing, so the answer is pywsgi's own, bytes for bytes."""
    taken = []
    lean = Lean.lean
    monkeypatch.setattr(Lean, "lean", lambda self: taken.append(lean(self)) or taken[-1])
    a, b, _, _ = both(servers, request_bytes + LAST)
    assert a == b and a.startswith(b"HTTP/1.")
    assert taken[0] is None


@pytest.mark.parametrize(
    "head",
    [
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nTransfer-Encoding\t: chunked\r\nContent-Length: 5\r\n",
        b"POST /p/list HTTP/1.1\r\nHost: x\r\nX-Cr: a\rContent-Length: 5\r\n",
    ],
)
def test_a_header_line_that_is_not_a_header_is_refused_on_both_paths(servers, head):
    """A proxy in front that reads such a line as a header frames the body otherwise than a server
    that drops it (request smuggling): the request gets a 400 and its connection closes, and the app
    sees neither it nor the request hidden in its body."""
    a, b, seen_a, seen_b = both(servers, head + b"\r\nhelloGET /p/list HTTP/1.1\r\nHost: x\r\n\r\n")
    assert a == b and a.startswith(b"HTTP/1.1 400 ") and a.count(b"HTTP/1.1") == 1
    assert seen_a == seen_b == []


def test_a_request_in_pieces_is_read_whole(servers):
    """A head cut across packets goes to pywsgi's path; a body cut across packets is read whole."""
    for cls in (Lean, Pywsgi):
        SEEN.clear()
        conn = socket.create_connection(("127.0.0.1", servers[cls].server_port))
        try:
            conn.sendall(b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-")
            gevent.sleep(0.05)
            conn.sendall(b"Length: 6\r\n\r\nabc")
            gevent.sleep(0.05)
            conn.sendall(b"def")
            with gevent.Timeout(2):
                assert conn.recv(65536).endswith(b"answer to POST")
        finally:
            conn.close()
        assert SEEN[0]["body"] == b"abcdef"


def test_a_lean_connection_idle_past_keepalive_is_closed(servers):
    conn = socket.create_connection(("127.0.0.1", servers[Lean].server_port))
    try:
        conn.sendall(b"GET /p/list HTTP/1.1\r\nHost: x\r\n\r\n")
        with gevent.Timeout(5):
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")
            assert conn.recv(65536) == b""  # closed after keep-alive's 2 s
    finally:
        conn.close()


def test_a_request_that_came_before_the_sweep_closed_its_idle_connection_is_served(servers):
    """The keep-alive close race (issue #49): on a loaded worker the sweep may run after a client's
    next request arrived and before the greenlet waiting for it; the request is served, not lost."""
    conn = socket.create_connection(("127.0.0.1", servers[Lean].server_port))
    try:
        conn.sendall(b"GET /p/list HTTP/1.1\r\nHost: x\r\n\r\n")
        with gevent.Timeout(5):
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")
        gevent.sleep(0.05)  # the handler waits for the next request, in the sweep's table
        assert any(h.server is servers[Lean] for h in worker.IDLE.waiting)
        conn.sendall(b"GET /p/list HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        # No yield since: the waiting greenlet has not run. The sweep comes first, past every time.
        worker.IDLE.close_idle(time.monotonic() + 3600)
        with gevent.Timeout(5):
            assert exchange_rest(conn).startswith(b"HTTP/1.1 200 OK")
    finally:
        conn.close()


def exchange_rest(conn) -> bytes:
    """What the server still sends on a connection until it closes it."""
    received = b""
    while chunk := conn.recv(65536):
        received += chunk
    return received


def test_an_app_failure_is_logged_by_the_lean_path(servers, caplog):
    exchange(servers[Lean], b"GET /p/raises HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [r.message for r in caplog.records if r.name == "semula.worker"] == ["the app failed"]


def test_a_stopping_worker_closes_its_idle_lean_connections_within_a_sweep():
    """Not after keep-alive's idle time (30 s here): a graceful stop is not held by idle clients."""

    class Patient(_Log):
        class cfg:  # noqa: N801 - gunicorn's attribute
            keepalive = 30
            timeout = 30

    server = WSGIServer(("127.0.0.1", 0), app, handler_class=Lean, log=None, error_log=None)
    server.log = Patient()
    server.start()
    conn = socket.create_connection(("127.0.0.1", server.server_port))
    try:
        conn.sendall(b"GET /p/list HTTP/1.1\r\nHost: x\r\n\r\n")
        with gevent.Timeout(5):
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")
        server.close()  # stops accepting, as a stopping worker's server does
        with gevent.Timeout(2):
            assert conn.recv(65536) == b""
    finally:
        conn.close()
        server.stop()


def test_the_sweeps_run_in_the_hub_that_serves_after_another_hub_is_gone():
    """A server run in a thread of its own (test_websocket's) started the sweeps in its hub, which
    ended with the thread: a server in this thread still gets its own (they failed in some orders)."""

    def other_hub():
        worker.IDLE.start()
        worker.HEADS.start()
        gevent.get_hub().destroy(destroy_loop=True)

    thread = threading.Thread(target=other_hub)
    thread.start()
    thread.join(10)
    test_a_stopping_worker_closes_its_idle_lean_connections_within_a_sweep()
    for table in (worker.IDLE, worker.HEADS):
        table.start()
        assert not table.sweepers[gevent.get_hub()].dead


HOST = b"Host: x\r\n"


@pytest.mark.parametrize(
    "request_bytes, status, reason",
    [
        (b"GET /p/list HTTP/1.1\r\n\r\n", 400, b"without a Host header"),
        (b"GET /p/list HTTP/1.1\r\nHost: x\r\nhost: y\r\n\r\n", 400, b"more than one Host header"),
        (b"GET /p/list HTTP/1.0\r\nHost: x\r\nHost: y\r\n\r\n", 400, b"more than one Host header"),
        (b"GET /p/list HTTP/1.1\r\n" + HOST + b"X-A: a\x00b\r\n\r\n", 400, b"control character"),
        (b"GET /p/list HTTP/1.1\r\n" + HOST + b"X-A: a\x1bb\r\n\r\n", 400, b"control character"),
        (b"GET /p/list HTTP/1.1\r\n" + HOST + b"X-A: a\r\n b\r\n\r\n", 400, b"folded"),
        (b"GET /p/list HTTP/1.1\r\n" + HOST + b"X\x00A: 1\r\n\r\n", 400, b"name"),
        (b"GET /p/list HTTP/1.1\r\n" + HOST + b"X(A): 1\r\n\r\n", 400, b"a token"),
        (b"GET\t/p/list HTTP/1.1\r\n" + HOST + b"\r\n", 400, b"request line"),
        (b"GET /p/list\tHTTP/1.1\r\n" + HOST + b"\r\n", 400, b"request line"),
        (b"GET /p/\x01list HTTP/1.1\r\n" + HOST + b"\r\n", 400, b"request line"),
        (b"GET /p/list HTTP/1.1 \r\n" + HOST + b"\r\n", 400, b"request line"),
        (b"get /p/list HTTP/1.1\r\n" + HOST + b"\r\n", 400, b"not in capitals"),
        (b"Post /p/list HTTP/1.1\r\n" + HOST + b"\r\n", 400, b"not in capitals"),
        (b"GET /" + b"a" * 100_000 + b" HTTP/1.1\r\n" + HOST + b"\r\n", 414, b"longer than 8192"),
        (
            b"GET /p/list HTTP/1.1\r\n" + HOST + b"".join(b"X-%d: 1\r\n" % i for i in range(5000)) + b"\r\n",
            431,
            b"",
        ),
        (
            b"GET /p/list HTTP/1.1\r\n" + HOST + b"X-Big: " + b"a" * 1_000_000 + b"\r\n\r\n",
            431,
            b"longer than",
        ),
    ],
)
def test_each_refused_form_gets_its_status_on_both_paths(servers, request_bytes, status, reason):
    """What gunicorn's parser and nginx refuse, refused alike by both paths with a status and why, and
    never a TCP reset (exchange fails on one): a refused request's unread bytes are read off before
    the connection closes. The app sees none of them."""
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, request_bytes)
    assert lean == pywsgi and lean.startswith(b"HTTP/1.1 %d " % status) and reason in lean
    assert b"Connection: close\r\n" in lean and lean.count(b"HTTP/1.1 ") == 1
    assert lean_seen == pywsgi_seen == []


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"GET /p/list HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",  # HTTP/1.0 needs no Host
        b"GET /p/list HTTP/1.1\r\nHost: x\r\nX-A: a\tb\r\n\r\n",  # a tab is no control character here
        b"GET /caf\xc3\xa9/list HTTP/1.1\r\nHost: x\r\nX-A: caf\xc3\xa9 \xff\r\n\r\n",  # bytes past ASCII
        b"GET /p/list HTTP/1.1\r\nhOsT: x\r\nX_Under: 1\r\n\r\n",
    ],
)
def test_heads_that_are_allowed_are_served_on_both_paths(servers, request_bytes):
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, request_bytes + LAST)
    assert lean == pywsgi and lean.startswith(b"HTTP/1.1 200 ") and lean.count(b"HTTP/1.1 200 ") == 2
    assert len(lean_seen) == 2 and lean_seen == pywsgi_seen


class QuickLean(Lean):
    header_timeout = body_timeout = 1.0


class QuickPywsgi(Pywsgi):
    header_timeout = body_timeout = 1.0


@pytest.fixture(scope="module")
def quick():
    servers = [_serve(cls) for cls in (QuickLean, QuickPywsgi)]
    yield servers
    for server in servers:
        server.stop()


def _until_closed(conn, within: float = 15) -> bytes:
    """What the server sends until it closes the connection, which it must do `within` seconds."""
    received = b""
    with gevent.Timeout(within, AssertionError(f"still open after {within} s: {received[:200]!r}")):
        while chunk := conn.recv(65536):
            received += chunk
    return received


def _trickle(conn, data: bytes) -> None:
    """Send a byte at a time, a tenth of a second apart, until the server closes the connection."""
    try:
        for byte in data:
            conn.sendall(bytes([byte]))
            gevent.sleep(0.1)
    except OSError:
        pass


@pytest.mark.parametrize(
    "how",
    ["part of a head", "a head a byte at a time", "a body shorter than its Content-Length"],
)
def test_a_slow_request_is_cut_off_by_its_deadline_while_others_are_served(quick, how):
    """With the deadlines at 1 s: a head sent in part and then nothing, or a byte at a time (each
    byte well within any per-read wait), gets a 408 and a close; so does a body that stops (on this
    app, which fails on the read, a close with the 500 it answers). Other clients are served in the
    meantime. Waited for with a generous bound, not timed."""
    head = b"POST /p/list HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    for server in quick:
        SEEN.clear()
        slow = socket.create_connection(("127.0.0.1", server.server_port))
        trickler = None
        try:
            if how == "part of a head":
                slow.sendall(head[:30])
            elif how == "a head a byte at a time":
                trickler = gevent.spawn(_trickle, slow, head * 10)
            else:
                slow.sendall(head + b"abc")
            answer = exchange(server, b"GET /p/list HTTP/1.1\r\nHost: y\r\nConnection: close\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"answer to GET")
            cut = _until_closed(slow)
        finally:
            slow.close()
            if trickler is not None:
                trickler.kill()
        if how == "a body shorter than its Content-Length":
            assert cut.startswith(b"HTTP/1.1 500 ")  # semula's app answers its 408 (acceptance test)
        else:
            assert cut.startswith(b"HTTP/1.1 408 ") and b"did not arrive within 1 s" in cut
            assert [seen["HTTP_HOST"] for seen in SEEN] == ["y"]  # the slow request never reached the app


def test_a_connection_idle_between_requests_keeps_its_keepalive_time(quick):
    """The head deadline starts at a request's first bytes: a connection waiting for its next
    request is closed by keep-alive's idle time (2 s here), with no 408."""
    conn = socket.create_connection(("127.0.0.1", quick[1].server_port))
    try:
        conn.sendall(b"GET /p/list HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = _until_closed(conn)
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"answer to GET")
    finally:
        conn.close()


@pytest.mark.parametrize("part", [b"GET /p/list HT", b"GET /p/list HTTP/1.1\r\nHost: x\r\nX-A: 1"])
def test_a_client_that_closes_inside_its_head_gets_no_answer_and_no_log_line(servers, part, monkeypatch):
    """As nginx: a head cut off by its client's close is no request to refuse (a slow client
    pool closing 10,000 connections would otherwise log 10,000 refusals)."""
    logged = []
    monkeypatch.setattr(worker.Handler, "log_error", lambda self, *args: logged.append(args))
    for cls in (Lean, Pywsgi):
        SEEN.clear()
        conn = socket.create_connection(("127.0.0.1", servers[cls].server_port))
        try:
            conn.sendall(part)
            conn.shutdown(socket.SHUT_WR)
            assert _until_closed(conn) == b""
        finally:
            conn.close()
        assert SEEN == []
    assert logged == []

"""The worker's lean path (semula.worker.Handler.lean) against pywsgi's own: the same requests, sent
to a server of each, get the same bytes back (but the Date), and the app sees the same environ.

Both servers run in this process on gevent's own sockets (the suite is not monkey-patched); the
client is a greenlet beside them.
"""

from __future__ import annotations

import contextlib
import re

import gevent
import pytest
from gevent import socket
from gevent.pywsgi import WSGIServer
from gevent.server import StreamServer
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


class Reader:
    """A connection's bytes as they come, and what has come of them (nothing is lost or skipped)."""

    def __init__(self, conn: socket.socket):
        self.conn = conn
        self.received = b""
        self.at = 0  # how much of it the replies read so far take
        self.closed = False

    def more(self) -> None:
        try:
            chunk = self.conn.recv(65536)
        except ConnectionResetError:  # closed with our bytes unread: closed all the same
            chunk = b""
        if not chunk:
            self.closed = True
            raise ConnectionError("closed")
        self.received += chunk

    def until(self, mark: bytes) -> bytes:
        while (end := self.received.find(mark, self.at)) == -1:
            self.more()
        piece, self.at = self.received[self.at : end], end + len(mark)
        return piece

    def take(self, n: int) -> None:
        while len(self.received) < self.at + n:
            self.more()
        self.at += n

    def to_close(self) -> None:
        while not self.closed:
            with contextlib.suppress(ConnectionError):
                self.more()


def _reply(reader: Reader) -> bool:
    """Read one reply whole (status line, headers, the body as its headers frame it); whether the
    connection carries on after it. A 1xx is read as a reply of its own. A reply to HEAD is read as
    any other: pywsgi sends the body the app gives it (this app's; Flask gives none)."""
    status_line, *lines = reader.until(b"\r\n\r\n").split(b"\r\n")
    version, status = status_line.split(b" ", 2)[:2]
    headers = {}
    for line in lines:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip().lower()
    keeps = headers.get(b"connection") != b"close" and (
        version == b"HTTP/1.1" or headers.get(b"connection") == b"keep-alive"
    )
    if status.startswith(b"1") or status in (b"204", b"304"):
        return keeps
    if headers.get(b"transfer-encoding") == b"chunked":
        while size := int(reader.until(b"\r\n").split(b";")[0], 16):
            reader.take(size)
            assert reader.until(b"\r\n") == b"", "a chunk longer than its size"
        while reader.until(b"\r\n"):  # trailers, up to the blank line
            pass
    elif b"content-length" in headers:
        reader.take(int(headers[b"content-length"]))
    else:  # framed by the close of the connection
        reader.to_close()
        reader.at = len(reader.received)
        return False
    return keeps


def exchange(server: StreamServer, data: bytes, replies: int | None = None) -> bytes:
    """Send `data` on one connection and read the replies whole: `replies` of them (a 1xx not
    counted), or every one until the server closes the connection. Fails, rather than return what
    came, when no reply comes, when one is cut short, when bytes follow the last, or after 10 s."""
    conn = socket.create_connection(("127.0.0.1", server.server_port))
    reader, whole = Reader(conn), 0
    try:
        conn.sendall(data)
        with gevent.Timeout(10, AssertionError("the replies did not come whole within 10 s")):
            while replies is None or whole < replies:
                if reader.at == len(reader.received):
                    try:
                        reader.more()
                    except ConnectionError:
                        break  # closed between replies
                start = reader.at
                try:
                    keeps = _reply(reader)
                except ConnectionError:
                    raise AssertionError(f"a reply cut short: {reader.received[start:]!r}") from None
                whole += reader.received[start + 9 : start + 10] != b"1"
                if not keeps:
                    reader.to_close()
                    break
        assert whole, f"no reply: {reader.received!r}"
        assert reader.at == len(reader.received), f"bytes after the replies: {reader.received[reader.at :]!r}"
        return reader.received
    finally:
        conn.close()


def both(servers, data: bytes, replies: int | None = None) -> tuple[bytes, bytes, list, list]:
    answers, seen = [], []
    for cls in (Lean, Pywsgi):
        SEEN.clear()
        answers.append(DATE.sub(b"Date: -\r\n", exchange(servers[cls], data, replies)))
        seen.append(list(SEEN))
    return answers[0], answers[1], seen[0], seen[1]


HEADER_NAMES = st.sampled_from(
    ["Host", "X-Semula-Project", "Accept", "User-Agent", "X-Thing", "Cookie", "x_under"]
)
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
    last = b"GET /p/list HTTP/1.1\r\nConnection: close\r\n\r\n"  # so that the server ends the exchange
    lean, pywsgi, lean_seen, pywsgi_seen = both(servers, b"".join(sequence) + last)
    assert lean == pywsgi
    assert lean_seen == pywsgi_seen


@pytest.mark.parametrize("how", HOWS)
def test_each_way_of_answering_is_served_by_the_lean_path(servers, how, monkeypatch):
    """Each app answer above goes through the lean path (not a fallback), and as pywsgi sends it."""
    taken = []
    lean = Lean.lean
    monkeypatch.setattr(Lean, "lean", lambda self: taken.append(lean(self)) or taken[-1])
    request = f"POST /v1/{how} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{{}}".encode()
    a, b, _, _ = both(servers, request, replies=1)
    assert a == b and a.startswith(b"HTTP/1.1 ")
    assert taken[0] in (True, False)


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"HEAD /p/list HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /p/list HTTP/1.0\r\n\r\n",
        b"POST /p/list HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"POST /p/list HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /p/list HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
        b"POST /p/list HTTP/1.1\r\nContent-Length: 1_0\r\n\r\n{}",
        b"GET http://x/p/list HTTP/1.1\r\n\r\n",
        b"GET /p/list HTTP/1.1\r\nFolded: a\r\n b\r\n\r\n",
        b"GET /p/list HTTP/1.1\nHost: x\n\n",
        b"GET  /p/list HTTP/1.1\r\n\r\n",
    ],
)
def test_what_the_lean_path_does_not_take_goes_to_pywsgi_unread(servers, request_bytes, monkeypatch):
    """Each of these is pywsgi's to read (it refuses some of them): the lean path hands it over
    having read nothing, so the answer is pywsgi's own, bytes for bytes."""
    taken = []
    lean = Lean.lean
    monkeypatch.setattr(Lean, "lean", lambda self: taken.append(lean(self)) or taken[-1])
    a, b, _, _ = both(servers, request_bytes, replies=1)
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
    a, b, seen_a, seen_b = both(servers, head + b"\r\nhelloGET /p/list HTTP/1.1\r\n\r\n")
    assert a == b and a.startswith(b"HTTP/1.1 400 ") and a.count(b"HTTP/1.1") == 1
    assert seen_a == seen_b == []


def test_a_request_in_pieces_is_read_whole(servers):
    """A head cut across packets goes to pywsgi's path; a body cut across packets is read whole."""
    for cls in (Lean, Pywsgi):
        SEEN.clear()
        conn = socket.create_connection(("127.0.0.1", servers[cls].server_port))
        try:
            conn.sendall(b"POST /p/list HTTP/1.1\r\nContent-")
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
        conn.sendall(b"GET /p/list HTTP/1.1\r\n\r\n")
        with gevent.Timeout(5):
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")
            assert conn.recv(65536) == b""  # closed after keep-alive's 2 s
    finally:
        conn.close()


def test_an_app_failure_is_logged_by_the_lean_path(servers, caplog):
    exchange(servers[Lean], b"GET /p/raises HTTP/1.1\r\n\r\n", replies=1)
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
        conn.sendall(b"GET /p/list HTTP/1.1\r\n\r\n")
        with gevent.Timeout(5):
            assert conn.recv(65536).startswith(b"HTTP/1.1 200 OK")
        server.close()  # stops accepting, as a stopping worker's server does
        with gevent.Timeout(2):
            assert conn.recv(65536) == b""
    finally:
        conn.close()
        server.stop()


@pytest.mark.parametrize(
    ("sent", "says"),
    [
        (b"", "no reply"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc", "a reply cut short"),
        (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", "a reply cut short"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nConnection: close\r\n\r\nab", "bytes after the replies"),
    ],
)
def test_the_exchange_fails_on_a_reply_that_is_not_whole(sent, says):
    """What the comparisons above rest on: an empty or broken reply is no answer to compare."""

    def reply_and_close(conn, address):
        conn.recv(65536)
        conn.sendall(sent)
        conn.close()

    server = StreamServer(("127.0.0.1", 0), reply_and_close)
    server.start()
    try:
        with pytest.raises(AssertionError, match=says):
            exchange(server, b"GET /p/list HTTP/1.1\r\n\r\n", 1)
    finally:
        server.stop()

"""semula.worker reads a request exactly as pywsgi would: parse_headers as the standard library's parser
pywsgi uses, the Headers lookups as the email message's own, get_environ as pywsgi's and gunicorn's."""

from __future__ import annotations

import io
import os
from http import client

import pytest
from gevent.pywsgi import Input, OldMessage, WSGIHandler, format_date_time
from gunicorn.workers.ggevent import PyWSGIHandler
from hypothesis import given, settings
from hypothesis import strategies as st

from semula import worker
from semula.worker import Handler, parse_headers

NOT_A_HEADER = "a header line that is not of the form name: value"
NAMES = st.sampled_from(["Host", "Content-Type", "Content-Length", "X-A", "authorization", "A_B", "x"])
VALUES = st.binary(max_size=12).filter(lambda b: b"\r" not in b and b"\n" not in b)
LINES = st.one_of(
    st.builds(lambda n, v: n.encode() + b": " + v + b"\r\n", NAMES, VALUES),  # the plain form
    st.builds(lambda n, v: n.encode() + b":" + v + b"\n", NAMES, VALUES),  # no space, bare LF
    st.builds(lambda v: b" \t" + v + b"\r\n", VALUES),  # a folded continuation
    st.builds(lambda v: b"no colon " + v + b"\r\n", VALUES),
    st.just(b"From someone\r\n"),
    st.just(b": empty name\r\n"),
    st.just(b"X-Cr: a\rb\r\n"),
    st.just(b"Trailing:  spaces  \r\n"),
)


def standard(block: bytes) -> tuple[list[tuple[str, str]], str, bytes]:
    fp = io.BytesIO(block)
    message = client.parse_headers(fp, _class=OldMessage)
    return message.items(), message.status, fp.read()


def ours(block: bytes) -> tuple[list[tuple[str, str]], str, bytes]:
    fp = io.BytesIO(block)
    message = parse_headers(fp)
    return message.items(), message.status, fp.read()


@settings(max_examples=400, deadline=None)
@given(st.lists(LINES, max_size=8), st.sampled_from([b"\r\n", b"\n", b""]), st.binary(max_size=8))
def test_any_header_block_parses_as_the_standard_library_parses_it(lines, end, body):
    block = b"".join(lines) + end + body
    assert ours(block) == standard(block)


class Counting(io.BufferedReader):
    """A socket's buffered reader that counts the lines read from it."""

    lines = 0

    def readline(self, *args):
        self.lines += 1
        return super().readline(*args)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(LINES, max_size=8),
    st.sampled_from([b"\r\n", b"\n", b""]),
    st.binary(max_size=8),
    st.sampled_from([4, 32, 8192]),
)
def test_a_block_in_a_readers_buffer_parses_as_the_standard_library_parses_it(lines, end, body, size):
    block = b"".join(lines) + end + body
    fp = io.BufferedReader(io.BytesIO(block), buffer_size=size)
    message = parse_headers(fp)
    assert (message.items(), message.status, fp.read()) == standard(block)


def test_a_plain_block_in_the_buffer_is_taken_whole_and_only_the_block():
    fp = Counting(io.BytesIO(b"Host: a\r\nContent-Length: 4\r\n\r\nbody"))
    fp.peek(1)  # the request line's read filled the buffer
    message = parse_headers(fp)
    assert fp.lines == 0 and fp.read() == b"body"
    assert message.items() == [("Host", "a"), ("Content-Length", "4")]
    cut = Counting(io.BytesIO(b"Host: a\r\nContent-Length: 4\r\n\r\nbody"), buffer_size=12)
    assert parse_headers(cut).items() == message.items() and cut.lines == 3 and cut.read() == b"body"


LOOKED_UP = st.sampled_from(["host", "HOST", "Content-Length", "x-a", "X-A", "a_b", "x", "absent"])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(LINES, max_size=8), st.lists(LOOKED_UP, max_size=6), st.sampled_from(["del", "set", "replace"])
)
def test_lookups_answer_as_the_email_messages_own_before_and_after_a_change(lines, names, change):
    block = b"".join(lines) + b"\r\n"
    message = parse_headers(io.BufferedReader(io.BytesIO(block)))
    reference = client.parse_headers(io.BytesIO(block), _class=OldMessage)

    def same() -> None:
        for name in names:
            assert message.get(name, "-") == reference.get(name, "-")
            assert message.get_all(name) == reference.get_all(name)
            assert message[name] == reference[name]

    same()
    for subject in (message, reference):
        for name in names[:2]:
            if change == "del":
                del subject[name]
            elif change == "set":
                subject[name] = "new"
            elif name in subject:
                subject.replace_header(name, "replaced")
    same()


REQUEST_LINES = st.builds(
    lambda method, path, version: f"{method} {path} {version}\r\n",
    st.sampled_from(["POST", "GET", "HEAD", "DELETE"]),
    st.sampled_from(
        ["/v1/chat/completions", "/p/a%20b/v1/x?y=1&z=%41", "/x?", "/%zz/caf%C3%A9", "/a?b?c", "*"]
    ),
    st.sampled_from(["HTTP/1.1", "HTTP/1.0"]),
)
ENVIRON_LINES = st.one_of(
    LINES,
    st.sampled_from(
        [
            b"Expect: 100-continue\r\n",
            b"Connection: Upgrade\r\n",
            b"Upgrade: websocket\r\n",
            b"Cookie: a=1\r\n",
            b"Transfer-Encoding: chunked\r\n",
            b"Content-Type: application/json\r\n",
            b"Connection: close\r\n",
        ]
    ),
)


class _Server:
    class log:  # noqa: N801 - gunicorn's attribute
        class cfg:  # noqa: N801
            keepalive = 2
            timeout = 30

        access_log_enabled = False

    closed = False

    def get_environ(self) -> dict:
        return {"SERVER_NAME": "bench", "SERVER_PORT": "80", "wsgi.url_scheme": "http"}


def read(handler_class: type, request: bytes, sock: object) -> dict | None:
    """The environ a handler of this class makes of a request, or None when it refuses the request."""
    handler = handler_class.__new__(handler_class)
    handler.socket, handler.client_address, handler.server = sock, ("127.0.0.1", 5555), _Server()
    handler.rfile = io.BufferedReader(io.BytesIO(request))
    line = handler.read_requestline()
    try:
        handler.read_request(line)
    except ValueError:
        return None
    env = handler.get_environ()
    given_input = env.pop("wsgi.input")
    if isinstance(given_input, Input):
        env["wsgi.input"] = (given_input.content_length, given_input.chunked_input, given_input.socket)
    else:
        env["wsgi.input"] = given_input is handler.rfile
    env["rest"] = handler.rfile.read()
    return env


NOT_OWS = {0x85: None, 0xA0: None}  # whitespace to Python's strip(), not to HTTP's


def _header_value(key: str) -> bool:
    return key.startswith("HTTP_") or key in ("CONTENT_TYPE", "CONTENT_LENGTH")


@settings(max_examples=400, deadline=None)
@given(REQUEST_LINES, st.booleans(), st.lists(ENVIRON_LINES, max_size=8))
def test_the_environ_is_the_one_pywsgi_and_gunicorn_make(request_line, host, lines):
    """But a header's value loses only spaces and tabs around it (pywsgi's strip() takes 0x85 and
    0xA0 too, and leaves Content-Length and Content-Type unstripped)."""
    request = request_line.encode() + (b"Host: h\r\n" if host else b"") + b"".join(lines) + b"\r\nbody"
    sock = _Socket(10)
    ours_env = read(Handler, request, sock)
    theirs = read(PyWSGIHandler, request, sock)
    if ours_env is None:  # refused: ambiguous framing, a head semula refuses, where pywsgi guesses
        line, _, block = request.decode("latin-1").partition("\r\n")
        headers = parse_headers(io.BytesIO(block.encode("latin-1")))
        assert (
            theirs is None
            or worker.framing_problem(headers) is not None
            or worker.head_problem(line, headers.block) is not None
        )
        return
    assert theirs is not None and ours_env.keys() == theirs.keys()
    for key, value in ours_env.items():
        if _header_value(key) and value != theirs[key]:
            assert value.strip() == theirs[key].strip() and value == value.strip(" \t"), key
        else:
            assert value == theirs[key], key


@settings(max_examples=300, deadline=None)
@given(st.lists(LINES, max_size=8))
def test_the_environ_gets_the_headers_pywsgi_would_give_it(lines):
    handler = Handler.__new__(Handler)
    handler.headers = parse_headers(io.BytesIO(b"".join(lines) + b"\r\n"))
    theirs: dict[str, str] = {}
    for key, value in WSGIHandler._headers(handler):  # joined as pywsgi's get_environ joins them
        theirs[key] = theirs[key] + ("; " if "COOKIE" in key else ",") + value if key in theirs else value
    ours: dict[str, str] = {}
    if not worker.put_headers(ours, handler.headers._headers):  # a second Content-Length: refused
        assert len(handler.headers.get_all("content-length")) > 1
        return
    if worker.head_problem("GET / HTTP/1.0", handler.headers.block) is not None:
        return  # refused (control characters, names that are not tokens)
    ours = {key: value for key, value in ours.items() if key.startswith("HTTP_")}  # pywsgi sets the others
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():  # but only spaces and tabs stripped (pywsgi's strip() takes 0xA0 too)
        assert value.translate(NOT_OWS) == theirs[key].translate(NOT_OWS) and value == value.strip(" \t"), key


def test_plain_headers_keep_order_duplicates_and_case_insensitive_lookup():
    message = parse_headers(io.BytesIO(b"Host: a\r\nX-Semula-Project: shop\r\nX-A: 1\r\nx-a: 2\r\n\r\nbody"))
    assert message.get("x-semula-project") == "shop"
    assert message.get_all("X-A") == ["1", "2"]
    assert list(message.headers) == ["Host: a\r\n", "X-Semula-Project: shop\r\n", "X-A: 1\r\n", "x-a: 2\r\n"]


def test_a_line_past_the_limit_is_refused_as_pywsgi_refuses_it():
    message = parse_headers(io.BytesIO(b"X: " + b"a" * 70_000 + b"\r\n\r\n"))
    assert message.status == "Line too long"


def test_more_than_100_headers_are_refused():
    block = b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n"
    with pytest.raises(client.HTTPException, match="more than 100 headers"):
        parse_headers(io.BytesIO(block))
    with pytest.raises(client.HTTPException, match="more than 100 headers"):
        client.parse_headers(io.BytesIO(block))


@given(st.one_of(st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/0.9", "HTTP/2.0", "HTTP/1.10"]), st.text()))
def test_http_versions_are_accepted_as_pywsgi_accepts_them(version):
    ours_ok, theirs_ok = Handler.__new__(Handler), WSGIHandler.__new__(WSGIHandler)
    ours_ok.request_version = theirs_ok.request_version = version
    try:
        expected = WSGIHandler._check_http_version(theirs_ok)
    except ValueError:  # pywsgi's own raises on versions it cannot parse; ours then does too
        with pytest.raises(ValueError):
            ours_ok._check_http_version()
        return
    assert ours_ok._check_http_version() == expected


def test_the_date_header_is_pywsgis_and_follows_the_clock(monkeypatch):
    for now in (1_700_000_000.2, 1_700_000_000.9, 1_700_000_001.0):
        monkeypatch.setattr(worker.time, "time", lambda now=now: now)
        assert worker.http_date() == format_date_time(int(now))


# A descriptor that is always readable: the request of a test "came" on it (Handler._first_bytes_came).
_READABLE, _writer = os.pipe()
os.write(_writer, b"x")


class _Socket:
    """Takes at most `room` bytes a send, as a full kernel buffer would."""

    def __init__(self, room: int):
        self.room, self.sent = room, b""

    def fileno(self) -> int:
        return _READABLE

    def settimeout(self, timeout) -> None:
        pass

    def send(self, data) -> int:
        self.sent += bytes(data[: self.room])
        return min(len(data), self.room)

    def sendall(self, data) -> None:
        while data:
            data = data[self.send(data) :]


@pytest.mark.parametrize("room", [1, 7, 10_000])
def test_a_response_goes_out_whole_whatever_each_send_takes(room):
    handler = Handler.__new__(Handler)
    handler.socket, handler.response_length, handler.code = _Socket(room), 0, 200
    handler._sendall(b"HTTP/1.1 200 OK\r\n\r\nbody")
    assert handler.socket.sent == b"HTTP/1.1 200 OK\r\n\r\nbody" and handler.response_length == 23


@pytest.mark.parametrize(
    "block, problem",
    [
        (b"Content-Length: 5\r\n\r\n", None),
        (b"Transfer-Encoding: chunked\r\n\r\n", None),
        (b"Transfer-Encoding: Chunked \r\n\r\n", None),
        (b"Content-Length: 2\r\nContent-Length: 47\r\n\r\n", "more than one Content-Length header"),
        (b"Content-Length: 1_0\r\n\r\n", "a Content-Length that is not a number"),
        (b"Content-Length: +5\r\n\r\n", "a Content-Length that is not a number"),
        (
            b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n",
            "both Transfer-Encoding and Content-Length",
        ),
        (
            b"Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n",
            "a Transfer-Encoding other than chunked",
        ),
        (b"Transfer-Encoding: gzip, chunked\r\n\r\n", "a Transfer-Encoding other than chunked"),
        (b"Host: x\r\nContent-Length : 5\r\n\r\n", NOT_A_HEADER),
        (b"Transfer-Encoding\t: chunked\r\nContent-Length: 3\r\n\r\n", NOT_A_HEADER),
        (b"Host: x\r\nno colon\r\n\r\n", NOT_A_HEADER),
        (b": no name\r\n\r\n", NOT_A_HEADER),
        (b"X-Cr: a\rb\r\n\r\n", NOT_A_HEADER),
        (b"X-Cr: a\rContent-Length: 5\r\n\r\n", NOT_A_HEADER),  # two headers to the email parser
        (b" first: a continuation\r\nHost: x\r\n\r\n", NOT_A_HEADER),
        (b"From someone\r\nHost: x\r\n\r\n", NOT_A_HEADER),
        (b"Host: x\r\nFrom someone\r\n\r\n", NOT_A_HEADER),
        (b"Host: x\r\nX-Folded: a\r\n b\r\n\r\n", None),  # obs-fold: unfolded as pywsgi did
        (b"Host: x\nContent-Length: 5\n\n", None),  # bare LF line ends: tolerated, as pywsgi did
    ],
)
def test_ambiguous_body_framing_is_named(block, problem):
    assert worker.framing_problem(parse_headers(io.BytesIO(block))) == problem

"""The gunicorn worker semula runs: gevent's pywsgi server, with fair turns and the keep-alive rules
of gunicorn's `gevent` worker.

- pywsgi serves a replay hit with about a fifth less CPU than gunicorn's `gevent` worker (bench/RESULTS.md),
  and holds thousands of parked calls just as well.
- Fair turns: a connection whose next request is already waiting would be served again and again
  without ever giving the event loop a turn, starving the worker's other connections for up to a
  second under load (p99 ~900 ms at 50 connections). Yielding once per request bounds that (p99 ~30 ms)
  for some throughput.
- Keep-alive: pywsgi ignores gunicorn's `keepalive`, so an idle client would hold its connection, and a
  graceful stop, for ever. A connection idle for `keepalive` seconds after a request is closed, and so
  is each one after its current request once the worker is stopping. A new connection's first
  request may take up to gunicorn's `timeout` (30 s) to come, but one that has sent nothing closes
  within a second of the worker stopping.
- Accepted sockets inherit TCP_NODELAY from gunicorn's listening socket (Linux), which a pywsgi server
  needs for small responses.
- Costs of pywsgi's per request are cut, each without changing what it accepts or sends (tests in
  tests/unit/test_worker.py compare each with pywsgi's and the standard library's own): request
  headers of the plain `Name: value` form are split here rather than by the standard library's email
  parser (a sixth of a replay hit's CPU), the whole block at once when the reader's buffer holds it,
  which the email parser still parses when it is anything else; a header is looked up in an index of
  the block rather than by lowercasing every header for each of the ten lookups a request makes; the
  environ is made in one method with each header name's key made once per process; a response with
  a Content-Length goes out in one send, not two. A kept hit through the worker and the app costs 11%
  fewer instructions than with pywsgi's own reading (wrk's 4 headers), 25% fewer with the openai
  SDK's 16 (`python -m bench.instructions`, bench/RESULTS.md session 11).
- The lean path (`Handler.lean`): a request of the plain form (HTTP/1.1, a method other than HEAD, an
  origin-form target, plain headers whose block is already in the reader's buffer, a Content-Length
  body or none, no Transfer-Encoding, Expect or Upgrade) is read, handed to the app and answered here
  in a few dozen lines instead of pywsgi's several hundred, with what pywsgi accepts and sends kept
  (tests/unit/test_worker_lean.py sends the same requests through both and compares the bytes).
  Anything else, and every request while gunicorn's access log is on, takes pywsgi's path, which
  reads nothing the lean path looked at. In process 102 -> 71 µs CPU a request of the floor app
  with its client (`python -m bench.worker_cpu`); through HTTP the floor served 1.3-1.7 times as
  many small requests in alternated runs on a noisy machine (bench/RESULTS.md session 22, decision 0049).
- Strict HTTP, in one place for both paths (`head_problem`, decision 0054): what gunicorn's parser
  and nginx refuse is refused before the app sees it, with a status and a line saying why (400 for
  a missing or repeated Host, control bytes in a header, a malformed request line or a lowercase
  method; 414 past 8192 bytes of request line; 431 past 100 header lines or 64 KiB in one), and a
  lingering close so that what the client still sends does not turn the close into a reset that
  destroys the response. One environ builder (`make_environ`) for both paths: a value loses the
  spaces and tabs around it, nothing else.
- Deadlines on the way in (decision 0054): a request's head must arrive within `header_timeout`
  of its first bytes (a table swept as keep-alive's is, `HEADS`), and a body may go `body_timeout`
  without a byte (`Body`); past either the connection gets a 408 and is closed.
- And smaller ones, each a percent or two of a replay hit: the Date header formatted once a second,
  the common HTTP versions accepted without parsing, gunicorn's access-log switch read once per
  connection, no getsockopt before each send.
"""

from __future__ import annotations

import contextlib
import email.errors
import email.parser
import functools
import logging
import re
import socket
import time
from collections.abc import Callable, Iterable
from http import client
from typing import Any, BinaryIO
from urllib.parse import unquote

import gevent
from gevent.pywsgi import Input, OldMessage, _InvalidClientRequest, format_date_time
from gevent.socket import wait_read
from gunicorn.workers.ggevent import GeventPyWSGIWorker, PyWSGIHandler

from semula import logs, metrics, sockets

logger = logging.getLogger("semula.worker")

# A header name as the email parser takes it: printable ASCII but the colon.
_NAME = "[!-9;-~]+"
# A header line as the email parser reads it, when it is nothing more: a name, a colon, a value.
PLAIN_HEADER = re.compile(rf"({_NAME}):[ \t]*([^\r\n]*?)\r?\n".encode())
# A whole block of such lines ending in CRLF, and each of its lines, read as latin-1 text.
PLAIN_BLOCK = re.compile(rf"(?:{_NAME}:[ \t]*[^\r\n]*\r\n)*\r\n")
PLAIN_PAIR = re.compile(rf"({_NAME}):[ \t]*([^\r\n]*)\r\n")
ONE_SEND = 64 * 1024  # a header block and a body up to this size go out in one send
FIRST_BYTES_SLICE = 1.0  # s: how soon a stopping worker closes a new connection that sent nothing
LINGER = 5.0  # s: how long a refused request's connection reads what its client still sends


_date: tuple[int, bytes] = (0, b"")


def http_date() -> bytes:
    """The Date header pywsgi writes, formatted once a second rather than for every response."""
    global _date
    now = int(time.time())
    if _date[0] != now:
        _date = (now, format_date_time(now))
    return _date[1]


class Headers(OldMessage):
    """The OldMessage of a plain header block, whose get() and get_all() look names up in an index
    rather than lowercasing every header for each lookup (pywsgi and semula make ten a request).

    The index is made at the first lookup and made again after any change of the headers: the
    email API changes them by appending (length), by replacing the list (identity), or in place
    (replace_header, which drops it). Plain values are latin-1 text, which the compat32 policy
    returns as they are, so a lookup answers what Message's own would.
    """

    _index: dict[str, list[str]] | None = None
    _indexed: list[tuple[str, str]] | None = None  # the list the index was made of
    _indexed_length = -1

    def _lookup(self) -> dict[str, list[str]]:
        """The index of lowercased names to values, made again when the headers changed since."""
        headers = self._headers
        index = self._index
        if index is None or self._indexed is not headers or self._indexed_length != len(headers):
            index = {}
            for name, value in headers:
                index.setdefault(name.lower(), []).append(value)
            self._index, self._indexed, self._indexed_length = index, headers, len(headers)
        return index

    def get(self, name: str, failobj: Any = None) -> Any:
        values = self._lookup().get(name.lower())
        return values[0] if values else failobj

    def get_all(self, name: str, failobj: Any = None) -> Any:
        values = self._lookup().get(name.lower())
        return list(values) if values else failobj

    def replace_header(self, _name: str, _value: str) -> None:
        self._index = None
        super().replace_header(_name, _value)


def parse_headers(fp: BinaryIO) -> OldMessage:
    """What `http.client.parse_headers(fp, _class=OldMessage)` returns, and pywsgi's headers_factory.

    The same limits on line length and count. A block of plain lines that is already in the reader's
    buffer (a request's usually is: it came in the packet of its request line) is taken whole and
    split with one regular expression; a plain block otherwise is read line by line and split the
    same way; anything else (folded lines, lines without a colon) goes to the email parser as before.
    """
    peek = getattr(fp, "peek", None)
    if peek is not None:
        buffered = peek(0)
        # The block's length: 2 with no headers, 3 (find's -1 + 4) when its end is not buffered yet.
        size = 2 if buffered.startswith(b"\r\n") else buffered.find(b"\r\n\r\n") + 4
        if size != 3:
            block = buffered[:size].decode("iso-8859-1")
            if (
                len(block) <= client._MAXLINE
                and block.count("\n") <= client._MAXHEADERS
                and PLAIN_BLOCK.fullmatch(block)
            ):
                fp.read(len(block))
                message = Headers()
                message._headers = PLAIN_PAIR.findall(block)
                message.block = block
                return message
    lines = []
    while True:
        line = fp.readline(client._MAXLINE + 1)
        if len(line) > client._MAXLINE:
            message = OldMessage()
            message.status = "Line too long"
            return message
        lines.append(line)
        if len(lines) > client._MAXHEADERS:
            raise client.HTTPException(f"got more than {client._MAXHEADERS} headers")
        if line in (b"\r\n", b"\n", b""):
            break
    message = Headers()
    message.block = b"".join(lines).decode("iso-8859-1")
    for line in lines[:-1]:
        match = PLAIN_HEADER.fullmatch(line)
        if match is None:
            block = message.block
            message = email.parser.Parser(_class=OldMessage).parsestr(block)
            message.block = block
            if any(b"\r" in each.removesuffix(b"\r\n") for each in lines):
                # The email parser splits a line at a bare CR, where a proxy in front may read one line
                # (`X: a<CR>Content-Length: 5`): refused (framing_problem).
                message.defects.append(email.errors.InvalidHeaderDefect("a bare CR in a header line"))
            return message
        message._headers.append((match[1].decode("iso-8859-1"), match[2].decode("iso-8859-1")))
    return message


_ENVIRON_KEYS: dict[str, str] = {}
ENVIRON_KEYS_MAX = 4096  # names whose key is remembered: a client making up names cannot grow it further


def environ_key(name: str) -> str:
    """The environ key of a request header's value, or "" for a header left out: a name with an
    underscore, as pywsgi leaves it out (a client must not pass for CONTENT_TYPE with Content_Type)."""
    key = "" if "_" in name else name.replace("-", "_").upper()
    if key and key not in ("CONTENT_TYPE", "CONTENT_LENGTH"):
        key = "HTTP_" + key
    if len(_ENVIRON_KEYS) < ENVIRON_KEYS_MAX:
        _ENVIRON_KEYS[name] = key
    return key


def put_headers(env: dict[str, Any], pairs: Iterable[tuple[str, str]]) -> bool:
    """Put each request header's value into the environ under its key (none for a header left out),
    without the spaces and tabs around it (RFC 9110 5.5; not the other characters Python's strip()
    takes, such as 0xA0), a repeated header's values joined as pywsgi joins them, the first of two
    Content-Types kept as pywsgi keeps it. False, with the environ half made, at a second
    Content-Length (framing_problem refuses it)."""
    keys = _ENVIRON_KEYS
    for name, value in pairs:
        key = keys.get(name)
        if key is None:
            key = environ_key(name)
        if not key:
            continue
        if key not in env:
            env[key] = value.strip(" \t")
        elif key == "CONTENT_LENGTH":
            return False
        elif key != "CONTENT_TYPE":
            env[key] += ("; " if "COOKIE" in key else ",") + value.strip(" \t")
    return True


CONTENT_LENGTH = re.compile(r"[0-9]{1,18}")

# What a request head may be (RFC 9112 3 and 5, RFC 9110 5.6.2), as gunicorn's parser and nginx take
# it: a request line of three parts split by single spaces, a method of capitals (gunicorn and
# nginx refuse `get`), a target with no control bytes, an HTTP/d.d version; header names that are
# tokens, values with no control byte but the tab (a NUL, a CR or LF of a folded line, an ESC).
REQUEST_LINE = re.compile(r"[A-Z][A-Z_-]{0,19} [^\x00-\x20\x7f]+ HTTP/[0-9]\.[0-9]")
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_VALUE = r"[^\x00-\x08\x0a-\x1f\x7f]*"  # no control character but the tab
# A header block of such lines (line ends CRLF, or a bare LF as pywsgi and nginx take it).
STRICT_BLOCK = re.compile(rf"(?:{_TOKEN}:{_VALUE}\r?\n)*\r?\n")
HEADER_LINE = re.compile(rf"({_TOKEN}:)?({_VALUE})\r?\n")
LINES = re.compile(r"[^\n]*\n")
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
REQUEST_LINE_MAX = 8192  # pywsgi's MAX_REQUEST_LINE: a longer line is a 414
HEADERS_MAX = client._MAXHEADERS  # header lines of a request (100), as pywsgi's: more is a 431
HEADER_LINE_MAX = client._MAXLINE  # bytes of a header line (64 KiB), as pywsgi's: more is a 431
REASONS = {
    400: "Bad Request",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
}


class Refused(_InvalidClientRequest):
    """A request refused before the app sees it, with its status and why (sent as the body)."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


class Cut(Refused):
    """The stream ended inside a request's head: its client closed the connection (or shut its
    sending side). There is no one to answer and nothing to log: the connection closes."""

    def __init__(self) -> None:
        super().__init__(400, "the stream ended inside the request head")


def refusal(status: int, reason: str) -> bytes:
    """The response to a request refused before the app saw it; the connection closes after it."""
    body = reason.encode() + b"\n"
    return (
        b"HTTP/1.1 %d %s\r\nDate: %s\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (status, REASONS[status].encode(), http_date(), len(body), body)
    )


def head_problem(line: str, block: str) -> Refused | None:
    """Why a request head is refused, or None: the one check of both paths (the lean path hands a
    head it refuses to pywsgi's path, which reads it and answers the refusal). `line` is the request
    line without its line end, `block` the header lines as received (latin-1 text) with the empty
    line that ends them. Missing or repeated Host on HTTP/1.1 (RFC 9112 3.2) and a repeated one on
    HTTP/1.0 are refused: two readers could take different hosts. A folded line (obs-fold) is a
    line without a name. Framing (Content-Length, Transfer-Encoding) is framing_problem's.
    One regular expression and a count over the block; the reason is looked for only for a refusal."""
    if REQUEST_LINE.fullmatch(line) is None:
        method = line.split(" ", 1)[0]
        if method.isalpha() and not method.isupper():
            return Refused(400, "a method that is not in capitals")
        return Refused(400, "a request line that is not METHOD SP target SP HTTP/x.y")
    if STRICT_BLOCK.fullmatch(block) is None:
        for each in LINES.findall(block)[:-1]:
            match = HEADER_LINE.fullmatch(each)
            if match is None:
                return Refused(400, "a control character in a header value")
            if match[1] is None:
                return Refused(400, "a header line without a name that is a token (or a folded one)")
        return Refused(400, "a header block that does not end in an empty line")
    hosts = f"\n{block}".lower().count("\nhost:")
    if hosts > 1:
        return Refused(400, "more than one Host header")
    if hosts == 0 and line.endswith("HTTP/1.1"):
        return Refused(400, "a request without a Host header")
    return None


# The request line the lean path takes: a method other than HEAD (no body on the wire, by its own
# rules), an origin-form target of printable ASCII, HTTP/1.1. Anything else goes to pywsgi.
LEAN_LINE = re.compile(rb"(GET|POST|PUT|PATCH|DELETE|OPTIONS) (/[!-~]*) HTTP/1\.1")
# Request headers that ask for what only pywsgi's path does: a chunked body, a 100 Continue, an upgrade.
NOT_LEAN = ("HTTP_TRANSFER_ENCODING", "HTTP_EXPECT", "HTTP_UPGRADE")
# pywsgi's answer to an app that raised before it sent anything.
INTERNAL_ERROR = (
    "500 Internal Server Error",
    [("Content-Type", "text/plain"), ("Connection", "close"), ("Content-Length", "21")],
    b"Internal Server Error",
)


def framing_problem(headers: OldMessage) -> str | None:
    """Why a request's body framing is ambiguous, or None. Where two readers could frame a body
    differently (a proxy in front, pywsgi here), the rest of one request passes for another (request
    smuggling): two Content-Length headers, one that is not plain digits (Python's int() reads
    "1_0"), Transfer-Encoding beside Content-Length, or any Transfer-Encoding but one `chunked`.

    And a line of the header block that is not a header (RFC 9112 5.1 and 2.2): whitespace before
    the colon (`Content-Length : 5`), no colon, no name, a continuation first, a bare CR. The email
    parser that reads a block that is not plain takes such a line and every line after it as the
    message's body (or a `From ` line as an envelope), and splits a line at a bare CR (which
    parse_headers notes as a defect): `Transfer-Encoding : chunked` was no header here, while a
    proxy in front that reads it as one frames the body its own way."""
    if headers.defects or headers.get_unixfrom() is not None or headers.get_payload():
        return "a header line that is not of the form name: value"
    lengths = headers.get_all("Content-Length") or []
    codings = headers.get_all("Transfer-Encoding") or []
    if len(lengths) > 1:
        return "more than one Content-Length header"
    if lengths and CONTENT_LENGTH.fullmatch(lengths[0].strip(" \t")) is None:
        return "a Content-Length that is not a number"
    if codings and lengths:
        return "both Transfer-Encoding and Content-Length"
    if codings and (len(codings) > 1 or codings[0].strip(" \t").lower() != "chunked"):
        return "a Transfer-Encoding other than chunked"
    return None


class Handler(PyWSGIHandler):
    _framing: str | None = None
    # How long a request's head may take to arrive from its first bytes, and a body's client between
    # two reads (SEMULA_HEADER_TIMEOUT, SEMULA_BODY_TIMEOUT; Worker.init_process sets them).
    header_timeout = 60.0
    body_timeout = 60.0
    late = False  # the head did not arrive in time

    @functools.cached_property
    def keepalive(self) -> float | None:
        # gunicorn's settings are costly to read; a connection reads this one twice a request.
        return self.server.log.cfg.keepalive or None

    @functools.cached_property
    def access_log_enabled(self) -> bool:
        return bool(self.server.log.access_log_enabled)

    @functools.cached_property
    def first_request_timeout(self) -> float | None:
        # A new connection's first request may be slow to come (its client busy, a thread waiting for
        # the GIL): it gets gunicorn's worker timeout (or the keep-alive time, if longer), not the
        # keep-alive idle time, which bounds the wait between two requests.
        return max(self.server.log.cfg.timeout or 0, self.keepalive or 0) or None

    def read_requestline(self) -> str:
        # The wait for a request's first bytes is bounded as keep-alive's (or a first request's)
        # wait; from them on, the whole head has header_timeout to arrive (HEADS). A held call never
        # reads from its socket.
        ready, timeout = self._request_wait()
        if not ready:
            return ""  # nothing in time, or the worker is stopping: the connection closes
        self.socket.settimeout(timeout)
        try:
            if not self.rfile.peek(1):
                return ""
        except OSError:
            return ""  # nothing in time (a timeout), or the client went
        finally:
            if self.socket is not None:
                self.socket.settimeout(None)
        HEADS.waiting[self] = time.monotonic() + self.header_timeout
        HEADS.start()
        return super().read_requestline()

    def head_late(self) -> None:
        """The head did not arrive within header_timeout: end its reads (gevent fails a read waiting
        on a socket whose read side is shut), so that handle_one_request answers a 408 on a
        connection that can still send it."""
        self.late = True
        sock = self.socket
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)

    def _request_wait(self) -> tuple[bool, float | None]:
        """Whether the connection's next request may be waited for, and up to how long: a new
        connection's once its first bytes came in time (first_request_timeout), a later one's
        for keep-alive's idle time."""
        if self.requestline is None:  # the connection's first
            return self._first_bytes_came(), self.first_request_timeout
        return True, self.keepalive

    def _first_bytes_came(self) -> bool:
        """Wait for a new connection's first bytes, up to first_request_timeout, a slice at a time: a
        stopping worker closes a connection that has sent nothing within a slice, rather than being
        held by it until the timeout (a browser's or a load balancer's connection opened ahead)."""
        limit = self.first_request_timeout
        deadline = None if limit is None else time.monotonic() + limit
        while not self.server.closed:
            wait = (
                FIRST_BYTES_SLICE if deadline is None else min(FIRST_BYTES_SLICE, deadline - time.monotonic())
            )
            if wait <= 0:
                return False
            try:
                wait_read(self.socket.fileno(), timeout=wait)
                return True
            except TimeoutError:
                continue
        return False

    def handle_one_request(self) -> Any:
        served = self.lean() if self.lean_enabled else None
        if served is None:  # not a request the lean path takes, or it is off: pywsgi's path
            result = super().handle_one_request()
            HEADS.waiting.pop(self, None)  # a head that ended before read_request (a 414, a client gone)
            if self.late:  # its reads ended by head_late, wherever they were
                result = (
                    "408",
                    refusal(408, f"the request head did not arrive within {self.header_timeout:g} s"),
                )
            if isinstance(result, tuple):  # a request refused before the app saw it
                self.refuse(*result)
                return None
            if result is not True:
                return result
        elif not served:
            return None  # the connection is done
        if self.server.closed or not self.keepalive:
            return None  # close: the worker is stopping, or keep-alive is off
        gevent.sleep(0)  # a fair turn for the worker's other connections
        return True

    @functools.cached_property
    def lean_enabled(self) -> bool:
        # gunicorn's access line is made of pywsgi's state, which the lean path does not keep.
        return not self.access_log_enabled

    def lean(self) -> bool | None:
        """Serve the connection's next request if it is of the plain form, as pywsgi would serve it.

        Returns True when it was served and the connection may go on, False when the connection is
        done (closed, timed out, or to be closed after this response), and None when the request is
        not one it takes: it read nothing of it, so pywsgi's path reads it from the start.
        """
        rfile = self.rfile
        if rfile.closed:
            return False
        # The waits of read_requestline, bounded by the worker's sweep (IDLE) rather than a timer for
        # each wait.
        ready, timeout = self._request_wait()
        if not ready:
            return False
        if timeout is not None:
            IDLE.waiting[self] = time.monotonic() + timeout
            IDLE.start()
        try:
            buffered = rfile.peek(1)
        except OSError:
            return False
        finally:
            IDLE.waiting.pop(self, None)
        if not buffered:
            return False
        self.requestline = ""  # no longer the connection's first request, whichever path reads it
        line_end = buffered.find(b"\r\n", 0, REQUEST_LINE_MAX)
        line = LEAN_LINE.fullmatch(buffered, 0, line_end) if line_end > 0 else None
        end = buffered.find(b"\r\n\r\n", line_end) + 4 if line is not None else 3
        if end == 3:  # no plain request line, or its head is not all in the buffer
            return None
        block = buffered[line_end + 2 : end].decode("iso-8859-1")  # the header lines and the empty one
        lines = block.count("\n")
        if lines > client._MAXHEADERS or block.count("\r\n") != lines:  # pywsgi's path: a 431, bare LFs
            return None
        requestline = buffered[:line_end].decode("ascii")
        if head_problem(requestline, block) is not None:
            return None  # pywsgi's path reads it and answers the refusal
        pairs = PLAIN_PAIR.findall(block) if lines > 1 else []
        self.command, self.path, self.request_version = (
            line[1].decode("ascii"),
            line[2].decode("ascii"),
            "HTTP/1.1",
        )
        env = self.make_environ(pairs)
        if env is None:
            return None  # two lengths: pywsgi's path refuses them
        length = env.get("CONTENT_LENGTH")
        if length is not None and CONTENT_LENGTH.fullmatch(length) is None:
            return None
        for name in NOT_LEAN:
            if name in env:
                return None
        rfile.read(end)  # the head, from the buffer: committed to this path from here
        self.requestline = requestline
        self.wsgi_input = Body(rfile, int(length) if length else None)
        self.wsgi_input.start(self.socket, self.body_timeout)
        env["wsgi.input"] = self.wsgi_input
        env["wsgi.input_terminated"] = True
        self.response_length, self.code = 0, 0
        reply = Reply(self, env.get("HTTP_CONNECTION", "").lower() == "close")
        if not reply.run(self.server.application, env):
            return False
        try:
            self.wsgi_input._discard()  # what the app left of the body, so the next request parses
        except (OSError, ValueError):
            return False
        return not reply.close

    def wake(self) -> None:
        """End the wait for this connection's next request: its read sees the end of the stream.

        Unless the request has begun to arrive: on a loaded worker the sweep can run after a client's
        bytes came and before the greenlet waiting for them, and closing then loses a request the
        client sent on a connection it had every reason to reuse (an SDK's pooled connection, idle
        for just under keep-alive's time; issue #49). Such a connection is served; a stopping worker
        closes it all the same."""
        sock = self.socket
        if sock is None or (not self.server.closed and sockets.unread(sock)):
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    def _request_environ(self, env: dict[str, Any]) -> None:
        """The environ's keys of the request line and the connection, pywsgi's and gunicorn's
        (gunicorn.sock, RAW_URI), for both paths."""
        target = self.path
        env["REQUEST_METHOD"] = self.command
        env["SCRIPT_NAME"] = ""
        path, _, env["QUERY_STRING"] = target.partition("?")
        env["PATH_INFO"] = unquote(path, encoding="latin-1") if "%" in path else path
        env["SERVER_PROTOCOL"] = self.request_version
        address = self.client_address
        if isinstance(address, tuple):
            env["REMOTE_ADDR"], env["REMOTE_PORT"] = str(address[0]), str(address[1])
        env["gunicorn.sock"] = self.socket
        env["RAW_URI"] = target

    def make_environ(self, pairs: list[tuple[str, str]]) -> dict[str, Any] | None:
        """The environ of a request, the one builder of both paths: pywsgi's and gunicorn's keys, the
        headers taken in one loop, each name's environ key made once per process
        (tests/unit/test_worker.py compares it with pywsgi's and gunicorn's own). None at a second
        Content-Length."""
        env = self.server.get_environ()
        if not put_headers(env, pairs):
            return None
        self._request_environ(env)
        return env

    def get_environ(self) -> dict[str, Any]:
        env = self.make_environ(self.headers._headers)
        assert env is not None  # read_request refused a second Content-Length (framing_problem)
        expects = env.get("HTTP_EXPECT") == "100-continue"
        chunked = env.get("HTTP_TRANSFER_ENCODING", "").lower() == "chunked"
        reads = not self._connection_upgrade_requested()
        self.wsgi_input = Body(
            self.rfile, self.content_length, socket=self.socket if expects else None, chunked_input=chunked
        )
        self.wsgi_input.start(self.socket, self.body_timeout)
        env["wsgi.input"] = self.wsgi_input if reads else self.rfile
        env["wsgi.input_terminated"] = reads
        return env

    def read_request(self, raw_requestline: str) -> Any:
        try:
            if not raw_requestline.endswith("\n"):
                raise Cut()
            result = super().read_request(raw_requestline)
        finally:
            HEADS.waiting.pop(self, None)
        block = self.headers.block
        if not (block in ("\r\n", "\n") or block.endswith(("\n\r\n", "\n\n"))):
            raise Cut()
        if self._framing is not None:
            raise Refused(400, self._framing)
        line = (
            raw_requestline[:-2] if raw_requestline.endswith("\r\n") else raw_requestline.removesuffix("\n")
        )
        problem = head_problem(line, self.headers.block)
        if problem is not None:
            raise problem
        return result

    def MessageClass(self, fp: BinaryIO, *args: Any) -> OldMessage:  # noqa: N802 - pywsgi's name
        try:
            message = parse_headers(fp)
        except client.HTTPException:
            raise Refused(431, f"more than {HEADERS_MAX} header lines") from None
        if message.status:  # "Line too long"
            raise Refused(431, f"a header line longer than {HEADER_LINE_MAX} bytes")
        self._framing = framing_problem(message)
        return message

    def _handle_client_error(self, ex: Exception) -> tuple[str, bytes] | None:
        # pywsgi's answers an empty 400 (and prints a traceback for more than 100 headers).
        if isinstance(ex, Cut | OSError):
            return None  # the client went (or head_late ended its reads: handle_one_request's 408)
        if not isinstance(ex, Refused):
            ex = Refused(400, "a malformed request")
        self.log_error("(from %s) %s", self.client_address, ex.reason)
        return str(ex.status), refusal(ex.status, ex.reason)

    def refuse(self, status: str, response: bytes) -> None:
        """Send a refusal and close the connection as nginx's lingering close does: the write side
        first, then what the client still sends is read and dropped (for up to LINGER seconds), so
        that its unread bytes do not make the close a TCP reset, which can destroy the response
        before the client reads it (a 100 KB target, a 1 MB header)."""
        if status == "414":  # pywsgi's own, before any of the request was parsed
            response = refusal(414, f"a request line longer than {REQUEST_LINE_MAX} bytes")
        self.status = status
        sock = self.socket
        try:
            sock.sendall(response)
            sock.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER
            while (left := deadline - time.monotonic()) > 0:
                sock.settimeout(left)
                if not sock.recv(65536):
                    break
        except OSError:  # the client is gone, or the time is up
            pass

    def _write_with_headers(self, data: bytes) -> None:
        # pywsgi's own sends the header block and the body in two sends (two packets with TCP_NODELAY).
        if isinstance(data, str):
            data = data.encode("latin-1")  # pywsgi's own 400 has a str body ('')
        self.headers_sent = True
        self.finalize_headers()
        head = bytearray(b"HTTP/1.1 ")
        head += self.status
        head += b"\r\n"
        for name, value in self.response_headers:
            head += name + b": " + value + b"\r\n"
        head += b"\r\n"
        if self.response_use_chunked or len(data) > ONE_SEND:
            self._sendall(head)
            self._write(data)
        else:
            self._sendall(head + data)

    def log_request(self) -> None:
        # gunicorn's handler formats two datetimes per request before its logger drops the entry.
        if self.access_log_enabled:
            super().log_request()

    def _check_http_version(self) -> bool:
        # pywsgi's own parses the version into a tuple of ints for every request.
        return self.request_version in ("HTTP/1.1", "HTTP/1.0") or super()._check_http_version()

    def finalize_headers(self) -> None:
        if self.provided_date is None:
            self.response_headers.append((b"Date", http_date()))
            self.provided_date = True
        super().finalize_headers()

    def _sendall(self, data: bytes) -> None:
        # gevent's sendall asks the kernel for the socket's send buffer size (a system call) before
        # each send; a response the buffer takes whole goes out in one send. Errors as pywsgi's own.
        try:
            sent = self.socket.send(data)
            if sent < len(data):
                self.socket.sendall(memoryview(data)[sent:])
        except OSError as exc:
            req = logs.CURRENT.get()
            if req is not None and req.pending_id is not None:
                # The app left while its call was held: the answer is saved, the response goes nowhere.
                metrics.pending_event("app_gone")
                logger.info("app gone", extra={"pending_id": req.pending_id, "error": type(exc).__name__})
            self.status = f"socket error: {exc}"
            if self.code > 0:
                self.code = -self.code
            raise
        self.response_length += len(data)


class Idle:
    """The connections of a worker that wait on the lean path for their next request (IDLE), or for
    the rest of a request's head (HEADS), each with the time it may wait until. One greenlet per
    table (and hub) looks twice a second and acts on those past their time (`action`), and on every
    one once the worker is stopping: a gevent timer for each wait cost a request ~12 us of its ~90.
    A connection so closes within half a second after keep-alive's idle time."""

    SWEEP = 0.5  # seconds between looks

    def __init__(self, action: Callable[[Handler], None]) -> None:
        self.action = action  # what is done to a connection past its time
        self.waiting: dict[Handler, float] = {}
        self.sweepers: dict[Any, gevent.Greenlet] = {}  # by hub

    def start(self) -> None:
        # Started in the worker (gunicorn forks it with this module imported), a sweeper per hub: a
        # process serving in several threads (the tests) has a hub per thread, and a hub that is gone
        # took its sweeper with it.
        hub = gevent.get_hub()
        if hub not in self.sweepers:
            self.sweepers[hub] = gevent.spawn(self._sweep)

    def _sweep(self) -> None:
        while True:
            gevent.sleep(self.SWEEP)
            try:
                self.close_idle(time.monotonic())
            except Exception:  # a bug must not leave idle connections open for the life of the worker
                logger.exception("the idle connections' sweep failed")

    def close_idle(self, now: float) -> None:
        for handler, until in list(self.waiting.items()):
            if until <= now or handler.server.closed:
                self.waiting.pop(handler, None)
                self.action(handler)


IDLE = Idle(Handler.wake)
# The connections whose request head is being read on pywsgi's path, each with the time its head must
# have come by (header_timeout from its first bytes, as nginx's client_header_timeout): a head sent
# in part, or a byte at a time, is cut off with a 408 instead of holding its connection for ever.
HEADS = Idle(Handler.head_late)


class Body(Input):
    """pywsgi's Input whose reads each wait at most `wait` seconds for the client's next bytes (as
    nginx's client_body_timeout): a body that stops coming (a Content-Length larger than what is
    sent) fails its read with TimeoutError, which the app answers with a 408 and a close. The
    socket's timeout is set for the read only: a held call never reads, and a response's sends are
    not bounded by it."""

    __slots__ = ("conn", "wait")

    def start(self, conn: Any, wait: float) -> None:
        self.conn, self.wait = conn, wait

    def read(self, length: int | None = None) -> bytes:
        return self._waiting(super().read, length)

    def readline(self, size: int | None = None) -> bytes:
        return self._waiting(super().readline, size)

    def _waiting(self, read: Callable[[int | None], bytes], size: int | None) -> bytes:
        conn = self.conn
        conn.settimeout(self.wait)
        try:
            return read(size)
        finally:
            conn.settimeout(None)


class Reply:
    """One response of the lean path, framed and checked as pywsgi frames and checks it: its head goes
    out with its first bytes of body (or alone, at the end, for an empty one), a Date added unless the
    app gave one, its length counted when the app returned a list without one, chunked when it
    returned anything else. An app that raises before anything was sent gets pywsgi's 500."""

    __slots__ = ("handler", "close", "status", "headers", "sent", "chunked", "code", "gone")

    def __init__(self, handler: Handler, close: bool):
        self.handler = handler
        self.close = close  # the request asked for it, or the app's headers do
        self.status: str | None = None
        self.headers: list[tuple[str, str]] = []
        self.sent = False  # the head went out
        self.chunked = False
        self.code = 0
        self.gone = False  # a send failed: the client went away

    def start_response(self, status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
        if exc_info is not None:
            try:
                if self.sent:
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        self.status, self.headers = status, headers
        return self.write

    def run(self, app: Any, env: dict[str, Any]) -> bool:
        """Call the app and send what it returns; False when the connection must close."""
        result = None
        try:
            result = app(env, self.start_response)
            if type(result) in (list, tuple) and self.status is not None and not self.sent:
                data = result[0] if len(result) == 1 else b"".join(result)
                head = self._head(len(data))
                self._send(head, self._framed(data))
            else:
                for data in result:
                    if data:
                        self.write(data)
                if not self.sent:
                    self.write(b"")  # the head of an empty body (or the app's missing start_response)
                if self.chunked:
                    self._sendall(b"0\r\n\r\n")
        except Exception:
            if self.gone:
                return False  # semula's _sendall logged a held call's client as gone
            logger.exception("the app failed")
            if not self.sent:
                status, headers, body = INTERNAL_ERROR
                self.status, self.headers, self.chunked = status, headers, False
                with contextlib.suppress(OSError):
                    head = self._head(len(body))
                    self._send(head, self._framed(body))
            return False
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        return True

    def write(self, data: bytes) -> None:
        """The write() of start_response, and each block of an iterated body."""
        if self.sent:
            if data:
                self._sendall(self._framed(data))
            return
        if self.status is None:
            raise ValueError("The application did not call start_response()")
        head = self._head(None)
        self._send(head, self._framed(data))

    def _framed(self, data: bytes) -> bytes:
        """A block of the body as it goes out (a chunk of a chunked one), once the head is made."""
        if not data:
            return data
        if self.code in (204, 304):
            raise ValueError(f"The {self.code} response must have no body")
        return b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data

    def _send(self, head: bytes, data: bytes) -> None:
        """The head and the first block, framed, in one send when they are small."""
        self.sent = True
        if len(data) > ONE_SEND:
            self._sendall(head)
            self._sendall(data)
        else:
            self._sendall(head + data)

    def _sendall(self, data: bytes) -> None:
        try:
            self.handler._sendall(data)
        except OSError:
            self.gone = True
            raise

    def _head(self, length: int | None) -> bytes:
        """The status line and headers; `length` is the body's when the app returned a list."""
        status = self.status
        assert status is not None
        self.code = code = int(status.split(" ", 1)[0])
        given_length = date = None
        lines = ["HTTP/1.1 ", status, "\r\n"]
        for name, value in self.headers:
            lower = name.lower()
            if lower == "content-length":
                given_length = value
            elif lower == "date":
                date = value
            elif lower == "connection" and value == "close":
                self.close = True
            lines += (name, ": ", value, "\r\n")
        text = "".join(lines)
        # pywsgi's check against response splitting: a CR or LF only where the lines above put one.
        breaks = 1 + len(self.headers)
        if text.count("\n") != breaks or text.count("\r") != breaks:
            raise ValueError("carriage return or newline in the status or a header")
        head = text.encode("latin-1")
        if date is None:
            head += b"Date: " + http_date() + b"\r\n"
        if code in (204, 304):
            if given_length is not None and given_length != "0":
                raise ValueError(f"Invalid Content-Length for {code} response: {given_length!r}")
        elif given_length is None:
            if length is not None:
                head += b"Content-Length: %d\r\n" % length
            else:
                self.chunked = True
                head += b"Transfer-Encoding: chunked\r\n"
        handler = self.handler
        handler.code, handler.status = code, status.encode("latin-1")
        return head + b"\r\n"


class Worker(GeventPyWSGIWorker):
    wsgi_handler = Handler

    def init_process(self) -> None:
        from semula.config import Settings  # read as gunicorn_conf read it; valid, or it did not start

        settings = Settings.from_env()
        Handler.header_timeout, Handler.body_timeout = settings.header_timeout, settings.body_timeout
        super().init_process()

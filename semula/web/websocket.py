"""A server-side WebSocket (RFC 6455) on the connection of an upgrade request, under semula's worker.

The framing, the handshake's checks, pings and the closing handshake are the `websockets` library's
sans-I/O protocol (websockets.server.ServerProtocol): this module only moves its bytes between it
and the connection. The 101 response goes out through the WSGI server's start_response, as any
response does (so its status is the one the server logs and counts); after it the connection is the
socket's: the worker sets `gunicorn.sock` in every request's environ (semula/worker.py), and an
upgrade request's `wsgi.input` is pywsgi's reader of the connection, which may hold bytes the
client sent right after its handshake.

One greenlet reads the connection for as long as it is open: it answers pings (the openai SDK's
client sends one every 20 s and closes a connection that does not answer) while the request's
greenlet waits for an answer to a parked call, and queues each whole message (fragments joined)
for receive(). Sends from both are serialised by a lock, each taking every frame the protocol has
ready, so frames never interleave. When the socket is done the connection is shut down and its
reader closed, so the server reads no further request from it and closes it (decision 0056).
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from websockets.datastructures import Headers
from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol

if TYPE_CHECKING:
    import gevent.queue

from semula.core import errors

logger = logging.getLogger("semula.web")

READ = 64 * 1024  # bytes asked of the connection at a time
CLOSING_WAIT = 5.0  # s: how long close() waits for the client's answer to the server's close frame


class Gone(Exception):
    """The client closed the socket, or the connection broke: nothing more can be sent."""


def _handshake(environ: dict[str, Any]) -> Request:
    """The handshake request as the protocol reads it: the request's path and headers."""
    headers = Headers()
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[key[5:].replace("_", "-")] = value
    return Request(environ.get("RAW_URI") or environ.get("PATH_INFO", "/"), headers)


def frames(texts: list[bytes]) -> bytes:
    """Text messages framed as the protocol frames what this server sends (unmasked, unfragmented,
    no extension offered): bytes send_frames() can send again, on this socket or another."""
    return b"".join(Frame(Opcode.TEXT, text).serialize(mask=False, extensions=[]) for text in texts)


class WebSocket:
    """An accepted WebSocket: receive() its messages, send() text messages, close() it."""

    def __init__(self, sock: socket.socket, reader: Any, protocol: ServerProtocol):
        self._sock = sock
        self._reader = reader  # the connection's buffered reader: it may hold the client's first bytes
        # gevent is imported by the first socket, not with the app: a fifth of `semula replay`'s start,
        # whose threaded server takes no WebSocket (gunicorn's gevent worker has it imported already).
        import gevent
        import gevent.lock
        import gevent.queue

        self._protocol = protocol
        self._messages: gevent.queue.Queue[bytes | None] = gevent.queue.Queue()
        self._sending = gevent.lock.Semaphore()
        self._gone = False  # nothing more can be sent
        self._ended = False  # receive() has seen the end
        self._reading = gevent.spawn(self._read)

    @classmethod
    def accept(
        cls,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
        *,
        max_size: int,
        headers: list[tuple[str, str]] | tuple[()] = (),
    ) -> WebSocket:
        """Answer the handshake with 101 (and `headers`) and take over the connection; a request that
        is no valid handshake gets a 400 before anything is sent (raised: the caller answers it)."""
        sock = environ.get("gunicorn.sock")
        stream = environ.get("wsgi.input")
        reader = getattr(stream, "rfile", stream)  # pywsgi's Input wraps the reader of an upgrade it read
        if sock is None or not hasattr(reader, "read1"):
            raise errors.BadRequest(
                "This server cannot take a WebSocket here: semula serves them under `semula serve` only.",
                code="websocket_unsupported",
            )
        # The handshake is checked and answered by the protocol's own rules (no extension is offered);
        # the request was read by the WSGI server, so the frames are read by a protocol that starts open.
        response = ServerProtocol().accept(_handshake(environ))
        if response.status_code != 101:
            reason = response.body.decode("utf-8", "replace").strip().splitlines()[0]
            raise errors.BadRequest(
                f"Not a WebSocket handshake: {reason}", code="invalid_websocket_handshake"
            )
        write = start_response("101 Switching Protocols", [*response.headers.raw_items(), *headers])
        write(b"")  # the head now: the client sends nothing before it
        return cls(sock, reader, ServerProtocol(state=State.OPEN, max_size=max_size))

    def receive(self) -> bytes | None:
        """The next message's payload (a text message's UTF-8); None once the socket is closed."""
        if self._ended:
            return None
        message = self._messages.get()
        self._ended = message is None
        return message

    def send(self, *texts: bytes) -> None:
        """Send text messages (UTF-8 bytes), in one write; raises Gone when the socket is closed or
        broken. A stream's events sent together cost one system call rather than one each."""
        with self._sending:
            try:
                for text in texts:
                    self._protocol.send_text(text)
            except InvalidState:
                raise Gone() from None
            self._flush()

    def send_frames(self, data: bytes) -> None:
        """Send text messages framed by frames(), in one write; raises Gone when the socket is closed
        or broken. A kept turn's frames are made once, not once per reply (decision 0056)."""
        with self._sending:
            if self._protocol.state is not State.OPEN:
                raise Gone()
            self._flush()  # anything the protocol has ready (a pong) goes first, whole
            try:
                self._sock.sendall(data)
            except OSError:
                self._gone = True
                raise Gone() from None

    def wait_closed(self, seconds: float) -> None:
        """Wait `seconds`, or less when the client closes the socket or the connection breaks first
        (pings are answered meanwhile)."""
        self._reading.join(seconds)

    def abort(self) -> None:
        """Cut the connection where it stands, without the closing handshake: the client sees what a
        broken connection gives it (no close frame: its close code is 1006)."""
        with self._sending:
            self._gone = True
            self._shut()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Close the socket (the closing handshake when it is open) and the connection under it."""
        with self._sending:
            if self._protocol.state is State.OPEN and not self._gone:
                self._protocol.send_close(code, reason)
                with contextlib.suppress(Gone):
                    self._flush()
        self._reading.join(CLOSING_WAIT)
        self._reading.kill()
        self._shut()
        # The WSGI server reads no request after this: what the client sent past its frames (or
        # after the protocol stopped reading them) stays unread in this buffer, not a request line.
        with contextlib.suppress(OSError, ValueError):
            self._reader.close()

    def _read(self) -> None:
        """Feed what the client sends to the protocol (answering its pings and its close) and queue
        its messages, until the connection ends."""
        protocol = self._protocol
        parts: list[bytes] = []
        try:
            while protocol.state is not State.CLOSED:
                try:
                    data = self._reader.read1(READ)
                except (OSError, ValueError):
                    data = b""
                if data:
                    protocol.receive_data(data)
                else:
                    protocol.receive_eof()
                for frame in protocol.events_received():
                    if frame.opcode in (Opcode.TEXT, Opcode.BINARY, Opcode.CONT):
                        parts.append(frame.data)
                        if frame.fin:
                            self._messages.put(b"".join(parts))
                            parts = []
                with self._sending, contextlib.suppress(Gone):
                    self._flush()
                if not data or protocol.parser_exc is not None:
                    break
        finally:
            self._messages.put(None)

    def _flush(self) -> None:
        """Send every frame the protocol has ready, in one write; the caller holds the lock."""
        frames = self._protocol.data_to_send()
        ended = bool(frames) and not frames[-1]  # the protocol's end of stream comes last
        data = b"".join(frames)
        if data:
            try:
                self._sock.sendall(data)
            except OSError:
                self._gone = True
                raise Gone() from None
        if ended:  # the server closes the connection
            self._gone = True
            self._shut()

    def _shut(self) -> None:
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)

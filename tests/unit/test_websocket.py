"""semula.web.websocket on semula's worker handler: a gevent pywsgi server in a thread of its own (with
its own hub; the suite is not monkey-patched) and the websockets library's client in the test's."""

from __future__ import annotations

import json
import socket
import threading

import gevent
import pytest
from gevent.pywsgi import WSGIServer
from websockets.exceptions import ConnectionClosedError, ConnectionClosedOK
from websockets.sync.client import connect

from bench.worker_cpu import _Log
from semula.core import errors
from semula.web.websocket import Gone, WebSocket, frames
from semula.worker import Handler
from tests.helpers import wait_for

MAX_SIZE = 1024
SEEN: dict[str, list] = {}  # what each path's socket received, message by message (None: closed)
ENDED: dict[str, object] = {}  # how each path's connection ended on the server's side
RELEASE = threading.Event()  # lets /busy answer


def app(environ, start_response):
    """Echoes each message; /busy first waits for the test's RELEASE (its reader still answers pings),
    /close closes after the first message."""
    try:
        ws = WebSocket.accept(environ, start_response, max_size=MAX_SIZE, headers=[("X-Extra", "1")])
    except errors.SemulaError as exc:
        body = json.dumps(exc.to_dict()).encode()
        start_response(f"{exc.status} Refused", [("Content-Length", str(len(body)))])
        return [body]
    path = environ["PATH_INFO"]
    try:
        while True:
            message = ws.receive()
            SEEN.setdefault(path, []).append(message)
            if message is None:
                break
            while path == "/busy" and not RELEASE.is_set():
                gevent.sleep(0.01)  # a held call's wait: other greenlets run
            if path == "/frames":  # made once, sent as they are (a kept turn's frames)
                ws.send_frames(frames([b"framed " + message, b"x" * 200, b"y" * 70000]))
            else:
                ws.send(b"echo " + message)
            if path == "/wait":
                ws.wait_closed(60)
                SEEN[path].append("waited")
            if path in ("/abort", "/wait"):
                ws.abort()
                try:
                    ws.send(b"never")
                except Gone:  # the connection is cut: nothing more goes out
                    SEEN[path].append("gone")
                break
            if path == "/close":
                break
    finally:
        ws.close()
    return []


@pytest.fixture(scope="module")
def url():
    """The server's URL; the server is made, run and stopped in its thread (a hub is per thread)."""
    ready, stop = threading.Event(), threading.Event()
    box: dict = {}

    def serve():
        server = WSGIServer(("127.0.0.1", 0), app, handler_class=Ending, log=None, error_log=None)
        server.log = _Log()
        server.start()
        box["port"] = server.server_port
        ready.set()
        while not stop.is_set():
            gevent.sleep(0.05)
        server.stop(timeout=1)
        gevent.get_hub().destroy(destroy_loop=True)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    yield f"ws://127.0.0.1:{box['port']}"
    stop.set()
    thread.join(10)


class Ending(Handler):
    """semula's handler, noting how each connection's handling ended (pywsgi's handle())."""

    def handle(self):
        try:
            super().handle()
        except BaseException as exc:
            ENDED[self.path] = exc
            raise
        ENDED[self.path] = "closed"


def seen(path: str, count: int) -> list:
    """What the socket of `path` received, once it has `count` entries."""
    return wait_for(lambda: SEEN.get(path) if len(SEEN.get(path, ())) >= count else None, timeout=10)


def test_messages_go_both_ways_in_order_and_whole(url):
    with connect(url + "/both", open_timeout=5) as ws:
        assert ws.response.headers["X-Extra"] == "1" and ws.response.status_code == 101
        ws.send("one")
        ws.send(["tw", "o"])  # a message sent in two fragments
        ws.send("é" * 10)
        assert [ws.recv(timeout=5) for _ in range(3)] == ["echo one", "echo two", "echo " + "é" * 10]
    assert seen("/both", 4) == [b"one", b"two", ("é" * 10).encode(), None]


def test_frames_made_once_are_messages_of_every_length(url):
    # Short, 16-bit and 64-bit lengths: the library's framing, as the client's protocol reads it.
    with connect(url + "/frames", open_timeout=5, max_size=None) as ws:
        ws.send("a")
        ws.send("b")
        got = [ws.recv(timeout=5) for _ in range(6)]
    assert got[0::3] == ["framed a", "framed b"]
    assert got[1::3] == ["x" * 200] * 2 and got[2::3] == ["y" * 70000] * 2


def test_pings_are_answered_while_the_app_is_busy(url):
    with connect(url + "/busy", open_timeout=5) as ws:
        ws.send("slow")
        try:
            assert ws.ping().wait(10)  # answered by the reader while the app waits over the message
        finally:
            RELEASE.set()
        assert ws.recv(timeout=5) == "echo slow"


def test_a_client_close_ends_receive(url):
    ws = connect(url + "/bye", open_timeout=5)
    ws.send("bye")
    assert ws.recv(timeout=5) == "echo bye"
    ws.close()
    assert ws.protocol.close_rcvd.code == 1000  # the server answered the closing handshake
    assert seen("/bye", 2) == [b"bye", None]
    assert wait_for(lambda: ENDED.get("/bye"), timeout=10) == "closed"


def test_the_server_closes_after_its_last_message(url):
    with connect(url + "/close", open_timeout=5) as ws:
        ws.send("last")
        assert ws.recv(timeout=5) == "echo last"
        with pytest.raises(ConnectionClosedOK):
            ws.recv(timeout=5)


def test_an_abort_cuts_the_connection_without_a_close_frame(url):
    with connect(url + "/abort", open_timeout=5) as ws:
        ws.send("cut")
        assert ws.recv(timeout=5) == "echo cut"
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd is None  # no close frame: the client's 1006, as for a broken connection
    assert seen("/abort", 2) == [b"cut", "gone"]


def test_wait_closed_returns_when_the_client_leaves(url):
    ws = connect(url + "/wait", open_timeout=5)
    ws.send("hold")
    assert ws.recv(timeout=5) == "echo hold"
    ws.close()  # long before the app's 60 s
    assert seen("/wait", 3) == [b"hold", "waited", "gone"]


def test_a_message_over_the_limit_closes_with_1009(url):
    with connect(url + "/big", open_timeout=5) as ws:
        ws.send("x" * (MAX_SIZE + 1))
        with pytest.raises(ConnectionClosedError) as closed:
            ws.recv(timeout=5)
    assert closed.value.rcvd.code == 1009
    assert seen("/big", 1) == [None]
    # The unread rest of the message was not taken for a next request (a 400 to a closed socket).
    assert wait_for(lambda: ENDED.get("/big"), timeout=10) == "closed"


def test_a_request_that_is_no_handshake_is_refused_before_any_upgrade(url):
    port = int(url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        # No Sec-WebSocket-Key: the protocol's own check refuses it; nothing was switched.
        conn.sendall(
            b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\n\r\n"
        )
        answer = conn.recv(65536)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    error = json.loads(body)["error"]
    assert error["code"] == "invalid_websocket_handshake" and "Sec-WebSocket-Key" in error["message"]

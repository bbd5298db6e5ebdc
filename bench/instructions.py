"""Instructions per request through semula's own worker and app, in one process, counted by callgrind:
a figure that does not move with the machine's load, to compare two versions of the code on a shared
or noisy machine (wall-clock runs there vary by ±10%).

    .venv/bin/python -m bench.instructions [--mode hit|first|turn] [--sdk] [--db sqlite|postgres]
        [--requests 1000] [--src DIR] [--app semula|floor] [--kib 88] [--switch-interval S]
        [--api chat|chat-stream|responses|messages|messages-stream|gemini|gemini-stream]

A request goes through `semula.worker.Handler.handle_one_request` (gevent's pywsgi with semula's
cuts) into the app `semula serve` runs (SQLite, or with `--db postgres` a database of its own on
SEMULA_BENCH_POSTGRES_URL's server, whose own instructions are not counted; auth on, the call log
batched), read from an in-memory stream and answered into a socket that takes every send whole:
everything a worker runs for it but the system calls and the event loop. `--mode hit` sends the
recorded 1.6 KB pair again and again (a kept hit); `first` gives every request a `user` of its own
(a first sight). Requests carry wrk's four headers, or with `--sdk` the sixteen the official
`openai` SDK sends. The count is that of a run of `--requests` requests less that of a run of none,
divided by the requests: the two runs' start-ups differ by some millions of instructions, so few
requests give a noisy figure (a kept hit measured 349,000-431,000 at 300 requests, 408,000-410,000
at 3,000). `--src DIR` imports semula from another checkout (a worktree of an older
commit). `--app floor` counts the floor (bench/floor_app.py: the bare route's steps as plain WSGI)
through the same worker instead, so the two counts differ by what semula's own code adds to a
request. `--kib N` (2 or more): the store (or the floor's table) holds bench.workloads' agent request
of about N KiB with its tools instead of the pair, and that request is sent (issue #52's first sight
at 2, 32 and 88 KB). `--api` (with `--mode hit`): the pair as bench.dialects sends it to another
API (`chat-stream`, `messages-stream`: the request with `"stream": true`; `gemini-stream`:
`:streamGenerateContent?alt=sse`), every API's form recorded as bench.dialects records them, so each
API's kept hit is counted against Chat's. Needs valgrind (`apt-get install valgrind`).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import replace
from typing import Any

SDK_HEADERS = (
    b"Accept-Encoding: gzip, deflate\r\nAccept: application/json\r\nUser-Agent: OpenAI/Python 1.99.0\r\n"
    b"X-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.99.0\r\nX-Stainless-OS: Linux\r\n"
    b"X-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\nX-Stainless-Runtime-Version: 3.11.7\r\n"
    b"X-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\nConnection: keep-alive\r\n"
)
WARM = 50  # requests before the counted ones: imports, caches, the first statements, the kept hit


# A descriptor that is always readable: the connection's first bytes "came" (Handler._first_bytes_came).
_READABLE, _writer = os.pipe()
os.write(_writer, b"x")


class _Socket:
    """Takes every send whole, and checks that each response is a 200 (a stream's later sends carry
    its events: only a send that starts a response is looked at)."""

    def __init__(self) -> None:
        self.responses = 0

    def fileno(self) -> int:
        return _READABLE

    def settimeout(self, timeout: float | None) -> None:
        pass

    def send(self, data: bytes) -> int:
        if bytes(data[:5]) == b"HTTP/":
            if bytes(data[:15]) != b"HTTP/1.1 200 OK":
                raise SystemExit(f"not a replay: {bytes(data[:300])!r}")
            self.responses += 1
        return len(data)

    def sendall(self, data: bytes) -> None:
        self.send(data)


class _Upgraded(_Socket):
    """The connection of a WebSocket: its 101, then the turns' frames, each turn's checked (by the
    count of completed events the frames carry, one a turn)."""

    def __init__(self) -> None:
        import gevent.event

        super().__init__()
        self.head, self.completed, self.errors = b"", 0, 0
        self.answered = gevent.event.Event()  # set as a turn's reply is sent

    def send(self, data: bytes) -> int:
        if not self.head:
            self.head = bytes(data)
            if not self.head.startswith(b"HTTP/1.1 101"):
                raise SystemExit(f"not an upgrade: {self.head[:300]!r}")
        # A turn's reply is one send, its completed event (2.6 KB) last: its tail is looked at, so
        # that this stand-in for the client adds little to the count.
        if data.find(b'{"type":"response.completed"', max(0, len(data) - 4096)) != -1:
            self.completed += 1
        elif data.find(b'{"type":"error"') != -1:
            self.errors += 1
        self.answered.set()
        return len(data)

    def shutdown(self, how: int) -> None:
        pass


class _Client(io.RawIOBase):
    """What the client sends on the connection, as a client does it: the handshake, then each turn's
    frame once the turn before it was answered, then its close frame once the last one was."""

    def __init__(self, pieces: list[bytes], sock: _Upgraded):
        self.pieces, self.sock, self.given = list(pieces), sock, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.given >= len(self.pieces):
            return 0
        while self.sock.completed + self.sock.errors < self.given - 1:  # the turn before is unanswered
            self.sock.answered.clear()
            self.sock.answered.wait()
        piece = self.pieces[self.given]
        size = min(len(piece), len(buffer))
        buffer[:size] = piece[:size]
        if size < len(piece):
            self.pieces[self.given] = piece[size:]
        else:
            self.given += 1
        return size


# --api: the route and body bench.dialects sends each API (the pair in its form), and its own headers.
def _api_request(api: str) -> tuple[bytes, bytes, bytes]:
    from bench import dialects, pair

    gemini = dialects.GEMINI_ROUTE.encode()
    table = {
        "chat": (b"/v1/chat/completions", pair.request_body(), b""),
        "chat-stream": (b"/v1/chat/completions", {**pair.request_body(), "stream": True}, b""),
        "responses": (b"/v1/responses", pair.responses_body(), b""),
        "messages": (b"/v1/messages", pair.messages_body(), b"anthropic-version: 2023-06-01\r\n"),
        "messages-stream": (
            b"/v1/messages",
            {**pair.messages_body(), "stream": True},
            b"anthropic-version: 2023-06-01\r\n",
        ),
        "gemini": (gemini, pair.gemini_body(), b""),
        "gemini-stream": (
            gemini.replace(b":generateContent", b":streamGenerateContent?alt=sse"),
            pair.gemini_body(),
            b"",
        ),
    }
    path, body, extra = table[api]
    return path, json.dumps(body).encode(), extra


APIS = ("chat", "chat-stream", "responses", "messages", "messages-stream", "gemini", "gemini-stream")


def recording(kib: int) -> Any:
    """The recording sent: the pair below 2 KiB, else the agent request of about `kib` KiB."""
    from bench import workloads

    return workloads.agent_recording(kib * 1024) if kib >= 2 else None


def semula_app(url: str | None, kib: int = 0, every_api: bool = False) -> tuple[Any, str]:
    """The app `semula serve` runs, on the pair or the agent request of `kib` KiB (SQLite when no url;
    `every_api`: recorded for each API, as bench.dialects records it), its call log batched; a token."""
    from bench import dialects, replay
    from semula.config import Settings
    from semula.db import connect
    from semula.web import create_app

    url = url or f"sqlite:///{tempfile.mkdtemp(prefix='semula-instructions-')}/bench.db"
    agent = recording(kib)
    if every_api:
        token = dialects.load(url)
    elif agent is None:
        token = replay.load_pair(url)
    else:
        from semula.service import bundles, projects

        with replay.service(url) as ctx:
            projects.create(ctx, {"name": replay.PROJECT})
            bundle = {
                "bundle": {"format": "semula-bundle", "version": 1},
                "entries": [{"request": agent.request, "response": agent.response}],
            }
            bundles.import_bundle(ctx, replay.PROJECT, io.BytesIO(json.dumps(bundle).encode()))
            token = replay.replay_token(ctx)
    app = create_app(replace(Settings(), database_url=url, auth=True), connect(url, pool_size=2))
    layer = app.wsgi_app
    while not hasattr(layer, "calllog"):
        layer = getattr(layer, "app", None) or layer.fallback
    layer.calllog.batched = True
    return app, token


def serve(
    mode: str,
    sdk: bool,
    requests: int,
    url: str | None = None,
    which: str = "semula",
    kib: int = 0,
    api: str = "chat",
) -> None:
    """Run WARM + `requests` requests through a Handler (the child callgrind counts)."""
    from bench import pair
    from semula.worker import Handler

    agent = recording(kib)
    if which == "floor":
        if agent is not None:  # the floor's table holds the agent request (read at its import)
            recordings = tempfile.mkstemp(prefix="semula-instructions-", suffix=".jsonl")[1]
            with open(recordings, "w") as out:
                out.write(json.dumps({"request": agent.request, "response": agent.response}) + "\n")
            os.environ["SEMULA_BENCH_RECORDINGS"] = recordings
        from bench import floor_app

        app, token = floor_app.app, "unused"
    else:
        app, token = semula_app(url, kib, every_api=mode == "turn" or api != "chat")
    path, extra = b"/v1/chat/completions", b""
    if api != "chat":
        if mode != "hit" or agent is not None or which != "semula":
            raise SystemExit("--api is for --mode hit of the pair through semula")
        path, api_body, extra = _api_request(api)
    if agent is None:  # a `user` of its own for each first sight
        body, mark, new = pair.request_bytes(), b'"messages"', b'"user":"u%d","messages"'
    else:  # it has a `user`: its value is each first sight's own
        body, mark, new = (
            json.dumps({**agent.request, "user": "u"}).encode(),
            b'"user": "u"',
            b'"user": "u%d"',
        )

    def request(number: int) -> bytes:
        raw = body if mode == "hit" else body.replace(mark, new % number, 1)
        if api != "chat":
            raw = api_body
        head = b"POST /p/bench" + path + b" HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n" + extra
        head += SDK_HEADERS if sdk else b""
        head += b"Authorization: Bearer " + token.encode() + b"\r\nContent-Type: application/json\r\n"
        return head + b"Content-Length: %d\r\n\r\n" % len(raw) + raw

    class Log:
        class cfg:  # noqa: N801 - gunicorn's attribute
            keepalive = 2
            timeout = 30

        access_log_enabled = False

    class Server:
        log, closed, application = Log(), False, staticmethod(app)

        def get_environ(self) -> dict[str, Any]:
            return {
                "SERVER_NAME": "bench",
                "SERVER_PORT": "80",
                "wsgi.url_scheme": "http",
                "wsgi.errors": sys.stderr,
            }

    handler = Handler.__new__(Handler)
    handler.socket, handler.client_address, handler.server = _Socket(), ("127.0.0.1", 5555), Server()
    if mode == "turn":
        handler.socket = _Upgraded()
        handler.rfile = io.BufferedReader(_Client(socket_turns(token, WARM + requests), handler.socket))
        handler.handle_one_request()  # the upgrade, then every turn, until the client's close frame
        if handler.socket.completed != WARM + requests or handler.socket.errors:
            raise SystemExit(f"{handler.socket.completed} turns completed, {handler.socket.errors} errors")
        return
    handler.rfile = io.BufferedReader(io.BytesIO(b"".join(request(n) for n in range(WARM + requests))))
    for _ in range(WARM + requests):
        if handler.handle_one_request() is not True:
            raise SystemExit("the connection closed")
    if handler.socket.responses != WARM + requests:
        raise SystemExit(f"{handler.socket.responses} responses to {WARM + requests} requests")


def socket_turns(token: str, turns: int) -> list[bytes]:
    """What a client of the Responses WebSocket sends: the handshake (wrk's headers but the body's),
    `turns` turns of the pair's Responses request, and its close frame."""
    from bench import websocket

    head = (
        b"GET /p/bench/v1/responses HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer " + token.encode() + b"\r\n\r\n"
    )
    close = (
        bytes([0x88, 0x82])
        + websocket.MASK
        + bytes(a ^ b for a, b in zip(b"\x03\xe8", websocket.MASK[:2], strict=True))
    )
    return [head, *[websocket.masked_frame(websocket.turn_message())] * turns, close]


def counted(argv: list[str], env: dict[str, str], db: str) -> int:
    """The instructions callgrind counts for one run of this module as the child (on PostgreSQL, in a
    database of its own, dropped after)."""
    from bench.common import PostgresDatabase

    database = PostgresDatabase().create() if db == "postgres" else None
    try:
        url = ["--url", database.url] if database else []
        out = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--callgrind-out-file=/dev/null",
                sys.executable,
                __file__,
                *argv,
                *url,
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        if database:
            database.drop()
    found = re.search(r"Collected : (\d+)", out.stderr)
    if found is None:
        raise SystemExit(f"callgrind said no count:\n{out.stderr[-2000:]}")
    return int(found[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("hit", "first", "turn"), default="hit")
    parser.add_argument("--sdk", action="store_true", help="the openai SDK's sixteen headers, not wrk's four")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--src", default=None, help="import semula from this checkout instead")
    parser.add_argument(
        "--app", choices=("semula", "floor"), default="semula", help="floor: bench/floor_app.py instead"
    )
    parser.add_argument("--kib", type=int, default=0, help="the agent request of about this many KiB")
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="sys.setswitchinterval in seconds, as a worker sets it (semula/web/wsgi.py); else Python's",
    )
    parser.add_argument("--api", choices=APIS, default="chat", help="the pair as this API's kept hit")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.src:
        sys.path.insert(0, args.src)
    if args.child is not None:
        if args.switch_interval is not None:
            sys.setswitchinterval(args.switch_interval)
        serve(args.mode, args.sdk, args.child, args.url, args.app, args.kib, args.api)
        return
    # The child runs this file as a script: the checkout to measure first on its path, then this one.
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [args.src, here]))}
    common = ["--mode", args.mode, "--app", args.app, "--kib", str(args.kib), "--api", args.api] + (
        ["--sdk"] if args.sdk else []
    )
    common += ["--src", args.src] if args.src else []
    common += ["--switch-interval", str(args.switch_interval)] if args.switch_interval is not None else []
    db = "none" if args.app == "floor" else args.db
    base = counted([*common, "--child", "0"], env, db)
    total = counted([*common, "--child", str(args.requests)], env, db)
    what = "the floor" if args.app == "floor" else f"{args.mode}, {args.db}"
    what += f", {args.kib} KiB agent request" if args.kib >= 2 else ""
    what += f", {args.api}" if args.api != "chat" else ""
    print(
        f"{(total - base) / args.requests:,.0f} instructions per request ({what}, "
        f"{'sdk' if args.sdk else 'wrk'} headers, semula from {args.src or here})"
    )


if __name__ == "__main__":
    main()

"""Responses API turns over a WebSocket (issue #47): the recorded pair's Responses request sent as
`response.create` turns on long-lived sockets, each turn timed from its send to its
`response.completed`.

wrk cannot speak WebSocket, so the turns are driven by a client of this module made to cost little
next to the server, as wrk does for the HTTP rows, and driven as wrk drives them: THREADS processes
(wrk's -t), CONNECTIONS sockets among them (wrk's -c), each socket sending its next turn when the
last one completed. A client process holds its sockets on one epoll loop of raw sockets: the turn's
frame is masked once and sent as the same bytes every time, and a reply is read by walking its
frames' headers until the frame whose payload begins with `{"type":"response.completed"` (the
server's events are compact JSON); a turn counts as answered when its reply has the length of the
one check() read and verified whole. The server's CPU per turn is measured as wrk's rows measure it
per request; the client's own CPU (its processes', waited for) is reported beside it and left out
of the `others` share, so the runs' quiet-machine rules are wrk's.
"""

from __future__ import annotations

import base64
import json
import multiprocessing
import os
import select
import socket
import time
from typing import Any
from urllib.parse import urlsplit

from bench import pair, replay
from bench.common import (
    BenchError,
    children_cpu_seconds,
    machine_busy_seconds,
    median,
    percentile,
    wait_quiet,
)
from bench.replay import OTHERS_LIMIT, THREADS, Target, settle

LABEL = "Responses, WebSocket turn"
ONE_SOCKET = "Responses, WebSocket turns on one socket"
COMPLETED = b'{"type":"response.completed"'
ERROR = b'{"type":"error"'
MASK = b"\x5a\x13\xc7\x3e"  # one masking key for every frame: the server unmasks whatever it is


_EXPECTED: dict[str, int] = {}  # a target's reply length, as check() read it


def turn_message() -> bytes:
    return json.dumps({"type": "response.create", **pair.responses_body()}).encode()


def masked_frame(payload: bytes) -> bytes:
    """A client's text frame (FIN, masked) of `payload`, as RFC 6455 frames it."""
    size = len(payload)
    if size < 126:
        head = bytes([0x81, 0x80 | size])
    elif size < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + size.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big")
    key = int.from_bytes((MASK * (size // 4 + 1))[:size], "big")
    return head + MASK + (int.from_bytes(payload, "big") ^ key).to_bytes(size, "big")


def connect(target: Target) -> socket.socket:
    """A socket upgraded by the handshake of `target`'s URL with its headers (non-blocking after)."""
    url = urlsplit(target.url)
    sock = socket.create_connection((url.hostname, url.port or 80), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {url.path} HTTP/1.1",
        f"Host: {url.netloc}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in target.headers.items() if name.lower() != "content-type"),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        got = sock.recv(4096)
        if not got:
            raise BenchError(f"{target.name}: the handshake was cut")
        head += got
    if not head.startswith(b"HTTP/1.1 101"):
        raise BenchError(f"{target.name}: the handshake was answered {head[:200]!r}")
    if head.index(b"\r\n\r\n") + 4 != len(head):
        raise BenchError(f"{target.name}: the server sent something before the first turn")
    return sock


def frame_at(buffer: bytes | bytearray, at: int) -> tuple[int, int] | None:
    """Where the payload of the (unmasked) frame at `at` starts and how long it is, once its header
    is in `buffer`."""
    size = len(buffer)
    if at + 2 > size:
        return None
    length = buffer[at + 1] & 0x7F
    if length < 126:
        return at + 2, length
    wide = 2 if length == 126 else 8
    if at + 2 + wide > size:
        return None
    return at + 2 + wide, int.from_bytes(buffer[at + 2 : at + 2 + wide], "big")


def reply_end(buffer: bytearray, at: int) -> tuple[int, bool | None]:
    """Walk the whole frames of `buffer` from `at` (the start of a frame): where the walk stopped,
    and True once it passed the turn's completed event, False an error event, None neither yet."""
    size = len(buffer)
    while (found := frame_at(buffer, at)) is not None and found[0] + found[1] <= size:
        start, end = found[0], found[0] + found[1]
        if buffer.startswith(COMPLETED, start):
            return end, True
        if buffer.startswith(ERROR, start):
            return end, False
        at = end
    return at, None


def one_turn(sock: socket.socket, frame: bytes) -> bytes:
    """One turn on a blocking socket, its reply's frames whole."""
    sock.sendall(frame)
    buffer, at = bytearray(), 0
    while True:
        got = sock.recv(1 << 16)
        if not got:
            raise BenchError("the socket closed during a turn")
        buffer += got
        at, done = reply_end(buffer, at)
        if done is not None:
            if not done or at != len(buffer):
                raise BenchError(f"a turn failed: {bytes(buffer[-300:])!r}")
            return bytes(buffer)


def reply_text(data: bytes) -> str:
    """The text the deltas of a turn's reply carry (its frames parsed whole)."""
    text, at = [], 0
    while (found := frame_at(data, at)) is not None:
        at = found[0] + found[1]
        event = json.loads(data[found[0] : at])
        if event["type"] == "response.output_text.delta":
            text.append(event["delta"])
    return "".join(text)


def _client(target: Target, sockets: int, expected: int, ready: Any, go: Any, out: Any) -> None:
    """One client process: `sockets` sockets turning until the deadline `go` sends; what it sends
    back is the turns' latencies (s) and the count of failed ones."""
    frame = masked_frame(turn_message())
    opened = [connect(target) for _ in range(sockets)]
    poller = select.epoll()
    state: dict[int, list[Any]] = {}  # fd: [socket, buffer, walked to, sent at]
    for sock in opened:
        sock.setblocking(False)
        poller.register(sock.fileno(), select.EPOLLIN)
        state[sock.fileno()] = [sock, bytearray(), 0, 0.0]
    ready.send(True)
    until = go.recv()
    latencies: list[float] = []
    failed = 0
    clock = time.perf_counter
    for entry in state.values():
        entry[3] = clock()
        entry[0].send(frame)
    active = len(state)
    while active:
        for fd, _ in poller.poll(1.0):
            entry = state[fd]
            sock, buffer = entry[0], entry[1]
            got = sock.recv(1 << 18)
            if not got:
                raise BenchError("the server closed a socket during a turn")
            buffer += got
            at, done = reply_end(buffer, entry[2])
            if done is None:
                entry[2] = at
                continue
            now = clock()
            if done and at == len(buffer) == expected:
                latencies.append(now - entry[3])
            else:
                failed += 1
            entry[1], entry[2] = bytearray(), 0
            if time.monotonic() < until:
                entry[3] = now
                sock.send(frame)  # a few hundred bytes: a socket's buffer takes them whole
            else:
                poller.unregister(fd)
                active -= 1
    for sock in opened:
        sock.close()
    out.send((latencies, failed))


def _drive(target: Target, seconds: float, expected: int) -> tuple[list[float], int, float, float]:
    """Turns on target.connections sockets in THREADS client processes for `seconds`: each turn's
    latency (s), the turns that failed, and the server's and the client's CPU seconds meanwhile."""
    context = multiprocessing.get_context("fork")
    shares = [target.connections // THREADS + (i < target.connections % THREADS) for i in range(THREADS)]
    pipes, processes = [], []
    for share in shares:
        ready_in, ready_out = context.Pipe(False)
        go_in, go_out = context.Pipe(False)
        out_in, out_out = context.Pipe(False)
        process = context.Process(target=_client, args=(target, share, expected, ready_out, go_in, out_out))
        process.start()
        pipes.append((ready_in, go_out, out_in))
        processes.append(process)
    for ready_in, _, _ in pipes:
        ready_in.recv()
    client0, server0 = children_cpu_seconds(), target.cpu_by_pid()
    until = time.monotonic() + seconds
    for _, go_out, _ in pipes:
        go_out.send(until)
    latencies: list[float] = []
    failed = 0
    for _, _, out_in in pipes:
        got, lost = out_in.recv()
        latencies += got
        failed += lost
    for process in processes:
        process.join()
    server = sum(cpu - server0.get(pid, 0.0) for pid, cpu in target.cpu_by_pid().items())
    return latencies, failed, server, children_cpu_seconds() - client0


def check(target: Target) -> int:
    """One turn by hand, read whole: the recorded answer, or the benchmark would measure errors. The
    length of its reply, which every turn's must have (target.expected, for the runs)."""
    sock = connect(target)
    try:
        frame = masked_frame(turn_message())
        data = one_turn(sock, frame)
        again = one_turn(sock, frame)  # a kept turn: the same frames, restamped in place
    finally:
        sock.close()
    if reply_text(data) != pair.ANSWER_TEXT or reply_text(again) != pair.ANSWER_TEXT:
        raise BenchError(f"{target.name} answered something else than the recorded answer")
    if len(again) != len(data):
        raise BenchError(f"{target.name}: two turns' replies differ in length ({len(data)}, {len(again)})")
    return len(data)


def run_turns(target: Target, duration: int) -> dict[str, float]:
    """One run of turns, with the figures run_wrk gives a wrk run (turns stand for requests)."""
    expected = _EXPECTED.get(target.name) or _EXPECTED.setdefault(target.name, check(target))
    attempts = replay.ATTEMPTS if replay.PATIENCE > 0 else 1  # read now: `--patience` sets them
    result: dict[str, float] = {}
    for attempt in range(1, attempts + 1):
        settle(target)
        if replay.PATIENCE > 0:
            wait_quiet(patience=replay.PATIENCE)
        machine0 = machine_busy_seconds()
        latencies, failed, server, client = _drive(target, duration, expected)
        machine = machine_busy_seconds() - machine0
        turns = len(latencies)
        result = {
            "rps": turns / duration,
            "p50_ms": 1000 * percentile(latencies, 50) if latencies else float("nan"),
            "p99_ms": 1000 * percentile(latencies, 99) if latencies else float("nan"),
            "cpu_us": 1e6 * server / turns if turns else float("nan"),
            "client_cpu_us": 1e6 * client / turns if turns else float("nan"),
            "non2xx": failed,
            "socket_errors": 0,
            "others": max(0.0, machine - server - client) / (duration * (os.cpu_count() or 1)),
        }
        if result["others"] <= OTHERS_LIMIT or attempt == attempts:
            break
    return result


def summary(target: Target) -> str:
    """The client's CPU per turn, beside the row (the server's is in the row)."""
    client = median([r.get("client_cpu_us", float("nan")) for r in target.rounds])
    return (
        f"{target.name}: {target.connections} sockets in {THREADS} client processes; the client took "
        f"{client:.0f} µs of CPU a turn."
    )

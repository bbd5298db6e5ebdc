"""Running one attempt: a fresh child process per call, or one POST to the operator's URL.

A runner takes the stdin document (the contract of docs/design/answerer.md) as bytes and returns an Outcome:
the raw output on success, else a short status for the log (never the output itself).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import requests

from answerer import containment
from answerer.config import AnswererConfig

CHUNK = 64 * 1024
# How often a waiting read looks at the kill switch; output wakes it at once, so this costs nothing.
KILL_CHECK = 0.2
# Each call runs under this (answerer/supervise.py), which runs the operator's command.
SUPERVISOR = str(Path(__file__).with_name("supervise.py"))
# How long a supervisor may take to kill its call's processes and exit once told to; past it the
# daemon kills it and sweeps by itself.
SUPERVISOR_GRACE = 10.0


@dataclass(frozen=True)
class Outcome:
    """What one attempt gave: output (bytes) when it succeeded, and a status safe to log."""

    output: bytes | None
    status: str
    # The child's lifetime (its supervisor's: start to exit, its tree killed), or the webhook's round trip.
    child_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.output is not None


class Runner(Protocol):
    def run(self, document: bytes) -> Outcome: ...
    def kill_all(self) -> None: ...


def _exited_within(pid: int, seconds: float) -> bool:
    """Whether our child `pid` exits within `seconds` (watched through a pidfd, so not reaped)."""
    exit_fd = os.pidfd_open(pid)
    try:
        return bool(select.select([exit_fd], [], [], seconds)[0])
    finally:
        os.close(exit_fd)


def kill_group(pgid: int) -> None:
    """SIGKILL a child's whole process group; a group already gone is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        # A member changed its uid (setuid binary): nothing more we are allowed to do.
        pass


class ChildRunner:
    """One fresh process per attempt, in its own session and an empty temporary directory.

    Each attempt's command runs under its own supervisor process (answerer/supervise.py), which
    kills everything the command started when the call ends, and when this process dies.
    """

    def __init__(
        self,
        argv: tuple[str, ...],
        env: Mapping[str, str],
        timeout: float,
        max_output: int,
        *,
        adopt_orphans: bool = False,
    ):
        self.argv = list(argv)
        self.env = dict(env)
        self.timeout = timeout
        self.max_output = max_output
        # True only in the daemon process once it is a child subreaper (containment.harden_daemon):
        # then every child of ours that is not a running call's is a call's orphan.
        self.adopt_orphans = adopt_orphans
        self._lock = threading.Lock()
        # A running call's supervisor pid: the call's mark and the daemon's end of its line.
        self._live: dict[int, tuple[str, socket.socket]] = {}
        self._killed = threading.Event()

    @classmethod
    def from_config(cls, config: AnswererConfig) -> ChildRunner:
        assert config.argv is not None
        return cls(
            config.argv, config.env, config.timeout, config.max_output, adopt_orphans=config.adopt_orphans
        )

    def run(self, document: bytes) -> Outcome:
        started = time.monotonic()
        if self._killed.is_set():
            return Outcome(None, "stopped")
        # Named after the daemon, so a successor can tell this directory's owner died (containment).
        workdir = tempfile.mkdtemp(prefix=f"{containment.DIR_PREFIX}{containment.identity()}-")
        mark = containment.new_mark()
        # The supervisor's line: closing our end (or dying) tells it to end the call; it reports back.
        line, its_end = socket.socketpair()
        try:
            try:
                # Under the lock: a supervisor that exits at once must not be reaped as an orphan by
                # another call's sweep before it is known to be this call's.
                with self._lock:
                    # Never a shell: argv is the operator's, the request only ever goes to stdin.
                    proc = subprocess.Popen(
                        [
                            sys.executable,
                            "-I",
                            "-S",
                            SUPERVISOR,
                            str(its_end.fileno()),
                            workdir,
                            "--",
                            *self.argv,
                        ],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        cwd=workdir,
                        env={**self.env, containment.MARK: mark},
                        start_new_session=True,
                        close_fds=True,
                        pass_fds=(its_end.fileno(),),
                    )
                    self._live[proc.pid] = (mark, line)
            except OSError as exc:
                # The errno name only: the message would carry the path.
                return Outcome(None, f"exec_failed:{errno.errorcode.get(exc.errno or 0, 'unknown')}")
            finally:
                its_end.close()
            spawned = time.monotonic()
            try:
                status, output = self._exchange(proc, document, started + self.timeout)
            finally:
                self._end(proc, line, mark)
                lifetime = time.monotonic() - spawned
            if status == "exited":
                status = self._judge(self._reported(line), output)
            return Outcome(output if status == "ok" else None, status, lifetime)
        finally:
            line.close()
            shutil.rmtree(workdir, ignore_errors=True)

    def _end(self, proc: subprocess.Popen, line: socket.socket, mark: str) -> None:
        """Whatever happened, nothing of this call outlives it.

        The supervisor kills its whole tree once told (end-of-file on its line) and exits. Should it
        be gone early (its command may kill it: same user), or not exit in time, the daemon kills it
        and sweeps itself: every process that carries the call's mark or descends from the
        supervisor, and (as a subreaper) the orphans that came back to it. The supervisor is not
        reaped before that, so its pid cannot name a stranger.
        """
        with contextlib.suppress(OSError):
            line.shutdown(socket.SHUT_WR)
        if not _exited_within(proc.pid, SUPERVISOR_GRACE):
            kill_group(proc.pid)
        with self._lock:
            del self._live[proc.pid]
            containment.sweep(
                mark,
                root=proc.pid,
                adopt=self.adopt_orphans,
                spare={proc.pid, *self._live},
                keep={m for m, _ in self._live.values()},
            )
            kill_group(proc.pid)
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    @staticmethod
    def _reported(line: socket.socket) -> int | str:
        """The command's exit code (negative: its signal), or a status, as its supervisor said."""
        line.setblocking(False)
        try:
            said = line.recv(128).decode("ascii", "replace").strip()
        except OSError:
            said = ""
        kind, _, value = said.partition(":")
        if kind == "exit" and value.isdigit():
            return int(value)
        if kind == "signal" and value.isdigit():
            return -int(value)
        if kind == "killed":
            return -signal.SIGKILL
        if kind == "exec_failed":
            return said
        # No report: the supervisor itself died (its command may kill it; the sweep did the rest).
        return "supervisor_failed"

    def kill_all(self) -> None:
        """End every running call now (stop after the grace, or a second signal)."""
        self._killed.set()
        with self._lock:
            for _, line in self._live.values():
                # Its supervisor kills its whole tree at once; the call's thread finishes the rest.
                with contextlib.suppress(OSError):
                    line.shutdown(socket.SHUT_WR)

    def _judge(self, code: int | str, output: bytes) -> str:
        if isinstance(code, str):
            return code
        if self._killed.is_set() and code < 0:
            return "killed"
        if code != 0:
            return f"exit:{code}" if code > 0 else f"signal:{-code}"
        if not output.strip():
            return "no_output"
        return "ok"

    def _exchange(self, proc: subprocess.Popen, document: bytes, deadline: float) -> tuple[str, bytes]:
        """Feed stdin and read stdout together until the child exits; "exited" or why it was cut short.

        Never communicate(): it neither kills nor returns while a grandchild holds the pipe. The
        child's exit is watched through a pidfd, which does not reap it.
        """
        assert proc.stdin is not None and proc.stdout is not None
        output = bytearray()
        pending = memoryview(document)
        exit_fd = os.pidfd_open(proc.pid)
        try:
            with selectors.DefaultSelector() as selector:
                os.set_blocking(proc.stdin.fileno(), False)
                selector.register(proc.stdin, selectors.EVENT_WRITE)
                selector.register(proc.stdout, selectors.EVENT_READ)
                selector.register(exit_fd, selectors.EVENT_READ)
                reading, exited = True, False
                while reading or not exited:
                    if self._killed.is_set():
                        return "killed", b""
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return "timeout", b""
                    # Once the child is gone, only what is in the pipe already is its output: a
                    # grandchild still holding stdout must not keep the call waiting.
                    events = selector.select(0 if exited else min(remaining, KILL_CHECK))
                    if exited and not events:
                        break
                    for key, _ in events:
                        if key.fileobj is proc.stdin:
                            pending = self._write(proc, selector, pending)
                        elif key.fileobj == exit_fd:
                            exited = True
                            selector.unregister(exit_fd)
                            if not proc.stdin.closed:
                                selector.unregister(proc.stdin)
                                proc.stdin.close()
                        else:
                            chunk = os.read(proc.stdout.fileno(), CHUNK)
                            if not chunk:
                                reading = False
                                selector.unregister(proc.stdout)
                                continue
                            output += chunk
                            if len(output) > self.max_output:
                                return "overflow", b""
        finally:
            os.close(exit_fd)
        return "exited", bytes(output)

    @staticmethod
    def _write(proc: subprocess.Popen, selector: selectors.BaseSelector, pending: memoryview) -> memoryview:
        assert proc.stdin is not None
        try:
            written = os.write(proc.stdin.fileno(), pending[:CHUNK])
        except BlockingIOError:
            return pending
        except BrokenPipeError:
            # The child closed its stdin without reading it all: its exit status and output decide.
            written = len(pending)
        pending = pending[written:]
        if not pending:
            selector.unregister(proc.stdin)
            proc.stdin.close()
        return pending


class WebhookRunner:
    """One POST per attempt to the operator's URL; no redirects, the response capped like stdout."""

    def __init__(self, url: str, bearer: str | None, timeout: float, max_output: int):
        self.url = url
        self.bearer = bearer
        self.timeout = timeout
        self.max_output = max_output
        self._killed = threading.Event()

    @classmethod
    def from_config(cls, config: AnswererConfig) -> WebhookRunner:
        assert config.url is not None
        return cls(config.url, config.bearer, config.timeout, config.max_output)

    def kill_all(self) -> None:
        # A blocked read ends at its own timeout; this stops reading at the next chunk.
        self._killed.set()

    def run(self, document: bytes) -> Outcome:
        started = time.monotonic()
        deadline = started + self.timeout
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.bearer:
            headers["Authorization"] = f"Bearer {self.bearer}"
        try:
            with requests.post(
                self.url,
                data=document,
                headers=headers,
                timeout=self.timeout,
                allow_redirects=False,
                stream=True,
            ) as response:
                if not 200 <= response.status_code < 300:
                    return Outcome(None, f"http:{response.status_code}", time.monotonic() - started)
                output = bytearray()
                for chunk in response.iter_content(CHUNK):
                    output += chunk
                    if len(output) > self.max_output:
                        return Outcome(None, "overflow", time.monotonic() - started)
                    if self._killed.is_set():
                        return Outcome(None, "killed", time.monotonic() - started)
                    if time.monotonic() > deadline:
                        return Outcome(None, "timeout", time.monotonic() - started)
        except requests.Timeout:
            return Outcome(None, "timeout", time.monotonic() - started)
        except requests.RequestException as exc:
            # The type only: requests' messages carry the URL, which may hold a token.
            return Outcome(None, f"http_error:{type(exc).__name__}", time.monotonic() - started)
        if not bytes(output).strip():
            return Outcome(None, "no_output", time.monotonic() - started)
        return Outcome(bytes(output), "ok", time.monotonic() - started)


def make_runner(config: AnswererConfig) -> Runner:
    return ChildRunner.from_config(config) if config.argv else WebhookRunner.from_config(config)

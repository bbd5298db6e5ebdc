"""Helpers for the answerer tests: the stand-in child, parking calls, running the daemon."""

from __future__ import annotations

import json
import os
import shutil
import signal
import site
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from answerer import config as answerer_config
from answerer.daemon import Daemon
from semula.service import Context, pending, projects
from tests.helpers import CHAT_WEATHER_TOOL, wait_for

CHILD = Path(__file__).resolve().parent / "answerer_children" / "child.py"
WEATHER_TOOL = CHAT_WEATHER_TOOL


def command(mode: str, *args: str) -> list[str]:
    """The argv an operator would configure, running the stand-in child in MODE."""
    return [sys.executable, str(CHILD), mode, *args]


def with_command(ctx: Context, argv: list[str] | None = None, **settings: Any) -> Context:
    """The context with the answerer configured (a command, unless a URL is given)."""
    values = {"answerer_command": argv, "answerer_env": ("ANSWERER_TEST_DIR",), **settings}
    return Context(ctx.store, replace(ctx.settings, **values), ctx.principal)


def answerer_project(ctx: Context, name: str = "shop", **settings: Any) -> dict[str, Any]:
    return projects.create(ctx, {"name": name, "mode": "record", "answerer": True, **settings})


def park(ctx: Context, project: str, n: int = 1, *, tools: bool = False, first: int = 0) -> list[str]:
    """Park n distinct calls (numbered from `first`) in a project, as misses in record mode would."""
    row = projects.get_row(ctx, project)
    ids = []
    for i in range(first, first + n):
        request: dict[str, Any] = {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": f"question {i} in {project}"}],
            "temperature": 0,
        }
        if tools:
            request["tools"] = [WEATHER_TOOL]
        pending_id = pending.park(ctx, row, f"v1:test-{project}-{i}", request, False)
        assert pending_id
        ids.append(pending_id)
    return ids


def status(ctx: Context, pending_id: str) -> dict[str, Any]:
    """The list view of a call (status, claimed_by...) as the operator sees it."""
    return pending.get(ctx, pending_id)


def stdin_docs(out: Path, pending_id: str) -> dict[int, dict[str, Any]]:
    """The stdin documents the child received for a call, by attempt."""
    docs = {}
    for attempt in (1, 2):
        path = out / f"stdin-{pending_id}-{attempt}.json"
        if path.exists():
            docs[attempt] = json.loads(path.read_text())
    return docs


def runs(out: Path, pending_id: str) -> list[int]:
    """The attempt numbers of every child run for a call, in order (a re-run shows as a repeat)."""
    path = out / f"runs-{pending_id}"
    return [int(n) for n in path.read_text().split()] if path.exists() else []


NOBODY = 65534


def unprivileged() -> tuple[str, list[str], dict[str, str]]:
    """How to run this checkout's Python code as a user that is not root: the interpreter, the
    argv prefix, the environment it needs. Root reads any process whatever it set, so a root test
    run uses nobody, with the system interpreter (nobody cannot reach the one under /root)."""
    repo = str(Path(__file__).resolve().parents[1])
    env = {"PYTHONPATH": os.pathsep.join([repo, *site.getsitepackages()])}
    if os.geteuid() != 0:
        return sys.executable, [], env
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.skip("no system python3 for an unprivileged user")
    return python, ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"], env


def alive(pid: int) -> bool:
    """True while the process exists and is not a zombie waiting to be reaped by init."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        # The process ended between the two looks: reading a dead pid's stat fails with ESRCH.
        return False
    return state != "Z"


@contextmanager
def running_daemon(ctx: Context, out: Path, **kwargs: Any) -> Iterator[Daemon]:
    """An in-process daemon for ctx's settings, polling fast; stopped (and drained) afterwards."""
    out.mkdir(exist_ok=True)
    environ = {**os.environ, "ANSWERER_TEST_DIR": str(out), "SEMULA_CANARY_SECRET": "must-not-reach"}
    config = answerer_config.from_settings(ctx.settings, environ)
    daemon = Daemon(ctx, config, poll_interval=kwargs.pop("poll_interval", 0.05), **kwargs)
    thread = threading.Thread(target=daemon.run, daemon=True)
    thread.start()
    try:
        yield daemon
    finally:
        daemon.stop()
        thread.join(30)
        assert not thread.is_alive(), "the daemon did not stop"


def wait_resolved(ctx: Context, pending_id: str, timeout: float = 20) -> dict[str, Any]:
    return wait_for(
        lambda: (s := status(ctx, pending_id))["status"] != "pending" and s,
        timeout=timeout,
        what=f"{pending_id} answered",
    )


class AnswererProcess:
    """`semula-answerer` as a real process, its stderr (the JSON log) kept in a file."""

    def __init__(
        self,
        db_url: str,
        log_path: Path,
        argv: list[str] | None = None,
        *,
        args: list[str] | None = None,
        **env: str,
    ):
        self.log_path = log_path
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("SEMULA_")},
            "SEMULA_ANSWERER_ENV": "ANSWERER_TEST_DIR",
            **env,
        }
        # Over HTTP (SEMULA_ANSWERER_SERVER) the daemon gets no database URL: it refuses one.
        if "SEMULA_ANSWERER_SERVER" not in env:
            self.env["SEMULA_DATABASE_URL"] = db_url
        if argv is not None:
            self.env["SEMULA_ANSWERER_COMMAND"] = json.dumps(argv)
        script = Path(sys.executable).with_name("semula-answerer")
        # `args`: how to start it, when not the console script (say, as another user).
        self.args = args or ([str(script)] if script.exists() else [sys.executable, "-m", "answerer"])
        self.proc: subprocess.Popen | None = None

    def start(self) -> AnswererProcess:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        wait_for(self._started, timeout=30, what="semula-answerer started")
        return self

    def run_to_end(self, timeout: float = 60) -> int:
        """Run it expecting it to stop by itself (a refusal): its exit status; its output is log()."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
            try:
                return self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError(f"semula-answerer did not stop by itself:\n{self.log()}") from None

    def _started(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"semula-answerer exited with {self.proc.returncode}:\n{self.log()}")
        return '"msg": "started"' in self.log()

    def log(self) -> str:
        """The daemon's log, each JSON line written out with json.dumps's spacing (the server writes
        them compact) so the tests' text checks read one form."""
        lines = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                lines.append(json.dumps(json.loads(line), ensure_ascii=False))
            except ValueError:
                lines.append(line)
        return "\n".join(lines)

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)

    def stop(self) -> int | None:
        """SIGTERM, then a second one (kill the children at once), then SIGKILL: never leave it running."""
        for sig, wait in ((signal.SIGTERM, 15), (signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            if not self.proc or self.proc.poll() is not None:
                break
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue
        self._log.close()
        return self.proc.returncode if self.proc else None


def answered_by_daemon(
    start_server: Any, start_answerer: Any, ctx: Context, tmp_path: Path
) -> tuple[Any, Path]:
    """A real server whose project `shop` the answerer daemon answers (the `json` test command),
    with the daemon started on it: the server, and the folder where the command writes what it read."""
    argv = command("json")
    server = start_server(SEMULA_ANSWERER_COMMAND=json.dumps(argv))
    projects.create(
        Context(ctx.store, replace(ctx.settings, answerer_command=argv), ctx.principal),
        {"name": "shop", "answerer": True},
    )
    out = tmp_path / "out"
    out.mkdir()
    start_answerer(argv, ANSWERER_TEST_DIR=str(out))
    return server, out

"""A pytest plugin: replay recorded OpenAI calls from a bundle file, with no server to set up.

    pytest --semula-bundle tests/llm.json          # or `semula_bundle = tests/llm.json` in the ini
    pytest --semula-bundle tests/llm.json --semula-record   # misses park; the bundle is updated

The plugin starts `semula replay` before collection and points OPENAI_BASE_URL (and a
placeholder OPENAI_API_KEY) at it for the whole session; the session fixture `semula_server`
yields its URL. A replay miss is the SDK's 424 error, whose message names the closest recorded
entry and the first field that differs.

Each process of the run (each pytest-xdist worker, or the one process without xdist) replays in a
replay session of its own, named in its base URL (`/p/default/s/<worker>/v1`), and every test starts
by resetting it: a test's first, second and third identical call get answers 1, 2 and 3 of the
request's sequence, whatever ran before it (docs/decisions/0036-sequences-and-sessions.md). With
`--semula-record` a call past the last answer records the next one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

START_TIMEOUT = 60
# The server's base URL, handed from the process that started it to pytest-xdist's workers.
URL_VARIABLE = "SEMULA_REPLAY_URL"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("semula", "replay recorded LLM calls with semula")
    group.addoption(
        "--semula-bundle", metavar="PATH", help="Serve this bundle to the OpenAI SDK for the session."
    )
    group.addoption(
        "--semula-record",
        action="store_true",
        help="Record mode: misses park for an agent; new entries are written back to the bundle.",
    )
    parser.addini("semula_bundle", "Bundle file to replay (relative to the ini file).")


def _bundle_path(config: pytest.Config) -> Path | None:
    option = config.getoption("semula_bundle")
    if option:
        return Path(option).resolve()
    ini = config.getini("semula_bundle")
    if ini:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / ini).resolve()
    return None


class ReplayServer:
    """The `semula replay` process of a session, started before collection so module-level clients see it."""

    def __init__(self, bundle: Path, record: bool):
        self.bundle, self.record = bundle, record
        argv = [sys.executable, "-m", "semula", "replay", str(bundle), "--port", "0"]
        self.proc = subprocess.Popen(
            argv + (["--record"] if record else []), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.url = _first_line(self.proc)
        if not self.url.startswith("http://"):
            self.proc.kill()
            raise pytest.UsageError(
                f"semula replay did not start: {self.proc.stderr.read().strip() or self.url}"
            )
        self.patch = pytest.MonkeyPatch()
        self.patch.setenv(URL_VARIABLE, self.url)
        self.patch.setenv("OPENAI_API_KEY", "semula-replay")

    def stop(self) -> None:
        self.patch.undo()
        # SIGINT, like Ctrl-C: in record mode the server writes the bundle back before it exits.
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.record and self.proc.returncode != 0:
            sys.stderr.write(
                f"semula replay failed to write {self.bundle}: {self.proc.stderr.read().strip()}\n"
            )


class Session:
    """This process's replay session on the server: its base URL, and a reset before each test."""

    def __init__(self, url: str, name: str):
        root, _, rest = url.partition("/p/")
        project = rest.split("/")[0]
        self.url = f"{root}/p/{project}/s/{name}/v1"
        self.reset_url = f"{root}/api/v1/projects/{project}/sessions/{name}/reset"
        self.patch = pytest.MonkeyPatch()
        self.patch.setenv("OPENAI_BASE_URL", self.url)

    def reset(self) -> None:
        response = requests.post(self.reset_url, timeout=30)
        response.raise_for_status()


def pytest_configure(config: pytest.Config) -> None:
    bundle = _bundle_path(config)
    if bundle is None:
        return
    worker = getattr(config, "workerinput", None)
    if worker is None:
        config._semula = ReplayServer(bundle, config.getoption("semula_record"))  # type: ignore[attr-defined]
    url = os.environ.get(URL_VARIABLE)
    if url:  # a worker whose controller started no server (no bundle there) has none to use
        name = worker["workerid"] if worker else "main"
        config._semula_session = Session(url, name)  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    session = getattr(config, "_semula_session", None)
    if session is not None:
        session.patch.undo()
    server = getattr(config, "_semula", None)
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def semula_server(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The base URL this process replays through (None when no bundle is configured)."""
    session = getattr(request.config, "_semula_session", None)
    yield session.url if session else None


@pytest.fixture(autouse=True)
def _semula_session_reset(request: pytest.FixtureRequest) -> None:
    """Every test starts its replay session over: its calls count from one, like a cassette."""
    session = getattr(request.config, "_semula_session", None)
    if session is not None:
        session.reset()


def _first_line(proc: subprocess.Popen) -> str:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    return line[0].strip() if line else ""


def pytest_report_header(config: pytest.Config) -> str | None:
    bundle = _bundle_path(config)
    if bundle is None:
        return None
    mode = "record" if config.getoption("semula_record") else "replay"
    return f"semula: {mode} from {os.path.relpath(bundle)}"

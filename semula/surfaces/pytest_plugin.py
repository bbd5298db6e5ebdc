"""A pytest plugin: replay recorded OpenAI, Anthropic and Gemini calls from a bundle file, no server to
set up.

    pytest --semula-bundle tests/llm.json          # or `semula_bundle = tests/llm.json` in the ini
    pytest --semula-bundle tests/llm.json --semula-record   # misses park; the bundle is updated
    pytest --semula-record --semula-prune          # ... and entries no test used are dropped

The plugin starts `semula replay` before collection and points OPENAI_BASE_URL,
ANTHROPIC_BASE_URL and GOOGLE_GEMINI_BASE_URL (and placeholder OPENAI_API_KEY, ANTHROPIC_API_KEY and
GEMINI_API_KEY) at it for the whole session; the session fixture `semula_server` yields its URL. A
replay miss is the SDK's 424 error, whose message names the closest recorded entry and the values
that differ; the plugin adds the command that records the test's calls.

Each process of the run (each pytest-xdist worker, or the one process without xdist) replays in a
replay session of its own, named in its base URL (`/p/default/s/<worker>/v1`), and every test starts
by resetting it: a test's first, second and third identical call get answers 1, 2 and 3 of the
request's sequence, whatever ran before it (docs/decisions/0036-sequences-and-sessions.md). With
`--semula-record` a call past the last answer records the next one.

A test marked `@pytest.mark.semula_fault("rate_limit", times=2)` has that fault rule in its session
while it runs (docs/testing.md, section 4): its calls get the fault instead of their recording, so the
suite tests its retry logic against its own recordings.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

START_TIMEOUT = 60
# How often a record session looks for parked calls, to say on the terminal which test waits.
WATCH_INTERVAL = 0.5
# The start of every replay miss message (semula/service/replay.py), as the SDK's error shows it.
MISS = "No recorded entry matches this request"
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
    group.addoption(
        "--semula-prune",
        action="store_true",
        help="With --semula-record: write back only the entries this run used.",
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

    def __init__(self, config: pytest.Config, bundle: Path):
        self.config, self.bundle = config, bundle
        self.record = bool(config.getoption("semula_record"))
        self.prune = self.record and bool(config.getoption("semula_prune"))
        # A bundle that does not exist yet is served empty: only a test that makes a call fails.
        self.missing = not self.record and not bundle.exists()
        argv = [sys.executable, "-m", "semula", "replay", str(bundle), "--port", "0"]
        argv += ["--record"] if self.record else []
        argv += ["--prune"] if self.prune else []
        argv += ["--missing-ok"] if self.missing else []
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = _first_line(self.proc)
        if not self.url.startswith("http://"):
            self.proc.kill()
            raise pytest.UsageError(
                f"semula replay did not start: {self.proc.stderr.read().strip() or self.url}"
            )
        self.root = self.url.split("/p/", 1)[0]
        # The server logs every request on stderr: read it all the time, or a full pipe blocks it.
        self.errors: deque[str] = deque(maxlen=50)
        threading.Thread(target=self._drain, daemon=True).start()
        self.current: str | None = None  # the test running now, for the waiting notice
        self.stopping = threading.Event()
        if self.record:
            threading.Thread(target=self._watch, daemon=True).start()
        self.patch = pytest.MonkeyPatch()
        self.patch.setenv(URL_VARIABLE, self.url)
        from semula import dialects  # here: the plugin is loaded by every pytest run, most without a bundle

        # Every API's SDKs: base URLs (a session's, below, in each worker) and placeholder keys.
        for name, value in dialects.sdk_env(self.url.removesuffix("/v1"), "semula-replay").items():
            self.patch.setenv(name, value)

    def claim_line(self) -> str:
        return f"SEMULA_URL={self.root} semula claim --wait"

    def record_command(self, test: str) -> str:
        """`test` is the test's id from where pytest ran (file::name, without parameters): `-k name`
        would also select every test whose module or class name holds it."""
        given = self.config.getoption("semula_bundle")
        bundle = f" --semula-bundle {given}" if given else ""
        return f"pytest --semula-record{bundle} {shlex.quote(test)}"

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.errors.append(line.rstrip("\n"))

    def _watch(self) -> None:
        """Say on the terminal which test waits on which parked call, once per call."""
        seen: set[str] = set()
        session = requests.Session()
        while not self.stopping.wait(WATCH_INTERVAL):
            try:
                parked = session.get(self.root + "/api/v1/pending", timeout=5).json()["data"]
            except (requests.RequestException, ValueError, KeyError):
                continue
            for call in parked:
                if call["id"] not in seen:
                    seen.add(call["id"])
                    self._say(
                        f"semula: {self.current or 'a test'} is waiting on parked call {call['id']}; "
                        f"answer it: {self.claim_line()}"
                    )

    def _say(self, text: str) -> None:
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        capture = self.config.pluginmanager.get_plugin("capturemanager")
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(text, yellow=True)
            return
        # The test's own thread is blocked in the HTTP call; the terminal is free for one line.
        with capture.global_and_fixture_disabled():
            reporter.ensure_newline()
            reporter.write_line(text, yellow=True)

    def stop(self) -> None:
        self.stopping.set()
        self.patch.undo()
        # SIGINT, like Ctrl-C: in record mode the server writes the bundle back before it exits.
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if not self.record:
            return
        if self.proc.returncode != 0:
            detail = "\n".join(self.errors)
            sys.stderr.write(f"semula replay failed to write {self.bundle}: {detail}\n")
            return
        wrote = [line for line in self.errors if line.startswith("semula replay: wrote ")]
        if wrote:
            sys.stderr.write(wrote[-1].removeprefix("semula replay: ").join(("semula: ", "\n")))


class Session:
    """This process's replay session on the server: its base URL, and a reset before each test."""

    def __init__(self, url: str, name: str):
        root, _, rest = url.partition("/p/")
        project = rest.split("/")[0]
        self.url = f"{root}/p/{project}/s/{name}/v1"
        self.name = name
        self.reset_url = f"{root}/api/v1/projects/{project}/sessions/{name}/reset"
        self.faults_url = f"{root}/api/v1/projects/{project}/faults"
        self.patch = pytest.MonkeyPatch()
        from semula import dialects

        for variable, value in dialects.sdk_env(self.url.removesuffix("/v1")).items():  # base URLs
            self.patch.setenv(variable, value)

    def reset(self) -> None:
        response = requests.post(self.reset_url, timeout=30)
        response.raise_for_status()

    def add_fault(self, kind: str, params: dict[str, Any]) -> None:
        """A fault rule for this session's calls (a bad rule fails the test with the server's message)."""
        response = requests.post(
            self.faults_url, json={"kind": kind, **params, "session": self.name}, timeout=30
        )
        if response.status_code >= 400:
            pytest.fail(f"@pytest.mark.semula_fault: {_message(response)}", pytrace=False)

    def clear_faults(self) -> None:
        requests.delete(self.faults_url, params={"session": self.name}, timeout=30).raise_for_status()


def _message(response: requests.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {response.status_code}"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "semula_fault(kind, **params): this test's calls get the fault (rate_limit, server_error, ..., "
        "with times=, probability=, seed=, match=) instead of their recording; see docs/testing.md.",
    )
    # --help and --version must work whatever the ini says (a bundle not recorded yet included).
    if config.getoption("help", False) or config.getoption("version", 0):
        return
    bundle = _bundle_path(config)
    if bundle is None:
        return
    worker = getattr(config, "workerinput", None)
    if worker is None:
        config._semula = ReplayServer(config, bundle)  # type: ignore[attr-defined]
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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    server = getattr(item.config, "_semula", None)
    if server is not None:
        server.current = item.nodeid
    yield
    if server is not None:
        server.current = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome: Any = yield
    report = outcome.get_result()
    server = getattr(item.config, "_semula", None)
    if server is not None and report.failed and MISS in report.longreprtext:
        # All of a parametrized test's cases, from the directory pytest ran in.
        within = item.nodeid.split("::", 1)[1].split("[", 1)[0] if "::" in item.nodeid else item.name
        record = server.record_command(f"{os.path.relpath(item.path)}::{within}")
        lines = [f"This test made a call the bundle has not recorded. Record it: {record}"]
        if server.missing:
            lines.insert(0, f"The bundle {os.path.relpath(server.bundle)} does not exist yet.")
        report.sections.append(("semula", "\n".join(lines)))


@pytest.fixture(scope="session")
def semula_server(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The base URL this process replays through (None when no bundle is configured)."""
    session = getattr(request.config, "_semula_session", None)
    yield session.url if session else None


@pytest.fixture(autouse=True)
def _semula_session_reset(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test starts its replay session over: its calls count from one, like a cassette. A test
    marked semula_fault has its fault rules in its session while it runs (its counts start over too)."""
    session = getattr(request.config, "_semula_session", None)
    marks = list(request.node.iter_markers("semula_fault"))
    if marks and session is None:
        pytest.fail(
            "@pytest.mark.semula_fault needs semula's replay server: --semula-bundle PATH or "
            "semula_bundle in the ini.",
            pytrace=False,
        )
    if session is None:
        yield
        return
    session.reset()
    if not marks:
        yield
        return
    session.clear_faults()
    for mark in marks:
        if len(mark.args) != 1:
            pytest.fail("@pytest.mark.semula_fault takes the kind, then key=value parameters.", pytrace=False)
        session.add_fault(mark.args[0], mark.kwargs)
    try:
        yield
    finally:
        session.clear_faults()


def _first_line(proc: subprocess.Popen) -> str:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(START_TIMEOUT)
    return line[0].strip() if line else ""


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    server = getattr(config, "_semula", None)
    if server is None:
        return None
    bundle = os.path.relpath(server.bundle)
    if not server.record:
        missing = " (not recorded yet: pytest --semula-record)" if server.missing else ""
        return [f"semula: replay from {bundle}{missing} at {server.url}"]
    prune = ", pruning entries no test uses" if server.prune else ""
    return [
        f"semula: record into {bundle}{prune} at {server.url}",
        f"semula: answer parked calls with: {server.claim_line()}",
    ]

"""A pytest plugin: replay recorded OpenAI and Anthropic calls from a bundle file, no server to set up.

    pytest --semula-bundle tests/llm.json          # or `semula_bundle = tests/llm.json` in the ini
    pytest --semula-bundle tests/llm.json --semula-record   # misses park; the bundle is updated

The plugin starts `semula replay` before collection and points OPENAI_BASE_URL and
ANTHROPIC_BASE_URL (and placeholder OPENAI_API_KEY and ANTHROPIC_API_KEY) at it for the whole
session; the session fixture `semula_server` yields its URL. A replay miss is the SDK's 424 error,
whose message names the closest recorded entry and the first field that differs.
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

START_TIMEOUT = 60


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
        self.patch.setenv("OPENAI_BASE_URL", self.url)
        self.patch.setenv("OPENAI_API_KEY", "semula-replay")
        # The Anthropic SDK appends /v1/messages to its base URL itself.
        self.patch.setenv("ANTHROPIC_BASE_URL", self.url.removesuffix("/v1"))
        self.patch.setenv("ANTHROPIC_API_KEY", "semula-replay")

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


def pytest_configure(config: pytest.Config) -> None:
    bundle = _bundle_path(config)
    if bundle is not None and not hasattr(config, "workerinput"):
        config._semula = ReplayServer(bundle, config.getoption("semula_record"))  # type: ignore[attr-defined]


def pytest_unconfigure(config: pytest.Config) -> None:
    server = getattr(config, "_semula", None)
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def semula_server(request: pytest.FixtureRequest) -> Iterator[str | None]:
    """The base URL of the session's replay server (None when no bundle is configured)."""
    server = getattr(request.config, "_semula", None)
    yield server.url if server else None


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

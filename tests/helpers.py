"""Test helpers: waiting for an event by polling, running the real semula server, call-log rows."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests
from prometheus_client.parser import text_string_to_metric_families


def call_row(**fields: Any) -> dict[str, Any]:
    """A call-log row as the proxy logs one (a hit of project prj_x), without its id; `fields` override."""
    row = dict(workspace_id="wsp_default", project_id="prj_x", created_at=1000.0, fingerprint=None)
    row |= dict(model="m", stream=0, outcome="hit", status=200, duration_ms=0.5)
    return row | dict(entry_id=None, pending_id=None, token_id=None, api="openai.chat", fault=None) | fields


def metric_samples(text: str) -> dict[tuple[str, frozenset], float]:
    """A /metrics page's samples, by name and labels (read them with metric_value)."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def metric_value(samples: dict[tuple[str, frozenset], float], name: str, **labels: str) -> float:
    """One sample of metric_samples(), 0 when the page has none."""
    return samples.get((name, frozenset(labels.items())), 0.0)


# A migration name no semula knows: recorded as applied, it makes a database look migrated by a newer one.
FUTURE_MIGRATION = "9999_from_a_newer_semula.sql"


def forget_migration(store: Any, name: str) -> None:
    """Make the database look as if migration `name` had not been applied."""
    with store.transaction() as tx:
        tx.script(f"DELETE FROM semula_migrations WHERE name = '{name}'")


def wait_for(
    predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.02, what: str = ""
) -> Any:
    """Poll until predicate() is truthy and return it; fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or predicate}")
        time.sleep(interval)


PORTS = 1000  # ports of each pytest-xdist worker's own range
FIRST_PORT = 20000  # the ranges lie below Linux's ephemeral ports (32768-60999), which connections take
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_ports = itertools.count(random.randrange(PORTS))  # another run's tests may be on this machine too


def free_port() -> int:
    """A port nothing listens on, for a server started after this returns. From this xdist worker's
    own range: a port that bind(0) gives back could be given to another worker's server, or to a
    connection's own end, before this one's server binds it."""
    base = FIRST_PORT + _WORKER % ((32768 - FIRST_PORT) // PORTS) * PORTS
    for _ in range(PORTS):
        port = base + next(_ports) % PORTS
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or lingering after a close
            return port
    raise AssertionError(f"no free port in {base}-{base + PORTS - 1}")


class Server:
    """`semula serve` as a real process: gunicorn with gevent workers on a free port."""

    def __init__(
        self,
        db_url: str,
        log_path: Path,
        *,
        dev: bool = False,
        workers: int = 1,
        semula: str | None = None,
        cwd: Path | None = None,
        **env: str,
    ):
        """`semula` is the executable to run (default: this interpreter's semula), `cwd` its directory."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {
            **os.environ,
            "SEMULA_DATABASE_URL": db_url,
            "SEMULA_WORKERS": str(workers),
            "SEMULA_KEEPALIVE": "1",
            **env,
        }
        self.cwd = cwd
        self.args = [semula, "serve"] if semula else [sys.executable, "-m", "semula", "serve"]
        self.args += ["--dev", "--port", str(self.port)] if dev else ["--bind", f"127.0.0.1:{self.port}"]
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            self.args,
            env=self.env,
            cwd=self.cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for(self._healthy, timeout=60, what=f"semula on {self.url}")
        return self

    def _healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"semula exited with {self.proc.returncode}:\n{self.log()}")
        try:
            return requests.get(self.url + "/readyz", timeout=5).status_code == 200
        except (requests.ConnectionError, requests.Timeout):
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


class CountingProxy:
    """An HTTP proxy in front of a server that records every request sent through it (method, path).

    Point an agent's SEMULA_URL at `url` to count its round trips to the REST API.
    """

    FORWARDED = ("Authorization", "Content-Type", "Accept")

    def __init__(self, target: str):
        self.target = target.rstrip("/")
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                with proxy._lock:
                    proxy.requests.append((self.command, urlsplit(self.path).path))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: self.headers[k] for k in proxy.FORWARDED if self.headers.get(k)}
                upstream = requests.request(
                    self.command, proxy.target + self.path, data=body, headers=headers, timeout=60
                )
                self.send_response(upstream.status_code)
                self.send_header("Content-Type", upstream.headers.get("Content-Type", "application/json"))
                self.send_header("Content-Length", str(len(upstream.content)))
                self.end_headers()
                self.wfile.write(upstream.content)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _forward

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                pass

        return Handler

    def take(self) -> list[tuple[str, str]]:
        """The requests recorded since the last take()."""
        with self._lock:
            taken, self.requests = self.requests, []
        return taken

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def parked(ctx: Any, project: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls parked in `project`, once there are some."""
    return wait_for(
        lambda: ctx.store.all("parked_in_project", project_id=project["id"]), what="a parked call"
    )


def answered_post(ctx: Any, project: dict[str, Any], post: Callable[[], Any], payload: Any) -> Any:
    """Make the request `post` sends, answer the one call it parks with `payload`, return its response."""
    from concurrent.futures import ThreadPoolExecutor

    from semula.service import pending

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(post)
        [row] = parked(ctx, project)
        pending.answer(ctx, row["id"], payload)
        return future.result(10)


def dashboard_text_answer(client: Any, secret: str, pending_id: str, text: str) -> str:
    """Sign in to the dashboard with a token, as a person would, and answer a parked call with text;
    returns the call's page as shown before the answer."""
    import re

    page = client.get("/ui/login").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert client.post("/ui/login", data={"token": secret, "csrf": csrf}).status_code == 302
    shown = client.get(f"/ui/pending/{pending_id}").get_data(as_text=True)
    csrf = re.search(r'name="csrf" value="([^"]+)"', shown).group(1)
    posted = client.post(f"/ui/pending/{pending_id}", data={"csrf": csrf, "kind": "text", "content": text})
    assert posted.status_code == 302, posted.get_data(as_text=True)
    return shown


def typed_events(text: str) -> list[dict[str, Any]]:
    """The events of an `event: TYPE` + `data: JSON` stream; each event line must name its data's type."""
    import json

    events = []
    for block in text.strip().split("\n\n"):
        kind, data = block.split("\n")
        event = json.loads(data.removeprefix("data: "))
        assert kind == f"event: {event['type']}"
        events.append(event)
    return events


# One function tool, as Chat Completions nests it and as the Responses API flattens it.
WEATHER_FUNCTION = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
CHAT_WEATHER_TOOL = {"type": "function", "function": WEATHER_FUNCTION}
RESPONSES_WEATHER_TOOL = {"type": "function", **WEATHER_FUNCTION, "strict": True}


def held_call(call: Callable[[], Any], errors: type[BaseException]) -> tuple[threading.Thread, dict]:
    """Run an SDK call in a thread (it parks and waits); the dict gets its "result", or the `errors`
    exception it raised, which the test's assertions report."""
    out: dict = {}

    def run() -> None:
        try:
            out["result"] = call()
        except errors as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: dict) -> Any:
    """The result of a held_call(), once its thread is done; fails on its error."""
    thread.join(60)
    assert "error" not in out, out.get("error")
    return out["result"]


@contextlib.contextmanager
def json_log_lines(name: str = "") -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The lines a logger (and those below it; the root by default) writes while inside, as semula's
    JSON formatter writes them: a function that reads them so far, each as a dict."""
    from semula import logs

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JSONFormatter())
    logger = logging.getLogger(name)
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)

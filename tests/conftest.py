"""Fixtures: every storage-touching test runs on SQLite and on PostgreSQL.

PostgreSQL runs when SEMULA_TEST_POSTGRES_URL is set (CI sets it); each test gets its own
database cloned from a migrated template, so tests never see each other's rows.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import queue
import random
import shutil
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from semula.config import Settings
from semula.db import Store, connect
from semula.migrate import migrate
from semula.service import CLI, Context

pytest_plugins = ["pytester"]

PG_URL = os.environ.get("SEMULA_TEST_POSTGRES_URL")
PG_SKIP = "PostgreSQL half skipped: SEMULA_TEST_POSTGRES_URL is not set (CI sets it)"
_counter = itertools.count()


def _pg_admin():
    import psycopg

    return psycopg.connect(PG_URL, autocommit=True)


def _with_dbname(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


# Test files whose tests one pytest-xdist worker runs one after another (make test's --dist
# loadgroup): they share a session fixture that costs minutes (the wheel, built once).
TOGETHER = ("tests/acceptance/test_wheel_install.py",)
# Test files whose tests of one database one worker runs one after another: they share a `semula
# serve` per module and database (tests/acceptance/shared.py), started once if they run together.
ONE_SERVER = tuple(
    f"tests/acceptance/test_{name}.py"
    for name in (
        "anthropic_api",
        "dashboard",
        "embeddings_api",
        "fault_rules",
        "faults",
        "record_replay",
        "responses_api",
        "responses_websocket",
        "websocket_faults",
    )
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest work first, so that pytest-xdist's workers run out of it together: the tests of
    TOGETHER (one worker runs them one after another), then the acceptance tests, then the rest."""

    def rank(item: pytest.Item) -> int:
        if item.nodeid.split("::")[0] in TOGETHER:
            return 0
        return 1 if item.get_closest_marker("acceptance") else 2

    items.sort(key=rank)
    from tests.acceptance import shared

    for item in items:
        if getattr(getattr(item, "module", None), "server", None) is shared.server:
            path = item.nodeid.split("::")[0]
            if path not in ONE_SERVER:
                raise pytest.UsageError(
                    f"{path} shares a server (tests/acceptance/shared.py): list it in ONE_SERVER"
                )


def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """--dist loadgroup, grouping TOGETHER's files. xdist 3.8's own loadgroup groups nothing under
    pytest 9 (it renames a test by `item._nodeid`, which pytest 9 no longer reads), so the groups are
    named here, where the scheduler sees only test ids, rather than by xdist_group marks."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class Together(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::")[0]
            if path in ONE_SERVER:  # the module's tests of one database: its server's
                params = nodeid.rpartition("[")[2].rstrip("]").split("-")
                return f"{path}[{'postgres' if 'postgres' in params else 'sqlite'}]"
            return path if path in TOGETHER else nodeid

    return Together(config, log)


@pytest.fixture(scope="session", autouse=True)
def replay_cache(tmp_path_factory) -> Iterator[None]:
    """`semula replay` keeps imported bundles in the session's directory, never the user's cache
    (started processes inherit it)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SEMULA_REPLAY_CACHE", str(tmp_path_factory.mktemp("replay-cache")))
        yield


@pytest.fixture(scope="session")
def pg_template() -> Iterator[str | None]:
    if not PG_URL:
        yield None
        return
    name = f"semula_tpl_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    store = connect(_with_dbname(PG_URL, name), pool_size=1)
    migrate(store)
    store.close()
    yield name
    # Dropped by the clones' thread (pg_clones, which needs this, closes first), after the clones.


class Clones:
    """PostgreSQL databases cloned from the migrated template ahead of the tests that take them, and
    dropped after them, by two threads: a clone takes PostgreSQL about as long to make and to drop as
    a short test takes to run (0.2-1 s each), which the tests so do not wait for."""

    AHEAD = 2  # clones made before a test asks

    def __init__(self, template: str):
        self.template = template
        self.ready: queue.Queue[str | None] = queue.Queue(self.AHEAD)
        self.done: queue.Queue[str | None] = queue.Queue()
        self.stopping = threading.Event()
        self.leaving = threading.Event()
        # Dropped when the run's own are (each DROP DATABASE waits for a checkpoint: behind hundreds
        # of these, the run's own were not dropped by its end and were left in turn), in an order of
        # this run's own, so that runs started together drop different ones.
        self.left_behind = _left_behind()
        random.shuffle(self.left_behind)
        self.threads = [
            threading.Thread(target=self._make, daemon=True),
            threading.Thread(target=self._drop, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def take(self) -> str:
        """A fresh clone's name (the error a clone failed with, if it did)."""
        name = self.ready.get(timeout=300)
        if name is None:
            self.ready.put(None)  # for the next test to fail as fast
            raise AssertionError("the clones' thread failed: see its traceback in the output")
        return name

    def give_back(self, name: str) -> None:
        self.done.put(name)

    def close(self, also: str) -> None:
        """Stop making clones; what is not dropped yet (the clones, then `also`, the template) is left
        to a process of its own. A DROP DATABASE waits for a checkpoint, which a PostgreSQL other runs
        keep busy may take minutes to make: waiting for it here held each worker's last test (120 s
        each at the end of a loaded `make test`). If that process is killed too, the names carry this
        process's id and the next run drops them (_left_behind)."""
        self.stopping.set()
        while self.threads[0].is_alive():  # unblock its put, dropping what it made
            with contextlib.suppress(queue.Empty):
                if (name := self.ready.get(timeout=0.1)) is not None:
                    self.done.put(name)
        while not self.ready.empty():
            if (name := self.ready.get()) is not None:
                self.done.put(name)
        self.leaving.set()  # the drop thread ends after the drop it is in, if any
        left = []  # the run's own: those of ended runs stay for the next run
        with contextlib.suppress(queue.Empty):
            while True:
                if (name := self.done.get_nowait()) is not None:
                    left.append(name)
        self.done.put(None)  # wakes the drop thread if it waits for a name
        _DROPPERS.append(
            subprocess.Popen(
                [sys.executable, "-c", _DROP, *left, also],  # the URL from the environment
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # outlives this worker
            )
        )

    def _make(self) -> None:
        try:
            with _pg_admin() as conn:
                while not self.stopping.is_set():
                    name = f"semula_t_{os.getpid()}_{next(_counter)}"
                    conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
                    self.ready.put(name)
        except BaseException:
            self.ready.put(None)
            raise

    def _drop(self) -> None:
        with _pg_admin() as conn:
            while not self.leaving.is_set() and (name := self._next()) is not None:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def _next(self) -> str | None:
        """The run's own next database to drop, else one left behind, else the next the run gives back."""
        with contextlib.suppress(queue.Empty):
            return self.done.get_nowait()
        return self.left_behind.pop() if self.left_behind else self.done.get()


# The session's last drops, run by a process that outlives the session (Clones.close); kept here so
# that its Popen is not collected (and warned about) while the session still runs.
_DROPPERS: list[subprocess.Popen] = []
_DROP = """
import os, sys, psycopg
with psycopg.connect(os.environ["SEMULA_TEST_POSTGRES_URL"], autocommit=True) as conn:
    for name in sys.argv[1:]:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
"""


def _left_behind() -> list[str]:
    """The test databases of test processes that have ended without dropping them (killed, or stopped
    on a timeout): each name carries its process's id. Left there, they pile up by the thousand on a
    developer's server and every DROP DATABASE's checkpoint then syncs all their files."""
    with _pg_admin() as conn:
        names = [
            row[0] for row in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'semula\\_%'")
        ]
    left = []
    for name in names:
        parts = name.split("_")
        if len(parts) >= 4 and parts[1] in ("t", "e", "tpl") and parts[2].isdigit():
            try:
                os.kill(int(parts[2]), 0)
            except ProcessLookupError:
                left.append(name)
            except PermissionError:
                pass  # another user's live process
    return left


@pytest.fixture(scope="session")
def pg_clones(pg_template) -> Iterator[Clones]:
    clones = Clones(pg_template)
    yield clones
    clones.close(also=pg_template)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory) -> Path:
    """A migrated SQLite file that each test's database is a copy of."""
    path = tmp_path_factory.mktemp("template") / "semula.db"
    store = connect(f"sqlite:///{path}", pool_size=1)
    migrate(store)
    store.close()
    return path


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A fresh, migrated database URL of each dialect: a copy of a template migrated once."""
    yield from fresh_database(request, tmp_path)


def fresh_database(request: pytest.FixtureRequest, directory: Path) -> Iterator[str]:
    """db_url's database (also a module's: tests/acceptance/shared.py), its SQLite file in `directory`."""
    if request.param == "sqlite":
        shutil.copyfile(request.getfixturevalue("sqlite_template"), directory / "semula.db")
        yield f"sqlite:///{directory}/semula.db"
        return
    if not PG_URL:
        pytest.skip(PG_SKIP)
    clones = request.getfixturevalue("pg_clones")
    name = clones.take()
    yield _with_dbname(PG_URL, name)
    clones.give_back(name)


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database URL of each dialect with nothing in it: not migrated."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
        return
    if not PG_URL:
        pytest.skip(PG_SKIP)
    clones = request.getfixturevalue("pg_clones")  # its thread drops this one too, as it drops clones
    name = f"semula_e_{os.getpid()}_{next(_counter)}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_dbname(PG_URL, name)
    clones.give_back(name)


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    s = connect(db_url, pool_size=4)
    yield s
    s.close()


@pytest.fixture
def settings(db_url: str) -> Settings:
    return replace(Settings(), database_url=db_url)


@pytest.fixture
def ctx(store: Store, settings: Settings) -> Context:
    """The operator's context (admin, full scope, default workspace)."""
    return Context(store, settings, CLI)


@pytest.fixture
def app(store: Store, settings: Settings):
    from semula.web import create_app

    return create_app(settings, store)


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def make_token(ctx: Context):
    """Create a token through the service and return its Authorization header."""

    def make(role: str = "admin", scope: str = "full", project: str | None = None) -> dict[str, str]:
        from semula.service import tokens

        secret = tokens.create(ctx, {"role": role, "scope": scope, "project": project})["token"]
        return {"Authorization": f"Bearer {secret}"}

    return make

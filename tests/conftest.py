"""Fixtures: every storage-touching test runs on SQLite and on PostgreSQL.

PostgreSQL runs when SEMULA_TEST_POSTGRES_URL is set (CI sets it); each test gets its own
database cloned from a migrated template, so tests never see each other's rows.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from dataclasses import replace

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
    name = f"semula_tpl_{uuid.uuid4().hex[:8]}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    store = connect(_with_dbname(PG_URL, name), pool_size=1)
    migrate(store)
    store.close()
    yield name
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path, pg_template) -> Iterator[str]:
    """A fresh, migrated database URL of each dialect."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/semula.db"
        store = connect(url, pool_size=1)
        migrate(store)
        store.close()
        yield url
        return
    if not PG_URL:
        pytest.skip(PG_SKIP)
    name = f"semula_t_{os.getpid()}_{next(_counter)}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{pg_template}"')
    yield _with_dbname(PG_URL, name)
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(params=["sqlite", "postgres"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path) -> Iterator[str]:
    """A database URL of each dialect with nothing in it: not migrated."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/empty.db"
        return
    if not PG_URL:
        pytest.skip(PG_SKIP)
    name = f"semula_e_{os.getpid()}_{next(_counter)}"
    with _pg_admin() as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield _with_dbname(PG_URL, name)
    with _pg_admin() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


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

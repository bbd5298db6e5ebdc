"""Issue 16: /healthz is liveness only; /readyz says whether the database and its schema are ready."""

from __future__ import annotations

from dataclasses import replace

import pytest

from semula.config import Settings
from semula.db import Unavailable, connect
from semula.migrate import migration_files
from semula.web import create_app
from tests.helpers import FUTURE_MIGRATION, forget_migration


@pytest.fixture
def down_store(store):
    """The test store, except that every read finds the database unreachable."""

    class Down:
        dialect = store.dialect
        blocks_process = store.blocks_process

        def __getattr__(self, name):
            return getattr(store, name)

        def one(self, *args, **kwargs):
            raise Unavailable("OperationalError")

        all = one

    return Down()


def test_readyz_is_ready_on_a_migrated_database(client):
    r = client.get("/readyz")
    assert r.status_code == 200 and r.json == {"status": "ready"}


def readyz_on(store, db_url):
    return create_app(replace(Settings(), database_url=db_url), store).test_client().get("/readyz")


@pytest.mark.parametrize(
    ("change", "reason", "advice"),
    [
        ("newer", "schema_newer", "Upgrade semula"),
        ("behind", "schema_behind", "run `semula migrate`"),
    ],
)
def test_readyz_reports_a_schema_that_does_not_fit(store, db_url, change, reason, advice):
    if change == "newer":
        store.run("record_migration", name=FUTURE_MIGRATION, now=1.0)
    else:
        forget_migration(store, migration_files(store.dialect)[-1].name)
    r = readyz_on(store, db_url)
    assert r.status_code == 503
    assert r.json["status"] == "not_ready" and r.json["reason"] == reason and advice in r.json["message"]


def test_readyz_reports_a_missing_schema(empty_db_url):
    store = connect(empty_db_url, pool_size=1)
    try:
        r = readyz_on(store, empty_db_url)
    finally:
        store.close()
    assert r.status_code == 503 and r.json["reason"] == "schema_missing"
    assert "semula migrate" in r.json["message"]


def test_readyz_reports_an_unreachable_database_without_its_url(down_store, db_url):
    app = create_app(replace(Settings(), database_url=db_url), down_store)
    client = app.test_client()
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json["reason"] == "database_unreachable"
    assert db_url not in r.text and db_url.split("://", 1)[1] not in r.text
    # Liveness reads nothing: the process is up even while the database is not.
    assert client.get("/healthz").json == {"status": "ok"}

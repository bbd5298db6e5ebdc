"""Hosted-mode fixtures: two workspaces, and on PostgreSQL the application role that RLS binds."""

from __future__ import annotations

from dataclasses import replace

import psycopg
import pytest

from semula.db import connect
from semula.service import CLI, Context, workspaces

APP_ROLE = "semula_app"


def app_role_url(owner_url: str) -> str:
    """Grant the application role what semula needs on this database and return its URL."""
    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute(
            f"DO $$ BEGIN CREATE ROLE {APP_ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        conn.execute(f"GRANT USAGE ON SCHEMA public TO {APP_ROLE}")
        conn.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {APP_ROLE}")
    scheme, rest = owner_url.split("://", 1)
    return f"{scheme}://{APP_ROLE}@{rest.split('@', 1)[1]}"


@pytest.fixture
def hosted(db_url, settings):
    """(operator context, app store, hosted settings): the app store runs as the RLS-bound role."""
    owner = connect(db_url, pool_size=2)
    hosted_settings = replace(settings, hosted=True)
    operator = Context(owner, hosted_settings, CLI)
    app_url = app_role_url(db_url) if db_url.startswith("postgresql") else db_url
    app_store = connect(app_url, pool_size=4)
    yield operator, app_store, replace(hosted_settings, database_url=app_url)
    app_store.close()
    owner.close()


def tenant(operator: Context, name: str) -> Context:
    """A new workspace and its operator context."""
    workspaces.create(operator, name)
    return workspaces.operator_in(operator, name)

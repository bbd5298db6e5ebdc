"""Apply migrations/NNNN_*.sql in order, each in its own transaction, recorded in semula_migrations.

The checkout keeps them at its top level; the wheel ships them inside the package, as
semula/migrations (setup.cfg maps the directory), so an installed semula finds them wherever it is
installed. A file named `NNNN_x.postgresql.sql` or `NNNN_x.sqlite.sql` applies to that dialect
only. Concurrent runs are safe: each migration takes the store's migration lock and re-checks.

Which migrations a process knows is fixed when this module is imported (LOADED): an upgrade replaces
the files on disk under running processes, which must go on judging the database by the code they
run, so a database the new code migrated is `schema_newer` to them (decision 0052).
"""

from __future__ import annotations

import fnmatch
import os
import time
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from semula.core import errors
from semula.db import Store


def shipped_migrations() -> Traversable:
    """The installed package's semula/migrations, or else the checkout's top-level migrations/ (this
    package run from its checkout, installed editable or on PYTHONPATH)."""
    installed = resources.files(__package__).joinpath("migrations")
    return installed if installed.is_dir() else Path(__file__).resolve().parents[1] / "migrations"


MIGRATIONS_DIR: Traversable = (
    Path(os.environ["SEMULA_MIGRATIONS_DIR"])
    if os.environ.get("SEMULA_MIGRATIONS_DIR")
    else shipped_migrations()
)


class SchemaMismatch(errors.ServiceUnavailable):
    """The database schema does not match this version of semula."""

    code = "schema_mismatch"

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def migration_files(dialect: str, directory: Traversable = MIGRATIONS_DIR) -> list[Traversable]:
    """The migrations for a dialect, in order."""
    names = sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []
    files = []
    for name in fnmatch.filter(names, "[0-9][0-9][0-9][0-9]_*.sql"):
        parts = name.split(".")
        if len(parts) == 3 and parts[1] != dialect:
            continue
        files.append(directory.joinpath(name))
    return files


def known_migrations(dialect: str, directory: Traversable = MIGRATIONS_DIR) -> tuple[str, ...]:
    """The names of a directory's migrations for a dialect, in order, as they are on disk now."""
    return tuple(p.name for p in migration_files(dialect, directory))


# The migrations of the code this process runs: read once, at import (a server worker's start, a
# command's start), never again from disk. Only the package's own directory is kept; another
# `directory` passed below is read when asked.
LOADED: dict[str, tuple[str, ...]] = {
    dialect: known_migrations(dialect) for dialect in ("sqlite", "postgresql")
}


def loaded_migrations(dialect: str, directory: Traversable = MIGRATIONS_DIR) -> tuple[str, ...]:
    """What this process knows: LOADED for the package's directory, else that directory as it is now."""
    if directory is MIGRATIONS_DIR and dialect in LOADED:
        return LOADED[dialect]
    return known_migrations(dialect, directory)


@dataclass(frozen=True)
class Schema:
    """The migrations this semula knows for a dialect, and those the database records as applied."""

    known: tuple[str, ...]
    applied: tuple[str, ...]

    def problem(self) -> SchemaMismatch | None:
        """Why the database does not fit this semula, with what to do about it; None when it fits."""
        unknown = [name for name in self.applied if name not in self.known]
        missing = [name for name in self.known if name not in self.applied]
        if unknown:
            return SchemaMismatch(
                "schema_newer",
                f"The database holds migrations this semula does not know ({', '.join(unknown)}): a newer "
                "semula migrated it. Upgrade semula, or point SEMULA_DATABASE_URL at another database.",
            )
        if not self.known:
            return SchemaMismatch(
                "schema_missing",
                "This semula installation ships no migrations: reinstall semula (the wheel carries "
                "semula/migrations/*.sql), or unset SEMULA_MIGRATIONS_DIR if it points elsewhere.",
            )
        if not self.applied:
            message = "The database has no semula tables: run `semula migrate`."
            return SchemaMismatch("schema_missing", message)
        if missing:
            return SchemaMismatch(
                "schema_behind",
                f"The database lacks migrations {', '.join(missing)}: run `semula migrate`.",
            )
        return None


def schema(store: Store, directory: Traversable = MIGRATIONS_DIR) -> Schema:
    """Which migrations this process knows (loaded_migrations) and which the database has applied
    (none when it has no migrations table)."""
    known = loaded_migrations(store.dialect, directory)
    row = store.one("migrations_table_exists")
    applied = tuple(r["name"] for r in store.all("list_migrations")) if row and row["n"] else ()
    return Schema(known, applied)


def migrate(store: Store, directory: Traversable = MIGRATIONS_DIR) -> list[str]:
    """Apply what is not applied yet; return the names applied by this call.

    Refuses (SchemaMismatch) a database that a newer semula migrated, before changing it, and a
    database that still does not fit afterwards (an installation without its migrations).
    """
    before = schema(store, directory)
    problem = before.problem()
    if problem is not None and (problem.reason == "schema_newer" or not before.known):
        raise problem
    applied = []
    for name in before.known:
        path = directory.joinpath(name)
        with store.migration_transaction() as tx:
            tx.run("create_migrations_table")
            if tx.one("migration_applied", name=path.name):
                continue
            tx.script(path.read_text())
            tx.run("record_migration", name=path.name, now=time.time())
        applied.append(path.name)
    problem = schema(store, directory).problem()
    if problem is not None:
        raise problem
    return applied

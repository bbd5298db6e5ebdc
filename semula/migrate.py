"""Apply migrations/NNNN_*.sql in order, each in its own transaction, recorded in semula_migrations.

A file named `NNNN_x.postgresql.sql` or `NNNN_x.sqlite.sql` applies to that dialect only.
Concurrent runs are safe: each migration takes the store's migration lock and re-checks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from semula.db import Store

MIGRATIONS_DIR = Path(
    os.environ.get("SEMULA_MIGRATIONS_DIR", Path(__file__).resolve().parent.parent / "migrations")
)


def migration_files(dialect: str, directory: Path = MIGRATIONS_DIR) -> list[Path]:
    """The migrations for a dialect, in order."""
    files = []
    for path in sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql")):
        parts = path.name.split(".")
        if len(parts) == 3 and parts[1] != dialect:
            continue
        files.append(path)
    return files


def migrate(store: Store, directory: Path = MIGRATIONS_DIR) -> list[str]:
    """Apply what is not applied yet; return the names applied by this call."""
    applied = []
    for path in migration_files(store.dialect, directory):
        with store.migration_transaction() as tx:
            tx.run("create_migrations_table")
            if tx.one("migration_applied", name=path.name):
                continue
            tx.script(path.read_text())
            tx.run("record_migration", name=path.name, now=time.time())
        applied.append(path.name)
    return applied

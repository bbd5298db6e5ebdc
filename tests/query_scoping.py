"""The query lint: every named statement that reads or changes a tenant table (one with a
`workspace_id` column, as the migrations make it) compares `workspace_id` or `project_id` with a
parameter in that same SELECT, UPDATE or DELETE, so no statement finds a row by an id alone; and an
upsert whose conflict key holds neither updates only a row of its own workspace
(`WHERE t.workspace_id = excluded.workspace_id`): the row it meets may be another's.

A statement that must cross workspaces says so under its header with `-- across workspaces: why`
(authentication before the workspace is known, retention, the metrics scrape, the poll of held
calls). Run by `make lint` (`python -m tests.query_scoping`) and by tests/unit/test_query_scoping.py;
tests/integration/test_isolation.py runs every statement this lint passes with another tenant's ids.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from importlib import resources

from semula.migrate import migration_files

SCOPES = ("workspace_id", "project_id")
ACROSS = "-- across workspaces:"
_HEADER = re.compile(r"^-- name: ([\w.]+)\n(.*?)(?=^-- name: |\Z)", re.S | re.M)
# Where a statement, or a statement nested in another, starts.
_START = re.compile(r"\b(?=(?:SELECT|UPDATE|DELETE|INSERT)\b)")
_TABLE = re.compile(r"\b(?:FROM|JOIN|UPDATE)\s+(\w+)")
_UPSERT = re.compile(
    r"INSERT INTO (\w+)\b[^;]*?ON CONFLICT \(([^)]*)\)[^;]*?DO UPDATE(.*?)(?=;|\bRETURNING\b|\Z)", re.S
)
_OWN_ROW = re.compile(r"\b\w+\.workspace_id\s*=\s*excluded\.workspace_id\b")
_SCOPED = re.compile(
    rf"\b(?:\w+\.)?(?:{'|'.join(SCOPES)})\s*(?:=|IN\b)\s*(?:ANY\s*\(\s*)?:\w+|"
    rf"(?<![:\w]):(?:{'|'.join(SCOPES)})\b\s*=\s*(?:\w+\.)?(?:{'|'.join(SCOPES)})\b",
    re.I,
)


def tenant_tables() -> set[str]:
    """The tables with a workspace_id column, from the SQLite migrations (PostgreSQL's hold the same)."""
    db = sqlite3.connect(":memory:")
    for path in migration_files("sqlite"):
        db.executescript(path.read_text())
    names = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {t for t in names if any(c[1] == "workspace_id" for c in db.execute(f"PRAGMA table_info({t})"))}


def named_statements() -> dict[str, str]:
    """Every named query of queries/*.sql as written, comments kept: {name (with its dialect): text}."""
    folder = resources.files("semula.db").joinpath("queries")
    found: dict[str, str] = {}
    for path in sorted(folder.iterdir(), key=lambda p: p.name):
        if path.name.endswith(".sql"):
            found |= {m.group(1): m.group(2) for m in _HEADER.finditer(path.read_text())}
    return found


def across_workspaces(text: str) -> bool:
    return any(line.strip().startswith(ACROSS) for line in text.splitlines())


def unscoped(sql: str, tables: set[str]) -> list[str]:
    """The parts of one query (each SELECT, UPDATE or DELETE, nested ones apart) that read or change
    a tenant table without comparing a scoping column with a parameter."""
    code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    parts = [p for p in _START.split(code) if p.strip()]
    bad = []
    for part in parts:
        if part.startswith("INSERT"):
            continue  # the row's keys are its values; what an INSERT ... SELECT reads is its own part
        touched = {t for t in _TABLE.findall(part) if t in tables}
        if touched and not _SCOPED.search(part):
            bad.append(" ".join(part.split())[:120])
    for upsert in _UPSERT.finditer(code):
        table, target, update = upsert.groups()
        if (
            table in tables
            and not set(re.findall(r"\w+", target)) & set(SCOPES)
            and not _OWN_ROW.search(update)
        ):
            bad.append(f"an upsert of {table} on ({target}) updating another workspace's row")
    return bad


def problems() -> list[str]:
    tables = tenant_tables()
    statements = named_statements()
    across = {name.partition(".")[0] for name, text in statements.items() if across_workspaces(text)}
    out = []
    for name, text in sorted(statements.items()):
        if name.partition(".")[0] in across:
            continue
        for part in unscoped(text, tables):
            out.append(f"{name}: unscoped: {part}")
    return out


if __name__ == "__main__":
    found = problems()
    for line in found:
        print(line)
    sys.exit(1 if found else 0)

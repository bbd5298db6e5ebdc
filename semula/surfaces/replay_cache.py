"""`semula replay`'s cache of imported bundles (docs/decisions/0062-replay-start-cache.md).

A start that imported a bundle keeps the database it made, named by a digest of the bundle's bytes,
the project's name and the code that read, checked and wrote it; a later start with the same digest
copies that database instead of importing again. Anything that could change what an import makes
changes the digest, so a copy is always what the import would have made; a bundle that fails to
import is never kept, so it fails the same way at every start.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import sqlite3
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import semula
from semula.config import Settings
from semula.db import DatabaseError

if TYPE_CHECKING:
    from semula.db.sqlite import SQLiteStore

logger = logging.getLogger(__name__)

KEEP = 4  # databases kept, the least recently used dropped first (a 100,000-entry one is ~200 MB)
READ = 1 << 20


def directory(environ: Mapping[str, str]) -> Path | None:
    """Where the databases are kept: SEMULA_REPLAY_CACHE (`off`: nowhere), else the user's cache."""
    value = environ.get("SEMULA_REPLAY_CACHE", "")
    if value == "off":
        return None
    if value:
        return Path(value)
    base = environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (KeyError, RuntimeError):  # no home directory to be found: nothing is kept
            return None
    return Path(base) / "semula" / "replay"


def digest(project: str, settings: Settings, changes: Mapping[str, Any]) -> hashlib.blake2b | None:
    """The digest a bundle's bytes are added to, to name the database made from them with the project's
    settings `changes` (the server's mode: the import writes them); None when none may be kept: with
    secrets in the settings (an import redacts them; no digest of one is written)."""
    if settings.secrets():
        return None
    made = hashlib.blake2b(_code(), digest_size=20)
    made.update(f"\0{project}\0{settings.max_body_bytes}\0".encode())
    made.update(json.dumps(changes, sort_keys=True).encode() + b"\0")
    return made


def key(bundle: Path, project: str, settings: Settings, changes: Mapping[str, Any]) -> str | None:
    """The name of the database made from `bundle` as it is now (see digest()); None when it cannot be
    read (the import then says why, as without a cache)."""
    made = digest(project, settings, changes)
    if made is None:
        return None
    try:
        with bundle.open("rb") as source:
            while chunk := source.read(READ):
                made.update(chunk)
    except OSError:
        return None
    return made.hexdigest()


class Reading:
    """A bundle's bytes read through to an import and added to a digest: the database is kept under
    the name of the bytes it was made from, even if the file changed since its name was looked up."""

    def __init__(self, source: IO[bytes], made: hashlib.blake2b):
        self.source, self.made = source, made

    def read(self, size: int = -1) -> bytes:
        data = self.source.read(size)
        self.made.update(data)
        return data

    def name(self) -> str:
        """The digest of every byte of the source (what the import left unread included)."""
        while self.read(READ):
            pass
        return self.made.hexdigest()


@functools.cache
def _code() -> bytes:
    """A digest of semula's code and queries as loaded (an editable checkout changes without a new
    version), of Python's and of SQLite's versions."""
    root = Path(semula.__file__).parent
    digest = hashlib.blake2b(f"{sys.version}\0{sqlite3.sqlite_version}\0".encode())
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".sql")):
        digest.update(f"\0{path.relative_to(root)}\0".encode())
        digest.update(path.read_bytes())
    return digest.digest()


def load(folder: Path, name: str, target: Path) -> bool:
    """Copy the database kept under `name` to `target`; False when there is none (or it cannot be read)."""
    kept = folder / f"{name}.db"
    try:
        with kept.open("rb") as source, target.open("xb") as copy:
            while chunk := source.read(READ * 8):
                copy.write(chunk)
        os.utime(kept)  # recently used: kept the longest
    except FileNotFoundError:
        target.unlink(missing_ok=True)
        return False
    except OSError as exc:
        target.unlink(missing_ok=True)
        logger.warning("replay_cache_unreadable", extra={"path": str(kept), "error": str(exc)})
        return False
    return True


def save(folder: Path, name: str, store: SQLiteStore, only: tuple[str, ...] | None = None) -> None:
    """Keep a copy of `store`'s database under `name` (a SQLiteStore, before anything but the import
    wrote to it, or with `only` the rows of these tables: those an import writes), then drop the least
    recently used beyond KEEP. A cache that cannot be written costs the next start its import, nothing
    else."""
    partial = folder / f".{name}.{os.getpid()}.partial"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial.unlink(missing_ok=True)
        store.copy_to(str(partial), only)
        os.replace(partial, folder / f"{name}.db")  # whole or not there, for starts running beside this one
    except (OSError, DatabaseError) as exc:
        logger.warning("replay_cache_unwritable", extra={"path": str(folder), "error": str(exc)})
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError):  # another start may be dropping the same files
        kept = sorted(folder.glob("*.db"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP:]:
            old.unlink(missing_ok=True)
        # A copy a killed start left half-written (SIGKILL while it was kept): never read, so dropped.
        for stale in folder.glob(".*.partial"):
            pid = stale.name.rsplit(".", 2)[-2]
            if pid.isdecimal() and not _alive(int(pid)):
                stale.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True

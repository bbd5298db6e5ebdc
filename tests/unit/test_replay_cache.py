"""`semula replay`'s kept imports: where they are kept and what names them (decision 0062)."""

from __future__ import annotations

import os
from pathlib import Path

from semula.config import Settings
from semula.surfaces import replay_cache


def settings(**env: str) -> Settings:
    return Settings.from_env({"SEMULA_DATABASE_URL": "sqlite:///unused.db", **env})


SETTINGS = settings()
REPLAY = {"mode": "replay", "record_timeout": 300}


def test_the_cache_is_the_users_unless_set_or_off(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert replay_cache.directory({"SEMULA_REPLAY_CACHE": "off", **home}) is None
    assert replay_cache.directory({"SEMULA_REPLAY_CACHE": "/x/y", **home}) == Path("/x/y")
    assert replay_cache.directory({"XDG_CACHE_HOME": "/c"}) == Path("/c/semula/replay")


def test_the_name_follows_every_byte_the_project_the_size_limit_and_the_mode(tmp_path):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(b'{"bundle": {"format": "semula-bundle", "version": 1}, "entries": []}\n')
    name = replay_cache.key(bundle, "default", SETTINGS, REPLAY)
    assert name == replay_cache.key(bundle, "default", SETTINGS, REPLAY)
    assert replay_cache.key(bundle, "other", SETTINGS, REPLAY) != name
    smaller = settings(SEMULA_MAX_BODY_BYTES="100000")
    assert replay_cache.key(bundle, "default", smaller, REPLAY) != name
    # A recording start's import writes another mode: it is kept apart.
    recording = {"mode": "record", "record_timeout": 300, "sequences": "record"}
    assert replay_cache.key(bundle, "default", SETTINGS, recording) != name
    bundle.write_bytes(bundle.read_bytes().replace(b"\n", b" \n"))
    assert replay_cache.key(bundle, "default", SETTINGS, REPLAY) != name
    # What an import read names what it made, whatever was looked up before it.
    with bundle.open("rb") as source:
        reading = replay_cache.Reading(source, replay_cache.digest("default", SETTINGS, REPLAY))
        reading.read(10)
        assert reading.name() == replay_cache.key(bundle, "default", SETTINGS, REPLAY)


def test_nothing_is_kept_with_secrets_in_the_settings(tmp_path):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(b"{}")
    secret = settings(SEMULA_UPSTREAM_KEY="sk-" + "a" * 40)
    assert replay_cache.key(bundle, "default", secret, REPLAY) is None


def test_a_copy_a_killed_start_left_half_written_is_dropped_by_the_next_save(tmp_path):
    from semula.db import connect

    folder = tmp_path / "cache"
    folder.mkdir()
    dead = folder / f".{'a' * 40}.{2**22 + 1}.partial"  # above Linux's largest pid: no such process
    running = folder / f".{'b' * 40}.{os.getpid()}.partial"  # a start still writing its copy
    for path in (dead, running):
        path.write_bytes(b"half a database")
    store = connect(f"sqlite:///{tmp_path}/made.db", pool_size=1)
    try:
        replay_cache.save(folder, "c" * 40, store)
    finally:
        store.close()
    assert sorted(p.name for p in folder.iterdir()) == sorted([running.name, f"{'c' * 40}.db"])

"""`semula replay`'s kept imports: where they are kept and what names them (decision 0062)."""

from __future__ import annotations

from pathlib import Path

from semula.config import Settings
from semula.surfaces import replay_cache


def settings(**env: str) -> Settings:
    return Settings.from_env({"SEMULA_DATABASE_URL": "sqlite:///unused.db", **env})


SETTINGS = settings()


def test_the_cache_is_the_users_unless_set_or_off(tmp_path):
    home = {"HOME": str(tmp_path)}
    assert replay_cache.directory({"SEMULA_REPLAY_CACHE": "off", **home}) is None
    assert replay_cache.directory({"SEMULA_REPLAY_CACHE": "/x/y", **home}) == Path("/x/y")
    assert replay_cache.directory({"XDG_CACHE_HOME": "/c"}) == Path("/c/semula/replay")


def test_the_name_follows_every_byte_the_project_and_the_size_limit(tmp_path):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(b'{"bundle": {"format": "semula-bundle", "version": 1}, "entries": []}\n')
    name = replay_cache.key(bundle, "default", SETTINGS)
    assert name == replay_cache.key(bundle, "default", SETTINGS)
    assert replay_cache.key(bundle, "other", SETTINGS) != name
    smaller = settings(SEMULA_MAX_BODY_BYTES="100000")
    assert replay_cache.key(bundle, "default", smaller) != name
    bundle.write_bytes(bundle.read_bytes().replace(b"\n", b" \n"))
    assert replay_cache.key(bundle, "default", SETTINGS) != name
    # What an import read names what it made, whatever was looked up before it.
    with bundle.open("rb") as source:
        reading = replay_cache.Reading(source, replay_cache.digest("default", SETTINGS))
        reading.read(10)
        assert reading.name() == replay_cache.key(bundle, "default", SETTINGS)


def test_nothing_is_kept_with_secrets_in_the_settings(tmp_path):
    bundle = tmp_path / "b.json"
    bundle.write_bytes(b"{}")
    secret = settings(SEMULA_UPSTREAM_KEY="sk-" + "a" * 40)
    assert replay_cache.key(bundle, "default", secret) is None

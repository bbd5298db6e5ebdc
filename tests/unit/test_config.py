from __future__ import annotations

import pytest

from semula.config import ConfigError, Settings


def test_defaults_without_environment():
    s = Settings.from_env({})
    assert s.database_url == "sqlite:///./semula.db"
    assert s.auth is True and s.hosted is False
    assert s.poll_interval == 0.2
    assert (s.session_idle_timeout, s.session_lifetime) == (12 * 3600, 7 * 86400)
    assert s.hit_cache_mb == 40 and s.call_log_hits == 1.0
    assert s.change_check == "read"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("SEMULA_AUTH", "maybe"),
        ("SEMULA_POLL_INTERVAL", "fast"),
        ("SEMULA_POLL_INTERVAL", "0"),
        ("SEMULA_WORKERS", "1000"),
        ("SEMULA_DATABASE_URL", "mysql://x"),
        ("SEMULA_ANSWERER_COMMAND", "claude -p"),
        ("SEMULA_ANSWERER_COMMAND", "[]"),
        ("SEMULA_ANSWERER_ENV", "HOME,SEMULA_UPSTREAM_KEY"),
        ("SEMULA_UPSTREAM_URL", "ftp://x"),
        ("SEMULA_SESSION_IDLE_TIMEOUT", "12h"),
        ("SEMULA_SESSION_LIFETIME", "0"),
        ("SEMULA_HIT_CACHE_MB", "0"),
        ("SEMULA_HIT_CACHE_MB", "40MB"),
        ("SEMULA_CALL_LOG_HITS", "2"),
        ("SEMULA_CHANGE_CHECK", "listen"),
        ("SEMULA_CHANGE_CHECK", "notify"),  # on the default database, SQLite
    ],
)
def test_bad_value_names_the_variable(name, value):
    with pytest.raises(ConfigError) as info:
        Settings.from_env({name: value})
    assert name in str(info.value)


def test_secret_values_never_in_error_or_repr():
    canary = "sk-canary-0123456789abcdef0123456789"
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"SEMULA_ANSWERER_COMMAND": f"not json {canary}"})
    assert canary not in str(info.value)
    s = Settings.from_env({"SEMULA_UPSTREAM_KEY": canary, "SEMULA_ANSWERER_URL": f"https://x/{canary}"})
    assert canary not in repr(s)
    assert canary in s.secrets()[0]
    anthropic = Settings.from_env(
        {"SEMULA_ANTHROPIC_KEY": canary, "SEMULA_ANTHROPIC_URL": "https://a.example/v1"}
    )
    assert canary not in repr(anthropic) and canary in anthropic.secrets()
    assert anthropic.upstream_configured and not Settings().upstream_configured


def test_answerer_command_and_url_are_exclusive():
    with pytest.raises(ConfigError, match="not both"):
        Settings.from_env(
            {"SEMULA_ANSWERER_COMMAND": '["true"]', "SEMULA_ANSWERER_URL": "http://127.0.0.1:9"}
        )


def test_auth_off_refused_in_hosted_mode():
    with pytest.raises(ConfigError, match="SEMULA_AUTH"):
        Settings.from_env({"SEMULA_AUTH": "off", "SEMULA_HOSTED": "on"})


def test_change_notices_are_for_postgresql():
    pg = "postgresql://semula@db.example/semula"
    assert Settings.from_env({"SEMULA_CHANGE_CHECK": "Notify", "SEMULA_DATABASE_URL": pg}).change_check == (
        "notify"
    )
    with pytest.raises(ConfigError, match="is for PostgreSQL"):
        Settings.from_env({"SEMULA_CHANGE_CHECK": "notify", "SEMULA_DATABASE_URL": "sqlite:///x.db"})


def test_answerer_env_names_parsed():
    s = Settings.from_env({"SEMULA_ANSWERER_ENV": "ANTHROPIC_API_KEY, OTHER"})
    assert s.answerer_env == ("ANTHROPIC_API_KEY", "OTHER")

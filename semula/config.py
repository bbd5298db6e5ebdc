"""Settings from SEMULA_* environment variables, read once at start and validated."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any
from urllib.parse import unquote

MAX_RECORD_TIMEOUT = 3600


class ConfigError(Exception):
    """A SEMULA_* variable has a value semula cannot use; the message names it."""


def read_env_file(text: str) -> dict[str, str]:
    """Variables from an environment file, parsed as systemd's EnvironmentFile= parses one.

    The rules of systemd's env-file parser: `#` and `;` start comment lines; whitespace around the
    key and before the value is dropped; quotes are special only where a value (or a part of it)
    starts: '...' is taken as is, "..." takes \\", \\\\, \\` and \\$ escapes; elsewhere a backslash
    escapes the next character and a quote is an ordinary one, so an unquoted JSON value such as
    `SEMULA_ANSWERER_COMMAND=["claude","-p","Answer."]` keeps its quotes; trailing whitespace of an
    unquoted value is dropped; a backslash at the end of a line continues it. Lines without `=` are
    ignored, as systemd ignores them.
    """
    env: dict[str, str] = {}
    state, key, value, trailing = "pre_key", "", [], 0
    for ch in text + "\n":
        newline = ch in "\n\r"
        if state == "pre_key":
            if ch in "#;":
                state = "comment"
            elif not ch.isspace():
                state, key = "key", ch
        elif state == "comment":
            if newline:
                state = "pre_key"
        elif state == "key":
            if newline:
                state = "pre_key"  # no "=": ignored
            elif ch == "=":
                state, value, trailing = "pre_value", [], 0
            else:
                key += ch
        elif state in ("pre_value", "value"):
            if newline:
                env[key.strip()] = "".join(value[: len(value) - trailing] if state == "value" else value)
                state = "pre_key"
            elif ch == "\\":
                state, trailing = "value_escape", 0
            elif state == "pre_value" and ch == "'":
                state = "single"
            elif state == "pre_value" and ch == '"':
                state = "double"
            elif state == "pre_value" and ch.isspace():
                pass
            else:
                state = "value"
                value.append(ch)
                trailing = trailing + 1 if ch.isspace() else 0
        elif state == "value_escape":
            state = "value"
            if not newline:  # a backslash-newline continues the line
                value.append(ch)
        elif state == "single":
            if ch == "'":
                state = "pre_value"
            else:
                value.append(ch)
        elif state == "double":
            if ch == '"':
                state = "pre_value"
            elif ch == "\\":
                state = "double_escape"
            else:
                value.append(ch)
        elif state == "double_escape":
            state = "double"
            if ch in '"\\`$':
                value.append(ch)
            elif not newline:
                value += ["\\", ch]
    return {k: v for k, v in env.items() if k}


def _url_password(url: str | None) -> tuple[str, ...]:
    """The password a database URL carries (postgresql://user:PASSWORD@host/db), as written and
    percent-decoded."""
    if not url or "@" not in url:
        return ()
    password = url.partition("://")[2].rpartition("@")[0].partition(":")[2]
    return (password, unquote(password)) if password else ()


def load_env_file(path: str | os.PathLike[str]) -> None:
    """Read an environment file (read_env_file's rules) into os.environ, its values winning: what
    `--env-file` does for `semula` and `semula-answerer`. ConfigError when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read {os.fspath(path)}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"cannot read {os.fspath(path)}: it is not UTF-8 text") from None
    os.environ.update(read_env_file(text))


def _bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no", ""):
        return False
    raise ConfigError(f"{name} must be on or off, not {raw!r}")


def _number(kind: Callable[[str], Any], low: float, high: float) -> Callable[[str, str], Any]:
    def parse(name: str, raw: str) -> Any:
        try:
            value = kind(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number, not {raw!r}") from None
        if not low <= value <= high:
            raise ConfigError(f"{name} must be between {low} and {high}, not {raw!r}")
        return value

    return parse


def _database_url(name: str, raw: str) -> str:
    if raw.startswith(("sqlite:///", "postgresql://", "postgres://")):
        return raw
    # Never echo the value: a database URL can carry a password.
    raise ConfigError(f"{name} must start with sqlite:/// or postgresql://")


def _http_url(name: str, raw: str) -> str:
    if raw.startswith(("http://", "https://")):
        return raw.rstrip("/")
    raise ConfigError(f"{name} must be an http(s) URL")


def _argv(name: str, raw: str) -> list[str]:
    try:
        argv = json.loads(raw)
    except ValueError:
        argv = None
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) and a for a in argv)):
        # The command is a secret: say what is wrong with it, never what it is.
        raise ConfigError(f"{name} must be a JSON array of non-empty strings (the argv)")
    return argv


def _env_names(name: str, raw: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    for n in names:
        if n.upper().startswith("SEMULA_"):
            raise ConfigError(f"{name} may not name SEMULA_ variables ({n})")
        if not n.replace("_", "").isalnum():
            raise ConfigError(f"{name} must be a comma list of variable names")
    return names


def _choice(*options: str) -> Callable[[str, str], str]:
    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in options:
            raise ConfigError(f"{name} must be one of {', '.join(options)}, not {raw!r}")
        return value

    return parse


def _text(name: str, raw: str) -> str:
    return raw


def setting(env: str, default: Any, parse: Callable[[str, str], Any] = _text, *, secret: bool = False) -> Any:
    return field(default=default, repr=not secret, metadata={"env": env, "parse": parse, "secret": secret})


@dataclass(frozen=True)
class Settings:
    """Server configuration; secrets are repr=False and never printed."""

    database_url: str = setting("SEMULA_DATABASE_URL", "sqlite:///./semula.db", _database_url, secret=True)
    # Hosted PostgreSQL: the owner role for migrations and operator commands (see deploy/).
    owner_database_url: str | None = setting("SEMULA_OWNER_DATABASE_URL", None, _database_url, secret=True)
    auth: bool = setting("SEMULA_AUTH", True, _bool)
    hosted: bool = setting("SEMULA_HOSTED", False, _bool)
    bind: str = setting("SEMULA_BIND", "127.0.0.1:8080")
    workers: int = setting("SEMULA_WORKERS", 2, _number(int, 1, 64))
    worker_connections: int = setting("SEMULA_WORKER_CONNECTIONS", 10000, _number(int, 10, 100000))
    keepalive: int = setting("SEMULA_KEEPALIVE", 5, _number(int, 0, 300))
    # Seconds a request's head may take from its first bytes, and a body's client between two reads,
    # before the connection is cut off with a 408 (nginx's client_header_timeout, client_body_timeout).
    header_timeout: float = setting("SEMULA_HEADER_TIMEOUT", 60.0, _number(float, 0.5, 3600))
    body_timeout: float = setting("SEMULA_BODY_TIMEOUT", 60.0, _number(float, 0.5, 3600))
    poll_interval: float = setting("SEMULA_POLL_INTERVAL", 0.2, _number(float, 0.01, 10))
    max_body_bytes: int = setting("SEMULA_MAX_BODY_BYTES", 8 * 1024 * 1024, _number(int, 1024, 1 << 30))
    # Bundles are read as a stream, so this bounds disk and time, not memory: an import checks
    # ~9 MB/s on one core (docs/decisions/0037), so 128 MiB answers well inside a client's 30 s.
    max_import_bytes: int = setting("SEMULA_MAX_IMPORT_BYTES", 128 << 20, _number(int, 1024, 1 << 40))
    log_retention_days: int = setting("SEMULA_LOG_RETENTION_DAYS", 14, _number(int, 1, 3650))
    # A replay session's counters go when it has counted no call for this long (decision 0041).
    session_retention_days: int = setting("SEMULA_SESSION_RETENTION_DAYS", 30, _number(int, 1, 3650))
    log_level: str = setting("SEMULA_LOG_LEVEL", "info", _choice("debug", "info", "warning", "error"))
    # Log lines as JSON, or as text for a person (auto: text when stderr is a terminal).
    log_format: str = setting("SEMULA_LOG_FORMAT", "auto", _choice("auto", "json", "text"))
    db_pool_size: int = setting("SEMULA_DB_POOL_SIZE", 10, _number(int, 1, 200))
    # MiB of kept replay hits each worker holds (service/hits.py).
    hit_cache_mb: int = setting("SEMULA_HIT_CACHE_MB", 40, _number(int, 1, 64 * 1024))
    # How long `semula serve` waits for an unreachable database before it gives up.
    db_wait: int = setting("SEMULA_DB_WAIT", 60, _number(int, 0, 86400))
    # The share of replay hits that get an access-log line (1: all, 0: none); other requests always get one.
    access_log_hits: float = setting("SEMULA_ACCESS_LOG_HITS", 1.0, _number(float, 0, 1))
    # The share of replay hits that get a call-log row (1: all, 0: none); every other call gets one.
    call_log_hits: float = setting("SEMULA_CALL_LOG_HITS", 1.0, _number(float, 0, 1))
    # How a kept replay hit learns of changes on PostgreSQL: `read` the change counter (the very next
    # request sees every change) or by `notify` (seen once the notice comes; decision 0047).
    change_check: str = setting("SEMULA_CHANGE_CHECK", "read", _choice("read", "notify"))
    # /metrics needs `Authorization: Bearer <this>` when set; in hosted mode /metrics is off without it.
    metrics_token: str | None = setting("SEMULA_METRICS_TOKEN", None, secret=True)
    # Per-workspace quotas (hosted mode); unset means the hosted defaults in service/quotas.py.
    quota_projects: int | None = setting("SEMULA_QUOTA_PROJECTS", None, _number(int, 1, 10**9))
    quota_entries: int | None = setting("SEMULA_QUOTA_ENTRIES", None, _number(int, 1, 10**12))
    quota_parked: int | None = setting("SEMULA_QUOTA_PARKED", None, _number(int, 1, 10**9))
    quota_answer_bytes: int | None = setting("SEMULA_QUOTA_ANSWER_BYTES", None, _number(int, 1, 1 << 30))
    secret_key: str | None = setting("SEMULA_SECRET", None, secret=True)
    cookie_secure: bool = setting("SEMULA_COOKIE_SECURE", False, _bool)
    # Dashboard sessions, in seconds: unused this long, or this long after sign-in, they end.
    session_idle_timeout: int = setting(
        "SEMULA_SESSION_IDLE_TIMEOUT", 12 * 3600, _number(int, 60, 365 * 86400)
    )
    session_lifetime: int = setting("SEMULA_SESSION_LIFETIME", 7 * 86400, _number(int, 60, 365 * 86400))
    upstream_key: str | None = setting("SEMULA_UPSTREAM_KEY", None, secret=True)
    upstream_url: str = setting("SEMULA_UPSTREAM_URL", "https://api.openai.com/v1", _http_url, secret=True)
    upstream_timeout: float = setting("SEMULA_UPSTREAM_TIMEOUT", 120.0, _number(float, 1, 3600))
    upstream_tenants: bool = setting("SEMULA_UPSTREAM_TENANTS", False, _bool)
    # Record-through for the Anthropic Messages API (sent as x-api-key); the OpenAI ones use UPSTREAM_*.
    anthropic_key: str | None = setting("SEMULA_ANTHROPIC_KEY", None, secret=True)
    anthropic_url: str = setting(
        "SEMULA_ANTHROPIC_URL", "https://api.anthropic.com/v1", _http_url, secret=True
    )
    # Record-through for the Gemini API (sent as x-goog-api-key); the model and method follow the URL.
    gemini_key: str | None = setting("SEMULA_GEMINI_KEY", None, secret=True)
    gemini_url: str = setting(
        "SEMULA_GEMINI_URL", "https://generativelanguage.googleapis.com/v1beta", _http_url, secret=True
    )
    answerer_command: list[str] | None = setting("SEMULA_ANSWERER_COMMAND", None, _argv, secret=True)
    answerer_url: str | None = setting("SEMULA_ANSWERER_URL", None, _http_url, secret=True)
    answerer_bearer: str | None = setting("SEMULA_ANSWERER_BEARER", None, secret=True)
    answerer_env: tuple[str, ...] = setting("SEMULA_ANSWERER_ENV", (), _env_names)
    answerer_timeout: float = setting("SEMULA_ANSWERER_TIMEOUT", 120.0, _number(float, 1, 3600))
    answerer_concurrency: int = setting("SEMULA_ANSWERER_CONCURRENCY", 2, _number(int, 1, 64))
    # HOST:PORT where the answerer daemon serves its own /metrics (runs by result); unset: none.
    answerer_metrics_bind: str | None = setting("SEMULA_ANSWERER_METRICS_BIND", None)
    # The answerer daemon talks to this server over REST with this token (editor, record scope)
    # instead of opening the database (decision 0042).
    answerer_server: str | None = setting("SEMULA_ANSWERER_SERVER", None, _http_url)
    answerer_token: str | None = setting("SEMULA_ANSWERER_TOKEN", None, secret=True)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read every SEMULA_* variable; raise ConfigError naming the first bad one."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = environ.get(f.metadata["env"])
            if raw is not None and raw != "":
                values[f.name] = f.metadata["parse"](f.metadata["env"], raw)
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        if self.answerer_command and self.answerer_url:
            raise ConfigError("set SEMULA_ANSWERER_COMMAND or SEMULA_ANSWERER_URL, not both")
        postgres = self.database_url.startswith(("postgresql://", "postgres://"))
        if self.change_check == "notify" and not postgres:
            raise ConfigError(
                "SEMULA_CHANGE_CHECK=notify is for PostgreSQL; on SQLite a kept hit's check reads no "
                "database already (leave it at read)"
            )
        if self.hosted and not self.auth:
            raise ConfigError(
                "SEMULA_AUTH=off is a local development switch and is refused with SEMULA_HOSTED=on"
            )

    def secrets(self) -> tuple[str, ...]:
        """Values that must never reach a response, a log line or the database."""
        values = [
            self.upstream_key,
            self.anthropic_key,
            self.gemini_key,
            self.answerer_url,
            self.answerer_bearer,
            self.answerer_token,
            self.secret_key,
            self.metrics_token,
        ]
        if self.answerer_command:
            values += [json.dumps(self.answerer_command), " ".join(self.answerer_command)]
        values += [*_url_password(self.database_url), *_url_password(self.owner_database_url)]
        return tuple(v for v in values if v and len(v) >= 8)

    @property
    def upstream_configured(self) -> bool:
        """Whether some provider key is set, so a project may turn record-through on."""
        return bool(self.upstream_key or self.anthropic_key or self.gemini_key)

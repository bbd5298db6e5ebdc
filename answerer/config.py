"""The daemon's view of the settings: a command or a URL, the child's environment, the limits.

Everything is read once at start. The command, URL and bearer are secrets: errors name the
variable, never its value, and only the executable's basename is ever shown.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field

from semula.config import ConfigError, Settings
from semula.service.pending import MAX_LEASE

# docs/design/answerer.md: the child's environment is this allowlist plus the names in SEMULA_ANSWERER_ENV.
ALLOWED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER")
# The claim outlives the child's timeout by this much, so answering after a slow child still
# happens inside the lease.
LEASE_MARGIN = 30
MAX_OUTPUT = 1024 * 1024
# What a daemon that talks to the server over HTTP refuses to be given (decision 0042).
DATABASE_VARIABLES = ("SEMULA_DATABASE_URL", "SEMULA_OWNER_DATABASE_URL")


@dataclass(frozen=True)
class AnswererConfig:
    """What the daemon runs and how: exactly one of argv and url is set."""

    argv: tuple[str, ...] | None = field(default=None, repr=False)
    url: str | None = field(default=None, repr=False)
    bearer: str | None = field(default=None, repr=False)
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 120.0
    concurrency: int = 2
    max_output: int = MAX_OUTPUT
    # Set by the entry point once the process is a child subreaper (answerer.containment).
    adopt_orphans: bool = False
    # The server's base URL and the daemon's token, when it talks REST instead of opening the database.
    server: str | None = None
    token: str | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """What logs and entry summaries may name: the executable's basename, or "webhook"."""
        return os.path.basename(self.argv[0]) if self.argv else "webhook"

    @property
    def lease_seconds(self) -> int:
        """One attempt's claim: the timeout plus a margin, within the service's maximum."""
        return min(MAX_LEASE, math.ceil(self.timeout) + LEASE_MARGIN)


def child_env(names: tuple[str, ...], environ: Mapping[str, str]) -> dict[str, str]:
    """The allowlisted variables that are set, plus the operator's names; never a SEMULA_ one."""
    env = {}
    for name in (*ALLOWED_ENV, *names):
        # Settings refuse SEMULA_ names already; this keeps the rule true whatever builds the list.
        if name.upper().startswith("SEMULA_"):
            raise ConfigError(f"SEMULA_ANSWERER_ENV may not name SEMULA_ variables ({name})")
        if name in environ:
            env[name] = environ[name]
    return env


def from_settings(settings: Settings, environ: Mapping[str, str] | None = None) -> AnswererConfig:
    """Check what the daemon needs; raise ConfigError naming the variable (never its value)."""
    environ = os.environ if environ is None else environ
    if settings.hosted:
        raise ConfigError("the answerer does not run with SEMULA_HOSTED=on (docs/design/answerer.md)")
    if settings.answerer_command and settings.answerer_url:
        raise ConfigError("set SEMULA_ANSWERER_COMMAND or SEMULA_ANSWERER_URL, not both")
    if not settings.answerer_command and not settings.answerer_url:
        raise ConfigError("set SEMULA_ANSWERER_COMMAND (a JSON argv) or SEMULA_ANSWERER_URL")
    if settings.answerer_bearer and not settings.answerer_url:
        raise ConfigError("SEMULA_ANSWERER_BEARER is set but SEMULA_ANSWERER_URL is not")
    if settings.answerer_token and not settings.answerer_server:
        raise ConfigError("SEMULA_ANSWERER_TOKEN is set but SEMULA_ANSWERER_SERVER is not")
    for name in DATABASE_VARIABLES:
        if settings.answerer_server and environ.get(name):
            # Over HTTP the daemon holds no database URL: that is what the mode keeps from the child.
            raise ConfigError(f"SEMULA_ANSWERER_SERVER is set: the answerer must not get {name} too")
    env = child_env(settings.answerer_env, environ)
    argv = tuple(settings.answerer_command) if settings.answerer_command else None
    # Found the way Popen will look for it (the child's PATH), so a typo stops the start, not every call.
    if argv and shutil.which(argv[0], path=env.get("PATH", os.defpath)) is None:
        raise ConfigError("SEMULA_ANSWERER_COMMAND: its executable is not found on PATH or is not executable")
    return AnswererConfig(
        argv=argv,
        url=settings.answerer_url,
        bearer=settings.answerer_bearer,
        env=env,
        timeout=settings.answerer_timeout,
        concurrency=settings.answerer_concurrency,
        server=settings.answerer_server,
        token=settings.answerer_token,
    )


def missing_env(settings: Settings, environ: Mapping[str, str] | None = None) -> list[str]:
    """Names listed in SEMULA_ANSWERER_ENV that are not set (worth a warning at start)."""
    environ = os.environ if environ is None else environ
    return [name for name in settings.answerer_env if name not in environ]

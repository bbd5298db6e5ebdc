"""Entry point of `semula-answerer`: read the settings, refuse what is unsafe, run until signalled.

It reaches semula through the database (SEMULA_DATABASE_URL) or, with SEMULA_ANSWERER_SERVER,
through the server's REST API with its own token and no database at all (decision 0042).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from dataclasses import replace

from answerer import config as answerer_config
from answerer import containment
from answerer.daemon import Daemon
from answerer.server import HttpServer, TokenRefused, Unavailable, refusal
from answerer.signals import on_stop
from semula import logs
from semula.config import ConfigError, Settings, load_env_file
from semula.db import DatabaseError, connect
from semula.migrate import SchemaMismatch, migrate
from semula.service import CLI, Context

logger = logging.getLogger("semula.answerer")

# systemd's unit lists this in RestartPreventExitStatus: a configuration refusal is not retried.
EXIT_CONFIG = 2


USAGE = """usage: semula-answerer [--env-file FILE]

Answers calls semula parks, one fresh process (SEMULA_ANSWERER_COMMAND) or HTTP POST
(SEMULA_ANSWERER_URL) per call, and runs until SIGTERM or SIGINT. Its settings are environment
variables (systemd's EnvironmentFile, deploy/answerer.env.example); --env-file FILE reads them from
FILE first, parsed as systemd parses it, its values winning over the environment's:

  SEMULA_ANSWERER_SERVER, SEMULA_ANSWERER_TOKEN   the server's URL and an editor token (record scope)
  SEMULA_ANSWERER_COMMAND or SEMULA_ANSWERER_URL  what answers a call (a JSON array argv, or a URL)
  SEMULA_ANSWERER_TIMEOUT, SEMULA_ANSWERER_CONCURRENCY, SEMULA_ANSWERER_ENV, SEMULA_ANSWERER_BEARER

Without SEMULA_ANSWERER_SERVER it opens SEMULA_DATABASE_URL instead (PostgreSQL only in practice).
See docs/answerer.md.
"""


def main(argv: list[str] | None = None) -> int:
    """Run the answerer daemon until SIGTERM or SIGINT (a second one kills running children at once).

    `argv`: the arguments (sys.argv's by default): --env-file FILE, or --help."""
    args = list(sys.argv[1:] if argv is None else argv)
    env_file: str | None = None
    while args:
        arg = args.pop(0)
        if arg in ("-h", "--help"):
            print(USAGE, end="")
            return 0
        if arg == "--env-file":
            if not args:
                print("semula-answerer: --env-file needs a FILE; see --help", file=sys.stderr)
                return EXIT_CONFIG
            env_file = args.pop(0)
        elif arg.startswith("--env-file="):
            env_file = arg.removeprefix("--env-file=")
        else:
            print(f"semula-answerer: unknown argument {arg!r}; see --help", file=sys.stderr)
            return EXIT_CONFIG
    try:
        if env_file is not None:
            load_env_file(env_file)
        settings = Settings.from_env()
        config = answerer_config.from_settings(settings)
    except ConfigError as exc:
        # The message names the variable, never its value.
        print(f"semula-answerer: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    logs.setup(settings.log_level, settings.secrets())
    # Before any child runs: the children can then read neither this process's environment nor
    # its memory, and their orphans come back to it (decision 0028).
    containment.harden_daemon()
    config = replace(config, adopt_orphans=True)
    containment.clean_predecessors(tempfile.gettempdir())
    http: Daemon | None = None
    if config.server:
        # Over HTTP: no database in this process (decision 0042). The token first, before any
        # other line, so that a refused one prints one line and nothing else.
        http = Daemon(None, config, server=HttpServer(config.server, config.token))
        try:
            http.check()
        except TokenRefused as exc:
            # Restarting cannot fix a refused token: one line, and the status the unit does not restart on.
            print(refusal(config.server, config.token, exc), file=sys.stderr)
            return EXIT_CONFIG
        except Unavailable:
            pass  # The server may come later: the polls keep trying, and check the token when it answers.
    if settings.answerer_metrics_bind:
        from prometheus_client import start_http_server

        host, _, port = settings.answerer_metrics_bind.rpartition(":")
        try:
            start_http_server(int(port), addr=host or "127.0.0.1")
        except (OSError, ValueError) as exc:
            print(
                f"semula-answerer: SEMULA_ANSWERER_METRICS_BIND: cannot listen there ({exc})", file=sys.stderr
            )
            return EXIT_CONFIG
    for name in answerer_config.missing_env(settings):
        logger.warning("env_not_set", extra={"variable": name})
    if http is not None:
        with on_stop(http.stop, http.abort):
            http.run()
        if http.refused is not None:
            print(refusal(config.server, config.token, http.refused), file=sys.stderr)
            return EXIT_CONFIG
        return 0
    if settings.database_url.startswith("sqlite:"):
        # The child can read whatever this process's user can: with SQLite, the whole database file.
        logger.warning(
            "sqlite_database_mode",
            extra={"hint": "set SEMULA_ANSWERER_SERVER and SEMULA_ANSWERER_TOKEN (docs/answerer.md)"},
        )
    try:
        store = connect(settings.database_url, pool_size=settings.answerer_concurrency + 2)
    except DatabaseError as exc:
        logger.error("database_unavailable", extra={"error": type(exc).__name__})
        return 1
    try:
        # The server migrates too; whichever starts first does it, under the migration lock.
        try:
            migrate(store)
        except SchemaMismatch as exc:
            # Restarting cannot fix a schema this version does not fit; like a configuration refusal.
            print(f"semula-answerer: {exc.message}", file=sys.stderr)
            return EXIT_CONFIG
        daemon = Daemon(Context(store, settings, CLI), config)
        with on_stop(daemon.stop, daemon.abort):
            daemon.run()
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

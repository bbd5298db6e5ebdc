"""The semula command line: serve, migrate, and the operator's project and token commands."""

from __future__ import annotations

import json
import logging
import os
import secrets
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from semula.config import ConfigError, Settings
from semula.core.errors import NotFound, SemulaError
from semula.service import CLI, Context
from semula.surfaces import cli_agent

EXIT_ERROR, EXIT_USAGE = 1, 2
# `semula serve`'s refusals that starting again cannot fix (a setting semula cannot use, a schema a
# newer semula migrated): deploy/semula.service lists it in RestartPreventExitStatus, as the
# answerer's unit does for the same status.
EXIT_REFUSED = 2

logger = logging.getLogger("semula.serve")


class Refused(click.ClickException):
    """A refusal that running the command again cannot fix; `semula serve` exits EXIT_REFUSED with it
    (other commands exit 1, as with any error)."""


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise Refused(str(exc)) from None


@contextmanager
def local_context(*, read_only: bool = False) -> Iterator[Context]:
    """A service context on the configured database, acting as the operator (`cli`).

    With SEMULA_OWNER_DATABASE_URL (hosted PostgreSQL) the operator works as the owner role,
    which row-level security does not bind; the server itself uses SEMULA_DATABASE_URL.

    A command that changes nothing (`read_only`) neither creates nor migrates a database: it
    refuses, naming the database it looked for, when the file does not exist or the schema does
    not fit this semula. The others migrate first.
    """
    from semula.db import connect
    from semula.migrate import SchemaMismatch, migrate, schema

    settings = load_settings()
    url = settings.owner_database_url or settings.database_url
    if read_only and url.startswith("sqlite:///") and not _sqlite_file_exists(url):
        raise click.ClickException(f"There is no database to read. {_which_database(settings)}")
    store = connect(url, pool_size=2)
    try:
        if read_only:
            problem = schema(store).problem()
            if problem is not None:
                raise click.ClickException(f"{problem.message} {_which_database(settings)}")
        else:
            migrate(store)
        yield Context(store, settings, CLI)
    except SchemaMismatch as exc:
        raise Refused(f"{exc.message} {_which_database(settings)}") from None
    except NotFound as exc:
        # The commonest cause: another database than the server's (./semula.db of another directory).
        raise click.ClickException(f"{exc.message} {_which_database(settings)}") from None
    except SemulaError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        store.close()


def _sqlite_path(url: str) -> str:
    """The file of a sqlite:/// URL, absolute (":memory:" as it is)."""
    path = url.removeprefix("sqlite:").removeprefix("///")
    return str(Path(path).resolve()) if path and path != ":memory:" else path


def _sqlite_file_exists(url: str) -> bool:
    path = _sqlite_path(url)
    return path == ":memory:" or Path(path).is_file()


def _which_database(settings: Settings) -> str:
    """Which database a command used, without credentials: a relative SQLite path is the current
    directory's, so a command run elsewhere than the server finds another, empty one."""
    url = settings.owner_database_url or settings.database_url
    if url.startswith("sqlite:"):
        return (
            f"(This command used the SQLite database {_sqlite_path(url)}; the server's is set by its "
            "SEMULA_DATABASE_URL: run the command with the same setting, or --env-file.)"
        )
    host = url.split("@")[-1].split("?")[0]  # no user or password
    return f"(This command used the database at {host}.)"


def emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


class _Main(click.Group):
    """semula's command: its help names the APIs the dialect registry has when the help is shown, so
    that `semula --help` loads every dialect and the other commands do not (decision 0064)."""

    def format_help_text(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from semula import dialects

        self.help = f"semula records and replays LLM API calls: {dialects.spoken()}."
        super().format_help_text(ctx, formatter)


@click.group(cls=_Main)
@click.version_option(package_name="semula")
@click.option(
    "--env-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Read SEMULA_* settings from this file first, parsed as systemd's EnvironmentFile= is "
    "(the service's /etc/semula/semula.env); its values win over the environment's.",
)
def main(env_file: Path | None) -> None:
    """semula records and replays LLM API calls (the APIs the dialect registry has: _Main)."""
    if env_file is not None:
        from semula.config import load_env_file

        try:
            load_env_file(env_file)
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None


@main.command()
def migrate() -> None:
    """Apply pending database migrations (also done by `semula serve`)."""
    from semula.db import connect
    from semula.migrate import migrate as run

    settings = load_settings()
    store = connect(settings.owner_database_url or settings.database_url, pool_size=1)
    try:
        applied = run(store)
    except SemulaError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        store.close()
    click.echo(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))


LOOPBACK = ("127.0.0.1", "localhost", "::1")


@main.command()
@click.option(
    "--dev",
    is_flag=True,
    help="Local development: 127.0.0.1 only, auth off, project 'default' in record mode.",
)
@click.option("--port", type=int, default=None, help="Port to listen on (default 8080).")
@click.option("--bind", default=None, help="HOST:PORT to listen on (default SEMULA_BIND, 127.0.0.1:8080).")
@click.option(
    "--workers", type=int, default=None, help="gunicorn worker processes (default SEMULA_WORKERS, 2)."
)
def serve(dev: bool, port: int | None, bind: str | None, workers: int | None) -> None:
    """Run the server: gunicorn with gevent workers, after migrating the database.

    The one supported way to start it: it migrates, prepares the workers' shared metrics directory
    (removed again when the server stops) and refuses a busy address before gunicorn starts.
    """
    if bind and port is not None:
        raise click.UsageError("Give --bind HOST:PORT or --port PORT, not both.")
    if dev:
        os.environ["SEMULA_AUTH"] = "off"
        os.environ["SEMULA_HOSTED"] = "off"
        if bind and bind.rsplit(":", 1)[0].strip("[]") not in LOOPBACK:
            raise click.UsageError(
                f"--dev serves with auth off, so only on a loopback address (127.0.0.1, ::1); "
                f"--bind {bind} is not one. Run `semula serve` with tokens to serve elsewhere."
            )
        bind = bind or f"127.0.0.1:{port or 8080}"
    if workers:
        os.environ["SEMULA_WORKERS"] = str(workers)
    try:
        if port is not None and bind is None:
            bind = f"{load_settings().bind.rsplit(':', 1)[0]}:{port}"
        if bind:
            os.environ["SEMULA_BIND"] = bind
        settings = load_settings()
    except Refused as exc:
        exc.exit_code = EXIT_REFUSED  # click prints it; the unit does not restart on it
        raise
    from semula import logs

    logs.setup(settings.log_level, settings.secrets(), settings.log_format)
    try:
        check_address(settings.bind)
        wait_for_database(settings)
        # Every worker must sign dashboard sessions with the same key; without SEMULA_SECRET one is
        # made per start (sessions end with a restart; several hosts need a shared SEMULA_SECRET).
        os.environ.setdefault("SEMULA_SECRET", secrets.token_urlsafe(32))
        with local_context() as ctx:
            if dev:
                from semula.service import projects

                projects.ensure(ctx, "default", mode="record")
            settings = ctx.settings
    except click.ClickException as exc:
        # A refusal to start is a log line like the server's others: JSON, in the journal.
        logger.error(exc.message)
        sys.exit(EXIT_REFUSED if isinstance(exc, Refused) else EXIT_ERROR)
    prepare_metrics_dir()
    raise_open_files(settings.worker_connections)
    base = f"http://{settings.bind}"
    project = "default" if dev else "<project>"
    logger.info(
        f"semula serving on {base} ({settings.workers} gevent workers): dashboard {base}/ui, "
        f"OpenAI base URL {base}/p/{project}/v1",
        extra={"bind": settings.bind, "workers": settings.workers, "dashboard": f"{base}/ui"},
    )
    sys.stderr.flush()
    os.environ["SEMULA_SERVE"] = "1"  # semula/gunicorn_conf.py refuses a start that did not come through here
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:semula.gunicorn_conf"]
    os.execv(sys.executable, argv)


# Files a worker holds beside its connections: database connections, logs, metrics files, the listener.
FILES_BESIDE = 256


def raise_open_files(connections: int) -> int:
    """Let each worker hold its SEMULA_WORKER_CONNECTIONS: the soft open-file limit (1,024 by default
    under systemd, whose hard one is far higher) raised to connections + FILES_BESIDE as far as the
    hard limit allows, for gunicorn and its workers; a warning when the hard limit falls short, since a
    worker past it fails to accept. Returns the soft limit now (issue 52)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FILES_BESIDE
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    if soft < wanted:
        logger.warning(
            f"a worker may open {soft:,} files, fewer than SEMULA_WORKER_CONNECTIONS ({connections:,}) and "
            f"{FILES_BESIDE} more: raise the hard limit (LimitNOFILE= in the unit, ulimit -Hn) or lower it",
            extra={"open_files": soft, "worker_connections": connections},
        )
    return soft


def check_address(bind: str) -> None:
    """Fail once, clearly, when another process listens on HOST:PORT (gunicorn would retry and trace)."""
    import errno
    import socket

    if bind.startswith(("unix:", "fd://")):
        return
    host, _, port = bind.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise click.ClickException(
                    f"{host}:{port} is in use: another process (another semula?) listens there. "
                    "Stop it, or pick another port: `semula serve --port N` (`make run PORT=N`)."
                ) from None
            raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror}") from None


def wait_for_database(settings: Settings) -> None:
    """Wait until the database answers, saying where it is waiting; give up after SEMULA_DB_WAIT s."""
    from semula.db import DatabaseError, Unavailable, connect

    url = settings.owner_database_url or settings.database_url
    deadline = time.monotonic() + settings.db_wait
    delay = 1.0
    # The pool's own warnings repeat the driver's message on each try; this function says it once a try.
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    while True:
        try:
            connect(url, pool_size=1, open_timeout=2).close()
            return
        except Unavailable as exc:
            where = database_location(url)
            if time.monotonic() > deadline:
                raise click.ClickException(
                    f"the database at {where} did not answer within {settings.db_wait} s ({exc.detail}); "
                    "is it running, and are SEMULA_DATABASE_URL's host and port right?"
                ) from None
            logger.warning(
                f"waiting for the database at {where}: {exc.detail}; retrying in {delay:.0f} s",
                extra={"database": where, "error": type(exc).__name__},
            )
            time.sleep(max(0.0, min(delay, deadline - time.monotonic())))
            delay = min(delay * 2, 10.0)
        except DatabaseError as exc:
            raise click.ClickException(f"the database refused semula: {exc.describe()}") from None


def database_location(url: str) -> str:
    """host:port of a PostgreSQL URL (never its user or password), or a SQLite file's path."""
    from urllib.parse import urlsplit

    if url.startswith("sqlite:///"):
        return url[len("sqlite:///") :] or ":memory:"
    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    return f"{parts.hostname or 'localhost'}:{port}"


def prepare_metrics_dir() -> None:
    """Workers share metrics through files in PROMETHEUS_MULTIPROC_DIR, emptied at each start.

    A directory made here is removed when the server stops (semula/gunicorn_conf.py's on_exit).
    """
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="semula-metrics-")
        os.environ["SEMULA_METRICS_DIR_MADE"] = "1"
        return
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.remove(os.path.join(directory, name))


@main.command()
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--port", type=int, default=0, show_default=True, help="Port on 127.0.0.1; 0 picks a free one.")
@click.option("--project", default="default", show_default=True, help="Project name in the base URL.")
@click.option("--record", is_flag=True, help="Record mode: misses park; the bundle is rewritten on stop.")
@click.option(
    "--record-timeout",
    type=click.IntRange(1, 3600),
    default=300,
    show_default=True,
    help="With --record: seconds a parked call is held.",
)
@click.option(
    "--prune", is_flag=True, help="With --record: write back only the entries some call of this run used."
)
@click.option(
    "--missing-ok", is_flag=True, help="Serve a BUNDLE that does not exist yet as empty (every call misses)."
)
def replay(
    bundle: Path, port: int, project: str, record: bool, record_timeout: int, prune: bool, missing_ok: bool
) -> None:
    """Serve BUNDLE from a temporary database until stopped; prints the base URL first."""
    from semula.surfaces import replay_server

    if prune and not record:
        raise click.UsageError("--prune needs --record")
    try:
        replay_server.serve(
            bundle,
            port=port,
            project=project,
            record=record,
            record_timeout=record_timeout,
            missing_ok=missing_ok,
            prune=prune,
        )
    except FileNotFoundError as exc:
        raise click.ClickException(str(exc)) from None
    except SemulaError as exc:
        raise click.ClickException(exc.message) from None


@main.group()
def project() -> None:
    """Create, list, show and change projects (operator, on the local database)."""


def parse_assignments(pairs: tuple[str, ...]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep:
            raise click.UsageError(f"expected KEY=VALUE, got {pair!r}")
        try:
            settings[key] = json.loads(raw)
        except ValueError:
            settings[key] = raw
    return settings


# What each project setting means; `project create/set --help` lists them with their defaults.
SETTING_MEANINGS = {
    "mode": "record: a miss parks for an answer; replay: a miss fails at once (424)",
    "record_timeout": "seconds a parked call holds the application's request (1-3600)",
    "max_misses": "calls parked at once; past it a miss is 429",
    "ignore_fields": 'JSON pointers the fingerprint leaves out, e.g. ["/temperature", "/input/*/id"]',
    "normalize": 'rules applied to prompt text before fingerprinting: [{"pattern", "replacement"}]',
    "record_through": "forward a miss to the provider (SEMULA_UPSTREAM_*) instead of parking it",
    "upstream_model": "with record_through: send this model instead (null: the request's)",
    "upstream_max_calls": "with record_through: the budget of provider calls",
    "upstream_max_tokens": "with record_through: the budget of tokens (null: none)",
    "upstream_dry_run": "with record_through: fail a miss (424) and list its prompt instead of calling",
    "answerer": "hand misses to the answerer daemon (SEMULA_ANSWERER_*)",
    "restamp": "fresh: a replay gets a new id and created; recorded: the ones recorded",
    "stream_pacing": "none: streams replay at once; recorded: with recorded gaps; a number: gaps times it",
    "embeddings": "synthetic: a missed embeddings call is answered at once with made-up vectors; off: parked",
    "sequences": "record: in a session, the k-th identical call with fewer than k answers records answer k",
    "after_last": "past a sequence's last answer: repeat_last, cycle, or fail (424)",
    "faults": 'fault rules as JSON: [{"kind": "rate_limit", "times": 2}] (see `semula fault`)',
}


def settings_help(first: str) -> str:
    from semula.service.projects import DEFAULTS, OPERATOR_FIELDS

    lines = [first, "", "\b", "Settings (default; * admin only, reset by an import):"]
    for key, meaning in SETTING_MEANINGS.items():
        star = "*" if key in OPERATOR_FIELDS else ""
        default = DEFAULTS[key]
        lines.append(
            f"  {key}{star}={default if isinstance(default, str) else json.dumps(default)}  {meaning}"
        )
    return "\n".join(lines)


@project.command(
    "create",
    help=settings_help("Create project NAME, optionally with KEY=VALUE settings (values are JSON or text)."),
)
@click.argument("name")
@click.argument("settings", nargs=-1)
def project_create(name: str, settings: tuple[str, ...]) -> None:
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.create(ctx, {"name": name, **parse_assignments(settings)}))


@project.command("list")
def project_list() -> None:
    """List the projects."""
    from semula.service import projects

    with local_context(read_only=True) as ctx:
        for p in projects.list_projects(ctx, limit=1000)["data"]:
            click.echo(f"{p['name']}\t{p['mode']}\t{p['id']}")


@project.command("show")
@click.argument("name")
def project_show(name: str) -> None:
    """Show project NAME and its settings."""
    from semula.service import projects

    with local_context(read_only=True) as ctx:
        emit(projects.get(ctx, name))


@project.command(
    "set", help=settings_help("Change settings of project NAME: KEY=VALUE ... (values are JSON or text).")
)
@click.argument("name")
@click.argument("settings", nargs=-1, required=True)
def project_set(name: str, settings: tuple[str, ...]) -> None:
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.update(ctx, name, parse_assignments(settings)))


@project.command("refingerprint")
@click.argument("name")
@click.option("--dry-run", is_flag=True, help="Say what would change; change nothing.")
def project_refingerprint(name: str, dry_run: bool) -> None:
    """Take the fingerprint of every entry of project NAME again under its rules: after an upgrade
    of semula that leaves more out of fingerprints (docs/decisions/0059)."""
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.refingerprint(ctx, name, dry_run=dry_run))


@project.command("upstream")
@click.argument("name")
@click.option("--reset", is_flag=True, help="Zero the spend and forget dry-run prompts (audited).")
def project_upstream(name: str, reset: bool) -> None:
    """Show project NAME's record-through spend and dry-run prompts, or reset them."""
    from semula.service import record_through

    with local_context() as ctx:
        emit(record_through.reset(ctx, name) if reset else record_through.usage(ctx, name))


@main.group()
def session() -> None:
    """Replay sessions: the k-th identical call of a session gets answer k of its sequence."""


@session.command("reset")
@click.argument("project")
@click.argument("name")
def session_reset(project: str, name: str) -> None:
    """Start replay session NAME of PROJECT over: its next call of each request is call 1."""
    from semula.service import sequences

    with local_context() as ctx:
        emit(sequences.reset(ctx, project, name))


@main.group()
def fault() -> None:
    """Fault rules: the calls a rule matches get an error, silence, a cut or a delay instead of their
    recording (docs/testing.md, docs/decisions/0061)."""


@fault.command("add")
@click.argument("project")
@click.argument("kind")
@click.argument("settings", nargs=-1)
def fault_add(project: str, kind: str, settings: tuple[str, ...]) -> None:
    """Add a rule of KIND to PROJECT: KEY=VALUE ... are the kind's parameters (retry_after, after,
    after_events, at, ttfb, pace), times, probability, seed, session, entry, and match.api,
    match.model, match.fingerprint, match.contains."""
    from semula.service import faults

    rule: dict[str, Any] = {"kind": kind}
    for key, value in parse_assignments(settings).items():
        if key.startswith("match."):
            rule.setdefault("match", {})[key.removeprefix("match.")] = str(value)
        else:
            rule[key] = value
    with local_context() as ctx:
        emit(faults.add(ctx, project, rule))


@fault.command("list")
@click.argument("project")
def fault_list(project: str) -> None:
    """List PROJECT's fault rules, with the calls each matched and faulted per session."""
    from semula.service import faults

    with local_context(read_only=True) as ctx:
        emit(faults.list_rules(ctx, project))


@fault.command("clear")
@click.argument("project")
@click.option("--session", help="Only this replay session's rules.")
@click.option("--entry", help="Only this entry's rules.")
@click.option("--index", type=click.IntRange(0), help="Only the rule at this place in the list.")
def fault_clear(project: str, session: str | None, entry: str | None, index: int | None) -> None:
    """Remove PROJECT's fault rules and their counts (all, or only those chosen)."""
    from semula.service import faults

    with local_context() as ctx:
        emit(faults.clear(ctx, project, session=session, entry=entry, index=index))


@main.group()
def workspace() -> None:
    """Workspaces, the tenants of hosted mode (operator only; run with the owner's database URL)."""


@workspace.command("create")
@click.argument("name")
def workspace_create(name: str) -> None:
    """Create workspace NAME; then `semula token create --workspace NAME --role admin` for its admin."""
    from semula.service import workspaces

    with local_context() as ctx:
        emit(workspaces.create(ctx, name))


@workspace.command("list")
def workspace_list() -> None:
    """List workspaces with their quota overrides."""
    from semula.service import workspaces

    with local_context(read_only=True) as ctx:
        for w in workspaces.list_workspaces(ctx):
            state = "disabled" if w["disabled"] else "active"
            quotas = " ".join(f"{k}={w[k]}" for k in w if k.startswith("quota_") and w[k] is not None)
            click.echo(f"{w['name']}\t{w['id']}\t{state}\t{quotas or '-'}")


@workspace.command("disable")
@click.argument("name")
@click.option("--enable", is_flag=True, help="Enable it again instead.")
def workspace_disable(name: str, enable: bool) -> None:
    """Disable workspace NAME: its tokens are refused at once."""
    from semula.service import workspaces

    with local_context() as ctx:
        emit(workspaces.set_disabled(ctx, name, not enable))


@workspace.command("set")
@click.argument("name")
@click.argument("quotas", nargs=-1, required=True)
def workspace_set(name: str, quotas: tuple[str, ...]) -> None:
    """Override quotas of NAME: quota_projects=N quota_entries=N quota_parked=N quota_answer_bytes=N.

    A value of null goes back to the operator's default (SEMULA_QUOTA_*).
    """
    from semula.service import workspaces

    with local_context() as ctx:
        emit(workspaces.set_quotas(ctx, name, parse_assignments(quotas)))


@main.group()
def token() -> None:
    """Create, list and revoke API tokens and their dashboard sessions (operator, on the local database)."""


IN_WORKSPACE = click.option(
    "--workspace",
    default=None,
    help="The workspace (tenant) whose tokens these are (hosted mode); default: default.",
)


@contextmanager
def _in_workspace(workspace: str | None, *, read_only: bool = False) -> Iterator[Context]:
    """local_context(), as the operator inside `workspace` when one is named."""
    from semula.service import workspaces

    with local_context(read_only=read_only) as ctx:
        yield workspaces.operator_in(ctx, workspace) if workspace is not None else ctx


@token.command("create")
@click.option(
    "--role",
    type=click.Choice(["viewer", "editor", "admin"]),
    required=True,
    help="viewer reads; editor answers, claims and edits; admin also changes settings and tokens.",
)
@click.option(
    "--scope",
    type=click.Choice(["replay", "record", "full"]),
    default="full",
    show_default=True,
    help="replay: the proxy only, never parks; record: also the pending queue; full: everything.",
)
@click.option("--project", default=None, help="Bind the token to this project only.")
@click.option("--name", default="", help="A label to recognise the token by.")
@click.option("--workspace", default=None, help="The workspace (tenant) it belongs to; default: default.")
@click.option(
    "--expires-in",
    type=click.IntRange(1, 3650),
    default=None,
    metavar="DAYS",
    help="Refuse the token after this many days (rotation); default: it never expires.",
)
def token_create(
    role: str, scope: str, project: str | None, name: str, workspace: str | None, expires_in: int | None
) -> None:
    """Create a token. The secret is printed once, here, and is not stored."""
    import time

    from semula.service import tokens

    expires_at = int(time.time()) + expires_in * 86400 if expires_in else None
    with _in_workspace(workspace) as ctx:
        data = {"role": role, "scope": scope, "project": project, "name": name, "expires_at": expires_at}
        out = tokens.create(ctx, data)
    click.echo(f"{out['id']}\t{out['role']}\t{out['scope']}\t{out['project'] or '-'}", err=True)
    click.echo(out["token"])


@token.command("list")
@IN_WORKSPACE
def token_list(workspace: str | None) -> None:
    """List tokens (never their secrets): id, role, scope, project, state, last used, expires, name.

    Times are UTC; "-" is never (used) or no expiry. A token past its expiry shows as expired.
    """
    import time

    from semula.service import tokens

    def when(ts: int | None) -> str:
        return time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime(ts)) if ts is not None else "-"

    with _in_workspace(workspace, read_only=True) as ctx:
        click.echo("ID\tROLE\tSCOPE\tPROJECT\tSTATE\tLAST USED\tEXPIRES\tNAME")
        for t in tokens.list_tokens(ctx, limit=1000)["data"]:
            expired = t["expires"] is not None and t["expires"] <= time.time()
            state = "revoked" if t["revoked"] else "expired" if expired else "active"
            click.echo(
                f"{t['id']}\t{t['role']}\t{t['scope']}\t{t['project'] or '-'}\t{state}"
                f"\t{when(t['last_used'])}\t{when(t['expires'])}\t{t['name']}"
            )


@token.command("revoke")
@click.argument("token_id")
@IN_WORKSPACE
def token_revoke(token_id: str, workspace: str | None) -> None:
    """Revoke token TOKEN_ID at once."""
    from semula.service import tokens

    with _in_workspace(workspace) as ctx:
        tokens.revoke(ctx, token_id)
    click.echo(f"revoked {token_id}")


@token.command("sessions")
@click.argument("token_id")
@IN_WORKSPACE
def token_sessions(token_id: str, workspace: str | None) -> None:
    """List the dashboard sessions signed in with TOKEN_ID (never their secrets)."""
    from semula.service import sessions

    with _in_workspace(workspace, read_only=True) as ctx:
        for s in sessions.list_sessions(ctx, token_id, limit=1000)["data"]:
            click.echo(f"{s['id']}\t{s['status']}\t{s['created']}\t{s['last_seen']}\t{s['ended'] or '-'}")


@token.command("end-sessions")
@click.argument("token_id")
@click.option("--session", "session_id", default=None, help="End this session only (ses_…).")
@IN_WORKSPACE
def token_end_sessions(token_id: str, session_id: str | None, workspace: str | None) -> None:
    """Sign TOKEN_ID out of the dashboard everywhere at once; the token itself keeps working."""
    from semula.service import sessions

    with _in_workspace(workspace) as ctx:
        if session_id is not None:
            sessions.end(ctx, token_id, session_id)
            click.echo(f"ended {session_id}")
            return
        ended = sessions.end_all(ctx, token_id)["data"]
    click.echo(f"ended the open sessions of {token_id} ({len(ended)} in all)")


# The agent commands (pending, show, answer, claim, mcp) talk to a running server over REST.
cli_agent.register(main)

# The operator's entry, bundle, audit and retention commands (cli_entries imports emit and
# local_context from here, so it is imported last).
from semula.surfaces import cli_entries  # noqa: E402

cli_entries.register(main)

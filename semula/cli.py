"""The semula command line: serve, migrate, and the operator's project and token commands."""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from semula import cli_agent
from semula.config import ConfigError, Settings
from semula.errors import SemulaError
from semula.service import CLI, Context

EXIT_ERROR, EXIT_USAGE = 1, 2


def load_settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


@contextmanager
def local_context() -> Iterator[Context]:
    """A service context on the configured database, acting as the operator (`cli`).

    With SEMULA_OWNER_DATABASE_URL (hosted PostgreSQL) the operator works as the owner role,
    which row-level security does not bind; the server itself uses SEMULA_DATABASE_URL.
    """
    from semula.db import connect
    from semula.migrate import migrate

    settings = load_settings()
    store = connect(settings.owner_database_url or settings.database_url, pool_size=2)
    try:
        migrate(store)
        yield Context(store, settings, CLI)
    except SemulaError as exc:
        raise click.ClickException(exc.message) from None
    finally:
        store.close()


def emit(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


@click.group()
@click.version_option(package_name="semula")
def main() -> None:
    """semula records and replays OpenAI chat completions."""


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
    """Run the server: gunicorn with gevent workers, after migrating the database."""
    if dev:
        os.environ["SEMULA_AUTH"] = "off"
        os.environ["SEMULA_HOSTED"] = "off"
        bind = f"127.0.0.1:{port or 8080}"
    elif port is not None and bind is None:
        bind = f"{load_settings().bind.rsplit(':', 1)[0]}:{port}"
    if bind:
        os.environ["SEMULA_BIND"] = bind
    if workers:
        os.environ["SEMULA_WORKERS"] = str(workers)
    prepare_metrics_dir()
    # Every worker must sign dashboard sessions with the same key; without SEMULA_SECRET one is
    # made per start (sessions end with a restart; several hosts need a shared SEMULA_SECRET).
    os.environ.setdefault("SEMULA_SECRET", secrets.token_urlsafe(32))
    with local_context() as ctx:
        if dev:
            from semula.service import projects

            projects.ensure(ctx, "default", mode="record")
        settings = ctx.settings
    click.echo(f"semula serving on http://{settings.bind} ({settings.workers} gevent workers)", err=True)
    sys.stderr.flush()
    argv = [sys.executable, "-m", "gunicorn", "-c", "python:semula.gunicorn_conf"]
    os.execv(sys.executable, argv)


def prepare_metrics_dir() -> None:
    """Workers share metrics through files in PROMETHEUS_MULTIPROC_DIR, emptied at each start."""
    directory = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if not directory:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="semula-metrics-")
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
def replay(bundle: Path, port: int, project: str, record: bool, record_timeout: int) -> None:
    """Serve BUNDLE from a temporary database until stopped; prints the base URL first."""
    from semula import replay as replay_server

    try:
        replay_server.serve(bundle, port=port, project=project, record=record, record_timeout=record_timeout)
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


@project.command("create")
@click.argument("name")
@click.argument("settings", nargs=-1)
def project_create(name: str, settings: tuple[str, ...]) -> None:
    """Create project NAME, optionally with KEY=VALUE settings (values are JSON or text)."""
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.create(ctx, {"name": name, **parse_assignments(settings)}))


@project.command("list")
def project_list() -> None:
    """List the projects."""
    from semula.service import projects

    with local_context() as ctx:
        for p in projects.list_projects(ctx, limit=1000)["data"]:
            click.echo(f"{p['name']}\t{p['mode']}\t{p['id']}")


@project.command("show")
@click.argument("name")
def project_show(name: str) -> None:
    """Show project NAME and its settings."""
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.get(ctx, name))


@project.command("set")
@click.argument("name")
@click.argument("settings", nargs=-1, required=True)
def project_set(name: str, settings: tuple[str, ...]) -> None:
    """Change settings of project NAME: KEY=VALUE ... (values are JSON or text)."""
    from semula.service import projects

    with local_context() as ctx:
        emit(projects.update(ctx, name, parse_assignments(settings)))


@project.command("upstream")
@click.argument("name")
@click.option("--reset", is_flag=True, help="Zero the spend and forget dry-run prompts (audited).")
def project_upstream(name: str, reset: bool) -> None:
    """Show project NAME's record-through spend and dry-run prompts, or reset them."""
    from semula.service import upstream

    with local_context() as ctx:
        emit(upstream.reset(ctx, name) if reset else upstream.usage(ctx, name))


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

    with local_context() as ctx:
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
    """Create, list and revoke API tokens (operator, on the local database)."""


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
def token_create(role: str, scope: str, project: str | None, name: str, workspace: str | None) -> None:
    """Create a token. The secret is printed once, here, and is not stored."""
    from semula.service import tokens, workspaces

    with local_context() as ctx:
        if workspace is not None:
            ctx = workspaces.operator_in(ctx, workspace)
        out = tokens.create(ctx, {"role": role, "scope": scope, "project": project, "name": name})
    click.echo(f"{out['id']}\t{out['role']}\t{out['scope']}\t{out['project'] or '-'}", err=True)
    click.echo(out["token"])


@token.command("list")
def token_list() -> None:
    """List tokens (never their secrets)."""
    from semula.service import tokens

    with local_context() as ctx:
        for t in tokens.list_tokens(ctx, limit=1000)["data"]:
            state = "revoked" if t["revoked"] else "active"
            click.echo(f"{t['id']}\t{t['role']}\t{t['scope']}\t{t['project'] or '-'}\t{state}\t{t['name']}")


@token.command("revoke")
@click.argument("token_id")
def token_revoke(token_id: str) -> None:
    """Revoke token TOKEN_ID at once."""
    from semula.service import tokens

    with local_context() as ctx:
        tokens.revoke(ctx, token_id)
    click.echo(f"revoked {token_id}")


# The agent commands (pending, show, answer, claim, mcp) talk to a running server over REST.
cli_agent.register(main)

# The operator's entry, bundle, audit and retention commands (cli_entries imports emit and
# local_context from here, so it is imported last).
from semula import cli_entries  # noqa: E402

cli_entries.register(main)

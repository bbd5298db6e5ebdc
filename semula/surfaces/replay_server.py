"""`semula replay BUNDLE`: an ephemeral server for test suites, with nothing to set up.

A temporary SQLite database, the bundle imported, replay mode, auth off, 127.0.0.1 only. The
first line on stdout is the base URL for the OpenAI SDK. With `record`, misses park (for an
agent, over the usual REST API) and the bundle file is rewritten with every entry on stop.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

from werkzeug import serving
from werkzeug.serving import make_server

from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, bundles, entries, projects
from semula.surfaces import replay_cache, replay_loading
from semula.web import create_app

DATABASE = "replay.db"  # in the server's temporary directory


def serve(
    bundle: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    project: str = "default",
    record: bool = False,
    record_timeout: int = 300,
    missing_ok: bool = False,
    prune: bool = False,
    out: IO[str] = sys.stdout,
) -> None:
    """Run until SIGTERM or SIGINT; in record mode write the bundle back before leaving (with `prune`,
    only the entries some call used). `missing_ok` serves a bundle that does not exist yet as empty."""
    # werkzeug colours its access log whatever the output is; colour codes only for a terminal.
    serving._log_add_style = sys.stderr.isatty()
    if not (bundle.exists() or record or missing_ok):
        raise FileNotFoundError(
            f"no bundle at {bundle} (--missing-ok serves it empty until it exists; --record writes it)"
        )
    workdir = tempfile.mkdtemp(prefix="semula-replay-")
    settings = replay_settings(workdir)
    # Recording records sequences: a test's k-th identical call past the last answer records answer k.
    changes = {"mode": "record" if record else "replay", "record_timeout": record_timeout}
    changes |= {"sequences": "record"} if record else {}
    cache = replay_cache.directory(os.environ)
    kept = replay_cache.key(bundle, project, settings, changes) if cache and bundle.exists() else None
    # A database kept from an earlier start of this bundle is what the import would make again.
    loaded = kept is not None and replay_cache.load(cache, kept, Path(workdir) / DATABASE)
    store = connect(settings.database_url, pool_size=4)
    loading: replay_loading.Loading | None = None
    try:
        ctx = Context(store, settings, CLI)
        made = replay_cache.digest(project, settings, changes) if kept is not None else None
        if not loaded:
            migrate(store)
            projects.create(ctx, {"name": project})
            if bundle.exists():
                # Served while it is imported (replay_loading); its settings, with the mode, are written
                # first. Recording too: a miss, so anything recorded, waits for the import's end.
                loading = replay_loading.Loading(
                    ctx, project, bundle, changes, (cache, made) if made is not None else None
                )
                ctx = loading.ctx
        if loading is None:
            # A kept import holds the mode it was made with; written again, as a new project's.
            projects.update(ctx, project, changes)
        app = create_app(settings, ctx.store)
        server = make_server(host, port, loading.gate(app) if loading else app, threaded=True)
        stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()  # noqa: E731
        # Before the URL is printed: a caller that stops the server as soon as it read it gets the stop
        # that removes the temporary directory, not the default handler's exit.
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        print(f"http://{host}:{server.server_port}/p/{project}/v1", file=out, flush=True)
        if loading is not None:
            loading.start(on_failure=stop)
        try:
            server.serve_forever()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.server_close()
            if loading is not None:
                loading.stop()
        if loading is not None:
            loading.check()
        if record and loading is not None and not loading.imported:
            # Stopped before the import ended: nothing was recorded (a miss waits for its end), and
            # what this run holds is a part of the bundle, not to be written over it.
            print(f"semula replay: left {bundle} as it was: stopped while it was imported", file=sys.stderr)
        elif record:
            dropped = drop_unused(ctx, project) if prune else 0
            kept = write_back(ctx, project, bundle)
            pruned = f", dropped {dropped} that no call used" if prune else ""
            entries = f"{kept} entr{'y' if kept == 1 else 'ies'}"
            print(f"semula replay: wrote {bundle}: {entries}{pruned}", file=sys.stderr, flush=True)
    finally:
        store.close()
        shutil.rmtree(workdir, ignore_errors=True)


def replay_settings(workdir: str) -> Settings:
    """The server's settings, of its own whatever the environment says but for the log level. So
    every replay hit gets a call-log row (SEMULA_CALL_LOG_HITS is not read): --prune keeps exactly
    the entries the call log names."""
    return Settings.from_env(
        {
            "SEMULA_DATABASE_URL": f"sqlite:///{workdir}/{DATABASE}",
            "SEMULA_AUTH": "off",
            "SEMULA_LOG_LEVEL": os.environ.get("SEMULA_LOG_LEVEL", "warning"),
        }
    )


def drop_unused(ctx: Context, project: str) -> int:
    """Delete the entries no call of this run replayed or recorded (pinned ones stay); how many."""
    row = projects.get_row(ctx, project)
    used = {call["fingerprint"] for call in ctx.store.all("calls_in_project", project_id=row["id"])}
    unused = [
        entry["fingerprint"]
        for entry in ctx.store.iterate("export_entries", project_id=row["id"])
        if entry["fingerprint"] not in used and not entry["pinned"]
    ]
    for fingerprint in unused:
        found = ctx.store.one("entry_by_fingerprint", project_id=row["id"], fingerprint=fingerprint)
        entries.delete(ctx, found["id"])
    return len(unused)


def write_back(ctx: Context, project: str, bundle: Path) -> int:
    """Replace the bundle atomically with the project's export; the number of entries written."""
    fd, tmp = tempfile.mkstemp(prefix=".semula-", suffix=".json", dir=bundle.parent)
    with os.fdopen(fd, "wb") as target:
        for piece in bundles.export_bundle(ctx, project):
            target.write(piece)
    os.replace(tmp, bundle)
    project_id = projects.get_row(ctx, project)["id"]
    return sum(1 for _ in ctx.store.iterate("export_entries", project_id=project_id))

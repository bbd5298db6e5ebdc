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

from werkzeug.serving import make_server

from semula.config import Settings
from semula.db import connect
from semula.migrate import migrate
from semula.service import CLI, Context, bundles, projects
from semula.web import create_app


def serve(
    bundle: Path,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    project: str = "default",
    record: bool = False,
    record_timeout: int = 300,
    out: IO[str] = sys.stdout,
) -> None:
    """Run until SIGTERM or SIGINT; in record mode write the bundle back before leaving."""
    workdir = tempfile.mkdtemp(prefix="semula-replay-")
    env = {
        "SEMULA_DATABASE_URL": f"sqlite:///{workdir}/replay.db",
        "SEMULA_AUTH": "off",
        "SEMULA_LOG_LEVEL": os.environ.get("SEMULA_LOG_LEVEL", "warning"),
    }
    settings = Settings.from_env(env)
    store = connect(settings.database_url, pool_size=4)
    try:
        migrate(store)
        ctx = Context(store, settings, CLI)
        projects.create(ctx, {"name": project})
        if bundle.exists():
            with bundle.open("rb") as source:
                bundles.import_bundle(ctx, project, source)
        elif not record:
            raise FileNotFoundError(f"no bundle at {bundle}")
        # An import resets operator fields (mode among them): set the mode after it.
        # Recording records sequences: a test's k-th identical call past the last answer records answer k.
        changes = {"mode": "record" if record else "replay", "record_timeout": record_timeout}
        projects.update(ctx, project, changes | ({"sequences": "record"} if record else {}))
        server = make_server(host, port, create_app(settings, store), threaded=True)
        print(f"http://{host}:{server.server_port}/p/{project}/v1", file=out, flush=True)
        stop = lambda *_: threading.Thread(target=server.shutdown, daemon=True).start()  # noqa: E731
        previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            server.serve_forever()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.server_close()
        if record:
            write_back(ctx, project, bundle)
    finally:
        store.close()
        shutil.rmtree(workdir, ignore_errors=True)


def write_back(ctx: Context, project: str, bundle: Path) -> None:
    """Replace the bundle atomically with the project's export."""
    fd, tmp = tempfile.mkstemp(prefix=".semula-", suffix=".json", dir=bundle.parent)
    with os.fdopen(fd, "wb") as target:
        for piece in bundles.export_bundle(ctx, project):
            target.write(piece)
    os.replace(tmp, bundle)
